package credentials

import (
	"context"
	"time"
)

// EventKind names what happened to a credential.
type EventKind string

// Event kinds.
const (
	EventMinted    EventKind = "minted"
	EventRefreshed EventKind = "refreshed"
	EventRevoked   EventKind = "revoked"
	EventRejected  EventKind = "rejected" // a service refused a token and reported it
)

// Event is an audit record. It identifies a credential by its ID and never
// carries the credential itself.
type Event struct {
	Kind     EventKind `json:"kind"`
	Time     time.Time `json:"time"`
	Session  string    `json:"session,omitempty"`
	Name     string    `json:"name,omitempty"`
	Issuer   string    `json:"issuer,omitempty"`
	ID       string    `json:"jti,omitempty"`
	Audience string    `json:"audience,omitempty"`
	Scopes   []string  `json:"scopes,omitempty"`
	Expires  time.Time `json:"expires,omitzero"`
	// Rejections only: what was refused, why, and who reported it.
	Action string `json:"action,omitempty"`
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	Remote string `json:"remote,omitempty"`
	// Client and Server are the ends of the connection that presented the
	// token, as the reporting service saw them (verify.Rejection).
	Client string `json:"client,omitempty"`
	Server string `json:"server,omitempty"`
}

// AuditFunc receives audit events. It is called synchronously, without
// broker locks held, and must not block for long.
type AuditFunc func(ctx context.Context, e Event)
