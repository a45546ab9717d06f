package daemon

import (
	"context"
	"math"
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

// TestSummarizeChangesSaturates: sparse files' apparent sizes that add up
// past int64 give the largest count, never a wrapped or negative one;
// deleted files and directories add nothing.
func TestSummarizeChangesSaturates(t *testing.T) {
	const huge = 1 << 62
	cs := &api.ChangeSet{Workspaces: []api.WorkspaceChanges{{Changes: []api.Change{
		{Path: "a", Kind: "added", Type: "file", Size: huge},
		{Path: "b", Kind: "added", Type: "file", Size: huge},
		{Path: "c", Kind: "modified", Type: "file", Size: huge},
		{Path: "d", Kind: "deleted", Type: "file", Size: huge},
		{Path: "e", Kind: "added", Type: "dir", Size: 4096},
	}}}}
	sum := summarizeChanges(cs)
	if sum.Bytes != math.MaxInt64 || sum.Added != 3 || sum.Modified != 1 || sum.Deleted != 1 {
		t.Errorf("summary %+v, want bytes saturated at %d, 3 added, 1 modified, 1 deleted", sum, int64(math.MaxInt64))
	}
	small := summarizeChanges(&api.ChangeSet{Workspaces: []api.WorkspaceChanges{{Changes: []api.Change{
		{Path: "a", Kind: "added", Type: "file", Size: 3}, {Path: "b", Kind: "modified", Type: "file", Size: 4},
	}}}})
	if small.Bytes != 7 {
		t.Errorf("bytes %d, want 7", small.Bytes)
	}
}
