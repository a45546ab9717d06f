package daemon

import (
	"context"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// TestAuditTallySeed: the counts a daemon keeps as events are recorded
// (repeated decisions merged in the log counted one by one) are the
// counts a restarted daemon reads back from the log, once; events after
// the restart are counted on top, none twice.
func TestAuditTallySeed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	live := newAuditTally("", 0)
	a := audit.New(dir, 0, audit.WithObserver(live.observe))
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 100 {
		a.EmitDecision(ctx, api.AuditEvent{Time: at.Add(time.Duration(i) * time.Millisecond), Session: "s", Layer: "dns", Action: "refused", Subject: "x.test"})
	}
	a.EmitControl(ctx, api.AuditEvent{Time: at, Session: "s", Layer: "session", Action: "started"})
	a.Emit(ctx, api.AuditEvent{Time: at.Add(time.Second), Session: "s", Layer: "l7", Action: "allowed"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want := live.summary()
	if want.Events != 102 || want.Refused != 100 {
		t.Fatalf("live counts %+v, want 102 events, 100 refused", want)
	}

	// A restarted daemon: the log as it found it, then one more event.
	path := filepath.Join(dir, audit.File)
	restarted := newAuditTally(path, auditSize(dir))
	b := audit.New(dir, 0, audit.WithObserver(restarted.observe))
	b.Emit(ctx, api.AuditEvent{Time: at.Add(2 * time.Second), Session: "s", Layer: "approval", Action: "denied"})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	restarted.seed(ctx)
	restarted.seed(ctx) // once
	got := restarted.summary()
	want.Events, want.Refused = 103, 101
	want.Counts = []api.AuditCount{{Layer: "approval", Action: "denied", Count: 1}, {Layer: "dns", Action: "refused", Count: 100},
		{Layer: "l7", Action: "allowed", Count: 1}, {Layer: "session", Action: "started", Count: 1}}
	last := at.Add(2 * time.Second)
	want.Last = &last
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after a restart: %+v\nwant %+v", got, want)
	}
}
