package api

import (
	"context"
	"net/http"
)

// Audit returns a session's audit events in order: the perimeter's
// decisions (DNS answers, dropped connections, credential events, commit
// decisions) and the session's start and end.
func (c *Client) Audit(ctx context.Context, id string) ([]AuditEvent, error) {
	p, err := sessionPath(id, "audit")
	if err != nil {
		return nil, err
	}
	var evs []AuditEvent
	if err := c.doJSON(ctx, http.MethodGet, p, nil, nil, &evs); err != nil {
		return nil, err
	}
	return evs, nil
}
