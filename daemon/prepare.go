package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sync/errgroup"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/steps"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// initDir is the session's launch directory (see internal/launch).
const initDir = "init"

// readyTimeout bounds how long a new sandbox's init may take to wait for
// its command.
const readyTimeout = 20 * time.Second

// errStalePool marks a prepared sandbox a session cannot take; the session
// is then prepared cold.
var errStalePool = errors.New("prepared sandbox is stale")

// prepare makes a sandbox for p: session directory, workspace mounts,
// credential directories, network namespace and rules, container and a
// running task whose init waits for the command. Nothing of it depends on
// the command or the timeout. On error nothing is left behind.
func (d *Daemon) prepare(ctx context.Context, p policies.Policy, pooled bool) (_ *session, retErr error) {
	id := newID()
	d.mu.Lock()
	d.creating++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.creating--
		if retErr != nil {
			d.releaseCgroupParentsLocked()
		}
		d.mu.Unlock()
	}()
	ctx = log.With(ctx, "session", id, "label", p.Label)
	dir := d.sessionDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	tally := newAuditTally("", 0)
	cg := d.CgroupPath(id)
	s := &session{d: d, dir: dir, cgroup: cg, audit: d.newAudit(dir, p.Resources.AuditSize, tally), tally: tally, exited: make(chan struct{}), rec: record{
		ID: id, Label: p.Label, State: stateCreating, Policy: p, PolicyVersion: 1, Created: time.Now().UTC(), Cgroup: cg,
	}}
	if err := s.save(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer func() {
		if retErr != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 90*time.Second)
			defer cancel()
			if err := d.teardownRetry(dctx, id); err != nil {
				log.G(ctx).Error("rollback of failed create left objects behind", "error", err)
			}
		}
	}()
	uid, gid, err := p.UserIDs()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	step := steps.New()
	// Made before the layers, so that the L7 gateway has them from the
	// start (the key pair takes well under a millisecond).
	ca, set, err := prepareL7(dir, id, &p)
	if err != nil {
		return nil, err
	}
	s.ca, s.secrets = ca, set
	opts := runtime.HardeningOpts()
	popts, err := runtime.PolicyOpts(&p, runtime.Hostname(p.Label, id), s.cgroup)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	opts = append(opts, popts...)
	if p.Terminal {
		opts = append(opts, oci.WithTTY)
	}
	// The workspace, the credential directories, the launch directory, the
	// network and the rootfs snapshot do not depend on one another: they
	// are made side by side. Each parallel step only fills its own
	// variable; on an error the others still run to their end, so that
	// the rollback finds everything they made.
	var (
		fs     *fsscope.Session
		creds  *credentials.Plan
		net    *egress.Session
		ld     *launch.Dir
		rootfs *runtime.Rootfs
	)
	var g errgroup.Group
	g.Go(func() (err error) {
		defer step.Track("fs")()
		fs, err = d.fs.setup(ctx, dir, id, &p, uid, gid)
		return err
	})
	g.Go(func() (err error) {
		defer step.Track("credentials+launch")()
		if creds, err = d.creds.Prepare(dir, p.Credentials, uid, gid); err != nil {
			return err
		}
		ld, err = launch.Prepare(filepath.Join(dir, initDir), filepath.Join(d.cfg.BinDir, launch.Binary), uid, gid)
		return err
	})
	g.Go(func() (err error) {
		defer step.Track("egress")()
		sc := d.egressConfig(s, p, dir)
		sc.Hostname = runtime.Hostname(p.Label, id)
		net, err = d.egress.AddSession(ctx, id, sc)
		return err
	})
	// containerd's and runc's steps run to their end even when the caller
	// goes away (a daemon shutting down, a client hanging up): cut off in
	// the middle, runc may leave a cgroup that no task owns, which the
	// rollback could not find. The caller's cancellation is honoured
	// right after them.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	g.Go(func() (err error) {
		defer step.Track("rootfs")()
		rootfs, err = d.rt.PrepareRootfs(cctx, id, p.Image)
		return err
	})
	err = g.Wait()
	// Kept even on error: the rollback stops what was made.
	s.fs, s.creds, s.launch = fs, creds, ld
	// Gateway credentials reach the session's secrets, not the sandbox.
	s.creds.OnGateway(s.secrets.SetCredential)
	if err != nil {
		return nil, err
	}
	if fs != nil {
		opts = append(opts, fs.SpecOpt())
	}
	opts = append(opts, creds.SpecOpt())
	opts = append(opts, net.SpecOpts()...)
	opts = append(opts, l7SpecOpts(dir, ca, set)...)
	opts = append(opts, s.launchOpt())
	step.Mark("parallel")
	if err := d.rt.Create(cctx, runtime.CreateOptions{ID: id, Rootfs: rootfs, SpecOpts: opts}); err != nil {
		return nil, err
	}
	step.Mark("container")
	pid, ch, err := d.rt.Start(cctx, id, s.logDir(), p.Resources.LogSize, p.Terminal)
	if err != nil {
		return nil, err
	}
	step.Mark("task")
	s.pid = pid
	rctx, rcancel := context.WithTimeout(cctx, readyTimeout)
	err = ld.Ready(rctx)
	rcancel()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	step.Mark("ready")
	step.Log(ctx, "sandbox prepared")
	if pooled {
		s.rec.State = statePooled
		if err := s.save(); err != nil {
			return nil, err
		}
	}
	s.watch(ch)
	return s, nil
}

// launchOpt makes airlock-init the sandbox's first process, waiting in the
// launch directory, and keeps the environment the command will get.
func (s *session) launchOpt() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, spec *oci.Spec) error {
		if spec.Process == nil {
			return errors.New("spec has no process")
		}
		s.env = append([]string(nil), spec.Process.Env...)
		spec.Process.Args = []string{launch.SandboxBinary, launch.SandboxDir}
		spec.Mounts = append(spec.Mounts, specs.Mount{
			Destination: launch.SandboxDir, Type: "bind", Source: s.launch.Path(),
			Options: []string{"rbind", "ro", "nosuid", "nodev"},
		})
		return nil
	}
}

// claim makes a prepared sandbox the session of policy p: it takes the
// request's command and timeout, mints the credentials and, with start,
// runs the command. A pooled sandbox whose workspace changed on the host
// since it was prepared is torn down and errStalePool returned.
func (d *Daemon) claim(ctx context.Context, s *session, p policies.Policy, labels map[string]string, start, warm bool) (_ *api.Session, retErr error) {
	id := s.rec.ID
	defer func() {
		if retErr != nil {
			d.abandon(ctx, s)
		}
	}()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: its init exited", errStalePool)
	}
	if warm && s.fs != nil {
		fresh, reason, err := s.fs.Fresh(ctx)
		if err != nil || !fresh {
			s.mu.Unlock()
			if err != nil {
				reason = err.Error()
			}
			return nil, fmt.Errorf("%w: workspace changed on the host: %s", errStalePool, reason)
		}
	}
	if warm {
		// Prepared a while ago: a secret whose source has gone since
		// refuses the session; the gateway reads the values read again
		// here for the session's next request.
		if err := s.secrets.Resolve(); err != nil {
			s.mu.Unlock()
			return nil, err
		}
	}
	if err := s.creds.Mint(withSessionAudit(ctx, id, s.audit), id); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.rec.Policy = p
	s.rec.Label = p.Label
	s.rec.Created = time.Now().UTC()
	s.rec.State = api.StateCreated
	s.rec.Warm = warm
	s.rec.Labels = labels
	var err error
	if !start {
		// With start, start's record of the launch is the claimed
		// session's first: one write (and fsync) fewer on the way to
		// the command. A crash before it leaves the sandbox's record
		// as it was prepared (creating, or pooled), and the next
		// daemon removes the sandbox.
		err = s.saveLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.sessions[id] = s
	d.unreserveLocked(s)
	d.mu.Unlock()
	log.G(ctx).Info("session created", "image", p.Image, "warm", warm)
	if start {
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
	return s.view(), nil
}

// abandon removes a sandbox a create could not finish.
func (d *Daemon) abandon(ctx context.Context, s *session) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.stop(dctx, "stopped", 0); err != nil {
		log.G(ctx).Warn("stop abandoned sandbox", "error", err)
	}
	d.mu.Lock()
	delete(d.sessions, s.rec.ID)
	d.unreserveLocked(s)
	d.mu.Unlock()
	if err := d.teardown(dctx, s.rec.ID); err != nil {
		log.G(ctx).Error("rollback of failed create left objects behind", "error", err)
	}
	_ = s.audit.Close()
	d.mu.Lock()
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
}

// teardownRetry is teardown, repeated while containerd is unavailable (it
// is being restarted, see runtime.Embedded.Supervise) until ctx ends:
// teardown's steps are safe to repeat, so a create that failed because
// containerd died still leaves nothing once containerd is back.
func (d *Daemon) teardownRetry(ctx context.Context, id string) error {
	backoff := 200 * time.Millisecond
	for {
		err := d.teardown(ctx, id)
		if err == nil || !errdefs.IsUnavailable(err) {
			return err
		}
		log.G(ctx).Warn("rollback waits for containerd", "error", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
