// Package daemon is airlockd's session manager: it turns validated
// policies into sandboxes on the runtime, persists every session's state
// under the root so a restarted daemon re-adopts or tears down what it finds,
// and records each session's audit log (package internal/audit). Its
// exported methods are what package daemon/httpapi serves as the HTTP+JSON
// API of package api.
package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/steps"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Version is airlockd's version string.
var Version = "0.1.0-dev"

// Config configures a Daemon.
type Config struct {
	// Root holds all state: sessions, containerd's root and state, runc's root.
	Root string
	// Containerd is the address of an existing containerd; empty starts an
	// embedded one under Root.
	Containerd string
	// BinDir holds containerd, containerd-shim-runc-v2 and runc.
	BinDir string
	// Namespace is the containerd namespace; default "airlock".
	Namespace string
	// SelfBinary is airlockd's own absolute path; containerd's shim runs it
	// as the log writer of session output when BinDir has no airlock-logger.
	SelfBinary string
	// Issuers are external credential issuers: name -> argv of a command
	// speaking the exec issuer protocol (see package credentials).
	Issuers map[string][]string
	// Egress configures the network perimeter.
	Egress egress.Config
	// Pools are policies whose warm pools (their `pool` blocks) the
	// daemon fills from the start. They pass admission like any request.
	Pools []policies.Policy
	// Admission is the operator's admission policy; nil is
	// policies.DefaultAdmission. Serving the API to a group
	// (httpapi.Serve with a group, see ExposeAPI) needs an explicit one.
	Admission *policies.Admission
	// Socket is the API socket httpapi.Serve will be given; admission refuses it,
	// and every directory containing it, as a host path from the start.
	Socket string
	// ShimPerSession gives every session a runc shim of its own. By
	// default sessions share one shim, kept alive by a small anchor
	// container: a session starts and ends without starting or stopping
	// a shim process, but a crash of that shim ends every running session.
	ShimPerSession bool
}

// Daemon manages sessions.
type Daemon struct {
	cfg      Config
	prefix   string
	rt       sandboxRuntime
	runtime  *runtime.Runtime // rt, when it is containerd (nil in tests of a fake)
	embedded *runtime.Embedded
	cgroups  runtime.Cgroups

	// The layers each session is assembled from, besides the runtime.
	// creds mints the sessions' credentials and delivers them.
	creds  *credentials.Delivery
	egress *egress.Perimeter // nil without an uplink
	fs     *workspaces
	// admission checks every request and pool against the operator's
	// admission policy.
	admission *admitter

	// stopCtx is the daemon's root context: cancelled by Close.
	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	// pools keep sandboxes prepared ahead of their sessions.
	pools *warmPools

	mu       sync.Mutex
	sessions map[string]*session // +checklocks:mu
	// creating counts creates in progress, so that the shared parent
	// cgroups are never removed under one.
	creating int // +checklocks:mu
	// reserved counts creates and pool fills under way, for the session
	// limit.
	reserved int // +checklocks:mu
}

// Prefix derives the short name prefix of kernel objects and cgroups from
// the root, so two daemons with different roots never collide.
func Prefix(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return "al" + hex.EncodeToString(sum[:])[:4]
}

// New starts (or re-attaches to) containerd, loads the sessions recorded
// under the root and reconciles them with what containerd has.
func New(ctx context.Context, cfg Config) (_ *Daemon, retErr error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("root %q must be an absolute path: %w", cfg.Root, errdefs.ErrInvalidArgument)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "airlock"
	}
	if !filepath.IsAbs(cfg.SelfBinary) {
		return nil, fmt.Errorf("self binary %q must be an absolute path", cfg.SelfBinary)
	}
	for _, d := range []string{cfg.Root, filepath.Join(cfg.Root, "sessions"), filepath.Join(cfg.Root, "runc")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.BinDir, launch.Binary)); err != nil {
		return nil, fmt.Errorf("%s, the first process of every sandbox, is missing from the bin dir (make build puts it there): %w", launch.Binary, err)
	}
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		return nil, err
	}
	address := cfg.Containerd
	if address == "" {
		d.embedded = &runtime.Embedded{Dir: filepath.Join(cfg.Root, "containerd"), BinDir: cfg.BinDir}
		if err := d.embedded.Ensure(ctx); err != nil {
			return nil, err
		}
		address = d.embedded.Address()
	}
	rt, err := runtime.New(ctx, runtime.Config{
		Address:      address,
		Namespace:    cfg.Namespace,
		RuncBinary:   filepath.Join(cfg.BinDir, "runc"),
		RuncRoot:     filepath.Join(cfg.Root, "runc"),
		LoggerBinary: loggerBinary(cfg),
		FIFODir:      filepath.Join(cfg.Root, "fifo"),
		ShimGroup:    shimGroupOf(cfg),
	})
	if err != nil {
		return nil, err
	}
	d.runtime = rt
	defer func() {
		if retErr != nil {
			rt.Close()
		}
	}()
	perimeter, err := egress.Open(ctx, d.prefix, cfg.Egress)
	if err != nil {
		return nil, err
	}
	if err := d.open(ctx, rt, perimeter); err != nil {
		return nil, err
	}
	return d, nil
}

// newDaemon checks the admission policy and the configured pools against
// it, before anything is started.
func newDaemon(ctx context.Context, cfg Config) (*Daemon, error) {
	d := &Daemon{cfg: cfg, prefix: Prefix(cfg.Root), sessions: map[string]*session{}}
	d.admission = newAdmitter(cfg)
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if _, err := d.admission.admit(p); err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Label, err)
		}
		if p.Pool == nil || p.Pool.Size == 0 {
			return nil, fmt.Errorf("pool %q: the manifest has no `pool { size = N }` block: %w", p.Label, errdefs.ErrInvalidArgument)
		}
	}
	log.G(ctx).Info("admission policy", "policy", d.Admission().String())
	return d, nil
}

// open starts the daemon on a runtime and a perimeter (nil: no uplink):
// credentials, workspaces, the sessions recorded under the root
// reconciled with what the runtime has, the shim anchor and the pools. On
// error the perimeter is closed and nothing keeps running.
func (d *Daemon) open(ctx context.Context, rt sandboxRuntime, perimeter *egress.Perimeter) (retErr error) {
	d.rt, d.egress = rt, perimeter
	d.stopCtx, d.stop = context.WithCancel(context.WithoutCancel(ctx))
	d.pools = &warmPools{
		prepare: func(ctx context.Context, p policies.Policy) (*session, error) { return d.prepare(ctx, p, true) },
		discard: d.discard, reserve: d.reserve, release: d.release, ctx: d.stopCtx,
		pools: map[string]*pool{}, held: map[*session]*pool{}, dropped: map[*session]bool{},
	}
	defer func() {
		if retErr != nil {
			d.stop()
			d.wg.Wait()
			_ = d.egress.Close(ctx)
		}
	}()
	if err := d.openCredentials(); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			d.creds.Close()
		}
	}()
	d.fs = openWorkspaces(ctx, d.cfg.Root, d.maskRead)
	defer func() {
		if retErr != nil {
			d.fs.Close()
		}
	}()
	if err := d.reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile sessions: %w", err)
	}
	d.egress.Reconcile(ctx, d.runningEgress)
	anchor := d.rt.StartAnchor(log.With(d.stopCtx, "component", "shim-anchor"), anchorOptions(d.cfg, d.prefix))
	d.wg.Add(1)
	go func() { defer d.wg.Done(); <-anchor }()
	for i := range d.cfg.Pools {
		d.pools.ensure(&d.cfg.Pools[i])
	}
	return nil
}

func shimGroupOf(cfg Config) string {
	if cfg.ShimPerSession {
		return ""
	}
	return shimGroup
}

// loggerBinary is the small airlock-logger from the bin dir, or airlockd
// itself (which has a logger mode) when the bin dir has none.
func loggerBinary(cfg Config) string {
	p := filepath.Join(cfg.BinDir, "airlock-logger")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return cfg.SelfBinary
}

// Close stops the daemon's background work. Running sessions keep running
// and are re-adopted by the next daemon on the same root.
func (d *Daemon) Close(ctx context.Context) error {
	d.stop()
	// Prepared sandboxes belong to no session: they go with the daemon.
	d.pools.close(ctx)
	d.mu.Lock()
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
	d.mu.Lock()
	sessions := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		s.stopTimer()
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	err := d.egress.Close(ctx)
	d.wg.Wait()
	d.creds.Close()
	// Merged decisions still counting are written before the daemon goes.
	for _, s := range sessions {
		_ = s.audit.Close()
	}
	return errors.Join(err, d.rt.StopAnchor(ctx), d.fs.Close(), d.rt.Close())
}

// StopContainerd stops the embedded containerd, if this daemon started one.
// Call it after Close, once the sessions are removed: shims of live
// sessions outlive containerd by design.
func (d *Daemon) StopContainerd(ctx context.Context) error {
	if d.embedded == nil {
		return nil
	}
	return d.embedded.Stop(ctx, 10*time.Second)
}

// Runtime returns the runtime (for tests and image management).
func (d *Daemon) Runtime() *runtime.Runtime { return d.runtime }

// Version reports the daemon's version and root, and containerd's version
// when containerd answers.
func (d *Daemon) Version(ctx context.Context) api.Version {
	v := api.Version{Version: Version, Root: d.cfg.Root}
	if d.runtime == nil {
		return v
	}
	if cv, err := d.runtime.Client().Version(ctx); err == nil {
		v.Containerd = cv.Version
	}
	return v
}

func (d *Daemon) sessionDir(id string) string { return filepath.Join(d.cfg.Root, "sessions", id) }

func (d *Daemon) cgroupPath(id string) string { return "/airlock-" + d.prefix + "/" + id }

// CgroupPath is the cgroup (relative to a hierarchy's root) a session's
// processes run in.
func (d *Daemon) CgroupPath(id string) string { return d.cgroupPath(id) }

func (d *Daemon) get(id string) (*session, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sessions[id]
	if !ok {
		return nil, fmt.Errorf("no session %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// CheckSession returns what the session methods return for an id that
// names no session (an errdefs.ErrNotFound error, or ErrInvalidArgument for
// a malformed id), and nil for a known session.
func (d *Daemon) CheckSession(id string) error {
	_, err := d.get(id)
	return err
}

// Create validates the policy, checks it against the admission policy and
// creates a session; with start it also starts the main process. A policy
// with a warm pool takes one of its prepared sandboxes; otherwise the
// sandbox is prepared now. The returned session carries the policy's
// warnings. A refused policy creates nothing.
func (d *Daemon) Create(ctx context.Context, req api.CreateRequest) (*api.Session, error) {
	p := *req.Policy.Clone()
	warnings, err := d.admission.admit(&p)
	if err != nil {
		return nil, err
	}
	v, err := d.create(ctx, p, req.Start)
	if err != nil {
		return nil, err
	}
	v.Warnings = warnings
	return v, nil
}

func (d *Daemon) create(ctx context.Context, p policies.Policy, start bool) (*api.Session, error) {
	if len(p.Command) == 0 {
		return nil, fmt.Errorf("policy has no command (set `command` or pass `-- CMD`): %w", errdefs.ErrInvalidArgument)
	}
	key := poolKey(&p)
	for {
		s := d.pools.take(key, func(s *session) {
			// It keeps its place under the session limit until claim
			// counts it as a session (or abandons it).
			d.mu.Lock()
			s.reserved = true
			d.reserved++
			d.mu.Unlock()
		})
		if s == nil {
			break
		}
		v, err := d.claim(log.With(ctx, "session", s.rec.ID, "label", p.Label), s, p, start, true)
		if err == nil || !errors.Is(err, errStalePool) {
			return v, err
		}
		d.pools.stale(key)
		log.G(ctx).Info("discarded a prepared sandbox", "session", s.rec.ID, "reason", err)
	}
	if err := d.reserve(); err != nil {
		return nil, err
	}
	s, err := d.prepare(ctx, p, false)
	if err != nil {
		d.release()
		return nil, err
	}
	d.mu.Lock()
	s.reserved = true
	d.mu.Unlock()
	v, err := d.claim(log.With(ctx, "session", s.rec.ID, "label", p.Label), s, p, start, false)
	d.mu.Lock()
	d.unreserveLocked(s)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if p.Pool != nil && p.Pool.Size > 0 {
		d.pools.ensure(&p)
	}
	return v, nil
}

// Start starts a created session's main process.
func (d *Daemon) Start(ctx context.Context, id string) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	if err := d.start(log.With(ctx, "session", id), s); err != nil {
		return nil, err
	}
	return s.view(), nil
}

func (d *Daemon) start(ctx context.Context, s *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec.State != api.StateCreated {
		return fmt.Errorf("session %q is %s, not created: %w", s.rec.ID, s.rec.State, errdefs.ErrFailedPrecondition)
	}
	if s.launch == nil {
		s.launch = launch.Open(filepath.Join(s.dir, initDir))
	}
	// Env-delivered credentials reach the command through the launch
	// message only, never through the container's spec.
	credEnv, err := s.creds.StartEnv(ctx, s.rec.ID)
	if err != nil {
		return err
	}
	env := s.env
	if len(credEnv) > 0 {
		env = append(append([]string{}, s.env...), credEnv...)
	}
	if err := s.launch.Launch(ctx, launch.Message{Args: s.rec.Policy.Command, Env: env}); err != nil {
		return err
	}
	if err := s.launch.Clean(); err != nil {
		log.G(ctx).Warn("clean launch directory", "error", err)
	}
	s.launch = nil
	now := time.Now().UTC()
	deadline := now.Add(s.rec.Policy.Timeout.Std())
	s.rec.State = api.StateRunning
	s.rec.Started = &now
	s.rec.Deadline = &deadline
	s.rec.Pid = s.pid
	if err := s.saveLocked(); err != nil {
		log.G(ctx).Error("persist running state", "error", err)
	}
	d.armTimerLocked(s)
	s.creds.StartRefreshers(ctx, s.rec.ID)
	s.audit.EmitControl(ctx, api.AuditEvent{Session: s.rec.ID, Layer: "session", Action: "started",
		Subject: strings.Join(s.rec.Policy.Command, " "), Fields: map[string]any{"pid": s.pid, "timeout": s.rec.Policy.Timeout.String(), "warm": s.rec.Warm}})
	s.auditDenyRead(ctx)
	log.G(ctx).Info("session started", "pid", s.pid, "timeout", s.rec.Policy.Timeout.String(), "warm", s.rec.Warm)
	return nil
}

// armTimerLocked enforces a running session's wall-clock deadline.
func (d *Daemon) armTimerLocked(s *session) {
	if s.rec.Deadline == nil || s.timer != nil {
		return
	}
	id := s.rec.ID
	wait := max(time.Until(*s.rec.Deadline), 0)
	s.timer = time.AfterFunc(wait, func() {
		tctx := log.With(d.stopCtx, "session", id)
		log.G(tctx).Warn("session timed out; killing it")
		_ = d.stopSession(tctx, s, "timeout", 2*time.Second)
	})
}

// watch records the exit of a sandbox's main process; a sandbox that dies
// while it waits in a pool is dropped from it.
func (d *Daemon) watch(s *session, ch <-chan containerd.ExitStatus) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		select {
		case st := <-ch:
			ctx := log.With(d.stopCtx, "session", s.rec.ID)
			if d.pools.drop(ctx, s) {
				return
			}
			d.recordExit(ctx, s, st)
		case <-d.stopCtx.Done():
		}
	}()
}

// ending is how a session's main process ended, as far as it is known.
type ending struct {
	code int       // the exit status; -1 when unknown
	at   time.Time // when it ended; zero is now
	// reason is "exited" or "lost"; a requested stop and an OOM kill
	// take precedence.
	reason string
}

// recordExit ends a session whose main process the runtime saw exit.
func (d *Daemon) recordExit(ctx context.Context, s *session, st containerd.ExitStatus) {
	code, _, err := st.Result()
	end := ending{code: int(code), at: st.ExitTime().UTC(), reason: "exited"}
	if err != nil {
		end.code = -1
	}
	d.finish(ctx, s, end)
}

// finish is the one way a session ends, whether its exit was seen live
// (recordExit) or found by a restarted daemon (reconcile). Every step is
// safe to repeat, so a daemon that dies part-way finishes on its next
// start:
//   - the exit status is persisted while the task still holds it;
//   - the credentials are revoked and the OOM flag read (before the
//     task's deletion removes the cgroup);
//   - the network (its drops audited), the task and the workspace's
//     on_exit go side by side; on_exit waits for the task's deletion
//     unless the session's cgroup is already empty, so that no process
//     of the sandbox still writes to the workspace;
//   - the final state is stored, waiters are woken and the end audited.
//
// A session that is already stopped keeps its recorded exit; only an
// interrupted on_exit is completed.
func (d *Daemon) finish(ctx context.Context, s *session, end ending) {
	if end.at.IsZero() {
		end.at = time.Now().UTC()
	}
	id := s.rec.ID
	step := steps.New()
	defer step.Log(ctx, "session teardown steps", "phase", "exit")
	var ended bool // the session had ended before: its end is not recorded again
	step.Run("exit", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ended = s.rec.State == api.StateStopped || s.rec.State == api.StateUnknown
		if s.rec.State != api.StateRunning || s.rec.Exited != nil {
			return
		}
		s.rec.Exited = &exitStatus{Code: end.code, At: end.at}
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Error("persist exit status", "error", err)
		}
	})
	step.Run("credentials", func() { d.creds.Revoke(ctx, id) })
	var oom bool
	step.Run("oom", func() { oom = d.cgroups.OOMKilled(d.cgroupPath(id)) })
	taskGone := make(chan struct{})
	step.Go("network", func() {
		if err := d.egress.Remove(ctx, s.rec.ID, s.audit.EmitDecision); err != nil {
			log.G(ctx).Warn("remove network", "error", err)
		}
	})
	step.Go("task", func() {
		defer close(taskGone)
		if err := d.rt.DeleteTask(ctx, id); err != nil {
			log.G(ctx).Warn("delete exited task", "error", err)
		}
		if !ended {
			s.auditOutputDropped(ctx)
		}
	})
	review, finished := false, false
	step.Go("workspace", func() {
		if s.fs == nil || !s.fs.Live() {
			return
		}
		if !d.cgroups.Empty(d.cgroupPath(id)) {
			<-taskGone
		}
		var err error
		if review, err = s.finishFS(ctx); err != nil {
			log.G(ctx).Error("workspace on_exit", "error", err)
		}
		finished = true
	})
	step.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if finished {
		s.rec.Review = review
	}
	s.stopTimerLocked()
	if ended || s.rec.State == api.StateStopped || s.rec.State == api.StateUnknown {
		if finished {
			step.Run("state", func() {
				if err := s.saveLocked(); err != nil {
					log.G(ctx).Error("persist review state", "error", err)
				}
			})
		}
		s.closeExitedLocked()
		return
	}
	exit, reason := end.code, end.reason
	switch {
	case s.rec.Stopping != "":
		reason = s.rec.Stopping
		if s.rec.Started == nil {
			exit = -1 // stopped before its command ran
		}
	case oom:
		reason = "oom"
	}
	s.rec.State = api.StateStopped
	s.rec.Exited = nil
	s.rec.ExitCode = &exit
	s.rec.Reason = reason
	s.rec.Finished = &end.at
	step.Run("state", func() {
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Error("persist exit", "error", err)
		}
	})
	s.closeExitedLocked()
	s.audit.Flush(ctx)
	s.audit.EmitControl(ctx, api.AuditEvent{Session: s.rec.ID, Layer: "session", Action: "ended", Reason: reason,
		Fields: map[string]any{"exit_code": exit}})
	log.G(ctx).Info("session ended", "exit_code", exit, "reason", reason)
}

// Stop ends a running session: SIGTERM to every process, SIGKILL after grace.
func (d *Daemon) Stop(ctx context.Context, id string, grace time.Duration) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	if err := d.stopSession(log.With(ctx, "session", id), s, "stopped", grace); err != nil {
		return nil, err
	}
	return s.view(), nil
}

func (d *Daemon) stopSession(ctx context.Context, s *session, reason string, grace time.Duration) error {
	s.mu.Lock()
	switch s.rec.State {
	case api.StateRunning:
	case api.StateCreated, stateCreating, statePooled:
		// Never started: only airlock-init waits; nothing to ask nicely.
		grace = 0
	default:
		s.mu.Unlock()
		return nil
	}
	if s.rec.Stopping == "" {
		s.rec.Stopping = reason
		_ = s.saveLocked()
	}
	id, exited, pid := s.rec.ID, s.exited, s.pid
	s.mu.Unlock()
	// A stopped session's credentials stop working now, not when it exits.
	d.creds.Revoke(ctx, id)

	if grace > 0 {
		if err := d.rt.Signal(ctx, id, syscall.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Warn("SIGTERM", "error", err)
		}
		select {
		case <-exited:
			return nil
		case <-time.After(grace):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Killing the init of the session's PID namespace kills every process
	// in it; by pidfd that takes microseconds, against a runc process for
	// containerd's kill-all. runc is the fallback.
	if err := runtime.KillInit(pid, d.cgroupPath(id)); err != nil {
		log.G(ctx).Debug("kill by pidfd; asking runc", "error", err)
		if err := d.rt.Signal(ctx, id, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("session %q: kill: %w", id, err)
		}
	}
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("session %q did not exit 30s after SIGKILL: %w", id, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until the session's main process has exited.
func (d *Daemon) Wait(ctx context.Context, id string) (*api.WaitResponse, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	state, exited := s.rec.State, s.exited
	s.mu.Unlock()
	if state == api.StateCreated {
		return nil, fmt.Errorf("session %q has not been started: %w", id, errdefs.ErrFailedPrecondition)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &api.WaitResponse{ExitCode: -1, Reason: s.rec.Reason}
	if s.rec.ExitCode != nil {
		resp.ExitCode = *s.rec.ExitCode
	}
	return resp, nil
}

// Remove deletes a session and everything it owns. A running session is
// refused unless force is set, in which case it is killed first.
func (d *Daemon) Remove(ctx context.Context, id string, force bool) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	ctx = log.With(ctx, "session", id)
	s.mu.Lock()
	state, review := s.rec.State, s.rec.Review
	s.mu.Unlock()
	if review && !force {
		return fmt.Errorf("session %q has workspace changes waiting for review; commit or discard them first, or remove with force to drop them: %w", id, errdefs.ErrFailedPrecondition)
	}
	switch state {
	case api.StateRunning:
		if !force {
			return fmt.Errorf("session %q is running; stop it first or remove with force: %w", id, errdefs.ErrFailedPrecondition)
		}
		if err := d.stopSession(ctx, s, "stopped", 0); err != nil {
			return err
		}
	case api.StateCreated:
		if err := d.stopSession(ctx, s, "stopped", 0); err != nil {
			return err
		}
	}
	if err := d.teardown(ctx, id); err != nil {
		s.mu.Lock()
		s.rec.State = api.StateUnknown
		_ = s.saveLocked()
		s.mu.Unlock()
		return err
	}
	_ = s.audit.Close()
	d.mu.Lock()
	delete(d.sessions, id)
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
	log.G(ctx).Info("session removed")
	return nil
}

// teardown removes every object a session owns, then its directory.
// The network and the containerd objects go side by side; the session's
// files only once the task (if one was left) is deleted, so that nothing
// of the sandbox still runs on them.
func (d *Daemon) teardown(ctx context.Context, id string) (retErr error) {
	step := steps.New()
	defer func() {
		if retErr == nil {
			step.Log(ctx, "session teardown steps", "phase", "remove")
		}
	}()
	step.Run("credentials", func() { d.creds.Revoke(ctx, id) })
	var netErr, rtErr error
	step.Go("network", func() { netErr = d.egress.Discard(ctx, id) })
	step.Go("containerd", func() { rtErr = d.rt.Delete(ctx, id) })
	step.Wait()
	if err := errors.Join(netErr, rtErr); err != nil {
		return err
	}
	dir := d.sessionDir(id)
	var err error
	step.Run("workspace", func() { err = cleanupFS(ctx, dir) })
	if err != nil {
		return err
	}
	step.Run("mounts", func() { err = mountinfo.UnmountAll(dir) })
	if err != nil {
		return err
	}
	step.Run("dir", func() { err = os.RemoveAll(dir) })
	return err
}

// List returns all sessions, newest first.
func (d *Daemon) List(ctx context.Context) []api.Session {
	d.mu.Lock()
	all := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		all = append(all, s)
	}
	d.mu.Unlock()
	out := make([]api.Session, 0, len(all))
	for _, s := range all {
		out = append(out, *s.view())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Inspect returns one session with the resources it owns.
func (d *Daemon) Inspect(ctx context.Context, id string) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	v := s.view()
	res, err := d.rt.Resources(ctx, id)
	if err != nil {
		return nil, err
	}
	for _, r := range res {
		kind, name, _ := strings.Cut(r, "/")
		v.Resources = append(v.Resources, api.Resource{Kind: kind, Name: name})
	}
	return v, nil
}

// Exec runs an extra process in a running session.
func (d *Daemon) Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error) {
	s, err := d.get(id)
	if err != nil {
		return -1, err
	}
	s.mu.Lock()
	state := s.rec.State
	// The spec holds no credential: the env-delivered ones come from the
	// session's plan, before the caller's variables. (A session this
	// daemon re-adopted while it ran has none; see credentials.Plan.Env.)
	if credEnv := s.creds.Env(); len(credEnv) > 0 {
		o.Env = append(append([]string{}, credEnv...), o.Env...)
	}
	s.mu.Unlock()
	if state != api.StateRunning {
		return -1, fmt.Errorf("session %q is %s, not running: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	if len(o.Args) == 0 {
		return -1, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalidArgument)
	}
	o.ExecID = "exec-" + newID()
	return d.rt.Exec(ctx, id, o)
}

// reconcile loads recorded sessions and matches them with containerd:
// running ones are re-adopted, dead ones get their exit recorded, half-made
// ones and containerd objects without a record are removed.
func (d *Daemon) reconcile(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.Root, "sessions"))
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		id := e.Name()
		sctx := log.With(ctx, "session", id)
		rec, err := readRecord(d.sessionDir(id))
		if err != nil || rec.ID != id || rec.State == stateCreating || rec.State == statePooled {
			if rec != nil && rec.State == statePooled {
				log.G(sctx).Info("removing a sandbox prepared for a pool by the previous daemon")
			} else {
				log.G(sctx).Warn("removing a session whose creation did not finish", "error", err)
			}
			if err := d.teardown(sctx, id); err != nil {
				log.G(sctx).Error("teardown", "error", err)
				known[id] = true
			}
			continue
		}
		known[id] = true
		s := &session{d: d, dir: d.sessionDir(id), audit: audit.New(d.sessionDir(id), rec.Policy.Resources.AuditSize), rec: *rec, exited: make(chan struct{})}
		if s.fs, err = d.fs.load(s.dir, id); err != nil {
			log.G(sctx).Error("load workspace state", "error", err)
		}
		if err := d.reconcileSession(sctx, s); err != nil {
			log.G(sctx).Error("reconcile", "error", err)
			s.rec.State = api.StateUnknown
			_ = s.save()
		}
		d.mu.Lock()
		d.sessions[id] = s
		d.mu.Unlock()
	}
	owned, err := d.rt.Owned(ctx)
	if err != nil {
		return err
	}
	for id := range owned {
		if known[id] {
			continue
		}
		log.G(ctx).Warn("removing containerd objects of an unknown session", "session", id)
		if err := d.rt.Delete(ctx, id); err != nil {
			log.G(ctx).Error("remove orphan", "session", id, "error", err)
		}
	}
	return nil
}

// reconcileSession matches one recorded session with what containerd has:
// a live one is watched again, one that ended while the daemon was down
// is finished (see finish), as is one whose end was interrupted.
func (d *Daemon) reconcileSession(ctx context.Context, s *session) error {
	end, err := d.readopt(ctx, s)
	if err != nil || end == nil {
		return err
	}
	d.finish(ctx, s, *end)
	return nil
}

// readopt re-adopts a session whose sandbox still runs and returns nil;
// otherwise it returns how the session ended, for finish.
func (d *Daemon) readopt(ctx context.Context, s *session) (*ending, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.rec.State {
	case api.StateRunning, api.StateCreated:
		ts, err := d.rt.Task(ctx, s.rec.ID)
		if err != nil && !errdefs.IsNotFound(err) {
			return nil, err
		}
		if ts.Running {
			ch, err := d.rt.Wait(ctx, s.rec.ID)
			if err != nil {
				return nil, err
			}
			s.pid = ts.Pid
			uid, gid, _ := s.rec.Policy.UserIDs()
			s.creds = d.creds.Reopen(s.dir, s.rec.Policy.Credentials, uid, gid)
			if s.rec.State == api.StateCreated {
				// airlock-init still waits for the command. The spec's
				// environment holds no credential; start mints the
				// env-delivered ones again (credentials.Plan.StartEnv).
				if s.env, err = d.rt.ProcessEnv(ctx, s.rec.ID); err != nil {
					return nil, err
				}
			} else {
				d.armTimerLocked(s)
				s.creds.StartRefreshers(ctx, s.rec.ID)
			}
			d.watch(s, ch)
			log.G(ctx).Info("re-adopted session", "state", s.rec.State, "pid", ts.Pid)
			return nil, nil
		}
		// Ended while the daemon was down. A created session's init
		// exits only when the sandbox is lost.
		end := &ending{code: -1, reason: "lost"}
		switch {
		case s.rec.State == api.StateCreated:
		case ts.Exists:
			end.code, end.reason, end.at = int(ts.ExitCode), "exited", ts.ExitedAt.UTC()
		case s.rec.Exited != nil:
			// The previous daemon saw the exit and deleted the task.
			end.code, end.reason, end.at = s.rec.Exited.Code, "exited", s.rec.Exited.At
		}
		return end, nil
	case api.StateStopped:
		// Finished before, perhaps only in part: finish again repeats
		// what is left (credentials, network, task, on_exit).
		return &ending{}, nil
	default:
		s.closeExitedLocked()
		return nil, nil
	}
}

func hostname(label, id string) string {
	h := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, label)
	h = strings.Trim(h, "-")
	if h == "" {
		return id
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}

// releaseCgroupParentsLocked removes the shared parent cgroups once
// nothing of the daemon needs them: no session, no create in progress, no
// prepared sandbox. Every path that ends a session or a sandbox calls it.
func (d *Daemon) releaseCgroupParentsLocked() {
	if len(d.sessions) == 0 && d.creating == 0 && d.pools.Waiting() == 0 {
		d.removeCgroupParentsLocked()
	}
}

// removeCgroupParentsLocked removes the daemon's parent cgroups once no
// session uses them and no create is under way; a busy parent is left
// alone. Callers hold d.mu, which Create also takes before runc runs.
func (d *Daemon) removeCgroupParentsLocked() {
	d.cgroups.Remove(filepath.Dir(d.cgroupPath("x")))
}
