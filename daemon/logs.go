package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// followPoll is how often a follower looks for new output.
const followPoll = 5 * time.Millisecond

// flushGrace bounds how long a follower waits, after the main process has
// exited, for the log writer to flush its last bytes.
const flushGrace = 3 * time.Second

// Logs copies the session's recorded output. With Follow it returns once the
// main process has exited and its output has been written completely.
func (d *Daemon) Logs(ctx context.Context, id string, o runtime.LogsOptions) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	type stream struct {
		name string
		w    io.Writer
		f    *os.File
	}
	var streams []*stream
	if o.Stdout != nil {
		streams = append(streams, &stream{name: runtime.StdoutLog, w: o.Stdout})
	}
	if o.Stderr != nil {
		streams = append(streams, &stream{name: runtime.StderrLog, w: o.Stderr})
	}
	defer func() {
		for _, st := range streams {
			if st.f != nil {
				st.f.Close()
			}
		}
	}()
	drain := func() error {
		for _, st := range streams {
			if st.f == nil {
				f, err := os.Open(filepath.Join(s.logDir(), st.name))
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return err
				}
				st.f = f
			}
			if _, err := io.Copy(st.w, st.f); err != nil {
				return err
			}
		}
		return nil
	}
	flushed := func() bool {
		s.mu.Lock()
		started := s.rec.Started != nil
		s.mu.Unlock()
		if !started {
			return true
		}
		for _, st := range streams {
			if _, err := os.Stat(filepath.Join(s.logDir(), st.name+runtime.EOFSuffix)); err != nil {
				return false
			}
		}
		return true
	}
	var exitedAt time.Time
	for {
		if err := drain(); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
		if !s.running() {
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			}
			if flushed() || time.Since(exitedAt) > flushGrace {
				return drain()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPoll):
		}
	}
}

// outputDropped returns the output_truncated events of the session's
// streams that the cap on output cut. With wait, it first gives the log
// writer up to flushGrace to finish a cut stream, so that the count is
// final.
func (s *session) outputDropped(wait bool) []api.AuditEvent {
	var evs []api.AuditEvent
	for _, name := range []string{runtime.StdoutLog, runtime.StderrLog} {
		p := filepath.Join(s.logDir(), name+runtime.DroppedSuffix)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		for deadline := time.Now().Add(flushGrace); wait && time.Now().Before(deadline); time.Sleep(10 * followPoll) {
			if _, err := os.Stat(filepath.Join(s.logDir(), name+runtime.EOFSuffix)); err == nil {
				break
			}
		}
		var dr runtime.LogDropped
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &dr)
		}
		if err != nil {
			continue
		}
		stream := strings.TrimSuffix(name, ".log")
		reason := fmt.Sprintf("the session's output reached its cap of %s (resources.log_size): %d bytes of %s dropped", policies.FormatSize(dr.Limit), dr.Dropped, stream)
		if !dr.Final {
			reason = fmt.Sprintf("the session's output reached its cap of %s (resources.log_size): the rest of %s is being dropped", policies.FormatSize(dr.Limit), stream)
		}
		evs = append(evs, api.AuditEvent{
			Session: s.rec.ID, Layer: "session", Action: "output_truncated", Subject: stream, Reason: reason,
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
