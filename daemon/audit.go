package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// Audit returns a session's audit events in order.
func (d *Daemon) Audit(ctx context.Context, id string) ([]api.AuditEvent, error) {
	evs := []api.AuditEvent{}
	n := 0
	err := d.AuditEach(ctx, id, func(raw json.RawMessage) error {
		n++
		var ev api.AuditEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("audit event %d: %w", n, err)
		}
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// AuditEach calls fn with each of a session's audit events in order, as
// the JSON encoding of an api.AuditEvent; raw is valid only during the call.
// It sees every event emitted before it was called, and none emitted after
// it began, and it holds one event in memory at a time. It stops at fn's
// first error and returns it. Errors before the first call of fn (an
// unknown session, an unreadable log) are returned before any call.
func (d *Daemon) AuditEach(ctx context.Context, id string, fn func(raw json.RawMessage) error) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	if err := audit.Each(ctx, filepath.Join(s.dir, audit.File), fn); err != nil {
		return err
	}
	// Blocked connections of a live network are counted in the kernel;
	// they reach the log when the network is removed.
	var b []byte
	for _, ev := range append(d.egress.Drops(ctx, id), s.liveOutputDropped()...) {
		ev = s.withRepair(ev)
		if b, err = audit.AppendEvent(b[:0], &ev); err != nil {
			return err
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}
