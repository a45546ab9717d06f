// Package runtime is airlock's containerd client: it creates hardened
// session containers from OCI spec options, runs their tasks with output
// kept in files by a containerd binary logger, execs extra processes, and
// removes everything a session owned (task, container, snapshot, lease).
//
// Every containerd object of a session carries the session id: the lease,
// the container and the snapshot have it as their id, and the container is
// labelled LabelSession. Network, filesystem and credential layers plug in as
// oci.SpecOpts; this package knows nothing about them.
package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/errdefs"
	"github.com/containerd/ttrpc"
	"github.com/distribution/reference"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/logwriter"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// LabelSession marks containerd objects that belong to an airlock session.
const LabelSession = "dev.airlock.session"

// LoggerArg names the logger's argument that is the session's log
// directory (see package logwriter for the others).
const LoggerArg = logwriter.Arg

// OCIRuntimes are the OCI runtimes sessions may run on: containerd's runc
// shim drives either, since crun takes runc's command line.
var OCIRuntimes = []string{"runc", "crun"}

// DefaultOCIRuntime is the OCI runtime of a daemon that names none.
const DefaultOCIRuntime = "runc"

// crunSpecVersion is the spec version crun is given: crun 1.8 refuses a
// config whose ociVersion is not 1.0.x ("unknown version specified"),
// although it reads every field airlock's specs set (each hardening
// property is a test run on both runtimes: `make test`).
const crunSpecVersion = "1.0.2"

// specVersionOpt labels the spec with a version the runtime accepts.
func (r *Runtime) specVersionOpt() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if r.cfg.OCIRuntime == "crun" {
			s.Version = crunSpecVersion
		}
		return nil
	}
}

// Config configures a Runtime.
type Config struct {
	// Address is containerd's gRPC socket.
	Address string
	// Namespace is the containerd namespace for all sessions.
	Namespace string
	// Snapshotter unpacks images; default "overlayfs".
	Snapshotter string
	// OCIBinary is the OCI runtime's absolute path (runc, or crun, which
	// takes the same command line); never a PATH lookup. containerd's runc
	// shim runs it for every task.
	OCIBinary string
	// OCIRoot is the OCI runtime's state directory.
	OCIRoot string
	// OCIRuntime names the runtime at OCIBinary (one of OCIRuntimes;
	// empty is runc), for what differs between them (specVersionOpt).
	OCIRuntime string
	// LoggerBinary is an absolute path to a binary implementing containerd's
	// logging protocol when called as `LoggerBinary LoggerArg DIR`.
	LoggerBinary string
	// FIFODir holds the FIFOs of exec'd processes.
	FIFODir string
	// ShimGroup, when set, makes every session container join this runc
	// shim group: one shim serves them all (see EnsureAnchor). Empty: each
	// session gets a shim of its own.
	ShimGroup string
	// ShimStateDir is containerd's state directory, where the shims'
	// bundles are (ShimState); empty when unknown.
	ShimStateDir string
}

// Runtime runs session containers on containerd.
type Runtime struct {
	client *containerd.Client
	cfg    Config
	// joinMu admits one task at a time to the shim group. containerd runs
	// the shim's start-up command for every new task; it reuses the
	// group's shim only if it can connect to its socket within 100 ms,
	// and otherwise removes the socket and starts a new shim in its place.
	// Two such start-ups side by side (a host so loaded that the connect
	// times out) can each start a shim, and the one that loses the socket
	// is never handed a task, so it never exits. One at a time, the shim
	// creates tasks one at a time anyway.
	joinMu sync.Mutex
}

// New connects to containerd.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Namespace == "" {
		cfg.Namespace = "airlock"
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = "overlayfs"
	}
	for _, p := range []struct{ name, v string }{
		{"OCI runtime binary", cfg.OCIBinary}, {"OCI runtime root", cfg.OCIRoot},
		{"logger binary", cfg.LoggerBinary}, {"fifo dir", cfg.FIFODir},
	} {
		if !filepath.IsAbs(p.v) {
			return nil, fmt.Errorf("runtime: %s %q must be an absolute path: %w", p.name, p.v, errdefs.ErrInvalidArgument)
		}
	}
	if _, err := os.Stat(cfg.OCIBinary); err != nil {
		return nil, fmt.Errorf("runtime: OCI runtime binary: %w", err)
	}
	if err := os.MkdirAll(cfg.FIFODir, 0o700); err != nil {
		return nil, err
	}
	c, err := containerd.New(cfg.Address, containerd.WithDefaultNamespace(cfg.Namespace), containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("runtime: connect to containerd at %s: %w", cfg.Address, err)
	}
	return &Runtime{client: c, cfg: cfg}, nil
}

// Client returns the containerd client.
func (r *Runtime) Client() *containerd.Client { return r.client }

// Namespace returns the containerd namespace sessions live in.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// Snapshotter returns the snapshotter images are unpacked into.
func (r *Runtime) Snapshotter() string { return r.cfg.Snapshotter }

// Close closes the client connection. Sessions keep running.
func (r *Runtime) Close() error { return r.client.Close() }

func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

// CreateOptions describe a session container.
type CreateOptions struct {
	ID string
	// Rootfs is the session's rootfs, from PrepareRootfs.
	Rootfs *Rootfs
	// SpecOpts are applied after the image config and before the seccomp
	// profile, in order.
	SpecOpts []oci.SpecOpts
	Labels   map[string]string
}

// Rootfs is a session's lease and writable rootfs snapshot of its image,
// made ahead of its container so that the snapshot can be prepared while
// the rest of the sandbox is.
type Rootfs struct {
	id  string
	img containerd.Image
}

// PrepareRootfs creates the session's lease and its writable snapshot of
// image, unpacking the image first if it never was. On error nothing it
// created is left behind; after success, Delete removes both.
func (r *Runtime) PrepareRootfs(ctx context.Context, id, image string) (_ *Rootfs, retErr error) {
	ctx = r.ctx(ctx)
	ls := r.client.LeasesService()
	lease, err := ls.Create(ctx, leases.WithID(id), leases.WithLabel(LabelSession, id))
	if err != nil {
		return nil, fmt.Errorf("session %q: create lease: %w", id, err)
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := deferContext(ctx)
			defer cancel()
			if err := ls.Delete(dctx, lease, leases.SynchronousDelete); err != nil {
				log.G(ctx).Warn("rollback: delete lease", "session", id, "error", err)
			}
		}
	}()
	ctx = leases.WithLease(ctx, lease.ID)
	img, err := r.GetImage(ctx, image)
	if err != nil {
		return nil, err
	}
	unpacked, err := img.IsUnpacked(ctx, r.cfg.Snapshotter)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	if !unpacked {
		if err := img.Unpack(ctx, r.cfg.Snapshotter); err != nil {
			return nil, fmt.Errorf("image %q: unpack: %w", image, err)
		}
	}
	// However it came into the store: once per image, a label after.
	if err := ocipack.CheckNoDevices(ctx, r.client, img, r.cfg.Snapshotter); err != nil {
		return nil, err
	}
	// A writable snapshot lets runc create mount points; the spec then
	// remounts the root read-only before the process starts.
	parent, err := img.RootFS(ctx)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	sn := r.client.SnapshotService(r.cfg.Snapshotter)
	if _, err := sn.Prepare(ctx, id, identity.ChainID(parent).String(), snapshots.WithLabels(map[string]string{LabelSession: id})); err != nil {
		return nil, fmt.Errorf("session %q: prepare rootfs snapshot: %w", id, err)
	}
	return &Rootfs{id: id, img: img}, nil
}

// Create creates the session's container on its rootfs. On error no
// container is left; the rootfs stays the caller's to delete (Delete).
func (r *Runtime) Create(ctx context.Context, o CreateOptions) error {
	if o.Rootfs == nil || o.Rootfs.id != o.ID {
		return fmt.Errorf("session %q: no rootfs prepared for it: %w", o.ID, errdefs.ErrInvalidArgument)
	}
	ctx = leases.WithLease(r.ctx(ctx), o.ID)
	img := o.Rootfs.img
	specOpts := append([]oci.SpecOpts{oci.WithImageConfig(img)}, o.SpecOpts...)
	specOpts = append(specOpts, SeccompOpt(), r.specVersionOpt())
	var sandboxed []containerd.NewContainerOpts
	if r.cfg.ShimGroup != "" {
		sandboxed = append(sandboxed, containerd.WithSandbox(AnchorID))
		specOpts = append(specOpts, oci.WithAnnotations(map[string]string{GroupAnnotation: r.cfg.ShimGroup}))
	}
	labels := map[string]string{LabelSession: o.ID}
	for k, v := range o.Labels {
		labels[k] = v
	}
	_, err := r.client.NewContainer(ctx, o.ID, append([]containerd.NewContainerOpts{
		containerd.WithImage(img),
		containerd.WithSnapshotter(r.cfg.Snapshotter),
		containerd.WithSnapshot(o.ID),
		containerd.WithRuntime(plugins.RuntimeRuncV2, &options.Options{
			BinaryName: r.cfg.OCIBinary,
			Root:       r.cfg.OCIRoot,
		}),
		containerd.WithNewSpec(specOpts...),
		containerd.WithContainerLabels(labels),
	}, sandboxed...)...)
	if err != nil {
		return fmt.Errorf("session %q: create container: %w", o.ID, err)
	}
	return nil
}

// Start starts the session's main process with stdout and stderr written to
// stdout.log and stderr.log in logDir by the binary logger, the two
// together up to logSize bytes (0: the logger's default), and returns its
// pid and a channel that delivers its exit status.
//
// With tty the main process gets a terminal (the container's spec must
// ask for one: Process.Terminal): its output goes to stdout.log, and the
// logger relays it, and takes its input, on logwriter.TTYSocket in logDir
// (see AttachSocket).
func (r *Runtime) Start(ctx context.Context, id, logDir string, logSize int64, tty bool) (pid uint32, exit <-chan containerd.ExitStatus, retErr error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return 0, nil, fmt.Errorf("session %q: %w", id, err)
	}
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return 0, nil, err
	}
	args := map[string]string{LoggerArg: logDir}
	if logSize > 0 {
		args[logwriter.SizeArg] = strconv.FormatInt(logSize, 10)
	}
	creator := cio.BinaryIO(r.cfg.LoggerBinary, args)
	if tty {
		args[logwriter.TTYArg] = "1"
		in := filepath.Join(logDir, logwriter.TTYInput)
		_ = os.Remove(in)
		if err := syscall.Mkfifo(in, 0o600); err != nil {
			return 0, nil, fmt.Errorf("session %q: terminal input: %w", id, err)
		}
		creator = ttyCreator(cio.BinaryIO(r.cfg.LoggerBinary, args), in)
	}
	// A task joining the anchor's shim through its sandbox record needs
	// no start-up process, so no turn (see the anchor's doc).
	info, err := c.Info(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("session %q: %w", id, err)
	}
	serial := r.cfg.ShimGroup != "" && (info.SandboxID != AnchorID || !r.anchorSandbox(ctx))
	if serial {
		r.joinMu.Lock()
	}
	task, err := c.NewTask(ctx, creator)
	if err != nil && r.cfg.ShimGroup != "" && !serial && sandboxShimGone(err) {
		// The anchor's shim died after its record was read: forget the
		// record and join through the start-up process, which starts
		// a new shim.
		log.G(ctx).Warn("the shared shim is gone; starting through a new one", "session", id, "error", err)
		r.forgetAnchorSandbox(ctx)
		serial = true
		r.joinMu.Lock()
		task, err = c.NewTask(ctx, creator)
	}
	for try := 0; err != nil && r.cfg.ShimGroup != "" && shimGone(err) && try < 2; try++ {
		// The group's shim was exiting with its last task (an anchor
		// that died) just as this task joined it; the retry starts a
		// new shim.
		log.G(ctx).Warn("the shared shim exited while the task joined it; retrying", "session", id, "error", err)
		task, err = c.NewTask(ctx, creator)
	}
	if serial {
		r.joinMu.Unlock()
	}
	if err != nil {
		return 0, nil, fmt.Errorf("session %q: create task: %w", id, classifyStartError(err))
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := deferContext(ctx)
			defer cancel()
			_, _ = task.Delete(dctx, containerd.WithProcessKill)
		}
	}()
	// Wait before Start, so an instant exit is not missed.
	ch, err := task.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return 0, nil, fmt.Errorf("session %q: wait task: %w", id, err)
	}
	if err := task.Start(ctx); err != nil {
		return 0, nil, fmt.Errorf("session %q: start task: %w", id, classifyStartError(err))
	}
	return task.Pid(), ch, nil
}

// ttyCreator gives the task of base's output a terminal, whose input is
// the FIFO stdin.
func ttyCreator(base cio.Creator, stdin string) cio.Creator {
	return func(id string) (cio.IO, error) {
		i, err := base(id)
		if err != nil {
			return nil, err
		}
		return &ttyIO{IO: i, stdin: stdin}, nil
	}
}

type ttyIO struct {
	cio.IO
	stdin string
}

func (t *ttyIO) Config() cio.Config {
	c := t.IO.Config()
	c.Stdin, c.Terminal = t.stdin, true
	return c
}

// AttachTTY connects to the terminal of the session's main process (see
// Start): what the connection reads is the terminal's output from now
// on, what it writes is its input. It fails with ErrFailedPrecondition
// when the main process has no terminal or it has gone.
func (r *Runtime) AttachTTY(ctx context.Context, id, logDir string) (*net.UnixConn, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return nil, err
	}
	if spec.Process == nil || !spec.Process.Terminal {
		return nil, fmt.Errorf("session %q has no terminal: it was created without one (airlock run -it, or \"terminal\": true in the policy sent to the API): %w", id, errdefs.ErrFailedPrecondition)
	}
	conn, err := logwriter.DialTTY(logDir)
	if err != nil {
		return nil, fmt.Errorf("session %q: its terminal is gone (the main process has ended): %v: %w", id, err, errdefs.ErrFailedPrecondition)
	}
	return conn, nil
}

// Resize sets the size of the main process's terminal.
func (r *Runtime) Resize(ctx context.Context, id string, cols, rows uint32) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return fmt.Errorf("session %q is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	return t.Resize(ctx, cols, rows)
}

// ProcessEnv returns the main process's environment from the session's
// spec. The spec is written once, at create, and never rewritten: it
// holds no credential (those go through the launch message).
func (r *Runtime) ProcessEnv(ctx context.Context, id string) ([]string, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return nil, err
	}
	if spec.Process == nil {
		return nil, nil
	}
	return spec.Process.Env, nil
}

// TaskState is the state of a session's main process as containerd sees it.
type TaskState struct {
	Exists   bool
	Running  bool
	Pid      uint32
	ExitCode uint32
	ExitedAt time.Time
}

// Task returns the main process's state.
func (r *Runtime) Task(ctx context.Context, id string) (TaskState, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return TaskState{}, err
	}
	t, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return TaskState{}, nil
	}
	if err != nil {
		return TaskState{}, err
	}
	st, err := t.Status(ctx)
	if err != nil {
		return TaskState{}, err
	}
	return TaskState{
		Exists:   true,
		Running:  st.Status == containerd.Running || st.Status == containerd.Created || st.Status == containerd.Paused || st.Status == containerd.Pausing,
		Pid:      t.Pid(),
		ExitCode: st.ExitStatus,
		ExitedAt: st.ExitTime,
	}, nil
}

// Wait re-attaches to a running main process (after a daemon restart) and
// returns a channel that delivers its exit status.
func (r *Runtime) Wait(ctx context.Context, id string) (<-chan containerd.ExitStatus, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return nil, err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return nil, err
	}
	return t.Wait(context.WithoutCancel(ctx))
}

// Signal sends sig to every process of the session (the main process first).
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return err
	}
	err = t.Kill(ctx, sig, containerd.WithKillAll)
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// ExecOptions describe an extra process in a running session.
type ExecOptions struct {
	ExecID string
	Args   []string
	Env    []string // added to the session's environment
	Cwd    string
	Stdin  io.Reader // nil: empty stdin
	Stdout io.Writer
	Stderr io.Writer
	// TTY gives the process a terminal, of Size at first: its output,
	// stdout and stderr together, goes to Stdout. Each size received
	// from Resize resizes it.
	TTY    bool
	Size   WinSize
	Resize <-chan WinSize
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Cols, Rows uint16
}

// Exec runs a process in the session's container with the main process's
// user, capabilities and limits, streams its output and returns its exit code.
func (r *Runtime) Exec(ctx context.Context, id string, o ExecOptions) (int, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return -1, err
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return -1, err
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return -1, fmt.Errorf("session %q is not running: %w", id, errdefs.ErrFailedPrecondition)
	}
	pspec := *spec.Process
	pspec.Terminal = o.TTY
	pspec.ConsoleSize = nil
	if o.TTY && o.Size.Cols > 0 && o.Size.Rows > 0 {
		pspec.ConsoleSize = &specs.Box{Width: uint(o.Size.Cols), Height: uint(o.Size.Rows)}
	}
	pspec.Args = o.Args
	pspec.Env = append(append([]string{}, spec.Process.Env...), o.Env...)
	if o.Cwd != "" {
		pspec.Cwd = o.Cwd
	}
	var stdin io.Reader = eofReader{}
	if o.Stdin != nil {
		stdin = o.Stdin
	}
	stdout, stderr := o.Stdout, o.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var proc containerd.Process
	var procMu sync.Mutex
	closer := &stdinCloser{r: stdin, onEOF: func() {
		procMu.Lock()
		p := proc
		procMu.Unlock()
		if p != nil {
			_ = p.CloseIO(context.WithoutCancel(ctx), containerd.WithStdinCloser)
		}
	}}
	ioOpts := []cio.Opt{cio.WithStreams(closer, stdout, stderr), cio.WithFIFODir(r.cfg.FIFODir)}
	if o.TTY {
		ioOpts = append(ioOpts, cio.WithTerminal)
	}
	p, err := t.Exec(ctx, o.ExecID, &pspec, cio.NewCreator(ioOpts...))
	if err != nil {
		return -1, fmt.Errorf("session %q: exec: %w", id, err)
	}
	procMu.Lock()
	proc = p
	procMu.Unlock()
	defer func() {
		dctx, cancel := deferContext(ctx)
		defer cancel()
		_, _ = p.Delete(dctx, containerd.WithProcessKill)
	}()
	ch, err := p.Wait(context.WithoutCancel(ctx))
	if err != nil {
		return -1, err
	}
	if err := p.Start(ctx); err != nil {
		if cerr := classifyStartError(err); errdefs.IsInvalidArgument(cerr) {
			// As a shell does: the command does not exist, exit status 127.
			fmt.Fprintf(stderr, "airlock: %s: command not found\n", o.Args[0])
			return 127, nil
		}
		return -1, fmt.Errorf("session %q: start exec: %w", id, err)
	}
	if closer.sawEOF() {
		_ = p.CloseIO(ctx, containerd.WithStdinCloser)
	}
	if o.TTY && o.Resize != nil {
		rctx, stopResize := context.WithCancel(ctx)
		defer stopResize()
		go func() {
			for {
				select {
				case sz := <-o.Resize:
					if sz.Cols > 0 && sz.Rows > 0 {
						_ = p.Resize(rctx, uint32(sz.Cols), uint32(sz.Rows))
					}
				case <-rctx.Done():
					return
				}
			}
		}()
	}
	select {
	case st := <-ch:
		p.IO().Wait()
		code, _, err := st.Result()
		if err != nil {
			return -1, err
		}
		return int(code), nil
	case <-ctx.Done():
		_ = p.Kill(context.WithoutCancel(ctx), syscall.SIGKILL)
		return -1, ctx.Err()
	}
}

// Delete removes the session's task (killing it), container, snapshot and
// lease. Missing objects are not an error, so Delete is safe to repeat.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	var errs []error
	c, err := r.client.LoadContainer(ctx, id)
	switch {
	case errdefs.IsNotFound(err):
	case err != nil:
		errs = append(errs, err)
	default:
		if t, err := c.Task(ctx, nil); err == nil {
			if err := deleteTask(ctx, t); err != nil {
				errs = append(errs, err)
			}
		} else if !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("load task: %w", err))
		}
		if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete container: %w", err))
		}
	}
	// A snapshot left by an interrupted create.
	sn := r.client.SnapshotService(r.cfg.Snapshotter)
	if err := sn.Remove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove snapshot: %w", err))
	}
	if err := r.client.LeasesService().Delete(ctx, leases.Lease{ID: id}, leases.SynchronousDelete); err != nil && !errdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete lease: %w", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("session %q: %w", id, errors.Join(errs...))
	}
	return nil
}

// Owned lists the session ids that own containerd objects in the namespace:
// containers labelled LabelSession, and leases with that label.
func (r *Runtime) Owned(ctx context.Context) (map[string]bool, error) {
	ctx = r.ctx(ctx)
	ids := map[string]bool{}
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q", LabelSession))
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		ids[c.ID()] = true
	}
	ls, err := r.client.LeasesService().List(ctx, fmt.Sprintf("labels.%q", LabelSession))
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		ids[l.ID] = true
	}
	return ids, nil
}

// Resources lists the containerd objects that exist for a session.
func (r *Runtime) Resources(ctx context.Context, id string) ([]string, error) {
	ctx = r.ctx(ctx)
	var out []string
	if c, err := r.client.LoadContainer(ctx, id); err == nil {
		out = append(out, "container/"+id)
		if _, err := c.Task(ctx, nil); err == nil {
			out = append(out, "task/"+id)
		}
	}
	if _, err := r.client.SnapshotService(r.cfg.Snapshotter).Stat(ctx, id); err == nil {
		out = append(out, "snapshot/"+id)
	}
	ls, err := r.client.LeasesService().List(ctx, fmt.Sprintf("id==%q", id))
	if err != nil {
		return nil, err
	}
	if len(ls) > 0 {
		out = append(out, "lease/"+id)
	}
	return out, nil
}

// deferContext returns a context for cleanup that survives the caller's
// cancellation, bounded in time.
func deferContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// stdinCloser calls onEOF once its reader is exhausted, so the process sees
// EOF on stdin.
type stdinCloser struct {
	r     io.Reader
	onEOF func()
	mu    sync.Mutex
	eof   bool
}

func (s *stdinCloser) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err == io.EOF {
		s.mu.Lock()
		first := !s.eof
		s.eof = true
		s.mu.Unlock()
		if first {
			s.onEOF()
		}
	}
	return n, err
}

func (s *stdinCloser) sawEOF() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eof
}

// DeleteTask removes the session's (exited or killed) main task, freeing its
// shim and cgroup; the container and snapshot stay until Delete.
func (r *Runtime) DeleteTask(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	t, err := c.Task(ctx, nil)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := deleteTask(ctx, t); err != nil {
		return fmt.Errorf("session %q: %w", id, err)
	}
	return nil
}

// deleteTask deletes a task, killing its processes first only if it has
// not stopped: containerd's WithProcessKill asks the shim to run `runc kill
// --all` even for a stopped task, which costs a runc process and then fails
// with "not running".
func deleteTask(ctx context.Context, t containerd.Task) error {
	_, err := t.Delete(ctx)
	if errdefs.IsFailedPrecondition(err) {
		// Not stopped (running, created or paused).
		_, err = t.Delete(ctx, containerd.WithProcessKill)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("delete task: %w", err)
	}
	return nil
}

// GetImage finds an image by the name a manifest uses: exactly, or in its
// normalized form ("airlock/agent:bookworm" is "docker.io/airlock/agent:bookworm").
func (r *Runtime) GetImage(ctx context.Context, name string) (containerd.Image, error) {
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, name)
	if err == nil || !errdefs.IsNotFound(err) {
		return img, err
	}
	if ref, perr := reference.ParseDockerRef(name); perr == nil && ref.String() != name {
		if img, err2 := r.client.GetImage(ctx, ref.String()); err2 == nil {
			return img, nil
		}
	}
	return nil, fmt.Errorf("image %q: %w (import it with `airlock image import`)", name, err)
}

// shimGone reports an error of a call to a shim that had exited. In
// process the shim's ttrpc client returns ttrpc.ErrClosed; through
// containerd's API the error arrives in the class errdefs.ErrUnknown (it
// has no class of its own) with ttrpc's text at the end of its message,
// which is how containerd's own CRI service recognises it
// (internal/cri/util.IsShimTTRPCClosed). Both are checked here, once.
func shimGone(err error) bool {
	if errors.Is(err, ttrpc.ErrClosed) {
		return true
	}
	return errdefs.IsUnknown(err) && strings.HasSuffix(err.Error(), ttrpc.ErrClosed.Error())
}

// sandboxShimGone reports whether err is containerd's failure to reach
// the shim of the anchor's sandbox (a shim that was killed).
func sandboxShimGone(err error) bool {
	return strings.Contains(err.Error(), "failed to load sandbox task")
}

// execFailures are the reasons the OCI runtime gives for failing to exec a
// command: the program does not exist or cannot be executed. runc says
// them after "exec: " (`exec: "nope": executable file not found in
// $PATH`), crun after "open executable: " with errno's capital
// (`open executable: Permission denied`), or as "executable file `nope`
// not found in $PATH".
var execFailures = []string{"executable file not found", "no such file or directory", "permission denied", "not a directory", "is a directory", "operation not permitted"}

// commandFailed reports whether msg is the OCI runtime's report of a
// command it could not exec.
func commandFailed(msg string) bool {
	if strings.Contains(msg, "executable file `") && strings.Contains(msg, "` not found in $PATH") {
		return true // crun
	}
	for _, lead := range []string{"exec:", "open executable: "} {
		i := strings.Index(msg, lead)
		if i < 0 {
			continue
		}
		rest := strings.ToLower(msg[i+len(lead):])
		for _, s := range execFailures {
			if strings.Contains(rest, s) {
				return true
			}
		}
	}
	return false
}

// classifyStartError marks a start failure caused by the command itself (a
// program that does not exist or cannot be executed) as invalid argument, so
// the API answers 4xx with the runtime's reason instead of an internal error.
//
// runc and crun report such a failure only as text, which the shim passes
// on in the class errdefs.ErrUnknown (as Moby's translateContainerdStartErr
// finds it too); an error of any other class, or a context's, is left
// as it is.
func classifyStartError(err error) error {
	if !errdefs.IsUnknown(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if commandFailed(err.Error()) {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	return err
}
