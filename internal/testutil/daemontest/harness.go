// Package daemontest starts a real airlockd (in-process, or as a child
// process) with a private containerd and the agent image, for integration
// tests. It needs the binaries `make test` builds: AIRLOCK_BIN_DIR names the
// directory holding airlockd, containerd, the runc shim and runc, and
// AIRLOCK_AGENT_IMAGE the agent image archive.
package daemontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/airlock-sandbox/airlock/daemon"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/runtime"
)

// AgentImage is the image name sessions in tests use.
const AgentImage = "airlock/agent:bookworm"

// Env is what the harness needs from `make test`.
type Env struct {
	BinDir     string
	AgentImage string // archive path
	// Runtime is the OCI runtime the harness's daemon runs sessions on
	// (AIRLOCK_RUNTIME: runc, the default, or crun); `make test` runs the
	// hardening tests once on each.
	Runtime string
}

// LoadEnv reads AIRLOCK_BIN_DIR, AIRLOCK_AGENT_IMAGE and AIRLOCK_RUNTIME.
func LoadEnv() (Env, error) {
	e := Env{BinDir: os.Getenv("AIRLOCK_BIN_DIR"), AgentImage: os.Getenv("AIRLOCK_AGENT_IMAGE"), Runtime: os.Getenv("AIRLOCK_RUNTIME")}
	if e.BinDir == "" || e.AgentImage == "" {
		return e, errors.New("AIRLOCK_BIN_DIR and AIRLOCK_AGENT_IMAGE are not set: run the integration tests through `make test`")
	}
	if e.Runtime == "" {
		e.Runtime = runtime.DefaultOCIRuntime
	}
	for _, b := range []string{"airlockd", "containerd", "containerd-shim-runc-v2", e.Runtime} {
		if _, err := os.Stat(filepath.Join(e.BinDir, b)); err != nil {
			return e, fmt.Errorf("%s missing from AIRLOCK_BIN_DIR: %w (run `make build deps`)", b, err)
		}
	}
	if _, err := os.Stat(e.AgentImage); err != nil {
		return e, fmt.Errorf("agent image archive: %w (run `make image`)", err)
	}
	return e, nil
}

// AgentImageArchive returns the archive of the agent image built from
// recipe images/RECIPE (claude-code, codex), named by
// AIRLOCK_<RECIPE>_IMAGE (AIRLOCK_CLAUDE_CODE_IMAGE, AIRLOCK_CODEX_IMAGE),
// which `make test` sets from `make images`. A test that needs the image
// fails, not skips, when the variable is unset or the archive is missing.
func AgentImageArchive(recipe string) (string, error) {
	v := "AIRLOCK_" + strings.ToUpper(strings.ReplaceAll(recipe, "-", "_")) + "_IMAGE"
	p := os.Getenv(v)
	if p == "" {
		return "", fmt.Errorf("%s is not set: run the integration tests through `make test` (`make images` builds the archive, hack/build-image.sh --recipe %s prints its path)", v, recipe)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s image archive: %w (run `make images`)", recipe, err)
	}
	return p, nil
}

// Harness is a daemon with its own root, containerd and socket.
type Harness struct {
	// World is the daemon's uplink network.
	World *world.World
	// Log holds everything the daemon logged, at debug level.
	Log    *SyncBuffer
	Env    Env
	Root   string
	Socket string
	Daemon *daemon.Daemon
	cancel context.CancelFunc
	served chan error
}

// Start creates a fresh root under /tmp (short, for socket path limits),
// starts a test world (a network namespace with DNS and web servers under
// .test, see internal/world) as the daemon's uplink, starts a daemon in this
// process serving on a socket, and imports the agent image.
func Start(ctx context.Context) (*Harness, error) {
	env, err := LoadEnv()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("/tmp", "al-")
	if err != nil {
		return nil, err
	}
	h := &Harness{Env: env, Root: root, Socket: filepath.Join(root, "airlock.sock"), Log: &SyncBuffer{}}
	if err := os.MkdirAll(h.IssuerTokens(), 0o700); err != nil {
		return nil, err
	}
	w, err := world.Start(ctx, world.Config{Prefix: "w" + runtime.Prefix(root)[2:]})
	if err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("test world: %w", err)
	}
	h.World = w
	if err := h.startDaemon(ctx); err != nil {
		w.Close()
		os.RemoveAll(root)
		return nil, err
	}
	if err := h.ImportAgentImage(ctx); err != nil {
		h.Close(ctx)
		return nil, err
	}
	return h, nil
}

// Config is the daemon configuration the harness uses.
func (h *Harness) Config() daemon.Config {
	return daemon.Config{
		Root:       h.Root,
		BinDir:     h.Env.BinDir,
		Runtime:    h.Env.Runtime,
		SelfBinary: filepath.Join(h.Env.BinDir, "airlockd"),
		Issuers: map[string][]string{
			// The worked example from examples/issuers, reading tokens from
			// IssuerTokens.
			"static-file": {"/usr/bin/env", "AIRLOCK_STATIC_DIR=" + h.IssuerTokens(), staticIssuer()},
		},
		Egress: egress.Config{
			Uplink:        "netns:" + h.World.NetnsName(),
			DNSUpstreams:  []string{h.World.DNSAddr().String()},
			AllowPrivate:  []netip.Prefix{h.World.Net()},
			UpstreamRoots: h.World.CertPool(),
		},
	}
}

func (h *Harness) startDaemon(ctx context.Context) error {
	logger := slog.New(slog.NewTextHandler(h.Log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx = log.WithLogger(ctx, logger)
	d, err := daemon.New(ctx, h.Config())
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h.Daemon, h.cancel, h.served = d, cancel, make(chan error, 1)
	l, err := httpapi.Listen(h.Socket, "")
	if err != nil {
		cancel()
		d.Close(ctx)
		return err
	}
	l.Close()
	go func() { h.served <- httpapi.Serve(sctx, d, h.Socket, "") }()
	// Serve re-listens; wait for the socket to answer.
	for i := 0; i < 500; i++ {
		if _, err := os.Stat(h.Socket); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("daemon socket did not appear")
}

// ImportAgentImage imports the agent archive unless the image is present.
func (h *Harness) ImportAgentImage(ctx context.Context) error {
	c := h.Daemon.Runtime().Client()
	nctx := namespaces.WithNamespace(ctx, h.Daemon.Runtime().Namespace())
	if _, err := c.GetImage(nctx, AgentImage); err == nil {
		return nil
	}
	f, err := os.Open(h.Env.AgentImage)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = ocipack.Import(nctx, c, f, ocipack.ImportOptions{Name: AgentImage, Snapshotter: h.Daemon.Runtime().Snapshotter()})
	return err
}

// Close removes every session, stops the daemon and its containerd and
// deletes the root.
func (h *Harness) Close(ctx context.Context) error {
	var errs []error
	if h.Daemon != nil {
		for _, s := range h.Daemon.List(ctx) {
			if err := h.Daemon.Remove(ctx, s.ID, true); err != nil {
				errs = append(errs, err)
			}
		}
		h.cancel()
		<-h.served
		errs = append(errs, h.Daemon.Close(ctx), h.Daemon.StopContainerd(ctx))
		// With no session left, the shared shim goes with the daemon's
		// shim anchor.
		if shims := ShimProcesses(h.ContainerdAddress()); len(shims) > 0 {
			errs = append(errs, fmt.Errorf("runc shims left after the daemon stopped: %v", shims))
		}
	}
	if h.World != nil {
		errs = append(errs, h.World.Close())
	}
	if err := mountinfo.UnmountAll(h.Root); err != nil {
		errs = append(errs, err)
	}
	// The daemon's shared parent cgroups go with its last session or
	// prepared sandbox.
	if h.Daemon != nil {
		parent := "airlock-" + runtime.Prefix(h.Root)
		hier, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range append(hier, nil) {
			p := filepath.Join("/sys/fs/cgroup", parent)
			if e != nil {
				p = filepath.Join("/sys/fs/cgroup", e.Name(), parent)
			}
			if _, err := os.Stat(p); err == nil {
				kids, _ := os.ReadDir(p)
				var names []string
				for _, k := range kids {
					if k.IsDir() {
						names = append(names, k.Name())
					}
				}
				errs = append(errs, fmt.Errorf("cgroup %s left behind (children %v)", p, names))
				_ = os.Remove(p)
			}
		}
	}
	errs = append(errs, os.RemoveAll(h.Root))
	return errors.Join(errs...)
}

// Restart closes the in-process daemon without touching its sessions or
// containerd and starts a new one on the same root.
func (h *Harness) Restart(ctx context.Context) error {
	h.cancel()
	<-h.served
	if err := h.Daemon.Close(ctx); err != nil {
		return err
	}
	return h.startDaemon(ctx)
}

// ContainerdAddress is the socket of the daemon's embedded containerd.
func (h *Harness) ContainerdAddress() string {
	return runtime.Embedded{Dir: filepath.Join(h.Root, "containerd")}.Address()
}

// ShimProcesses lists the runc shims ("PID CMDLINE") serving the
// containerd at address.
func ShimProcesses(address string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 0 || filepath.Base(args[0]) != "containerd-shim-runc-v2" {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == address {
				out = append(out, strconv.Itoa(pid)+" "+strings.Join(args, " "))
				break
			}
		}
	}
	return out
}

// RemoveAnchor kills and removes the shim anchor of the containerd at
// address, if it still answers, so that a failed test leaves no shim.
func RemoveAnchor(ctx context.Context, address string) {
	if _, err := os.Stat(address); err != nil {
		return
	}
	c, err := containerd.New(address, containerd.WithTimeout(5*time.Second))
	if err != nil {
		return
	}
	defer c.Close()
	ctx = namespaces.WithNamespace(ctx, "airlock")
	ctr, err := c.LoadContainer(ctx, runtime.AnchorID)
	if err != nil {
		return
	}
	if t, err := ctr.Task(ctx, nil); err == nil {
		_, _ = t.Delete(ctx, containerd.WithProcessKill)
	}
	_ = ctr.Delete(ctx)
}

// MountsUnder lists mount points at or below dir.
func MountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir) }

// SyncBuffer is a bytes.Buffer safe for concurrent writers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// IssuerTokens is the directory the "static-file" exec issuer reads tokens
// from: one file per audience.
func (h *Harness) IssuerTokens() string { return filepath.Join(h.Root, "issuer-tokens") }

// staticIssuer is the absolute path of examples/issuers/static-file.sh.
func staticIssuer() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "issuers", "static-file.sh")
}

// Cap is the capacity of the buffer, what it holds in memory.
func (b *SyncBuffer) Cap() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Cap()
}
