package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/steps"
	"github.com/airlock-sandbox/airlock/metrics"
	"github.com/airlock-sandbox/airlock/runtime"
)

// A session's lifecycle, as methods of the session: one state machine
// whose transitions each persist the session's record before they act.
//
//	creating ──prepare──▶ created ──start──▶ running ──exit──▶ stopped
//	   (pooled: prepared for a pool, taken by a create)      │
//	created/running ──stop/timeout──▶ (kill) ──exit─────────┘
//
// finish is the one way into stopped, whether the exit was seen live
// (watch) or found by a restarted daemon (readopt); its steps are safe to
// repeat, so a daemon that dies part-way completes them on its next start.

// ending is how a session's main process ended, as far as it is known.
type ending struct {
	code int       // the exit status; -1 when unknown
	at   time.Time // when it ended; zero is now
	// reason is "exited", "lost" or "shim-lost"; a requested stop and an OOM kill
	// take precedence.
	reason string
}

// watch ends the session when its sandbox's main process exits; a
// sandbox that dies while it waits in a pool is dropped from it instead.
//
// A wait that fails (containerd was killed or restarted: the sandbox runs
// on under its shim) is no exit: the task's state is read again once
// containerd answers, and the watch goes on, or the exit the shim kept is
// taken (see rewait).
func (s *session) watch(ch <-chan containerd.ExitStatus) {
	d := s.d
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx := log.With(d.stopCtx, "session", s.rec.ID)
		for {
			var st containerd.ExitStatus
			select {
			case st = <-ch:
			case <-d.stopCtx.Done():
				return
			}
			code, _, err := st.Result()
			end := &ending{code: int(code), at: st.ExitTime().UTC(), reason: "exited"}
			if err != nil {
				log.G(ctx).Warn("waiting on the sandbox failed; reading its state again when containerd answers", "error", err)
				if ch, end = s.rewait(ctx); ch != nil {
					continue
				}
				if end == nil {
					return // the daemon is stopping
				}
			}
			if d.pools.drop(ctx, s) {
				return
			}
			s.finish(ctx, *end)
			return
		}
	}()
}

// rewait reads the session's task again once containerd answers: a task
// still running is waited on again (a new channel), one that ended has
// its exit as the shim kept it, and one containerd no longer has was lost.
// While containerd is down, the shim (which outlives it) is asked
// directly: an exit it reports is taken at once, since a restarted
// containerd cleans up an exited task without reporting its exit. It
// returns neither when the daemon stops first.
func (s *session) rewait(ctx context.Context) (<-chan containerd.ExitStatus, *ending) {
	d := s.d
	backoff := 100 * time.Millisecond
	outage := false
	for {
		ts, err := d.rt.Task(ctx, s.rec.ID)
		if errdefs.IsUnavailable(err) {
			outage = true
			if st, serr := d.rt.ShimState(ctx, s.rec.ID); serr == nil && st.Exists && !st.Running {
				log.G(ctx).Info("the sandbox ended while containerd was down; its shim kept the exit", "exit_code", st.ExitCode)
				return nil, &ending{code: int(st.ExitCode), at: st.ExitedAt.UTC(), reason: "exited"}
			}
		}
		switch {
		case err == nil && ts.Running:
			ch, werr := d.rt.Wait(ctx, s.rec.ID)
			if werr == nil {
				log.G(ctx).Info("waiting on the sandbox again", "pid", ts.Pid)
				return ch, nil
			}
			err = werr
		case err == nil && ts.Exists:
			return nil, &ending{code: int(ts.ExitCode), at: ts.ExitedAt.UTC(), reason: "exited"}
		case err == nil, errdefs.IsNotFound(err):
			s.mu.Lock()
			end := s.shimExit
			s.mu.Unlock()
			if end != nil {
				return nil, end
			}
			if !outage {
				// containerd answered all along: the wait broke because
				// the shim died, and took the sandbox with it.
				return nil, &ending{code: -1, reason: "shim-lost"}
			}
			return nil, &ending{code: -1, reason: "lost"}
		}
		log.G(ctx).Debug("containerd not answering yet", "error", err, "retry_in", backoff.String())
		select {
		case <-d.stopCtx.Done():
			return nil, nil
		case <-time.After(backoff):
		}
		// Short: an exit must be read from the shim before a restarted
		// containerd cleans the task up.
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// start hands a created session's command to its waiting sandbox: the
// launch message carries the environment, with the env-delivered
// credentials minted now; then the deadline is armed and the file
// credentials are kept fresh.
func (s *session) start(ctx context.Context) error {
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
	s.rec.Launching = true
	if err := s.saveLocked(); err != nil {
		s.rec.Launching = false
		return err
	}
	if err := s.launch.Launch(ctx, launch.Message{Args: s.rec.Policy.Command, Env: env}); err != nil {
		// Launching stays recorded: the command may have gone over
		// before the error (an acknowledgement that came late), and a
		// restarted daemon must then take the session for started.
		return err
	}
	if err := s.launch.Clean(); err != nil {
		log.G(ctx).Warn("clean launch directory", "error", err)
	}
	s.launch = nil
	now := time.Now().UTC()
	deadline := now.Add(s.rec.Policy.Timeout.Std())
	s.rec.State, s.rec.Launching = api.StateRunning, false
	s.rec.Started = &now
	s.rec.Deadline = &deadline
	s.rec.Pid = s.pid
	if err := s.saveLocked(); err != nil {
		log.G(ctx).Error("persist running state", "error", err)
	}
	s.armTimerLocked()
	s.creds.StartRefreshers(ctx, s.rec.ID)
	s.audit.EmitControl(ctx, api.AuditEvent{Session: s.rec.ID, Layer: "session", Action: "started",
		Subject: strings.Join(s.rec.Policy.Command, " "), Fields: map[string]any{"pid": s.pid, "timeout": s.rec.Policy.Timeout.String(), "warm": s.rec.Warm}})
	s.auditDenyRead(ctx)
	log.G(ctx).Info("session started", "pid", s.pid, "timeout", s.rec.Policy.Timeout.String(), "warm", s.rec.Warm)
	return nil
}

// armTimerLocked enforces a running session's wall-clock deadline.
func (s *session) armTimerLocked() {
	d := s.d
	if s.rec.Deadline == nil || s.timer != nil {
		return
	}
	id := s.rec.ID
	wait := max(time.Until(*s.rec.Deadline), 0)
	s.timer = time.AfterFunc(wait, func() {
		tctx := log.With(d.stopCtx, "session", id)
		log.G(tctx).Warn("session timed out; killing it")
		_ = s.stop(tctx, "timeout", 2*time.Second)
	})
}

// finish is the one way a session ends, whether its exit was seen live
// (watch) or found by a restarted daemon (readopt). Every step is
// safe to repeat, so a daemon that dies part-way finishes on its next
// start:
//   - the exit status is persisted while the task still holds it, with
//     the OOM flag (read before the task's deletion removes the cgroup);
//   - the credentials are revoked and the requests held for approval
//     denied;
//   - the network (its drops audited), the task and the workspace's
//     on_exit go side by side; on_exit waits for the task's deletion
//     unless the session's cgroup is already empty, so that no process
//     of the sandbox still writes to the workspace;
//   - the final state is stored, waiters are woken and the end audited.
//
// A session that is already stopped keeps its recorded exit; only an
// interrupted on_exit is completed.
func (s *session) finish(ctx context.Context, end ending) {
	d := s.d
	if end.at.IsZero() {
		end.at = time.Now().UTC()
	}
	id := s.rec.ID
	began := time.Now()
	step := steps.New()
	defer step.Log(ctx, "session teardown steps", "phase", "exit")
	var ended bool // the session had ended before: its end is not recorded again
	var oom bool
	step.Run("oom", func() { oom = d.cgroups.OOMKilled(s.cgroup) })
	step.Run("exit", func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		ended = s.rec.State == api.StateStopped || s.rec.State == api.StateUnknown
		if s.rec.Exited != nil && s.rec.Exited.OOM {
			// Read by a daemon that died before it recorded the end.
			oom = true
		}
		if s.rec.State != api.StateRunning || s.rec.Exited != nil {
			return
		}
		s.rec.Exited = &exitStatus{Code: end.code, At: end.at, OOM: oom}
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Error("persist exit status", "error", err)
		}
	})
	step.Run("credentials", func() { d.creds.Revoke(ctx, id) })
	// Requests still held are denied while the gateway can answer them.
	step.Run("approvals", func() { d.approvals.CancelSession(ctx, id) })
	taskGone := make(chan struct{})
	step.Go("network", func() {
		if err := d.egress.Remove(ctx, id, s.repairing(s.audit.EmitDecision)); err != nil {
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
		if !d.cgroups.Empty(s.cgroup) {
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
	d.cfg.Metrics.ObserveTeardown(metrics.PhaseExit, time.Since(began))
	s.audit.Flush(ctx)
	s.audit.EmitControl(ctx, api.AuditEvent{Session: s.rec.ID, Layer: "session", Action: "ended", Reason: reason,
		Fields: map[string]any{"exit_code": exit}})
	log.G(ctx).Info("session ended", "exit_code", exit, "reason", reason)
}

func (s *session) stop(ctx context.Context, reason string, grace time.Duration) error {
	d := s.d
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

	// A grace too short for any process to act on its SIGTERM is a kill
	// (the API's "1ns", sent by `airlock stop --time 0`): the SIGTERM goes
	// through runc (`runc kill --all`), a process of its own that cost
	// the stop 15 to 30 ms before the kill.
	if grace >= minGrace {
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
	var killErr error
	if err := runtime.KillInit(pid, s.cgroup); err != nil {
		log.G(ctx).Debug("kill by pidfd; asking runc", "error", err)
		if err := d.rt.Signal(ctx, id, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
			killErr = err
		}
	}
	// A kill that fails may have raced the session's own end: its exit
	// being handled deletes the task, and a call in flight to its shim
	// then fails ("ttrpc: closed") although nothing is left to kill. The
	// session's end decides; the error counts only if it does not come.
	wait := 30 * time.Second
	if killErr != nil {
		wait = killRaceWait
	}
	select {
	case <-exited:
		return nil
	case <-time.After(wait):
		if killErr != nil {
			return fmt.Errorf("session %q: kill: %w", id, killErr)
		}
		return fmt.Errorf("session %q did not exit 30s after SIGKILL: %w", id, errdefs.ErrUnavailable)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// minGrace is the shortest grace period a stop sends SIGTERM for.
const minGrace = time.Millisecond

// killRaceWait is how long a stop whose SIGKILL failed waits for the
// session's end before it reports the failure.
const killRaceWait = 5 * time.Second

// launchedAt reports whether the sandbox whose launch directory is dir,
// its init at pid, has been handed its command already, and about when: a
// launch cleans the directory's FIFOs out right after (its modification
// time), and the command replaces airlock-init (a daemon killed between
// the two leaves the FIFOs). A record that says a launch was under way
// (launching) counts as launched whatever the sandbox shows: the command
// could exec airlock-init again to look unstarted, and escape the
// deadline; a sandbox whose command never came looks started until its
// timeout, which costs nothing.
func launchedAt(dir string, pid uint32, launching bool) (time.Time, bool) {
	fi, err := os.Stat(dir)
	if err != nil {
		return time.Now().UTC(), launching
	}
	if _, err := os.Stat(launch.CtlPath(dir)); errors.Is(err, os.ErrNotExist) {
		return fi.ModTime().UTC(), true
	}
	if launching {
		return time.Now().UTC(), true
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != launch.Binary {
		return time.Now().UTC(), true
	}
	return time.Time{}, false
}

// readopt re-adopts a session whose sandbox still runs and returns nil;
// otherwise it returns how the session ended, for finish.
func (s *session) readopt(ctx context.Context) (*ending, error) {
	d := s.d
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
			s.creds = d.creds.Reopen(s.dir, s.rec.Policy.Credentials, uid, gid, s.rec.CredentialDirs)
			s.ca, s.secrets = reopenL7(ctx, s.dir, &s.rec.Policy)
			s.creds.OnGateway(s.secrets.SetCredential)
			s.reconcileCredentials(ctx)
			if s.rec.State == api.StateCreated {
				if at, ok := launchedAt(filepath.Join(s.dir, initDir), ts.Pid, s.rec.Launching); ok {
					// The previous daemon handed the command over and
					// died before it recorded so: the session runs.
					deadline := at.Add(s.rec.Policy.Timeout.Std())
					s.rec.State, s.rec.Started, s.rec.Deadline, s.rec.Pid, s.rec.Launching = api.StateRunning, &at, &deadline, ts.Pid, false
					if err := s.saveLocked(); err != nil {
						log.G(ctx).Error("persist running state", "error", err)
					}
					log.G(ctx).Warn("a session recorded as created had been started; it runs", "started", at)
				}
			}
			if s.rec.State == api.StateCreated {
				// airlock-init still waits for the command. The spec's
				// environment holds no credential; start mints the
				// env-delivered ones again (credentials.Plan.StartEnv).
				if s.env, err = d.rt.ProcessEnv(ctx, s.rec.ID); err != nil {
					return nil, err
				}
			} else {
				s.armTimerLocked()
				s.creds.StartRefreshers(ctx, s.rec.ID)
			}
			s.watch(ch)
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
