package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
type Session struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec SessionSpec `json:"spec"`
	// +optional
	Status SessionStatus `json:"status,omitempty"`
}

// SessionSpec is what a Session asks for. A Session starts as soon as a
// node agent claims it (api.CreateRequest with Start set).
type SessionSpec struct {
	// Policy is the session's manifest as the /v1 API carries it
	// (api.CreateRequest.Policy): a decoded `session "label" { ... }`
	// block, with the manifest's snake_case field names. The schema
	// checks its shape; the node agent validates it as the daemon does
	// ((*policies.Policy).Validate) and under its node's admission policy.
	// +required
	Policy policies.Policy `json:"policy"`
	// NodeName places the session on the node agent of that name; empty
	// leaves the choice to the placement controller.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// NodeSelector limits the placement to node agents with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// PoolName takes a sandbox the SessionPool of that name (in the
	// Session's namespace) prepared, when one is ready on the chosen node.
	// +optional
	PoolName string `json:"poolName,omitempty"`
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
	// error (as api.Session.Reason), or lost.
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
	// decision (an HTTP rule that says "ask"); bodies and headers stay on
	// the node.
	// +optional
	// +listType=map
	// +listMapKey=id
	PendingApprovals []PendingApproval `json:"pendingApprovals,omitempty"`
	// Conditions are the usual Kubernetes conditions (Placed, Ready, ...).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
// the request's headers and body).
type PendingApproval struct {
	// ID names the hold, as in POST /v1/approvals/{id}.
	ID     string `json:"id"`
	Method string `json:"method"`
	Host   string `json:"host"`
	Path   string `json:"path"`
	// Rule is the text of the rule that asked.
	Rule     string      `json:"rule"`
	Created  metav1.Time `json:"created"`
	Deadline metav1.Time `json:"deadline"`
}

// SessionList is a list of Sessions.
//
// +kubebuilder:object:root=true
type SessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Session `json:"items"`
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

// SessionPoolStatus is what the node agents report about a pool.
type SessionPoolStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Ready is the number of prepared sandboxes on all nodes.
	// +optional
	Ready int32 `json:"ready,omitempty"`
	// Nodes is the count on each node.
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
	Node  string `json:"node"`
	Ready int32  `json:"ready"`
}

// SessionPoolList is a list of SessionPools.
//
// +kubebuilder:object:root=true
type SessionPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SessionPool `json:"items"`
}
