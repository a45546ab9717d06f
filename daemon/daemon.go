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
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
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
	Egress EgressConfig
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
	rt       *runtime.Runtime
	embedded *runtime.Embedded

	broker *credentials.Broker
	creds  *credentialState
	egress *egress
	// readAudit refuses and audits opens of deny_read masks; nil when the
	// kernel offers no fanotify permission events.
	readAudit *fsscope.ReadAudit

	// stopCtx is the daemon's root context: cancelled by Close.
	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*session // +checklocks:mu
	// creating counts creates in progress, so that the shared parent
	// cgroups are never removed under one.
	creating int // +checklocks:mu
	// pools are the warm pools by policy key.
	pools map[string]*pool // +checklocks:mu
	// closed is set by Close: no pool fills any more.
	closed bool // +checklocks:mu
	// reserved counts creates and pool fills under way, for the session
	// limit.
	reserved int // +checklocks:mu
	// protected are the host paths admission refuses whatever the policy
	// says (see openAdmission).
	protected      *policies.Protected // +checklocks:mu
	protectedPaths []string            // +checklocks:mu
	// admission is the admission policy.
	admission *policies.Admission // +checklocks:mu
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
	d := &Daemon{cfg: cfg, prefix: Prefix(cfg.Root), sessions: map[string]*session{}, pools: map[string]*pool{}}
	d.openAdmission()
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if _, err := d.admit(p); err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Label, err)
		}
		if p.Pool == nil || p.Pool.Size == 0 {
			return nil, fmt.Errorf("pool %q: the manifest has no `pool { size = N }` block: %w", p.Label, errdefs.ErrInvalidArgument)
		}
	}
	log.G(ctx).Info("admission policy", "policy", d.Admission().String())
	d.stopCtx, d.stop = context.WithCancel(context.WithoutCancel(ctx))

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
	d.rt = rt
	defer func() {
		if retErr != nil {
			rt.Close()
		}
	}()
	if err := d.openBroker(ctx); err != nil {
		return nil, err
	}
	if err := d.openEgress(ctx); err != nil {
		d.stop()
		d.wg.Wait()
		return nil, err
	}
	d.openReadAudit(ctx)
	defer func() {
		if retErr != nil {
			d.readAudit.Close()
		}
	}()
	if err := d.reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconcile sessions: %w", err)
	}
	d.reconcileEgress(ctx)
	d.startAnchor(ctx)
	for i := range cfg.Pools {
		d.ensurePool(&cfg.Pools[i])
	}
	return d, nil
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
	d.drainPools(ctx)
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
	err := d.closeEgress(ctx)
	d.wg.Wait()
	// Merged decisions still counting are written before the daemon goes.
	for _, s := range sessions {
		_ = s.audit.Close()
	}
	return errors.Join(err, d.stopAnchor(ctx), d.readAudit.Close(), d.rt.Close())
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
func (d *Daemon) Runtime() *runtime.Runtime { return d.rt }

// Version reports the daemon's version and root, and containerd's version
// when containerd answers.
func (d *Daemon) Version(ctx context.Context) api.Version {
	v := api.Version{Version: Version, Root: d.cfg.Root}
	if cv, err := d.rt.Client().Version(ctx); err == nil {
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
	warnings, err := d.admit(&p)
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
		s := d.takePooled(key)
		if s == nil {
			break
		}
		v, err := d.claim(log.With(ctx, "session", s.rec.ID, "label", p.Label), s, p, start, true)
		if err == nil || !errors.Is(err, errStalePool) {
			return v, err
		}
		d.mu.Lock()
		if pl := d.pools[key]; pl != nil {
			pl.discarded++
		}
		d.mu.Unlock()
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
		d.ensurePool(&p)
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
	env := s.env
	if s.creds != nil && len(s.creds.env) > 0 {
		env = append(append([]string{}, s.env...), s.creds.env...)
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
	d.startRefreshers(ctx, s, s.minted)
	s.minted = nil
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
			if d.dropDead(ctx, s) {
				return
			}
			d.recordExit(ctx, s, st)
		case <-d.stopCtx.Done():
		}
	}()
}

// recordExit revokes the session's credentials, removes its network,
// deletes the task (freeing the shim and cgroup) and carries out on_exit,
// then stores the exit status and wakes waiters.
func (d *Daemon) recordExit(ctx context.Context, s *session, st containerd.ExitStatus) {
	code, _, err := st.Result()
	exit := int(code)
	if err != nil {
		exit = -1
	}
	id := s.rec.ID
	steps := newTeardownSteps()
	steps.run("exit", func() {
		// Persisted before the task, which also holds it, is deleted.
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.rec.State != api.StateRunning {
			return
		}
		at := st.ExitTime().UTC()
		if at.IsZero() {
			at = time.Now().UTC()
		}
		s.rec.Exited = &exitStatus{Code: exit, At: at}
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Error("persist exit status", "error", err)
		}
	})
	steps.run("credentials", func() { d.revokeCredentials(ctx, id) })
	// Read before the task's deletion removes the cgroup.
	var oom bool
	steps.run("oom", func() { oom = oomKilled(d.cgroupPath(id)) })
	// The network, the task and the workspace do not depend on one
	// another: they go side by side. on_exit must not run while a process
	// of the sandbox may still write to the workspace, so it waits for the
	// task's deletion unless the session's cgroup is already empty. It
	// normally is: the kernel kills the rest of a PID namespace before
	// the exit of its init is reported.
	taskGone := make(chan struct{})
	steps.spawn("network", func() {
		if err := d.stopEgress(ctx, s); err != nil {
			log.G(ctx).Warn("remove network", "error", err)
		}
	})
	steps.spawn("task", func() {
		defer close(taskGone)
		if err := d.rt.DeleteTask(ctx, id); err != nil {
			log.G(ctx).Warn("delete exited task", "error", err)
		}
		d.auditOutputDropped(ctx, s)
	})
	var review bool
	steps.spawn("workspace", func() {
		if !cgroupEmpty(d.cgroupPath(id)) {
			<-taskGone
		}
		var err error
		if review, err = d.finishFS(ctx, s); err != nil {
			log.G(ctx).Error("workspace on_exit", "error", err)
		}
	})
	steps.wait()
	defer steps.log(ctx, "exit")
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec.Review = review
	s.stopTimerLocked()
	if s.rec.State == api.StateStopped || s.rec.State == api.StateUnknown {
		return
	}
	reason := "exited"
	switch {
	case s.rec.Stopping != "":
		reason = s.rec.Stopping
		if s.rec.Started == nil {
			exit = -1 // stopped before its command ran
		}
	case oom:
		reason = "oom"
	}
	finished := st.ExitTime().UTC()
	if finished.IsZero() {
		finished = time.Now().UTC()
	}
	s.rec.State = api.StateStopped
	s.rec.Exited = nil
	s.rec.ExitCode = &exit
	s.rec.Reason = reason
	s.rec.Finished = &finished
	steps.run("state", func() {
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
	d.revokeCredentials(ctx, id)

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
	if err := killInit(pid, d.cgroupPath(id)); err != nil {
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

// killInit sends SIGKILL to a session's init (the container's pid 1) by
// pidfd, after checking through the pidfd's process that it is still in
// the session's cgroup, so a recycled pid is never signalled.
func killInit(pid uint32, cgroup string) error {
	if pid == 0 {
		return errors.New("no pid known")
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// The pidfd pins the process; if pid was recycled after it was opened
	// the check reads another process, and the signal below then fails
	// with ESRCH on the dead one.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if !cgroupListed(string(b), cgroup) {
		return fmt.Errorf("pid %d is not in cgroup %s", pid, cgroup)
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// cgroupListed reports whether a /proc/PID/cgroup listing places the
// process in path (or below it) in any hierarchy.
func cgroupListed(listing, path string) bool {
	for _, line := range strings.Split(listing, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == path || strings.HasPrefix(parts[2], path+"/")) {
			return true
		}
	}
	return false
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
	steps := newTeardownSteps()
	defer func() {
		if retErr == nil {
			steps.log(ctx, "remove")
		}
	}()
	steps.run("credentials", func() { d.revokeCredentials(ctx, id) })
	var netErr, rtErr error
	steps.spawn("network", func() { netErr = d.removeNetwork(ctx, id) })
	steps.spawn("containerd", func() { rtErr = d.rt.Delete(ctx, id) })
	steps.wait()
	if err := errors.Join(netErr, rtErr); err != nil {
		return err
	}
	dir := d.sessionDir(id)
	var err error
	steps.run("workspace", func() { err = cleanupFS(ctx, dir) })
	if err != nil {
		return err
	}
	steps.run("mounts", func() { err = mountinfo.UnmountAll(dir) })
	if err != nil {
		return err
	}
	steps.run("dir", func() { err = os.RemoveAll(dir) })
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
		if s.fs, err = d.loadFS(s.dir, id); err != nil {
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

func (d *Daemon) reconcileSession(ctx context.Context, s *session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.rec.State {
	case api.StateRunning:
		ts, err := d.rt.Task(ctx, s.rec.ID)
		if err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		if ts.Running {
			ch, err := d.rt.Wait(ctx, s.rec.ID)
			if err != nil {
				return err
			}
			log.G(ctx).Info("re-adopted running session", "pid", ts.Pid)
			s.pid = ts.Pid
			d.armTimerLocked(s)
			d.watch(s, ch)
			d.startRefreshers(ctx, s, nil)
			return nil
		}
		exit, reason := -1, "lost"
		finished := time.Now().UTC()
		if e := s.rec.Exited; e != nil && !ts.Exists {
			// The previous daemon saw the exit and deleted the task.
			exit, reason, finished = e.Code, "exited", e.At
		}
		if ts.Exists {
			exit, reason = int(ts.ExitCode), "exited"
			if !ts.ExitedAt.IsZero() {
				finished = ts.ExitedAt.UTC()
			}
			if oomKilled(d.cgroupPath(s.rec.ID)) {
				reason = "oom"
			}
		}
		if s.rec.Stopping != "" {
			reason = s.rec.Stopping
		}
		d.revokeCredentials(ctx, s.rec.ID)
		if err := d.rt.DeleteTask(ctx, s.rec.ID); err != nil {
			return err
		}
		review, err := d.finishFS(ctx, s)
		if err != nil {
			log.G(ctx).Error("workspace on_exit", "error", err)
		}
		s.rec.Review = review
		s.rec.State, s.rec.ExitCode, s.rec.Reason, s.rec.Finished = api.StateStopped, &exit, reason, &finished
		s.rec.Exited = nil
		s.closeExitedLocked()
		log.G(ctx).Info("session ended while the daemon was down", "exit_code", exit, "reason", reason)
		return s.saveLocked()
	case api.StateCreated:
		// Created but not started: airlock-init waits for the command.
		ts, err := d.rt.Task(ctx, s.rec.ID)
		if err != nil && !errdefs.IsNotFound(err) {
			return err
		}
		if ts.Running {
			ch, err := d.rt.Wait(ctx, s.rec.ID)
			if err != nil {
				return err
			}
			s.pid = ts.Pid
			s.creds = d.reopenCredentials(s.dir, &s.rec.Policy)
			s.env, err = d.rt.ProcessEnv(ctx, s.rec.ID)
			if err != nil {
				return err
			}
			d.watch(s, ch)
			log.G(ctx).Info("re-adopted created session", "pid", ts.Pid)
			return nil
		}
		exit, finished := -1, time.Now().UTC()
		d.revokeCredentials(ctx, s.rec.ID)
		if err := d.rt.DeleteTask(ctx, s.rec.ID); err != nil {
			return err
		}
		s.rec.State, s.rec.ExitCode, s.rec.Reason, s.rec.Finished = api.StateStopped, &exit, "lost", &finished
		s.closeExitedLocked()
		return s.saveLocked()
	case api.StateStopped:
		s.closeExitedLocked()
		d.revokeCredentials(ctx, s.rec.ID)
		if err := d.rt.DeleteTask(ctx, s.rec.ID); err != nil {
			return err
		}
		if s.fs != nil && s.fs.Live() {
			// The daemon died between the exit and on_exit.
			review, err := d.finishFS(ctx, s)
			if err != nil {
				return err
			}
			s.rec.Review = review
			return s.saveLocked()
		}
	case api.StateUnknown:
		s.closeExitedLocked()
	}
	return nil
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

// oomKilled reports whether the kernel's OOM killer acted in the session's
// memory cgroup (v1 memory.oom_control or v2 memory.events).
func oomKilled(cgroupPath string) bool {
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cgroupPath, "memory.oom_control"),
		filepath.Join("/sys/fs/cgroup", cgroupPath, "memory.events"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			if k == "oom_kill" && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}

// releaseCgroupParentsLocked removes the shared parent cgroups once
// nothing of the daemon needs them: no session, no create in progress, no
// prepared sandbox. Every path that ends a session or a sandbox calls it.
func (d *Daemon) releaseCgroupParentsLocked() {
	if len(d.sessions) == 0 && d.creating == 0 && d.pooledLocked() == 0 {
		d.removeCgroupParentsLocked()
	}
}

// removeCgroupParentsLocked removes the daemon's parent cgroups once no
// session uses them and no create is under way; a busy parent is left
// alone. Callers hold d.mu, which Create also takes before runc runs.
func (d *Daemon) removeCgroupParentsLocked() {
	parent := filepath.Dir(d.cgroupPath("x"))
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return
	}
	_ = os.Remove(filepath.Join("/sys/fs/cgroup", parent))
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join("/sys/fs/cgroup", e.Name(), parent))
		}
	}
}
