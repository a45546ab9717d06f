package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Logs copies the session's recorded output. With Follow it returns once the
// main process has exited and its output has been written completely.
func (d *Daemon) Logs(ctx context.Context, id string, o runtime.LogsOptions) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	return runtime.CopyLogs(ctx, runtime.LogSource{Dir: s.logDir(), Running: s.running, Exited: s.exited, Started: func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.rec.Started != nil
	}}, o)
}

// outputDropped returns the output_truncated events of the session's
// streams that the cap on output cut; with wait, once the counts are final
// (see runtime.OutputDropped).
func (s *session) outputDropped(wait bool) []api.AuditEvent {
	var evs []api.AuditEvent
	for _, dr := range runtime.OutputDropped(s.logDir(), wait) {
		reason := fmt.Sprintf("the session's output reached its cap of %s (resources.log_size): %d bytes of %s dropped", policies.FormatSize(dr.Limit), dr.Dropped, dr.Stream)
		if !dr.Final {
			reason = fmt.Sprintf("the session's output reached its cap of %s (resources.log_size): the rest of %s is being dropped", policies.FormatSize(dr.Limit), dr.Stream)
		}
		evs = append(evs, api.AuditEvent{
			Session: s.rec.ID, Layer: "session", Action: "output_truncated", Subject: dr.Stream, Reason: reason,
			Fields: map[string]any{"limit": dr.Limit, "written_bytes": dr.Written, "dropped_bytes": dr.Dropped, "final": dr.Final},
		})
	}
	return evs
}

// auditOutputDropped records in the audit how much output the cap on
// output dropped, once the session's log writer is done.
func (s *session) auditOutputDropped(ctx context.Context) {
	for _, ev := range s.outputDropped(true) {
		s.audit.EmitControl(ctx, ev)
	}
}

// liveOutputDropped is outputDropped for a running session, read when its
// audit is: the event is written when the session ends.
func (s *session) liveOutputDropped() []api.AuditEvent {
	if !s.running() {
		return nil
	}
	evs := s.outputDropped(false)
	now := time.Now().UTC()
	for i := range evs {
		evs[i].Time = now
	}
	return evs
}
