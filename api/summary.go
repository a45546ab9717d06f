package api

import "time"

// AuditSummary counts a session's audit events by layer and action: what
// a status report (the Kubernetes Session's status.audit) shows of the
// audit without reading it. The events themselves are GET
// /v1/sessions/{id}/audit.
type AuditSummary struct {
	// Events is the number of events the session's audit log was given,
	// each repeated decision counted once for each time it was decided
	// (the log writes repeats as one event with a count) and each event
	// the log's size cap left out counted all the same.
	Events int64 `json:"events"`
	// Refused counts the events whose action refused, denied, dropped or
	// rejected something (RefusingAction).
	Refused int64 `json:"refused"`
	// Counts break Events down by layer and action, in layer then
	// action order.
	Counts []AuditCount `json:"counts,omitempty"`
	// Last is when the latest event was recorded; nil without events.
	Last *time.Time `json:"last,omitempty"`
}

// AuditCount is how many events of one layer and action a session had.
type AuditCount struct {
	Layer  string `json:"layer"`
	Action string `json:"action"`
	Count  int64  `json:"count"`
}

// RefusingAction reports whether an audit event's action refused
// something: a DNS query refused, a connection dropped, an HTTP request
// denied or refused, a commit's change rejected, a read of a masked path
// denied, an approval denied, a credential rejected.
func RefusingAction(action string) bool {
	switch action {
	case "refused", "denied", "dropped", "rejected", "read_denied", "exfiltration", "blocked":
		return true
	}
	return false
}

// Change outcomes (ChangeSummary.Outcome).
const (
	OutcomeCommitted = "committed"
	OutcomeDiscarded = "discarded"
)

// ChangeSummary is the size of a session's workspace changes: those
// waiting for review, or, once they were committed or discarded, those
// that waited.
type ChangeSummary struct {
	// Added, Modified and Deleted count changed paths by kind; a rename,
	// a mode change, a symlink's new target and a change of file type
	// count as modified.
	Added    int `json:"added"`
	Modified int `json:"modified"`
	Deleted  int `json:"deleted"`
	// Bytes is the size of the added and modified regular files.
	Bytes int64 `json:"bytes"`
	// Rejected counts the changes a commit would refuse (a protected
	// path, a rule), as of the review.
	Rejected int `json:"rejected"`
	// Outcome is empty while the changes wait for review, then
	// OutcomeCommitted or OutcomeDiscarded.
	Outcome string `json:"outcome,omitempty"`
}
