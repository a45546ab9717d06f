package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// record is a session's persisted state: session.json in its directory.
// It is rewritten atomically on every transition, so a daemon that dies at
// any point finds either the old or the new record on restart.
type record struct {
	ID     string          `json:"id"`
	Label  string          `json:"label"`
	State  string          `json:"state"`
	Policy policies.Policy `json:"policy"`
	// PolicyVersion is Policy's version: 1 as created, one more for each
	// revision (Daemon.Update). Zero in records written before versions
	// were kept, which means 1.
	PolicyVersion int `json:"policy_version,omitempty"`
	// CredentialDirs are the sandbox directories the credential tmpfs's
	// numbered subdirectories are bound on (credentials.Plan.Layout),
	// once a revision has changed the credentials; empty, they follow
	// from Policy.Credentials.
	CredentialDirs []string   `json:"credential_dirs,omitempty"`
	Created        time.Time  `json:"created"`
	Started        *time.Time `json:"started,omitempty"`
	Finished       *time.Time `json:"finished,omitempty"`
	Deadline       *time.Time `json:"deadline,omitempty"`
	ExitCode       *int       `json:"exit_code,omitempty"`
	Reason         string     `json:"reason,omitempty"`
	Pid            uint32     `json:"pid,omitempty"`
	// Stopping records that a stop or timeout was requested, so the exit
	// reason survives a restart.
	Stopping string `json:"stopping,omitempty"`
	// Launching is set, and saved, before a created session's command is
	// handed to its sandbox: a daemon that dies then leaves a session the
	// next one takes for started (its sandbox cannot say otherwise).
	Launching bool `json:"launching,omitempty"`
	// Review is set while workspace changes wait for commit or discard.
	Review bool `json:"review,omitempty"`
	// Dropping is the outcome (api.OutcomeCommitted or
	// api.OutcomeDiscarded) of a review whose workspace state is being
	// removed, saved before the removal starts: a daemon that dies in
	// the middle of it leaves the next one the outcome, and the removal
	// to finish.
	Dropping string `json:"dropping,omitempty"`
	// Changes summarises the workspace changes under review, once a
	// summary was asked for (Daemon.ChangeSummary) or they were
	// committed or discarded (then with the outcome).
	Changes *api.ChangeSummary `json:"changes,omitempty"`
	// Warm records that the session took a pooled sandbox.
	Warm bool `json:"warm,omitempty"`
	// Cgroup is the session's cgroup path, as made (under
	// Config.CgroupParent then). Empty in records written before it was
	// kept, when there was no parent: the root's airlock-PREFIX/ID.
	Cgroup string `json:"cgroup,omitempty"`
	// Labels are the create request's labels (api.CreateRequest.Labels),
	// recorded with the created state, before the command can run.
	Labels map[string]string `json:"labels,omitempty"`
	// Exited holds the command's exit status from the moment it is known
	// until the session is recorded as stopped: the task that also holds
	// it is deleted in between, and a daemon that dies then must not lose
	// it.
	Exited *exitStatus `json:"exited,omitempty"`
}

// version is the record's policy version.
func (r *record) version() int { return max(r.PolicyVersion, 1) }

// exitStatus is a command's exit status as the runtime reported it.
type exitStatus struct {
	Code int       `json:"code"`
	At   time.Time `json:"at"`
	// OOM is true if the OOM killer acted in the session's cgroup, read
	// before the task's deletion removes the cgroup: a daemon that dies
	// after the deletion still records the session as oom.
	OOM bool `json:"oom,omitempty"`
}

// stateCreating marks a record whose create did not finish; a restarted
// daemon tears such sessions down.
const stateCreating = "creating"

// statePooled marks a sandbox prepared for a pool and not yet taken by a
// session; a restarted daemon tears it down (its pool prepares anew).
const statePooled = "pooled"

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// validID reports whether id may name a session: lower-case alphanumerics
// and [._-], at most 64 bytes, safe as a path component.
func validID(id string) error {
	if !idPattern.MatchString(id) || id == "." || id == ".." {
		return fmt.Errorf("session id %q is not valid (lower-case letters, digits, '.', '_' or '-', at most 64): %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// newID returns a random 12-hex-digit session id.
func newID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

func writeJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, "session.json"))
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return &r, nil
}
