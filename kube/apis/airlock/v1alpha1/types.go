package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/policies"
)

// Session is one airlock session: its manifest, and what the node agent
// running it reports.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=als,categories=airlock
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.node`
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.exitCode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
type Session struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SessionSpec `json:"spec"`
	// +optional
	Status SessionStatus `json:"status,omitempty"`
}

// SessionSpec is what a Session asks for. A Session starts as soon as a
// node agent claims it (api.CreateRequest with Start set). The node agent
// runs the policy it read when it claimed the Session; a later change to
// it is not applied.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.nodeName) || (has(self.nodeName) && self.nodeName == oldSelf.nodeName)",message="nodeName cannot be changed once set: a placed session is never moved, so that it never runs twice"
type SessionSpec struct {
	// Policy is the session's manifest as the /v1 API carries it
	// (api.CreateRequest.Policy): a decoded `session "label" { ... }`
	// block, with the manifest's snake_case field names. The schema
	// checks its shape; the node agent validates it as the daemon does
	// ((*policies.Policy).Validate) and under its node's admission policy.
	// +required
	Policy policies.Policy `json:"policy"`
	// NodeName places the session on the node agent (AirlockNode) of
	// that name; empty leaves the choice to the placement controller,
	// which sets it. Once set it cannot change: a session is never moved,
	// and one whose node is lost is marked Lost, not run elsewhere. Node
	// agents watch the Sessions with their own name here (a selectable
	// field: --field-selector spec.nodeName=NODE).
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// NodeSelector limits the placement to node agents whose
	// AirlockNode's labels hold all of these.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// PoolName takes a sandbox the SessionPool of that name (in the
	// Session's namespace) prepared, when one is ready on the chosen node.
	// +optional
	PoolName string `json:"poolName,omitempty"`
	// WorkspaceSources fill workspaces from outside the node. A git
	// source is fetched, before the session starts, by its node agent
	// into a directory of its own on the node (under airlockd's root,
	// which no manifest can name), removed with the Session; a volume
	// source is the directory of the PersistentVolume its claim is bound
	// to. A source's target is that of one of spec.policy.workspaces,
	// whose host_path is then left empty, or, when none has it, of a new
	// overlay workspace with the manifest's defaults. The node's
	// admission policy must admit the source (git_source blocks,
	// volume_paths; none by default).
	// +optional
	// +listType=map
	// +listMapKey=target
	// +kubebuilder:validation:MaxItems=8
	WorkspaceSources []WorkspaceSource `json:"workspaceSources,omitempty"`
}

// WorkspaceSource is where one workspace's content comes from: a git
// repository or a PersistentVolumeClaim, exactly one.
//
// +kubebuilder:validation:XValidation:rule="has(self.git) != has(self.volume)",message="set exactly one of git and volume"
type WorkspaceSource struct {
	// Target is the workspace's absolute path in the sandbox.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Target string `json:"target"`
	// Git fetches the workspace from a git repository.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// Volume takes the workspace from a PersistentVolumeClaim in the
	// Session's namespace.
	// +optional
	Volume *VolumeSource `json:"volume,omitempty"`
}

// VolumeSource is a PersistentVolumeClaim a workspace is taken from. The
// claim must be bound (both ways: its volumeName and the volume's
// claimRef with its uid) to a PersistentVolume that is a directory on the
// node, `local` or `hostPath`, under one of the node admission policy's
// volume_paths; the Session is placed only on a node the volume's
// nodeAffinity selects (matched against the Kubernetes Node of the
// AirlockNode's name). The directory is the workspace's host path: with
// mode "overlay" (the default) the session's changes to it wait for a
// review and a commit, with "rw" they are written to it directly, with
// "ro" none. A claim whose access modes are ReadOnlyMany alone takes
// mode "ro".
type VolumeSource struct {
	// ClaimName is the PersistentVolumeClaim's name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	ClaimName string `json:"claimName"`
	// SubPath is a directory inside the volume's directory taken as the
	// workspace instead of the whole volume, as a pod's volumeMount
	// subPath: a relative path of names separated by single slashes,
	// none of them "." or "..", no leading or trailing slash. It must
	// exist and be a directory, reached from the volume's directory
	// through no symbolic link and no other mount (the node resolves it
	// beneath the volume's directory: a Session whose subPath is missing,
	// no directory or goes through a symlink fails, refused). Empty: the
	// whole volume.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^([^./\x00][^/\x00]*|\.[^./\x00][^/\x00]*|\.\.[^/\x00]+)(/([^./\x00][^/\x00]*|\.[^./\x00][^/\x00]*|\.\.[^/\x00]+))*$`
	SubPath string `json:"subPath,omitempty"`
}

// GitSource is a git repository a workspace is fetched from and, once the
// session's changes are committed, pushed back to.
type GitSource struct {
	// URL is the repository's http or https URL, without user
	// information, or its ssh URL, ssh://USER@HOST[:PORT]/PATH (not git's
	// scp-like USER@HOST:PATH), without a password: credentials are the
	// node's.
	// +required
	// +kubebuilder:validation:Pattern=`^(https?://[^@/?#]+(/[^?#]*)?|ssh://[A-Za-z0-9_][A-Za-z0-9._-]*@([^@:/?#\[\]]+|\[[0-9A-Fa-f:.]+\])(:[0-9]+)?/[^?#]+)$`
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// Ref is the branch, tag or full commit id checked out; empty: the
	// repository's HEAD. A branch is checked out as that branch, anything
	// else with a detached HEAD.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	Ref string `json:"ref,omitempty"`
	// Depth is how many commits of history are fetched; 0 fetches all.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Depth int32 `json:"depth"`
	// PushBranch, when set, has the node agent push the workspace to this
	// branch of the repository once the session has ended and no change
	// waits for review (what the review committed is in the workspace
	// then), as one commit on top of the fetched one (the workspace's
	// files, not the commits the session made in its own copy of the
	// repository): a new branch, or a fast-forward of it, never a forced
	// update. The node's admission policy must admit the branch
	// (git_source push_branches). status.workspaceSources says what was
	// pushed.
	// +optional
	// +kubebuilder:validation:MaxLength=200
	PushBranch string `json:"pushBranch,omitempty"`
}

// SessionState is a Session's place in its life.
// +kubebuilder:validation:Enum=Pending;Placed;Running;Review;Exited;Failed;Lost
type SessionState string

// Session states.
const (
	// SessionPending: not yet placed on a node.
	SessionPending SessionState = "Pending"
	// SessionPlaced: a node was chosen; its agent has not started it yet.
	SessionPlaced SessionState = "Placed"
	// SessionRunning: the main process runs.
	SessionRunning SessionState = "Running"
	// SessionReview: the main process ended and workspace changes wait
	// for a commit or a discard.
	SessionReview SessionState = "Review"
	// SessionExited: the session ended (Reason says how) and nothing
	// waits.
	SessionExited SessionState = "Exited"
	// SessionFailed: the node agent could not run it (refused by
	// validation or admission, or an error before the process started).
	SessionFailed SessionState = "Failed"
	// SessionLost: its node stopped renewing its lease while the session
	// was placed or running; it is never run again elsewhere.
	SessionLost SessionState = "Lost"
)

// SessionStatus is what the node agent running a Session reports. It is
// written through the status subresource, with the resourceVersion it read
// (optimistic concurrency).
type SessionStatus struct {
	// ObservedGeneration is the generation of the spec this status is
	// about.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	State SessionState `json:"state,omitempty"`
	// Node is the node agent the session was placed on.
	// +optional
	Node string `json:"node,omitempty"`
	// ID is the session's id in its node's airlockd.
	// +optional
	ID string `json:"id,omitempty"`
	// ExitCode is the main process's exit status, once it ended.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// Reason says why the session ended: exited, stopped, timeout, oom,
	// error (as api.Session.Reason), refused (validation or admission on
	// its node), lost; or, while it is Pending, unschedulable (no live
	// node with room matches it; Message says why for each node).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail of Reason or of a failure.
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	PlacedAt *metav1.Time `json:"placedAt,omitempty"`
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// PolicyVersion is the version of the policy the session runs under:
	// 1 as created, one more for each revision (api.Session.PolicyVersion).
	// +optional
	PolicyVersion int32 `json:"policyVersion,omitempty"`
	// Warm is true when the session took a sandbox a pool had prepared.
	// +optional
	Warm bool `json:"warm,omitempty"`
	// Audit counts the session's perimeter decisions so far; the events
	// themselves stay on the node (airlock audit).
	// +optional
	Audit *AuditSummary `json:"audit,omitempty"`
	// Diff summarises the workspace changes waiting for review, or those
	// committed or discarded.
	// +optional
	Diff *DiffSummary `json:"diff,omitempty"`
	// PendingApprovals are the requests the L7 gateway holds for a
	// decision (an HTTP rule that says "ask"); their headers and whole
	// bodies stay on the node.
	// +optional
	// +listType=map
	// +listMapKey=id
	PendingApprovals []PendingApproval `json:"pendingApprovals,omitempty"`
	// PendingApprovalsOmitted counts the held requests left out of
	// PendingApprovals, the newest, once the list reached its bound on
	// size (256 KiB as the API server stores it): a sandbox's requests
	// cannot make the status too large to write. airlock approvals on the
	// node lists them all.
	// +optional
	PendingApprovalsOmitted int32 `json:"pendingApprovalsOmitted,omitempty"`
	// Decisions are what the Session's own node did with the
	// SessionApprovals naming it, the last 16, oldest first. They are the
	// record to trust: only that node writes its Session's status (the
	// node restriction), while any node may write a SessionApproval's
	// status first, and one that did before the Session's node looked is
	// not taken for an answer (the decision is applied all the same).
	// +optional
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=16
	Decisions []AppliedDecision `json:"decisions,omitempty"`
	// WorkspaceSources report what was fetched for each of
	// spec.workspaceSources, and pushed.
	// +optional
	// +listType=map
	// +listMapKey=target
	WorkspaceSources []WorkspaceSourceStatus `json:"workspaceSources,omitempty"`
	// Conditions are the usual Kubernetes conditions (Placed, Ready, ...).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkspaceSourceStatus is what the node agent did with one workspace
// source.
type WorkspaceSourceStatus struct {
	// Target is the source's target.
	Target string `json:"target"`
	// Volume is the PersistentVolume a volume source's claim is bound
	// to, and Path its directory on the node.
	// +optional
	Volume string `json:"volume,omitempty"`
	// +optional
	Path string `json:"path,omitempty"`
	// Commit is the id of the commit fetched.
	// +optional
	Commit string `json:"commit,omitempty"`
	// Branch is the branch checked out in the workspace; empty for a tag
	// or a commit id.
	// +optional
	Branch string `json:"branch,omitempty"`
	// PushedBranch and PushedCommit say where the committed changes were
	// pushed, once they were.
	// +optional
	PushedBranch string `json:"pushedBranch,omitempty"`
	// +optional
	PushedCommit string `json:"pushedCommit,omitempty"`
	// +optional
	PushedAt *metav1.Time `json:"pushedAt,omitempty"`
	// PushMessage says why nothing was pushed once the session ended:
	// nothing changed (every change discarded), the push was refused
	// (admission, or the remote), or it failed. A push is tried once.
	// +optional
	PushMessage string `json:"pushMessage,omitempty"`
}

// AuditSummary counts a session's audit events (api.AuditEvent) by layer
// and action.
type AuditSummary struct {
	// Events is the number of events recorded.
	Events int64 `json:"events"`
	// Refused counts the decisions that refused, dropped or rejected
	// something.
	Refused int64 `json:"refused"`
	// Counts break Events down by layer (dns, net, l7, approval, fs,
	// credentials, session) and action.
	// +optional
	// +listType=atomic
	Counts []AuditCount `json:"counts,omitempty"`
	// Last is when the latest event was recorded.
	// +optional
	Last *metav1.Time `json:"last,omitempty"`
}

// AuditCount is how many events of one layer and action a session had.
type AuditCount struct {
	Layer  string `json:"layer"`
	Action string `json:"action"`
	Count  int64  `json:"count"`
}

// DiffSummary is the size of a session's workspace changes.
type DiffSummary struct {
	// Files changed, by kind.
	Added    int32 `json:"added"`
	Modified int32 `json:"modified"`
	Deleted  int32 `json:"deleted"`
	// Bytes is the size of the added and modified files' contents.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// Rejected counts changes a commit would refuse (protected paths,
	// git metadata that is not known to be inert).
	// +optional
	Rejected int32 `json:"rejected,omitempty"`
	// Outcome is empty while the changes wait for review, then committed
	// or discarded.
	// +optional
	// +kubebuilder:validation:Enum=committed;discarded
	Outcome string `json:"outcome,omitempty"`
}

// PendingApproval is a request the L7 gateway holds (api.Approval, without
// the request's headers, and with its body's digest and first bytes
// instead of the body), enough to tell two held requests apart and to
// know which one a SessionApproval decides.
type PendingApproval struct {
	// ID names the hold, as in POST /v1/approvals/{id}.
	ID     string `json:"id"`
	Method string `json:"method"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	// Query is the request's raw query (after "?"), as the sandbox sent
	// it, at most 1 KiB; every byte outside printable ASCII, and the
	// backslash, written as \xHH (a query is ASCII on the wire).
	// +optional
	Query string `json:"query,omitempty"`
	// QueryTruncated says the query is longer than Query shows.
	// +optional
	QueryTruncated bool `json:"queryTruncated,omitempty"`
	// Refs are the refs a git push would update, when the request is
	// one, escaped as Query, at most 16 and 1 KiB together; RefsCount is
	// how many it updates, more than Refs lists when some were left out.
	// +optional
	Refs []string `json:"refs,omitempty"`
	// +optional
	RefsCount int32 `json:"refsCount,omitempty"`
	// ContentType and ContentEncoding are the request's headers of those
	// names as the sandbox sent them, escaped as Query, at most 128
	// bytes each.
	// +optional
	ContentType string `json:"contentType,omitempty"`
	// +optional
	ContentEncoding string `json:"contentEncoding,omitempty"`
	// HeaderNames are the names of the request's header fields, once
	// each, escaped as Query, at most 512 bytes together; HeadersSHA256
	// is the SHA-256 of its fields as the node shows them ("Name: value"
	// lines, a secret's placeholder in place of its value), so that two
	// requests that differ in a header's value alone are told apart. The
	// values stay on the node (airlock approvals).
	// +optional
	HeaderNames []string `json:"headerNames,omitempty"`
	// +optional
	HeadersSHA256 string `json:"headersSHA256,omitempty"`
	// BodyBytes is how many bytes of the body the gateway holds for the
	// decision (at most 64 KiB), and BodySHA256 their SHA-256 in hex (on
	// the node, GET /v1/approvals gives the bytes themselves).
	// +optional
	BodyBytes int32 `json:"bodyBytes,omitempty"`
	// +optional
	BodySHA256 string `json:"bodySHA256,omitempty"`
	// BodyTruncated says the body is longer than the bytes held: the
	// rest goes on unseen if the request is allowed.
	// +optional
	BodyTruncated bool `json:"bodyTruncated,omitempty"`
	// BodyPreview is the start of the body, at most 256 bytes, every
	// byte outside printable ASCII, and the backslash, written as \xHH.
	// +optional
	BodyPreview string `json:"bodyPreview,omitempty"`
	// Rule is the text of the rule that asked.
	Rule     string      `json:"rule"`
	Created  metav1.Time `json:"created"`
	Deadline metav1.Time `json:"deadline"`
}

// AppliedDecision is what a Session's node did with one SessionApproval.
type AppliedDecision struct {
	// Approval is the SessionApproval's name, UID its uid.
	Approval string    `json:"approval"`
	UID      types.UID `json:"uid"`
	// ApprovalID is the held request it decides.
	ApprovalID string `json:"approvalID"`
	// Phase is Applied or Refused, as the SessionApproval's status would
	// say; State the request's state after an applied decision (allowed
	// or denied); Message why one was refused.
	Phase SessionApprovalPhase `json:"phase"`
	// +optional
	State string `json:"state,omitempty"`
	// +optional
	Message string `json:"message,omitempty"`
	// At is when it was applied or refused.
	At metav1.Time `json:"at"`
}

// SessionList is a list of Sessions.
//
// +kubebuilder:object:root=true
type SessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Session `json:"items"`
}

// SessionApproval decides a request a Session's L7 gateway holds (one of
// its status.pendingApprovals), through the API server: whoever may
// create SessionApprovals in a Session's namespace may allow or deny its
// held requests, and no one else through Kubernetes. The node agent
// running the Session applies the decision once, records it in the
// session's audit on its node (with this object's namespace, name, uid
// and spec.decidedBy) and reports the outcome in status and in the
// Session's status.decisions (the record to trust: any node may write a
// SessionApproval's status first); a decision it cannot apply (no such Session, an approval id that the Session's
// session does not hold, one decided before) is reported, not applied.
// The spec cannot change once created: a new decision is a new object.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=alap,categories=airlock
// +kubebuilder:printcolumn:name="Session",type=string,JSONPath=`.spec.sessionName`
// +kubebuilder:printcolumn:name="Approval",type=string,JSONPath=`.spec.approvalID`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="By",type=string,JSONPath=`.spec.decidedBy`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SessionApproval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SessionApprovalSpec `json:"spec"`
	// +optional
	Status SessionApprovalStatus `json:"status,omitempty"`
}

// ApprovalDecision is a SessionApproval's decision.
// +kubebuilder:validation:Enum=allow;deny;revise
type ApprovalDecision string

// Decisions.
const (
	DecisionAllow ApprovalDecision = "allow"
	DecisionDeny  ApprovalDecision = "deny"
	// DecisionRevise allows the request by a revision of the session's
	// policy (airlock approve --revise): the rule that would have allowed
	// it is added on the node, so that every later request like it is
	// allowed without a hold, and the Session's status.policyVersion
	// goes up. The Session's spec is not changed. A request whose repair
	// cannot be written as a rule is refused (it stays held).
	DecisionRevise ApprovalDecision = "revise"
)

// SessionApprovalSpec is a decision on one held request.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a decision cannot be changed once made: create another SessionApproval"
type SessionApprovalSpec struct {
	// SessionName is the Session, in this object's namespace, whose
	// request is decided.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SessionName string `json:"sessionName"`
	// ApprovalID is the held request's id, as in the Session's
	// status.pendingApprovals.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{16}$`
	ApprovalID string `json:"approvalID"`
	// +required
	Decision ApprovalDecision `json:"decision"`
	// Reason is shown with the decision and audited (no control
	// characters).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// DecidedBy is who decides: the creator's Kubernetes user name. The
	// API server does not record an object's creator; the
	// ValidatingAdmissionPolicy airlock-sessionapproval-decider
	// (deploy/kubernetes/admission) refuses a SessionApproval whose
	// decidedBy is not its creator's user name, so that with it in place
	// this field, which the node's audit records, is proven. Without it,
	// it is what the creator claimed.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DecidedBy string `json:"decidedBy,omitempty"`
}

// SessionApprovalPhase says what became of a decision.
// +kubebuilder:validation:Enum=Applied;Refused
type SessionApprovalPhase string

// SessionApproval phases; empty until a node agent has looked at it.
const (
	// ApprovalApplied: the node agent decided the held request.
	ApprovalApplied SessionApprovalPhase = "Applied"
	// ApprovalRefused: the decision was not applied (Message says why).
	ApprovalRefused SessionApprovalPhase = "Refused"
)

// SessionApprovalStatus is what the node agent did with a decision.
type SessionApprovalStatus struct {
	// +optional
	Phase SessionApprovalPhase `json:"phase,omitempty"`
	// Node is the node agent that applied or refused it.
	// +optional
	Node string `json:"node,omitempty"`
	// State is the held request's state after the decision (allowed or
	// denied, as api.Approval.State), when applied.
	// +optional
	State string `json:"state,omitempty"`
	// Message says why a decision was refused.
	// +optional
	Message string `json:"message,omitempty"`
	// DecidedAt is when it was applied or refused.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
}

// SessionApprovalList is a list of SessionApprovals.
//
// +kubebuilder:object:root=true
type SessionApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SessionApproval `json:"items"`
}

// SessionPool keeps sandboxes of one policy prepared on the nodes it
// selects, so that Sessions naming it (spec.poolName) start warm. Each
// prepared sandbox serves exactly one session and is never reused.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=alp,categories=airlock
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.size`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.ready`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SessionPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SessionPoolSpec `json:"spec"`
	// +optional
	Status SessionPoolStatus `json:"status,omitempty"`
}

// SessionPoolSpec is what a SessionPool keeps prepared.
type SessionPoolSpec struct {
	// Policy is the prepared sandboxes' policy; a Session takes one only
	// if its own policy prepares the same sandbox. The policy's own pool
	// block is ignored: Size says how many.
	// +required
	Policy policies.Policy `json:"policy"`
	// Size is how many sandboxes each selected node keeps prepared.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	Size int32 `json:"size"`
	// NodeSelector picks the node agents that keep sandboxes; empty means
	// every node.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// SessionPoolStatus is what the node agents report about a pool. Each
// node agent writes its own entry of nodes by server-side apply, as field
// manager airlockd-node/NODE: writers on different nodes never overwrite
// each other's entries.
type SessionPoolStatus struct {
	// ObservedGeneration is the generation of the spec last acted on by
	// the node that wrote last; each node's own is in nodes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Ready is the number of prepared sandboxes on all nodes: the sum
	// of nodes' ready, as the last writer saw it (it catches up within
	// moments of a change).
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// Nodes are the nodes the pool selects, one entry each, written by
	// that node's agent.
	// +optional
	// +listType=map
	// +listMapKey=node
	Nodes []PoolNodeStatus `json:"nodes,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolNodeStatus is a pool's prepared sandboxes on one node.
type PoolNodeStatus struct {
	Node string `json:"node"`
	// Ready is how many prepared sandboxes wait on the node.
	Ready int32 `json:"ready"`
	// ObservedGeneration is the generation of the spec the node acted
	// on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Reason is "refused" when the node's admission policy refused the
	// pool's policy (the node then prepares nothing); empty otherwise.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why the node refused the policy, or why its last
	// attempt to prepare a sandbox failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// SessionPoolList is a list of SessionPools.
//
// +kubebuilder:object:root=true
type SessionPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SessionPool `json:"items"`
}

// AirlockNode is one node agent (airlockd --kubernetes): the sessions it
// takes at once and how many it holds. Its agent creates it at start and
// keeps its status; its labels (metadata.labels, from airlockd
// --node-labels and from whoever else labels it) are what a Session's
// nodeSelector matches. It is cluster-scoped, like a Node.
//
// Liveness is not in this object: each agent renews a
// coordination.k8s.io/v1 Lease of the same name in the airlock-system
// namespace (package kube/agent), as a kubelet renews its node's Lease in
// kube-node-lease. A Lease is small and written often; this object is
// larger, watched by the placement controller, and written only when
// something in it changes, so the heartbeat does not cost every watcher a
// copy of it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=aln,categories=airlock
// +kubebuilder:printcolumn:name="Capacity",type=integer,JSONPath=`.status.capacity`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessions`
// +kubebuilder:printcolumn:name="Unschedulable",type=boolean,JSONPath=`.spec.unschedulable`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AirlockNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec AirlockNodeSpec `json:"spec,omitempty"`
	// +optional
	Status AirlockNodeStatus `json:"status,omitempty"`
}

// AirlockNodeSpec is what the operator asks of a node agent.
type AirlockNodeSpec struct {
	// Unschedulable keeps the placement controller from placing new
	// Sessions on the node (a cordon); those on it run on.
	// +optional
	Unschedulable bool `json:"unschedulable,omitempty"`
}

// AirlockNodeStatus is what a node agent reports about itself.
type AirlockNodeStatus struct {
	// Capacity is how many Sessions the agent holds at once (airlockd
	// --node-capacity; never more than its admission policy's session
	// limit). A Session holds a place on its node from its placement
	// until it is deleted (as a local session counts under the session
	// limit until it is removed), unless it is Lost or failed before its
	// node made it a local session.
	// +kubebuilder:validation:Minimum=0
	Capacity int32 `json:"capacity"`
	// Sessions is how many local sessions the agent holds for Sessions,
	// as it last counted. The placement controller counts the Sessions
	// placed on the node itself, which includes those it placed a moment
	// ago.
	// +optional
	Sessions int32 `json:"sessions,omitempty"`
	// Version is the agent's airlockd version.
	// +optional
	Version string `json:"version,omitempty"`
	// Runtime is the OCI runtime new sessions run on (runc or crun).
	// +optional
	Runtime string `json:"runtime,omitempty"`
	// HolderIdentity is the identity the agent holds its Lease with: an
	// id kept under its --root, so that the same agent restarted takes its
	// Lease back at once and a second agent given the same node name is
	// refused while the first one's Lease is live.
	// +optional
	HolderIdentity string `json:"holderIdentity,omitempty"`
	// Endpoint is where the agent serves its Sessions' logs, diffs,
	// commits and audit logs (airlock --context), as a kubelet serves
	// its pods' logs.
	// +optional
	Endpoint NodeEndpoint `json:"endpoint,omitempty"`
}

// NodeEndpoint is a node agent's HTTPS endpoint. Clients trust it because
// the API server they already trust gave them its certificate: they pin
// that certificate, exactly, and no other. The agent authenticates every
// request's bearer token with a TokenReview and authorizes it with a
// SubjectAccessReview on the Session's subresource (sessions/log,
// sessions/diff, sessions/commit, sessions/audit, sessions/exec,
// sessions/attach, sessions/stop), as a kubelet does.
type NodeEndpoint struct {
	// Address is the endpoint's HOST:PORT.
	// +optional
	Address string `json:"address,omitempty"`
	// Certificate is the endpoint's self-signed serving certificate, PEM:
	// the agent makes it, its key kept under the daemon's root.
	// +optional
	Certificate string `json:"certificate,omitempty"`
}

// AirlockNodeList is a list of AirlockNodes.
//
// +kubebuilder:object:root=true
type AirlockNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AirlockNode `json:"items"`
}
