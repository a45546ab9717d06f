package api

import (
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// Approval states.
const (
	ApprovalPending = "pending"
	ApprovalAllowed = "allowed"
	ApprovalDenied  = "denied"
)

// Approval is a request the L7 gateway holds for a decision (an HTTP rule
// with "ask" matched it): its connection stays open until a person or the
// approver hook allows or denies it, or until Deadline, when it is denied.
type Approval struct {
	// ID names the hold in POST /v1/approvals/{id}: 16 hex digits,
	// random.
	ID      string `json:"id"`
	Session string `json:"session"`
	Method  string `json:"method"`
	Host    string `json:"host"`
	// Path is the request's path (normalized), without its query.
	Path string `json:"path"`
	// Query is the request's raw query (after "?", as the sandbox sent
	// it, percent-escapes and all), at most 8 KiB; empty when it has
	// none. QueryTruncated says it is longer: the rest goes on unseen if
	// the request is allowed. It is kept once the request is decided.
	Query          string `json:"query,omitempty"`
	QueryTruncated bool   `json:"query_truncated,omitempty"`
	// Headers are the request's header fields as the sandbox sent them,
	// one per value, in name order (names in Go's canonical case, as they
	// are forwarded), at most 100 fields and 16 KiB of names and values,
	// each value at most 1 KiB (HeaderField.Truncated); HeadersTruncated
	// says some were cut or left out. A header the gateway sets to a
	// secret's value on the way out (a secret bound to the host) is shown
	// with the secret's placeholder and name, never its value. Hop-by-hop
	// fields (Connection, Transfer-Encoding, ...) are shown but not
	// forwarded; trailers are not shown. Like Body, the headers are the
	// sandbox's text, shown only while the request is pending.
	Headers          []HeaderField `json:"headers,omitempty"`
	HeadersTruncated bool          `json:"headers_truncated,omitempty"`
	// Rule is the text of the rule that asked.
	Rule string `json:"rule"`
	// Refs are the refs a git push would update, when the request is one.
	Refs []string `json:"refs,omitempty"`
	// Body is the start of the request's body, at most 64 KiB, as the
	// sandbox sent it (in ContentEncoding, not decoded; base64 in JSON);
	// absent when the request has none. BodyTruncated says the body is
	// longer: the rest goes on unseen if the request is allowed. The body
	// is the sandbox's own bytes, so it must be shown with care (control
	// characters escaped); secrets the gateway injects go into headers,
	// never into it. It is shown only while the request is pending: a
	// decided approval no longer carries it, and the audit records at
	// most its length.
	Body          []byte `json:"body,omitempty"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	// ContentType and ContentEncoding are the request's headers as the
	// sandbox sent them.
	ContentType     string    `json:"content_type,omitempty"`
	ContentEncoding string    `json:"content_encoding,omitempty"`
	Created         time.Time `json:"created"`
	Deadline        time.Time `json:"deadline"`
	// State is ApprovalPending, ApprovalAllowed or ApprovalDenied.
	State string `json:"state"`
	// Decided, By and Reason say when, by whom and why it was decided:
	// By is a person ("alice (uid 1000)"), "approver", "timeout",
	// "cancelled" (the client went away), "session ended", "limit" (too
	// many holds; never held) or "daemon stopping".
	Decided *time.Time `json:"decided,omitempty"`
	By      string     `json:"by,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	// Repair is the smallest revision of the session's policy that would
	// allow the request (an allow rule for its method and path before the
	// rule that asked), as of when it was held; nil when none was
	// computed. Approving with Revise applies it, computed again against
	// the policy as it is then.
	Repair *policies.Repair `json:"repair,omitempty"`
	// RevisedTo is the policy version the revision that approved the
	// request installed (approved with Revise); 0 otherwise.
	RevisedTo int `json:"revised_to,omitempty"`
}

// HeaderField is a header field of a held request (Approval.Headers).
type HeaderField struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Truncated says Value was cut (at 1 KiB).
	Truncated bool `json:"truncated,omitempty"`
	// Secret names the secret whose value the gateway puts in this field
	// in place of Value (the secret's placeholder, with "Bearer " for a
	// bearer binding) once the request is allowed.
	Secret string `json:"secret,omitempty"`
}

// ApprovalDecision values.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// ApprovalDecision is the body of POST /v1/approvals/{id}, and what an
// approver hook writes to its stdout.
type ApprovalDecision struct {
	// Decision is DecisionAllow or DecisionDeny.
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Revise, with DecisionAllow, approves by a revision: the request's
	// repair (Approval.Repair, computed again against the session's
	// policy as it is) is applied to the session's policy as by PATCH
	// /v1/sessions/{id}, and the request is then allowed under the new
	// version, as is every later one like it. A repair a running session
	// cannot take is refused (409), and nothing changes: the request
	// stays held. Not for approver hooks.
	Revise bool `json:"revise,omitempty"`
}

// ApprovalEvent types.
const (
	// ApprovalHeld: a request is held (a follow stream starts with one
	// for each request already held).
	ApprovalHeld = "held"
	// ApprovalDecided: a held request was allowed or denied.
	ApprovalDecided = "decided"
	// ApprovalDropped: the follower was too slow; Dropped events were
	// left out of the stream at this point.
	ApprovalDropped = "dropped"
)

// ApprovalEvent is one line of GET /v1/approvals?follow=1.
type ApprovalEvent struct {
	Type     string    `json:"type"`
	Approval *Approval `json:"approval,omitempty"`
	Dropped  uint64    `json:"dropped,omitempty"`
}
