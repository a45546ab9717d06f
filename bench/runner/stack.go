package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/egress/netns"
	benchimage "github.com/airlock-sandbox/airlock/images/bench"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
	testworld "github.com/airlock-sandbox/airlock/internal/world"
)

// Zone is the DNS zone of the benchmark's world.
const Zone = "bench.test."

// DefaultWorldNet is the address range of the world namespace: the DNS
// server takes its first address, the hosts the following ones.
var DefaultWorldNet = netip.MustParsePrefix("10.214.0.0/24")

// StackConfig says what StartStack starts or attaches to.
type StackConfig struct {
	// BinDir holds airlockd, containerd, containerd-shim-runc-v2 and runc,
	// for a daemon of the stack's own.
	BinDir string
	// Socket names a running daemon to use instead. Its uplink must be a
	// network namespace: WorldNetns (a name in netns.DefaultDir, or a
	// path), where the world is then served, with its DNS server on
	// WorldDNS (the daemon's --dns-upstream; default the first address of
	// DefaultWorldNet).
	Socket     string
	WorldNetns string
	WorldDNS   netip.Addr
	// SecretsRoot, with Socket, is where the workers' secret files go
	// (SecretsDir): SecretsRoot/N for worker N, each of which that
	// daemon's admission policy must admit as a secret source. Empty: a
	// directory of the stack's own, which only a daemon of the stack's
	// own admits.
	SecretsRoot string
	// ImageArchive is the bench image archive (see images/bench); it is
	// imported unless the daemon has an image of the same name and digest.
	ImageArchive string
	// ImageRef is the bench image's name (default benchimage.Ref); an
	// agent's bench image is benchimage.AgentRef(NAME).
	ImageRef string
	// ModelHosts serves a scripted model API host per world instance
	// (ModelHost), for agents that run in the sessions, and lets the
	// stack's own daemon inject their API keys (StackModels). Only with
	// a daemon of the stack's own.
	ModelHosts bool
	// ModelUpstream, with ModelHosts, is a real model API the agents'
	// tasks reach instead of the scripted model hosts (see Upstream).
	ModelUpstream *Upstream
	// Fixture is the world's initial state (default AmPermBench's,
	// fixture.Default); an operator's suite brings its own.
	Fixture *fixture.Fixture
	// Workers is the number of world instances (default 2).
	Workers int
	// TempDir is where the stack's private root is made (default /tmp).
	TempDir string
	// DaemonLog, when set, receives a copy of the own daemon's log at
	// Close.
	DaemonLog string
	// Log receives one line per start and stop step (nil: discarded).
	Log io.Writer
}

// Stack is everything a benchmark run needs: the world's network, the
// world instances, and a daemon whose uplink is the world's namespace.
type Stack struct {
	Client *api.Client
	Socket string
	// Network is the world's network: a namespace with no route anywhere,
	// an authoritative DNS server for bench.test and one HTTP server per
	// world service, each on its own address. Every socket is opened in
	// the namespace from this process, so the handlers run here. Sessions
	// reach it only through airlock's gateway, whose uplink is this
	// namespace.
	Network *testworld.World
	Worlds  *Worlds
	// Image is the bench image's name, as the daemon knows it.
	Image string
	// Models are the world instances' model API hosts (with
	// StackConfig.ModelHosts).
	Models *Models
	// Daemon describes the daemon, for the report.
	Daemon api.Version
	// Root is the stack's private directory (sockets, daemon state,
	// workspaces); removed at Close.
	Root string

	cfg    StackConfig
	prefix string
	cmd    *exec.Cmd
	exited chan error
	log    io.Writer
}

// StartStack starts the world's network and services and, unless
// cfg.Socket names one, a daemon wired to the world as its uplink; then it
// imports the bench image. Close stops everything it started.
func StartStack(ctx context.Context, cfg StackConfig) (_ *Stack, retErr error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.TempDir == "" {
		cfg.TempDir = "/tmp"
	}
	s := &Stack{cfg: cfg, log: cfg.Log}
	if s.log == nil {
		s.log = io.Discard
	}
	root, err := os.MkdirTemp(cfg.TempDir, "alb-")
	if err != nil {
		return nil, err
	}
	s.Root = root
	defer func() {
		if retErr != nil {
			if err := s.Close(context.WithoutCancel(ctx)); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}
	}()

	if cfg.ImageRef == "" {
		cfg.ImageRef = benchimage.Ref
		s.cfg.ImageRef = cfg.ImageRef
	}
	if cfg.ModelHosts && cfg.Workers > upstreamOffset-16 {
		return nil, fmt.Errorf("agents: at most %d workers (a model host each): %w", upstreamOffset-16, errdefs.ErrInvalidArgument)
	}
	if cfg.ModelHosts && cfg.Socket != "" {
		return nil, fmt.Errorf("agents run only with a daemon of the bench's own (no --socket): it injects their API keys: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Socket == "" {
		if err := s.startOwn(ctx); err != nil {
			return nil, err
		}
	} else if err := s.attach(ctx); err != nil {
		return nil, err
	}
	v, err := s.Client.Version(ctx)
	if err != nil {
		return nil, err
	}
	s.Daemon = *v

	var wopts []world.Option
	if cfg.Fixture != nil {
		wopts = append(wopts, world.WithFixture(cfg.Fixture))
	}
	s.Worlds, err = NewWorlds(ctx, cfg.Workers, DaemonVerifier(s.Socket), wopts...)
	if err != nil {
		return nil, fmt.Errorf("world services: %w", err)
	}
	if err := s.Worlds.Serve(s.Network); err != nil {
		return nil, fmt.Errorf("world services: %w", err)
	}
	if cfg.ModelHosts {
		if s.Models, err = serveModels(s.Network, cfg.Workers, filepath.Join(s.Root, "secrets")); err != nil {
			return nil, fmt.Errorf("model hosts: %w", err)
		}
		if cfg.ModelUpstream != nil {
			if err := serveUpstream(s.Network, s.Models, cfg.ModelUpstream, s.Root); err != nil {
				return nil, err
			}
			fmt.Fprintf(s.log, "model upstream: %s, served in the world by the bench's proxy, sent on through the host's routes (that name alone)\n", cfg.ModelUpstream.Host)
		}
	}
	fmt.Fprintf(s.log, "world: namespace %s, dns %v, hosts %v\n", s.Network.NetnsPath(), s.Network.DNSAddr(), s.Network.Hosts())
	if err := s.importImage(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// startOwn creates the world's namespace and starts airlockd with it as
// the uplink.
func (s *Stack) startOwn(ctx context.Context) error {
	for _, b := range []string{"airlockd", "containerd", "containerd-shim-runc-v2", "runc"} {
		if _, err := os.Stat(filepath.Join(s.cfg.BinDir, b)); err != nil {
			return fmt.Errorf("%s: %w (run `make build deps`)", b, err)
		}
	}
	s.prefix = netns.PrefixFor(s.Root)
	var err error
	s.Network, err = testworld.Start(ctx, testworld.Config{Prefix: "bw" + s.prefix[2:], Zone: Zone, Net: DefaultWorldNet})
	if err != nil {
		return fmt.Errorf("world namespace: %w", err)
	}
	name := s.Network.NetnsName()
	s.Socket = filepath.Join(s.Root, "airlock.sock")
	logf, err := os.Create(filepath.Join(s.Root, "airlockd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{
		"--root", filepath.Join(s.Root, "state"),
		"--socket", s.Socket,
		"--bin-dir", s.cfg.BinDir,
		"--uplink", "netns:" + name,
		"--dns-upstream", s.Network.DNSAddr().String(),
		"--allow-private", s.Network.Net().String(),
		"--stop-containerd",
		"--log-level", "info",
	}
	more, err := s.admissionArgs()
	if err != nil {
		return err
	}
	args = append(args, more...)
	if more, err = s.upstreamCAArgs(); err != nil {
		return err
	}
	args = append(args, more...)
	s.cmd = exec.Command(filepath.Join(s.cfg.BinDir, "airlockd"), args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start airlockd: %w", err)
	}
	s.exited = make(chan error, 1)
	go func() { s.exited <- s.cmd.Wait() }()
	s.Client = api.NewClient(s.Socket)
	// The daemon's kernel objects carry the prefix of its --root.
	s.prefix = netns.PrefixFor(filepath.Join(s.Root, "state"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := s.Client.Version(ctx); err == nil {
			break
		}
		select {
		case err := <-s.exited:
			s.exited <- err
			return fmt.Errorf("airlockd exited at start (%v): %s", err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("airlockd did not answer within 60s: %s", s.logTail())
		}
	}
	fmt.Fprintf(s.log, "airlockd: pid %d, root %s\n", s.cmd.Process.Pid, s.Root)
	return nil
}

// attach uses the daemon at cfg.Socket, after checking that its uplink is
// the world namespace.
func (s *Stack) attach(ctx context.Context) error {
	if s.cfg.WorldNetns == "" {
		return errors.New("attaching to a running daemon needs the world namespace it uses as its uplink (--world-netns)")
	}
	s.Socket = s.cfg.Socket
	s.Client = api.NewClient(s.Socket)
	v, err := s.Client.Version(ctx)
	if err != nil {
		return err
	}
	path := s.cfg.WorldNetns
	if !strings.Contains(path, "/") {
		path = filepath.Join(netns.DefaultDir, path)
	}
	prefix := netns.PrefixFor(v.Root)
	if err := checkUplink(path, prefix); err != nil {
		return err
	}
	s.Network, err = testworld.Start(ctx, testworld.Config{Existing: path, Zone: Zone, Net: DefaultWorldNet, DNSAddr: s.cfg.WorldDNS})
	return err
}

// checkUplink verifies that the gateway of the daemon with prefix has its
// uplink's peer in the namespace at path: then every packet a session sends
// beyond the gateway lands in that namespace and nowhere else.
func checkUplink(path, prefix string) error {
	if !netns.IsNetns(path) {
		return fmt.Errorf("%s is not a network namespace: airlock bench attaches only to a daemon whose uplink is a network namespace", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return err
	}
	defer h.Close()
	if _, err := h.LinkByName(prefix + "-up"); err != nil {
		return fmt.Errorf("the daemon's uplink is not the namespace %s (no interface %s-up there): airlock bench attaches only to a daemon started with --uplink netns:NAME", path, prefix)
	}
	return nil
}

func (s *Stack) importImage(ctx context.Context) error {
	ref := s.cfg.ImageRef
	name, _, err := ocipack.NormalizeRef(ref)
	if err != nil {
		return err
	}
	s.Image = ref
	if s.cfg.ImageArchive == "" {
		imgs, err := s.Client.ListImages(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(imgs, func(i api.Image) bool { return i.Name == name }) {
			return fmt.Errorf("the daemon has no image %s and no bench image archive was given", ref)
		}
		return nil
	}
	f, err := os.Open(s.cfg.ImageArchive)
	if err != nil {
		return fmt.Errorf("bench image: %w", err)
	}
	defer f.Close()
	start := time.Now()
	if _, err := s.Client.ImportImage(ctx, ref, f); err != nil {
		return fmt.Errorf("import bench image: %w", err)
	}
	fmt.Fprintf(s.log, "image: imported %s in %v\n", ref, time.Since(start).Round(time.Millisecond))
	return nil
}

// Close removes the sessions of the stack's daemon (with an attached
// daemon, the sessions labelled by this package), stops what StartStack
// started and checks that nothing is left behind.
func (s *Stack) Close(ctx context.Context) error {
	var errs []error
	if s.Client != nil {
		if err := s.removeSessions(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cmd != nil && s.exited != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(60 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
			errs = append(errs, errors.New("airlockd did not stop within 60s; killed"))
		}
		fmt.Fprintf(s.log, "airlockd: stopped\n")
		if s.cfg.DaemonLog != "" {
			if b, err := os.ReadFile(filepath.Join(s.Root, "airlockd.log")); err == nil {
				_ = os.WriteFile(s.cfg.DaemonLog, b, 0o644)
			}
		}
	}
	if s.Client != nil {
		s.Client.Close()
	}
	if s.Network != nil {
		errs = append(errs, s.Network.Close())
	}
	if s.Worlds != nil {
		errs = append(errs, s.Worlds.Close())
	}
	if s.Root != "" {
		if err := mountinfo.UnmountAll(s.Root); err != nil {
			errs = append(errs, err)
		}
		errs = append(errs, os.RemoveAll(s.Root))
	}
	if s.cmd != nil && s.prefix != "" {
		left, err := netns.Leftovers(netns.DefaultDir, s.prefix, "")
		if err != nil {
			errs = append(errs, err)
		} else if len(left) > 0 {
			errs = append(errs, fmt.Errorf("left behind by airlockd: %v", left))
		}
	}
	return errors.Join(errs...)
}

func (s *Stack) removeSessions(ctx context.Context) error {
	list, err := s.Client.ListSessions(ctx)
	if err != nil {
		if s.cmd != nil && api.IsUnavailable(err) {
			return nil
		}
		return err
	}
	var errs []error
	for _, sess := range list {
		if s.cmd == nil && !strings.HasPrefix(sess.Label, labelPrefix) {
			continue
		}
		if err := s.Client.RemoveSession(ctx, sess.ID, true); err != nil && !api.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove session %s: %w", sess.ID, err))
		}
	}
	return errors.Join(errs...)
}

// SecretsDir is worker i's directory of secret files on the operator's
// side (a directory per host, a file per secret: SecretsDir(i)/HOST/NAME),
// which the stack's own daemon admits as secret sources for HOST alone.
// The contrast pairs' runner writes the registry tokens of the pair a
// worker runs there. A daemon the stack attaches to (StackConfig.Socket)
// admits them only if its own admission policy says so: with
// StackConfig.SecretsRoot they are SecretsRoot/N, which the operator can
// admit beforehand.
func (s *Stack) SecretsDir(i int) string {
	if s.cfg.SecretsRoot != "" {
		return filepath.Join(s.cfg.SecretsRoot, strconv.Itoa(i))
	}
	return filepath.Join(s.Root, "registry-secrets", strconv.Itoa(i))
}

func (s *Stack) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.Root, "airlockd.log"))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
