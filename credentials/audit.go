package credentials

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/api"
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

// AuditEvent is e as a record of session e.Session's audit log (layer
// "credentials", action the event's kind, subject the credential's name).
func (e Event) AuditEvent() api.AuditEvent {
	ev := api.AuditEvent{
		Time: e.Time, Session: e.Session, Layer: "credentials", Action: string(e.Kind),
		Subject: e.Name, Reason: e.Reason,
		Fields: map[string]any{"jti": e.ID, "issuer": e.Issuer, "audience": e.Audience},
	}
	for k, v := range map[string]string{"action": e.Action, "detail": e.Detail, "client": e.Client} {
		if v != "" {
			ev.Fields[k] = v
		}
	}
	if len(e.Scopes) > 0 {
		ev.Fields["scopes"] = e.Scopes
	}
	if !e.Expires.IsZero() {
		ev.Fields["expires"] = e.Expires
	}
	return ev
}
