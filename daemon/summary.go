package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/fsscope/change"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// auditTally counts a session's audit events as its log is given them (an
// audit.WithObserver), so that a summary costs a map copy and never a read
// of the log. A session a restarted daemon loaded counts the events its
// predecessor wrote once, the first time a summary is asked for, by
// reading the log up to the size it had when it was loaded: one event at
// a time, bounded by the log's cap.
type auditTally struct {
	mu      sync.Mutex
	counts  map[auditKey]int64 // +checklocks:mu
	events  int64              // +checklocks:mu
	refused int64              // +checklocks:mu
	last    time.Time          // +checklocks:mu

	// seedPath and seedSize are the log and its size when the session
	// was loaded; seeded closes once they are counted in. A fresh
	// session has nothing to seed.
	seedOnce sync.Once
	seedPath string
	seedSize int64
}

type auditKey struct{ layer, action string }

// newAuditTally returns a tally of a session's events; path and size, if
// size > 0, are its log as a restarted daemon found it.
func newAuditTally(path string, size int64) *auditTally {
	return &auditTally{counts: map[auditKey]int64{}, seedPath: path, seedSize: size}
}

// observe counts ev: an audit.WithObserver, quick and keeping nothing.
func (t *auditTally) observe(ev *api.AuditEvent) {
	t.mu.Lock()
	t.addLocked(ev.Layer, ev.Action, 1, ev.Time)
	t.mu.Unlock()
}

func (t *auditTally) addLocked(layer, action string, n int64, at time.Time) {
	t.counts[auditKey{layer, action}] += n
	t.events += n
	if api.RefusingAction(action) {
		t.refused += n
	}
	if at.After(t.last) {
		t.last = at
	}
}

// seed counts the events the log held when the session was loaded, once.
// A merged decision's line counts for its repeats.
func (t *auditTally) seed(ctx context.Context) {
	t.seedOnce.Do(func() {
		if t.seedSize <= 0 {
			return
		}
		type line struct {
			Time   time.Time `json:"time"`
			Layer  string    `json:"layer"`
			Action string    `json:"action"`
			Fields struct {
				Repeated int64 `json:"repeated"`
			} `json:"fields"`
		}
		counts := map[auditKey]int64{}
		var last time.Time
		err := audit.EachUpTo(ctx, t.seedPath, t.seedSize, func(raw json.RawMessage) error {
			var l line
			if err := json.Unmarshal(raw, &l); err != nil {
				return nil // counted by nothing: not an event this daemon wrote
			}
			n := int64(1)
			if l.Fields.Repeated > 0 {
				n = l.Fields.Repeated
			}
			counts[auditKey{l.Layer, l.Action}] += n
			if l.Time.After(last) {
				last = l.Time
			}
			return nil
		})
		if err != nil {
			log.G(ctx).Warn("audit summary: the log written before the restart is not counted", "log", t.seedPath, "error", err)
			return
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for k, n := range counts {
			t.addLocked(k.layer, k.action, n, time.Time{})
		}
		if last.After(t.last) {
			t.last = last
		}
	})
}

// summary returns the counts so far.
func (t *auditTally) summary() api.AuditSummary {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := api.AuditSummary{Events: t.events, Refused: t.refused}
	for k, n := range t.counts {
		out.Counts = append(out.Counts, api.AuditCount{Layer: k.layer, Action: k.action, Count: n})
	}
	slices.SortFunc(out.Counts, func(a, b api.AuditCount) int {
		return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Action, b.Action))
	})
	if !t.last.IsZero() {
		l := t.last
		out.Last = &l
	}
	return out
}

// AuditSummary counts a session's audit events by layer and action
// (api.AuditSummary) from counters the daemon keeps as events are
// recorded; the connections the kernel blocked while the session's
// network lives, which reach the log when the network is removed, are
// counted in as AuditEach shows them.
func (d *Daemon) AuditSummary(ctx context.Context, id string) (*api.AuditSummary, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.tally.seed(ctx)
	sum := s.tally.summary()
	drops := d.egress.Drops(ctx, id)
	if len(drops) == 0 {
		return &sum, nil
	}
	t := newAuditTally("", 0)
	t.mu.Lock()
	for _, c := range sum.Counts {
		t.addLocked(c.Layer, c.Action, c.Count, time.Time{})
	}
	if sum.Last != nil {
		t.last = *sum.Last
	}
	t.mu.Unlock()
	for i := range drops {
		t.observe(&drops[i])
	}
	sum = t.summary()
	return &sum, nil
}

// ChangeSummary returns the size of a session's workspace changes
// (api.ChangeSummary): those waiting for review, computed by a review
// the first time and kept in the session's record; once committed or
// discarded, those that waited, with the outcome. Nil, without an error,
// for a session with nothing to review (running, or without overlay
// workspaces, or ended before this daemon kept summaries).
func (d *Daemon) ChangeSummary(ctx context.Context, id string) (*api.ChangeSummary, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if c := s.rec.Changes; c != nil {
		out := *c
		s.mu.Unlock()
		return &out, nil
	}
	review := s.rec.Review && s.fs != nil
	s.mu.Unlock()
	if !review {
		return nil, nil
	}
	cs, err := d.Diff(ctx, id)
	if errdefs.IsNotFound(err) || errdefs.IsFailedPrecondition(err) {
		return nil, nil // committed, discarded or removed meanwhile
	}
	if err != nil {
		return nil, err
	}
	sum := summarizeChanges(cs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec.Changes == nil && s.rec.Review {
		s.rec.Changes = &sum
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Warn("change summary not saved", "session", id, "error", err)
		}
	}
	if s.rec.Changes != nil {
		sum = *s.rec.Changes
	}
	return &sum, nil
}

// summarizeChanges counts a review's changes.
func summarizeChanges(cs *api.ChangeSet) api.ChangeSummary {
	var sum api.ChangeSummary
	for _, w := range cs.Workspaces {
		for _, c := range w.Changes {
			switch c.Kind {
			case change.KindAdded:
				sum.Added++
			case change.KindDeleted:
				sum.Deleted++
			default:
				sum.Modified++
			}
			if c.Kind != change.KindDeleted && c.Type == change.TypeFile && c.Size > 0 {
				// Saturating: sparse files' apparent sizes can add
				// up past int64 (half a million of ext4's largest).
				sum.Bytes += min(c.Size, math.MaxInt64-sum.Bytes)
			}
		}
		sum.Rejected += len(w.Rejected)
	}
	return sum
}

// keepChangeSummary records the summary of the changes a commit or a
// discard is about to act on, unless one is recorded: their size stays
// known once they are gone.
func (s *session) keepChangeSummary(ctx context.Context, fs *fsscope.Session) {
	s.mu.Lock()
	known := s.rec.Changes != nil
	s.mu.Unlock()
	if known {
		return
	}
	cs, err := fs.Review(ctx)
	if err != nil {
		log.G(ctx).Warn("change summary not kept", "error", err)
		return
	}
	sum := summarizeChanges(cs)
	s.mu.Lock()
	if s.rec.Changes == nil {
		s.rec.Changes = &sum
	}
	s.mu.Unlock()
}

// auditSize is the size of the audit log in session directory dir, 0 if
// it has none.
func auditSize(dir string) int64 {
	st, err := os.Stat(filepath.Join(dir, audit.File))
	if err != nil {
		return 0
	}
	return st.Size()
}
