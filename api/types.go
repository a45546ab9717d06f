// Package api defines airlockd's HTTP+JSON API: request and response types,
// the error envelope, the stream framing used for logs and exec, and a client.
// docs/api.md documents the same routes for people.
//
// Routes (all under the unix socket, JSON bodies):
//
//	GET    /v1/version                      -> Version
//	POST   /v1/sessions                     CreateRequest -> Session (201)
//	GET    /v1/sessions                     -> []Session
//	GET    /v1/sessions/{id}                -> Session
//	POST   /v1/sessions/{id}/start          -> Session
//	POST   /v1/sessions/{id}/stop           StopRequest -> Session
//	GET    /v1/sessions/{id}/wait           -> WaitResponse (blocks until exit)
//	DELETE /v1/sessions/{id}?force=1        -> 204
//	GET    /v1/sessions/{id}/logs?follow=1&stdout=1&stderr=1  -> framed stream
//	POST   /v1/sessions/{id}/exec           ExecRequest -> framed stream, ends with an exit frame
//	POST   /v1/sessions/{id}/attach         AttachRequest -> framed stream of the main process's terminal
//	GET    /v1/sessions/{id}/audit          -> []AuditEvent
//	GET    /v1/approvals?session=ID         -> []Approval
//	GET    /v1/approvals?follow=1           -> ApprovalEvent JSON lines until the client goes away
//	POST   /v1/approvals/{id}               ApprovalDecision -> Approval
//	GET    /v1/images                       -> []Image
//	POST   /v1/images/import?name=REF       body: OCI or Docker archive -> []Image
package api

import (
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// Version is the daemon's identity.
type Version struct {
	Version    string `json:"version"`
	Containerd string `json:"containerd"`
	Root       string `json:"root"`
}

// Session states.
const (
	StateCreated = "created"
	StateRunning = "running"
	StateStopped = "stopped" // the main process exited or was stopped
	StateUnknown = "unknown" // a cleanup step failed; remove with force
)

// CreateRequest creates (and optionally starts) a session.
type CreateRequest struct {
	Policy policies.Policy `json:"policy"`
	// Start starts the main process right after creation.
	Start bool `json:"start,omitempty"`
	// Labels are the caller's own key/value tags for the session, kept in
	// its record from before its command can run, so that a caller that
	// dies mid-create finds the session it made after a restart (the
	// Kubernetes node agent labels each session with its Session's uid).
	// The daemon does not interpret them. See ValidateLabels for what a
	// key and a value may hold.
	Labels map[string]string `json:"labels,omitempty"`
	// OwnedWorkspaces are directories an in-process caller (the
	// Kubernetes node agent) made for this session alone, under the
	// daemon's root, and names as workspaces' host paths: admitted
	// although the root is protected and outside the admitted host paths.
	// Never read from or written to the wire: no API caller can name one.
	OwnedWorkspaces []string `json:"-"`
	// VolumeWorkspaces are the directories of the PersistentVolumes an
	// in-process caller (the Kubernetes node agent) found bound to the
	// claims of the Session it creates, named as workspaces' host paths:
	// admitted under the admission policy's volume_paths, where no API
	// caller's host path is. Never read from or written to the wire.
	VolumeWorkspaces []string `json:"-"`
}

// Session is what inspect and list return.
type Session struct {
	ID       string          `json:"id"`
	Label    string          `json:"label"`
	State    string          `json:"state"`
	Image    string          `json:"image"`
	Command  []string        `json:"command"`
	Created  time.Time       `json:"created"`
	Started  *time.Time      `json:"started,omitempty"`
	Finished *time.Time      `json:"finished,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Reason   string          `json:"reason,omitempty"` // why it ended: exited, stopped, timeout, oom, error
	Pid      uint32          `json:"pid,omitempty"`
	Policy   policies.Policy `json:"policy"`
	// Review is true while workspace changes wait for `airlock commit` or
	// `airlock discard`.
	Review bool `json:"review,omitempty"`
	// Warm is true when the session took a sandbox its pool had prepared
	// ahead of time.
	Warm bool `json:"warm,omitempty"`
	// PolicyVersion is the version of Policy: 1 as created, one more for
	// each revision (PATCH /v1/sessions/{id}, airlock update).
	PolicyVersion int `json:"policy_version,omitempty"`
	// Labels are the create request's labels.
	Labels    map[string]string `json:"labels,omitempty"`
	Resources []Resource        `json:"resources,omitempty"`
	// Queued is how long the create waited for its turn among the
	// sandboxes being prepared (airlockd --max-preparing) before its own
	// was; only the create response of a cold start carries it.
	Queued policies.Duration `json:"queued,omitempty"`
	// Warnings are what the daemon accepted in the policy but the caller
	// should know (a writable workspace, a credential in the environment,
	// a capability that weakens the sandbox), one "field: message" line
	// each. Only the create response carries them.
	Warnings []string `json:"warnings,omitempty"`
	// Revision is what a revision did; only the update response carries
	// it.
	Revision *Revision `json:"revision,omitempty"`
}

// UpdateRequest is the body of PATCH /v1/sessions/{id}: the session's
// policy, revised. A revision applies the difference to the running
// session, live; today only egress allow and deny entries and credentials
// may differ (an empty command keeps the running one).
type UpdateRequest struct {
	Policy policies.Policy `json:"policy"`
}

// Revision is what a revision of a session's policy changed.
type Revision struct {
	// Version is the revised policy's version; Previous the version it
	// replaced.
	Version  int `json:"version"`
	Previous int `json:"previous"`
	// Allow and Deny are the egress entries added, removed and kept.
	Allow policies.ListChange `json:"allow"`
	Deny  policies.ListChange `json:"deny"`
	// Unpinned are the destinations (ADDR or ADDR:PORT) DNS answers had
	// opened that the revised policy no longer allows; ConnectionsCut
	// counts the session's connections to them (and to addresses of
	// removed CIDR entries) that were ended.
	Unpinned       []string `json:"unpinned,omitempty"`
	ConnectionsCut int      `json:"connections_cut"`
	// HTTP are the hosts of the egress http rules added, removed and
	// kept (a host whose rules changed is removed and added); Inspect
	// is set when egress inspect changed. Requests held for approval
	// that the revised rules allow or deny are decided by them.
	HTTP    *policies.ListChange `json:"http,omitempty"`
	Inspect bool                 `json:"inspect,omitempty"`
	// Approval is set when the approval block changed: requests held
	// from then on wait as it says.
	Approval bool `json:"approval,omitempty"`
	// Workspaces are the targets of the workspaces whose commit rules
	// (protect, protect_refs, git_allow, preserve_untracked, on_exit)
	// the revision changed: they decide the next commit.
	Workspaces []string `json:"workspaces,omitempty"`
	// DenyRead are the deny_read patterns added, per workspace target;
	// Masked the sandbox paths they matched, which the sandbox can no
	// longer open.
	DenyRead map[string][]string `json:"deny_read,omitempty"`
	Masked   []MaskedPath        `json:"masked,omitempty"`
	// Secrets are the secrets removed, changed and kept; nil when the
	// revision left them alone.
	Secrets *policies.SecretChange `json:"secrets,omitempty"`
	// Credentials are what the revision did to the session's credentials;
	// nil when it left them alone.
	Credentials *CredentialRevision `json:"credentials,omitempty"`
	// CredentialsReminted counts the tokens the revision minted: one per
	// changed and per added credential (a stop and restart mints one per
	// credential).
	CredentialsReminted int `json:"credentials_reminted"`
}

// MaskedPath is a sandbox path a deny_read pattern masks, and the pattern.
type MaskedPath struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
}

// CredentialRevision is what a revision did to a session's credentials,
// each token by its credential's name and id, never its value.
type CredentialRevision struct {
	// Reminted are the new tokens of the credentials whose issuer,
	// audience, scopes, ttl or delivery changed; Added those of the
	// credentials the revision added.
	Reminted []CredentialToken `json:"reminted,omitempty"`
	Added    []CredentialToken `json:"added,omitempty"`
	// Revoked are the tokens of changed and removed credentials: they
	// fail verification from the revision on.
	Revoked []CredentialToken `json:"revoked,omitempty"`
	// Removed are the credentials the revision removed.
	Removed []string `json:"removed,omitempty"`
	// Kept are the unchanged credentials, with their current token.
	Kept []CredentialToken `json:"kept,omitempty"`
}

// CredentialToken names one token.
type CredentialToken struct {
	Name string `json:"name"`
	// ID is the token's jti; empty for an external issuer's credential.
	ID string `json:"jti,omitempty"`
}

// Pool is the state of one warm pool: sandboxes of one policy prepared
// ahead of time, each used by exactly one session.
type Pool struct {
	// Key identifies the policy (everything but command, timeout and pool).
	Key   string `json:"key"`
	Label string `json:"label"`
	Image string `json:"image"`
	Size  int    `json:"size"`
	// Ready sandboxes wait for a session; Preparing is set while the pool
	// is being filled, PreparingCount sandboxes of it being made at that
	// moment (up to airlockd's --pool-refill).
	Ready          int      `json:"ready"`
	ReadyIDs       []string `json:"ready_ids,omitempty"`
	Preparing      bool     `json:"preparing"`
	PreparingCount int      `json:"preparing_count,omitempty"`
	// Hits are sessions that took a ready sandbox; Misses found none and
	// started cold; Discarded were prepared but dropped (died, or their
	// workspace changed on the host before a session took them).
	Hits      uint64 `json:"hits"`
	Misses    uint64 `json:"misses"`
	Discarded uint64 `json:"discarded"`
	// LastError is the last failure to prepare a sandbox, if any.
	LastError string `json:"last_error,omitempty"`
}

// Resource names a kernel or containerd object that the session owns.
type Resource struct {
	Kind string `json:"kind"` // container, snapshot, lease, cgroup, netns, ...
	Name string `json:"name"`
}

// StopRequest stops the main process: SIGTERM, then SIGKILL after Grace.
type StopRequest struct {
	Grace policies.Duration `json:"grace,omitempty"` // default 10s
}

// WaitResponse reports how the main process ended.
type WaitResponse struct {
	ExitCode int    `json:"exit_code"`
	Reason   string `json:"reason"`
}

// ExecRequest runs an extra process in a running session.
type ExecRequest struct {
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	// Stdin, when true, makes the request body after the JSON header a
	// stdin stream (see docs/api.md); otherwise stdin is empty.
	Stdin bool `json:"stdin,omitempty"`
	// TTY gives the process a pseudo-terminal of Size: its output,
	// stdout and stderr together, comes as stdout frames, and resize
	// frames in the request body resize it (Stdin must be set for the
	// daemon to read them).
	TTY  bool     `json:"tty,omitempty"`
	Size *WinSize `json:"size,omitempty"`
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// AttachRequest is the first line of an attach request body; stdin and
// resize frames follow.
type AttachRequest struct {
	// Size, when set, resizes the terminal as the client attaches.
	Size *WinSize `json:"size,omitempty"`
}

// Image is one image in the daemon's store.
type Image struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	// Labels are the labels of the image's configuration; the agent
	// images carry LabelAgentName, LabelAgentPackage and
	// LabelAgentVersion.
	Labels map[string]string `json:"labels,omitempty"`
}

// Image configuration labels of the agent images (images/claude-code,
// images/codex): which agent the image holds, from which npm package, at
// which version.
const (
	LabelAgentName    = "dev.airlock.agent.name"
	LabelAgentPackage = "dev.airlock.agent.package"
	LabelAgentVersion = "dev.airlock.agent.version"
)

// Error classes, mapped to HTTP statuses by the server.
const (
	ClassInvalidArgument    = "invalid_argument"    // 400
	ClassNotFound           = "not_found"           // 404
	ClassAlreadyExists      = "already_exists"      // 409
	ClassFailedPrecondition = "failed_precondition" // 409
	ClassPermissionDenied   = "permission_denied"   // 403
	ClassUnavailable        = "unavailable"         // 503
	ClassResourceExhausted  = "resource_exhausted"  // 507: a disk (the daemon's root, a host workspace) is full
	ClassInternal           = "internal"            // 500
)

// ErrorBody is the body of every non-2xx response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error envelope's content.
type ErrorDetail struct {
	Class   string   `json:"class"`
	Message string   `json:"message"`
	Details []string `json:"details,omitempty"` // e.g. one line per validation problem
}

// AuditEvent is one perimeter decision about a session: a DNS answer
// allowed or refused, a connection dropped, a commit change rejected, a
// credential minted or revoked. Secrets never appear in an event.
type AuditEvent struct {
	Time    time.Time `json:"time"`
	Session string    `json:"session"`
	// Layer is dns, net, l7, approval, fs, credentials or session.
	Layer string `json:"layer"`
	// Action is what happened, e.g. allowed, refused, dropped, rejected,
	// minted, refreshed, revoked, started, ended.
	Action string `json:"action"`
	// Subject is what the decision was about: a name, an address:port, a
	// path, a credential name.
	Subject string         `json:"subject,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Fields  map[string]any `json:"fields,omitempty"`
	// PolicyVersion is the version of the session's policy the event was
	// decided under: 1 as created, one more for each revision (airlock
	// update). Zero in logs written before versions were recorded.
	PolicyVersion int `json:"policy_version,omitempty"`
}
