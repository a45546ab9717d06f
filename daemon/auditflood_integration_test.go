package daemon_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestReadDeniedFloodKeepsCommitDecisions: a sandbox that opens a
// deny_read mask in a loop must not crowd out of its (capped) audit log
// what the session then commits to the host. Each refused open used to be
// written as its own event, never merged: a few thousand opens fill the
// cap, and the commit decisions at exit were only counted as dropped.
func TestReadDeniedFloodKeepsCommitDecisions(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	writeTree(t, host, map[string]string{".env": "SECRET\n", "a.txt": "one\n"})
	p := policy("sh", "-c", `echo changed > /w/a.txt; i=0; while [ $i -lt 3000 ]; do cat /w/.env 2>/dev/null && echo READ; i=$((i+1)); done; echo DONE $i`)
	p.Workspaces = []policies.Workspace{{HostPath: host, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitCommit}}
	p.Resources.AuditSize = policies.MinAuditSize
	r := runSession(t, p)
	if got := readTree(t, host); got["a.txt"] != "changed\n" {
		t.Fatalf("on_exit commit did not apply: %v", got)
	}
	evs, err := h.Daemon.Audit(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	denied, applied := 0, false
	for _, ev := range evs {
		switch {
		case ev.Layer == "fs" && ev.Action == "read_denied":
			denied++
		case ev.Layer == "fs" && ev.Action == "applied" && ev.Subject == "/w/a.txt":
			applied = true
		}
	}
	if !applied {
		t.Errorf("the commit of /w/a.txt is not in the audit log (%d read_denied events, %d events in all)", denied, len(evs))
	}
}
