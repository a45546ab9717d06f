package perf

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// AgentImage is the image every measured session and container runs.
const AgentImage = "airlock/agent:bookworm"

// World hosts the measurements use (all in the world namespace this
// harness creates; nothing is routed anywhere else).
var (
	// EgressHost is the one host the full-perimeter manifest may reach.
	EgressHost     = "x.perf.test"
	egressHostAddr = netip.MustParseAddr("10.214.0.10")
	// DNSNames are DNSNameCount names under DNSZone, all on one address.
	DNSZone      = "dns.perf.test"
	DNSNameCount = 50
	dnsHostAddr  = netip.MustParseAddr("10.214.0.11")
	// MissZone has no names: every query under it is NXDOMAIN upstream.
	MissZone = "miss.perf.test"
	// SinkHost runs the TCP sink on SinkPort.
	SinkHost     = "sink.perf.test"
	sinkHostAddr = netip.MustParseAddr("10.214.0.20")
	SinkPort     = 5001
)

// EnvConfig locates what the harness runs.
type EnvConfig struct {
	// Repo is the airlock checkout (for examples/).
	Repo string
	// BinDir holds airlock, airlockd, containerd, the shim, ctr and runc.
	BinDir string
	// ImageArchive is the agent image archive (`make image`).
	ImageArchive string
	// Perfload is the static load generator bound into sessions.
	Perfload string
	// Logf reports progress.
	Logf func(format string, args ...any)
	// DaemonLogLevel is airlockd's --log-level (default warn); DaemonLog,
	// when set, is where airlockd's log is copied at Close.
	DaemonLogLevel string
	DaemonLog      string
	// Ocilabel, when set, is the ocilabel binary (perf/cmd/ocilabel) the
	// runtimes section's ctr baseline runs crun through.
	Ocilabel string
}

// Env is a private airlockd with its embedded containerd under a temporary
// root, with a test world namespace as its uplink. Close removes all of it.
type Env struct {
	cfg EnvConfig
	// Root holds everything: the daemon's state, the socket, manifests.
	Root      string
	StateRoot string
	Socket    string
	// Prefix is the daemon's kernel-object prefix (netns, cgroups).
	Prefix string
	World  *world.World
	// WorkDir holds generated manifests and the workspace.
	WorkDir string
	// LoadDir holds perfload; sessions bind it at /opt/perf.
	LoadDir string
	// BinDir holds the run's copies of EnvConfig.BinDir's binaries.
	BinDir string
	Client *api.Client
	// CtrRef is the agent image's reference in containerd.
	CtrRef string
	// WorldCAFile is the world's CA (PEM): airlockd's --upstream-ca, so
	// that the L7 gateway verifies the world's hosts where it terminates
	// TLS.
	WorldCAFile string
	// SecretsDir holds secrets files as HOST/NAME: the admission policy
	// (AdmissionFile, airlockd's --admission) is the built-in one but for
	// its secret source, this directory instead of /etc/airlock/secrets.
	SecretsDir    string
	AdmissionFile string

	daemon    *exec.Cmd
	daemonErr chan error
	logFile   *os.File
	ctrd      *containerd.Client
	// ctrCgroups are the namespace's parent cgroups ("airlock" in each
	// hierarchy) that did not exist before the run: the ctr baselines'
	// containers go into /airlock/ID, and runc leaves the parent behind.
	ctrCgroups []string
	// runtime is airlockd's --runtime ("" is its default, runc), and
	// shimPerSession its --shim-per-session.
	runtime        string
	shimPerSession bool
	// busyPids are the busy loops of a loaded run: measurements of the
	// whole machine leave their CPU time out.
	busyPids []int
}

// StartEnv builds the environment. On error nothing is left behind.
func StartEnv(ctx context.Context, cfg EnvConfig) (_ *Env, retErr error) {
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	for _, b := range binaries {
		if _, err := os.Stat(filepath.Join(cfg.BinDir, b)); err != nil {
			return nil, fmt.Errorf("%w (run `make build deps`)", err)
		}
	}
	if _, err := os.Stat(cfg.ImageArchive); err != nil {
		return nil, fmt.Errorf("agent image: %w (run `make image`)", err)
	}
	root, err := os.MkdirTemp("/tmp", "alperf-")
	if err != nil {
		return nil, err
	}
	e := &Env{
		cfg: cfg, Root: root, StateRoot: filepath.Join(root, "state"), Socket: filepath.Join(root, "airlock.sock"),
		WorkDir: filepath.Join(root, "work"), LoadDir: filepath.Join(root, "load"), BinDir: filepath.Join(root, "bin"),
	}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range append(ctrls, nil) {
		p := filepath.Join("/sys/fs/cgroup", "airlock")
		if c != nil {
			p = filepath.Join("/sys/fs/cgroup", c.Name(), "airlock")
		}
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			e.ctrCgroups = append(e.ctrCgroups, p)
		}
	}
	e.Prefix = runtime.Prefix(e.StateRoot)
	defer func() {
		if retErr != nil {
			if _, err := e.Close(context.WithoutCancel(ctx)); err != nil {
				cfg.Logf("cleanup after failed start: %v", err)
			}
		}
	}()
	for _, d := range []string{e.WorkDir, e.LoadDir, e.BinDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The run uses its own copies: a rebuild of the checkout's binaries
	// while it runs must not change what is measured or profiled.
	for _, b := range binaries {
		if err := copyFile(filepath.Join(cfg.BinDir, b), filepath.Join(e.BinDir, b), 0o755); err != nil {
			return nil, err
		}
	}
	if cfg.Ocilabel != "" {
		if err := copyFile(cfg.Ocilabel, filepath.Join(e.BinDir, "ocilabel"), 0o755); err != nil {
			return nil, err
		}
	}
	// Sessions run as 65534: the loader must be reachable and executable.
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	if err := copyFile(cfg.Perfload, filepath.Join(e.LoadDir, "perfload"), 0o755); err != nil {
		return nil, err
	}

	w, err := world.Start(ctx, world.Config{Prefix: "pw" + e.Prefix[2:]})
	if err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	e.World = w
	if err := e.writeDaemonFiles(); err != nil {
		return nil, err
	}
	if err := w.AddHost(EgressHost, egressHostAddr); err != nil {
		return nil, err
	}
	for i := range DNSNameCount {
		if err := w.AddHost(fmt.Sprintf("d%d.%s", i, DNSZone), dnsHostAddr); err != nil {
			return nil, err
		}
	}
	if err := w.AddHost(SinkHost, sinkHostAddr); err != nil {
		return nil, err
	}

	if err := e.startDaemon(ctx); err != nil {
		return nil, err
	}
	e.Client = api.NewClient(e.Socket)
	if out, err := e.CLI("image", "import", cfg.ImageArchive).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("image import: %v: %s", err, out)
	}
	e.ctrd, err = containerd.New(e.ContainerdSocket(), containerd.WithDefaultNamespace("airlock"))
	if err != nil {
		return nil, fmt.Errorf("containerd client: %w", err)
	}
	out, err := e.Ctr("images", "ls", "-q").Output()
	if err != nil {
		return nil, fmt.Errorf("ctr images ls: %w", err)
	}
	for _, ref := range strings.Fields(string(out)) {
		if strings.HasSuffix(ref, AgentImage) {
			e.CtrRef = ref
		}
	}
	if e.CtrRef == "" {
		return nil, fmt.Errorf("image %s not found by ctr in %q", AgentImage, out)
	}
	return e, nil
}

// writeDaemonFiles writes the world's CA and the admission policy
// airlockd is started with.
func (e *Env) writeDaemonFiles() error {
	e.WorldCAFile = filepath.Join(e.Root, "world-ca.pem")
	e.SecretsDir = filepath.Join(e.Root, "secrets")
	e.AdmissionFile = filepath.Join(e.Root, "admission.hcl")
	if err := os.WriteFile(e.WorldCAFile, e.World.CAPEM(), 0o644); err != nil {
		return err
	}
	if err := os.Mkdir(e.SecretsDir, 0o700); err != nil {
		return err
	}
	src, err := admissionPolicy(e.SecretsDir)
	if err != nil {
		return err
	}
	return os.WriteFile(e.AdmissionFile, []byte(src), 0o644)
}

// admissionPolicy is the built-in admission policy with secrets from
// dir/HOST/ instead of /etc/airlock/secrets/HOST/.
func admissionPolicy(dir string) (string, error) { return policies.DefaultAdmissionFile(dir) }

func (e *Env) startDaemon(ctx context.Context) error {
	var err error
	// Appended to: SetRuntime starts it again.
	e.logFile, err = os.OpenFile(filepath.Join(e.Root, "airlockd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	e.daemon = exec.Command(e.Bin("airlockd"), e.DaemonArgs()...)
	e.daemon.Stdout, e.daemon.Stderr = e.logFile, e.logFile
	// Its own process group: a signal to ours (a terminal's ^C, timeout(1)
	// signalling its group) must not stop the daemon before Close has
	// removed the sessions through it.
	e.daemon.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.daemon.Start(); err != nil {
		return err
	}
	e.daemonErr = make(chan error, 1)
	go func() { e.daemonErr <- e.daemon.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(e.Socket); err == nil {
			if _, err := api.NewClient(e.Socket).Version(ctx); err == nil {
				return nil
			}
		}
		select {
		case err := <-e.daemonErr:
			e.daemonErr <- err
			return fmt.Errorf("airlockd exited: %v: %s", err, e.DaemonLog())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("airlockd did not serve %s within 60s: %s", e.Socket, e.DaemonLog())
}

// DaemonArgs are airlockd's flags (for the report's reproduce lines).
func (e *Env) DaemonArgs() []string {
	args := []string{"--root", e.StateRoot, "--socket", e.Socket, "--bin-dir", e.BinDir,
		"--uplink", "netns:" + e.World.NetnsName(), "--dns-upstream", e.World.DNSAddr().String(),
		"--allow-private", e.World.Net().String(),
		"--upstream-ca", e.WorldCAFile, "--admission", e.AdmissionFile,
		"--stop-containerd", "--log-level", cmp.Or(e.cfg.DaemonLogLevel, "warn"),
		// The DNS section measures the proxy's own throughput, not the
		// per-session limit.
		"--dns-rate", "1000000", "--runtime", e.Runtime()}
	if e.shimPerSession {
		args = append(args, "--shim-per-session")
	}
	return args
}

// Runtime is the OCI runtime airlockd runs sessions on.
func (e *Env) Runtime() string { return cmp.Or(e.runtime, runtime.DefaultOCIRuntime) }

// SetRuntime restarts airlockd on OCI runtime rt, with a shim per session
// or not, unless it runs so already. It removes every session first:
// airlockd, stopped with none, stops containerd, the shim anchor and its
// shim, and the restart makes them anew.
func (e *Env) SetRuntime(ctx context.Context, rt string, shimPerSession bool) error {
	if rt == e.Runtime() && shimPerSession == e.shimPerSession {
		return nil
	}
	if err := e.RemoveAll(ctx); err != nil {
		return err
	}
	if e.ctrd != nil {
		e.ctrd.Close()
		e.ctrd = nil
	}
	_ = e.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.daemonErr:
	case <-time.After(60 * time.Second):
		_ = e.daemon.Process.Kill()
		<-e.daemonErr
		return errors.New("airlockd did not stop within 60s of SIGTERM; killed")
	}
	e.logFile.Close()
	e.runtime, e.shimPerSession = rt, shimPerSession
	if err := e.startDaemon(ctx); err != nil {
		return err
	}
	var err error
	e.ctrd, err = containerd.New(e.ContainerdSocket(), containerd.WithDefaultNamespace("airlock"))
	return err
}

// DaemonLog returns the daemon's log so far (its last 4 KiB).
func (e *Env) DaemonLog() string {
	b, _ := os.ReadFile(filepath.Join(e.Root, "airlockd.log"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// DaemonPID is airlockd's pid.
func (e *Env) DaemonPID() int { return e.daemon.Process.Pid }

// ContainerdSocket is the embedded containerd's address.
func (e *Env) ContainerdSocket() string {
	return filepath.Join(e.StateRoot, "containerd", "containerd.sock")
}

// ContainerdPID reads the embedded containerd's pidfile.
func (e *Env) ContainerdPID() int {
	b, err := os.ReadFile(filepath.Join(e.StateRoot, "containerd", "containerd.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// Bin is the path of a binary in BinDir.
func (e *Env) Bin(name string) string { return filepath.Join(e.BinDir, name) }

// binaries are what a run copies from EnvConfig.BinDir (airlock-init is
// every sandbox's first process, airlock-logger its log writer).
var binaries = []string{"airlock", "airlockd", "airlock-init", "airlock-logger", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "crun"}

// CLIArgs is the argv of `airlock --socket SOCK ARGS...`.
func (e *Env) CLIArgs(args ...string) []string {
	return append([]string{e.Bin("airlock"), "--socket", e.Socket}, args...)
}

// CLI returns `airlock --socket SOCK ARGS...`.
func (e *Env) CLI(args ...string) *exec.Cmd {
	a := e.CLIArgs(args...)
	cmd := exec.Command(a[0], a[1:]...)
	cmd.Dir = e.cfg.Repo
	return cmd
}

// CtrArgs is the argv of ctr against the embedded containerd.
func (e *Env) CtrArgs(args ...string) []string {
	return append([]string{e.Bin("ctr"), "-a", e.ContainerdSocket(), "-n", "airlock"}, args...)
}

// Ctr returns a ctr command against the embedded containerd.
func (e *Env) Ctr(args ...string) *exec.Cmd {
	a := e.CtrArgs(args...)
	return exec.Command(a[0], a[1:]...)
}

// Containerd is a client of the embedded containerd (namespace airlock).
func (e *Env) Containerd() *containerd.Client { return e.ctrd }

// ContainerdCtx adds the session namespace to ctx.
func ContainerdCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, "airlock")
}

// RemoveAll force-removes every session the daemon knows.
func (e *Env) RemoveAll(ctx context.Context) error {
	list, err := e.Client.ListSessions(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list {
		if err := e.Client.RemoveSession(ctx, s.ID, true); err != nil && !api.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove %s: %w", s.ID, err))
		}
	}
	return errors.Join(errs...)
}

// Cleanup is what Close found and removed.
type Cleanup struct {
	// Leftovers were still there after the daemon stopped; Close removed
	// them. A clean run has none.
	Leftovers []string `json:"leftovers"`
	// Remaining could not be removed.
	Remaining []string `json:"remaining"`
}

// Close removes every session, stops airlockd (which stops containerd),
// closes the world, checks that nothing of the run is left (namespaces,
// links, nftables tables, cgroups, mounts, processes) and removes the
// root.
func (e *Env) Close(ctx context.Context) (*Cleanup, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var errs []error
	if e.Client != nil && e.daemonAlive() {
		if err := e.RemoveAll(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if e.ctrd != nil {
		e.ctrd.Close()
	}
	if e.daemon != nil && e.daemonAlive() {
		_ = e.daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.daemonErr:
		case <-time.After(60 * time.Second):
			_ = e.daemon.Process.Kill()
			<-e.daemonErr
			errs = append(errs, errors.New("airlockd did not stop within 60s of SIGTERM; killed"))
		}
	}
	if e.logFile != nil {
		e.logFile.Close()
		if e.cfg.DaemonLog != "" {
			if b, err := os.ReadFile(e.logFile.Name()); err != nil {
				errs = append(errs, err)
			} else if err := os.WriteFile(e.cfg.DaemonLog, b, 0o644); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range e.ctrCgroups {
		_ = os.Remove(p) // only when empty
	}
	c := &Cleanup{Leftovers: []string{}, Remaining: []string{}}
	uplink := ""
	if e.World != nil {
		uplink = e.World.NetnsPath()
	}
	c.Leftovers = append(c.Leftovers, e.leftovers(uplink)...)
	if e.World != nil {
		if err := e.World.Close(); err != nil {
			errs = append(errs, fmt.Errorf("world: %w", err))
		}
	}
	if len(c.Leftovers) > 0 {
		e.sweep()
		c.Remaining = append(c.Remaining, e.leftovers("")...)
	}
	if _, err := os.Stat(filepath.Join(netns.DefaultDir, "pw"+e.Prefix[2:]+"-world")); err == nil {
		c.Remaining = append(c.Remaining, "netns pw"+e.Prefix[2:]+"-world")
	}
	if err := os.RemoveAll(e.Root); err != nil {
		errs = append(errs, err)
	}
	if len(c.Remaining) > 0 {
		errs = append(errs, fmt.Errorf("left behind: %s", strings.Join(c.Remaining, ", ")))
	}
	return c, errors.Join(errs...)
}

func (e *Env) daemonAlive() bool {
	if e.daemon == nil || e.daemon.Process == nil {
		return false
	}
	select {
	case err := <-e.daemonErr:
		e.daemonErr <- err
		return false
	default:
		return true
	}
}

// leftovers lists what of this run still exists: kernel objects with the
// daemon's prefix, its cgroups, mounts below the root and processes
// started from it.
func (e *Env) leftovers(uplinkNetns string) []string {
	var out []string
	objs, err := netns.Leftovers(netns.DefaultDir, e.Prefix, uplinkNetns)
	if err != nil {
		out = append(out, "netns check failed: "+err.Error())
	}
	out = append(out, objs...)
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		p := filepath.Join("/sys/fs/cgroup", c.Name(), "airlock-"+e.Prefix)
		if _, err := os.Stat(p); err == nil {
			out = append(out, "cgroup "+p)
		}
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", "airlock-"+e.Prefix)); err == nil {
		out = append(out, "cgroup /sys/fs/cgroup/airlock-"+e.Prefix)
	}
	for _, m := range mountsUnder(e.Root) {
		out = append(out, "mount "+m)
	}
	for _, p := range processesUnder(e.Root) {
		out = append(out, fmt.Sprintf("process %d %s", p.pid, p.cmd))
	}
	return out
}

// sweep removes what a failed run left: it kills the processes started
// from the root and those in the run's session cgroups (by pid), unmounts
// below the root and removes the daemon's namespaces and cgroups.
func (e *Env) sweep() {
	for _, p := range processesUnder(e.Root) {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
	for _, pid := range processesInCgroupPrefix("airlock-" + e.Prefix + "/") {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	time.Sleep(200 * time.Millisecond)
	_ = mountinfo.UnmountAll(e.Root)
	_ = netns.CleanupDir(context.Background(), netns.DefaultDir, e.Prefix)
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		removeCgroupTree(filepath.Join("/sys/fs/cgroup", c.Name(), "airlock-"+e.Prefix))
	}
	removeCgroupTree(filepath.Join("/sys/fs/cgroup", "airlock-"+e.Prefix))
}

func removeCgroupTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if en.IsDir() {
			removeCgroupTree(filepath.Join(dir, en.Name()))
		}
	}
	_ = os.Remove(dir)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	m, _ := mountinfo.Under(dir)
	return m
}

type proc struct {
	pid int
	cmd string
}

// processesUnder lists processes whose command line names a path below
// dir (the daemon, containerd, shims and log writers of this run).
func processesUnder(dir string) []proc {
	var out []proc
	for _, p := range allProcesses() {
		if strings.Contains(p.cmd, dir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// allProcesses lists every process but this one, with its command line
// (arguments joined by spaces, with a trailing space).
func allProcesses() []proc {
	entries, _ := os.ReadDir("/proc")
	var out []proc
	self := os.Getpid()
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		out = append(out, proc{pid: pid, cmd: string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))})
	}
	return out
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
