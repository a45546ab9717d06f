package world

import (
	"slices"
	"sync"
	"time"
)

// Event is one request as a world service saw it. Every request to a
// service handler records exactly one Event.
type Event struct {
	// Seq numbers events from 1, in the order they were recorded.
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Service string    `json:"service"` // ServiceGit, ServiceJobs, ...
	Method  string    `json:"method"`
	Path    string    `json:"path"`
	// TokenID and Session are the token's "jti" and "sub", once its
	// signature has been verified.
	TokenID string `json:"jti,omitempty"`
	Session string `json:"session,omitempty"`
	// Trusted marks a request served through ServeAs: it carried no
	// token, its claims were given in-process, and Session is their
	// subject (TokenID is empty).
	Trusted bool `json:"trusted,omitempty"`
	// Credential is the name of the static registry token the request
	// carried (the package registry takes them besides session tokens);
	// TokenID and Session are then empty.
	Credential string `json:"credential,omitempty"`
	// Action is the scope action checked (or to be checked), Targets what
	// it was about, named as the oracles name them: job ids, service ids,
	// object ids ("s3://bucket/key" for objects without one),
	// "origin/<branch>" for refs of the world's repository, the repository
	// name for fetches, "REPO#N" for issues, "NAME@V" (or "NAME@V:STAGE"
	// for a publish) for model versions, "REPO/NAME@VERSION" for packages
	// (and the registry token's name beside it), "paste:PATH" for pastes.
	Action  string   `json:"action,omitempty"`
	Targets []string `json:"targets,omitempty"`
	// Decision is DecisionAllow or DecisionDeny once the token has been
	// judged, DecisionChallenge for a git request sent without a token
	// (git always asks anonymously first; not a denial), and empty when
	// the request failed before (an unknown target, a bad request).
	Decision string `json:"decision,omitempty"`
	// Reason says why a request was denied: a reason of package verify
	// ("scope_denied", "expired", "revoked", "wrong_audience", ...) or
	// "no_token".
	Reason string `json:"reason,omitempty"`
	// Status is the HTTP status answered.
	Status int `json:"status"`
	// Error is the error answered, if any.
	Error string `json:"error,omitempty"`
}

// Decisions.
const (
	DecisionAllow     = "allow"
	DecisionDeny      = "deny"
	DecisionChallenge = "challenge"
)

// auditLog is the world's append-only request log.
type auditLog struct {
	sink func(Event)

	mu sync.Mutex
	// +checklocks:mu
	events []Event
}

func (l *auditLog) record(e Event) {
	l.mu.Lock()
	e.Seq = uint64(len(l.events)) + 1
	e.Targets = slices.Clone(e.Targets)
	l.events = append(l.events, e)
	l.mu.Unlock()
	if l.sink != nil {
		l.sink(e)
	}
}

// since returns the events with Seq > after.
func (l *auditLog) since(after uint64) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after >= uint64(len(l.events)) {
		return []Event{}
	}
	out := make([]Event, len(l.events)-int(after))
	copy(out, l.events[after:])
	for i := range out {
		out[i].Targets = slices.Clone(out[i].Targets)
	}
	return out
}

func (l *auditLog) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return uint64(len(l.events))
}
