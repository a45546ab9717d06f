package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// Audit returns a session's audit events in order: the perimeter's
// decisions (DNS answers, dropped connections, credential events, commit
// decisions) and the session's start and end.
func (c *Client) Audit(ctx context.Context, id string) ([]AuditEvent, error) {
	evs := []AuditEvent{}
	err := c.AuditEach(ctx, id, func(ev AuditEvent) error {
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// AuditEach calls fn with each of a session's audit events in order, as
// Audit returns them, decoding the response as it arrives so that a long
// log is never held whole. It stops at fn's first error and returns it.
func (c *Client) AuditEach(ctx context.Context, id string, fn func(AuditEvent) error) error {
	p, err := sessionPath(id, "audit")
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, p, nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	decodeErr := func(err error) error {
		return fmt.Errorf("%s %s: decoding response: %w", http.MethodGet, p, err)
	}
	dec := json.NewDecoder(resp.Body)
	if tok, err := dec.Token(); err != nil {
		return decodeErr(err)
	} else if tok != json.Delim('[') {
		return decodeErr(fmt.Errorf("got %v, want an array of events", tok))
	}
	for dec.More() {
		var ev AuditEvent
		if err := dec.Decode(&ev); err != nil {
			return decodeErr(err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing bracket
		return decodeErr(err)
	}
	return nil
}
