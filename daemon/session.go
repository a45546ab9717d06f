package daemon

import (
	"maps"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/secrets"
)

// session is one live session in the daemon.
type session struct {
	d   *Daemon
	dir string
	// cgroup is the session's cgroup path (record.Cgroup, or what a
	// record without it means), fixed when the session is made or
	// loaded.
	cgroup string
	audit  *audit.Log
	// tally counts the events audit is given (Daemon.AuditSummary).
	tally *auditTally

	mu     sync.Mutex
	rec    record      // +checklocks:mu
	timer  *time.Timer // +checklocks:mu
	exited chan struct{}
	closed bool // +checklocks:mu
	// fs is the session's filesystem view; nil without workspaces or
	// once nothing is left to review.
	fs *fsscope.Session // +checklocks:mu
	// launch is the sandbox's launch directory until its command runs.
	launch *launch.Dir // +checklocks:mu
	// env is the main process's environment from the spec, without
	// credentials, which are minted when a session takes the sandbox.
	env []string // +checklocks:mu
	// creds are the sandbox's credentials and their delivery; minted at
	// claim.
	creds *credentials.Plan // +checklocks:mu
	// ca is the session's CA, with which the L7 gateway terminates TLS
	// (the sandbox trusts it): nil unless the egress block has l7 =
	// "check", or when a restarted daemon could not load it. Its key and
	// certificate are kept in dir.
	ca *egress.SessionCA // +checklocks:mu
	// shimExit is the exit the shim reported while containerd was down
	// (Daemon.readShimExits), for rewait.
	shimExit *ending // +checklocks:mu
	// secrets are the session's secrets for the L7 gateway: the
	// placeholders the sandbox holds and the values that replace them;
	// nil without secrets.
	secrets *secrets.Set // +checklocks:mu
	// pid is the sandbox init's pid, which the command takes over.
	pid uint32 // +checklocks:mu
	// revising serializes the session's revisions (Daemon.Update).
	revising sync.Mutex
	// repairs remembers the repairs of the session's refusals.
	repairs repairCache
	// reserved is set while the sandbox holds a place under the session
	// limit that is not yet counted as a session.
	reserved bool // +checklocks:d.mu
}

func (s *session) logDir() string { return filepath.Join(s.dir, "logs") }

func (s *session) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

func (s *session) saveLocked() error {
	return writeJSONAtomic(filepath.Join(s.dir, "session.json"), &s.rec)
}

func (s *session) closeExitedLocked() {
	if !s.closed {
		s.closed = true
		close(s.exited)
	}
}

func (s *session) stopTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopTimerLocked()
}

func (s *session) stopTimerLocked() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// running reports whether the main process may still produce output.
func (s *session) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.State == api.StateRunning
}

func (s *session) view() *api.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rec
	return &api.Session{
		ID:       r.ID,
		Label:    r.Label,
		State:    r.State,
		Image:    r.Policy.Image,
		Command:  r.Policy.Command,
		Created:  r.Created,
		Started:  r.Started,
		Finished: r.Finished,
		ExitCode: r.ExitCode,
		Reason:   r.Reason,
		Pid:      r.Pid,
		Policy:   r.Policy,
		Review:   r.Review,
		Warm:     r.Warm,
		Labels:   maps.Clone(r.Labels),

		PolicyVersion: r.version(),
	}
}
