package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/runc/options"
	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/sandbox"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/plugins"
	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// A shared shim.
//
// containerd starts one runc shim per task unless the task's spec names a
// group (the runc shim's io.containerd.runc.v2.group annotation): then every
// task of the group is served by one shim, which exits with the group's last
// task. Sharing saves the start and shutdown of a shim process per session
// (the shim is not on the output path: the binary logger reads the
// container's pipes itself) and its few MiB of memory, at the price that a
// crash of that one shim ends every session in the group.
//
// A session task joins the anchor's shim without a start-up process: its
// container names the anchor as its sandbox (containerd's sandbox API, as
// CRI's pods use it), and while a sandbox record of that id exists,
// containerd hands a new task straight to the shim serving the anchor's
// task (the runc shim speaks the version of its bootstrap protocol that
// allows it) instead of running `containerd-shim-runc-v2 start` to find or
// start the group's shim. The record exists only while the anchor does
// (EnsureAnchor makes it, RemoveAnchor and the anchor's exit remove it);
// without it containerd falls back to the start-up process and the group
// annotation, and joinMu admits one such start-up at a time.
//
// The anchor is what makes the shim outlive a session: a container of the
// group whose only process sleeps (airlock-init --pause) in its own
// namespaces, as an unprivileged user with no capabilities, on a read-only
// root holding nothing but that binary. It belongs to the daemon, not to a
// session: created when the daemon starts, removed when the daemon stops
// with no session task left.

// AnchorID is the id of the anchor container in the daemon's namespace.
// Session ids are 12 hexadecimal digits, so it never collides with one.
const AnchorID = "shim-anchor"

// LabelAnchor marks the anchor container; its value is the shim group.
const LabelAnchor = "dev.airlock.shim-anchor"

// GroupAnnotation is the runc shim's grouping annotation.
const GroupAnnotation = "io.containerd.runc.v2.group"

// PauseArg makes airlock-init sleep until SIGTERM or SIGINT.
const PauseArg = "--pause"

// AnchorOptions describe the anchor container.
type AnchorOptions struct {
	// Dir becomes the anchor's root filesystem; it is created and filled
	// with a copy of InitBinary.
	Dir string
	// InitBinary is the static airlock-init.
	InitBinary string
	// CgroupPath is the anchor's cgroup.
	CgroupPath string
}

// anchorBinary is where the init binary sits in the anchor's root.
const anchorBinary = "/" + launch.Binary

// ShimGroup returns the shim group sessions join ("" for a shim each).
func (r *Runtime) ShimGroup() string { return r.cfg.ShimGroup }

// EnsureAnchor makes sure the anchor of the runtime's shim group is
// running: an existing one whose task runs is kept (after a daemon
// restart), anything else under its id is removed and a new one started.
// It returns a channel that delivers the anchor's exit. Without a shim
// group it does nothing and returns a nil channel.
func (r *Runtime) EnsureAnchor(ctx context.Context, o AnchorOptions) (<-chan containerd.ExitStatus, error) {
	if r.cfg.ShimGroup == "" {
		return nil, nil
	}
	ctx = r.ctx(ctx)
	if c, err := r.client.LoadContainer(ctx, AnchorID); err == nil {
		if t, err := c.Task(ctx, nil); err == nil {
			if st, err := t.Status(ctx); err == nil && st.Status == containerd.Running {
				ch, err := t.Wait(context.WithoutCancel(ctx))
				if err != nil {
					return nil, err
				}
				return ch, r.ensureAnchorSandbox(ctx)
			}
		}
	} else if !errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("shim anchor: %w", err)
	}
	if err := r.RemoveAnchor(ctx); err != nil {
		return nil, err
	}
	if err := writeAnchorRoot(o); err != nil {
		return nil, fmt.Errorf("shim anchor: %w", err)
	}
	c, err := r.client.NewContainer(ctx, AnchorID,
		containerd.WithRuntime(plugins.RuntimeRuncV2, &options.Options{
			BinaryName: r.cfg.OCIBinary,
			Root:       r.cfg.OCIRoot,
		}),
		containerd.WithNewSpec(
			oci.WithRootFSPath(o.Dir),
			oci.WithRootFSReadonly(),
			oci.WithProcessArgs(anchorBinary, PauseArg),
			oci.WithProcessCwd("/"),
			oci.WithEnv(nil),
			oci.WithUIDGID(65534, 65534),
			withNoAdditionalGIDs,
			oci.WithCapabilities(nil),
			withInheritableCapabilities(nil),
			oci.WithAmbientCapabilities(nil),
			oci.WithNoNewPrivileges,
			oci.WithHostname("shim-anchor"),
			oci.WithCgroup(o.CgroupPath),
			oci.WithMemoryLimit(16<<20),
			// The Go runtime's threads count against pids.
			oci.WithPidsLimit(16),
			oci.WithAnnotations(map[string]string{GroupAnnotation: r.cfg.ShimGroup}),
			SeccompOpt(),
			r.specVersionOpt(),
		),
		containerd.WithContainerLabels(map[string]string{LabelAnchor: r.cfg.ShimGroup}),
	)
	if err != nil {
		return nil, fmt.Errorf("shim anchor: create container: %w", err)
	}
	r.joinMu.Lock()
	t, err := c.NewTask(ctx, cio.NullIO)
	r.joinMu.Unlock()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("shim anchor: create task: %w", err), r.RemoveAnchor(ctx))
	}
	ch, err := t.Wait(context.WithoutCancel(ctx))
	if err == nil {
		err = t.Start(ctx)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("shim anchor: start: %w", err), r.RemoveAnchor(ctx))
	}
	if err := r.ensureAnchorSandbox(ctx); err != nil {
		return nil, errors.Join(err, r.RemoveAnchor(ctx))
	}
	return ch, nil
}

// ensureAnchorSandbox records the running anchor as a sandbox, so that
// session tasks naming it join its shim directly.
func (r *Runtime) ensureAnchorSandbox(ctx context.Context) error {
	_, err := r.client.SandboxStore().Create(ctx, sandbox.Sandbox{
		ID:      AnchorID,
		Labels:  map[string]string{LabelAnchor: r.cfg.ShimGroup},
		Runtime: sandbox.RuntimeOpts{Name: plugins.RuntimeRuncV2},
	})
	if err != nil && !errdefs.IsAlreadyExists(err) {
		return fmt.Errorf("shim anchor: sandbox record: %w", err)
	}
	return nil
}

// anchorSandbox reports whether the anchor's sandbox record exists: a
// task whose container names it joins the anchor's shim directly.
func (r *Runtime) anchorSandbox(ctx context.Context) bool {
	_, err := r.client.SandboxStore().Get(ctx, AnchorID)
	return err == nil
}

// forgetAnchorSandbox removes the anchor's sandbox record: tasks join
// through the shim's start-up process until EnsureAnchor makes it again.
func (r *Runtime) forgetAnchorSandbox(ctx context.Context) error {
	if err := r.client.SandboxStore().Delete(r.ctx(ctx), AnchorID); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("shim anchor: remove sandbox record: %w", err)
	}
	return nil
}

// RemoveAnchor kills and removes the anchor container, if there is one.
// The group's shim exits once its last task is gone.
func (r *Runtime) RemoveAnchor(ctx context.Context) error {
	ctx = r.ctx(ctx)
	// First: no task may join a shim through an anchor that is going.
	if err := r.forgetAnchorSandbox(ctx); err != nil {
		return err
	}
	c, err := r.client.LoadContainer(ctx, AnchorID)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("shim anchor: %w", err)
	}
	if t, err := c.Task(ctx, nil); err == nil {
		if err := deleteTask(ctx, t); err != nil {
			return fmt.Errorf("shim anchor: %w", err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("shim anchor: load task: %w", err)
	}
	if err := c.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("shim anchor: delete container: %w", err)
	}
	return nil
}

// SessionTasks counts the tasks in the namespace other than the anchor's.
func (r *Runtime) SessionTasks(ctx context.Context) (int, error) {
	ctx = r.ctx(ctx)
	resp, err := r.client.TaskService().List(ctx, &tasks.ListTasksRequest{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range resp.Tasks {
		if t.ID != AnchorID {
			n++
		}
	}
	return n, nil
}

// writeAnchorRoot lays out the anchor's root: the init binary and the
// mount points of the default spec, so runc writes nothing into it.
func writeAnchorRoot(o AnchorOptions) error {
	if !filepath.IsAbs(o.Dir) || !filepath.IsAbs(o.InitBinary) {
		return fmt.Errorf("anchor root %q and init binary %q must be absolute paths", o.Dir, o.InitBinary)
	}
	for _, d := range []string{"", "proc", "dev", "sys", "run"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return err
		}
	}
	dst := filepath.Join(o.Dir, anchorBinary)
	tmp := dst + ".tmp"
	_ = os.Remove(tmp)
	if err := launch.Install(o.InitBinary, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// StartAnchor starts (or, after a daemon restart, re-adopts) the anchor
// now, then restarts it in the background whenever it exits or could not
// start, backing off up to 30 s, until ctx is done; the returned channel
// is closed when that background work has ended. Without an anchor
// sessions still work, each group of overlapping ones sharing a shim that
// exits with the last of them; so failures are logged, not returned.
// Without a shim group nothing is started.
func (r *Runtime) StartAnchor(ctx context.Context, o AnchorOptions) <-chan struct{} {
	done := make(chan struct{})
	if r.cfg.ShimGroup == "" {
		close(done)
		return done
	}
	exit, err := r.EnsureAnchor(ctx, o)
	if err != nil {
		log.G(ctx).Warn("sessions share a shim only while they overlap: the shim anchor did not start", "error", err)
	}
	go func() {
		defer close(done)
		r.keepAnchor(ctx, o, exit)
	}()
	return done
}

func (r *Runtime) keepAnchor(ctx context.Context, o AnchorOptions, exit <-chan containerd.ExitStatus) {
	backoff := time.Second
	for {
		if exit != nil {
			select {
			case <-ctx.Done():
				return
			case st := <-exit:
				log.G(ctx).Warn("shim anchor exited; starting a new one", "exit", st.ExitCode())
				// Its shim may be gone with it: new tasks go through the
				// start-up process until the new anchor runs.
				if err := r.forgetAnchorSandbox(ctx); err != nil {
					log.G(ctx).Warn("shim anchor", "error", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		var err error
		if exit, err = r.EnsureAnchor(ctx, o); err != nil {
			log.G(ctx).Warn("restart shim anchor", "error", err, "retry_in", backoff.String())
			exit = nil
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// StopAnchor removes the anchor when no session task is left for the
// shared shim to serve; otherwise it stays for the next daemon, like the
// sessions themselves.
func (r *Runtime) StopAnchor(ctx context.Context) error {
	if r.cfg.ShimGroup == "" {
		return nil
	}
	n, err := r.SessionTasks(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		log.G(ctx).Info("leaving the shim anchor to the next daemon", "session_tasks", n)
		return nil
	}
	return r.RemoveAnchor(ctx)
}
