package daemon_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestKill9DuringReviewRemoval: airlockd killed while it removes the
// workspace state of changes just committed or discarded. The removal
// takes the state file first (fsscope's TestRemovalCutShortLoadsWholeOrNot
// cuts it after every unlink), and the outcome is saved before it starts
// (record.Dropping); the states such a kill leaves are made here on a
// real daemon's sessions:
//   - the outcome saved, the removal cut after its first unlinks: the
//     next daemon finishes it and reports the outcome;
//   - the outcome saved, the removal not begun: the same;
//   - a removal cut short with no outcome saved (a daemon from before
//     record.Dropping): the session has nothing to review, said plainly.
//
// Before, the next daemon loaded the state that had lost its quota image
// and every diff and commit answered 500 "disk.img: no such file or
// directory" for ever (the soak's one mismatch).
func TestKill9DuringReviewRemoval(t *testing.T) {
	d, root, _ := startFaultDaemon(t)
	type sess struct {
		id, host string
	}
	var ss []sess
	for range 3 {
		host := t.TempDir()
		p := policy("sh", "-c", "echo new > /w/b.txt")
		p.Workspaces = []policies.Workspace{{HostPath: host, Target: "/w", Mode: policies.ModeOverlay,
			DefaultDenyRead: true, OnExit: policies.OnExitReview}}
		b, _ := json.Marshal(api.CreateRequest{Policy: p, Start: true})
		var s api.Session
		d.do("POST", "/v1/sessions", bytes.NewReader(b), &s)
		ss = append(ss, sess{s.ID, host})
	}
	for _, s := range ss {
		d.do("GET", "/v1/sessions/"+s.id+"/wait", nil, nil)
		if got := d.inspect(s.id); !got.Review {
			t.Fatalf("session %s after its exit: review %v, want changes kept for review", s.id, got.Review)
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()

	setRecord := func(id string, edit func(map[string]any)) {
		t.Helper()
		p := filepath.Join(root, "sessions", id, "session.json")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		edit(rec)
		if b, err = json.Marshal(rec); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// What a removal cut after its first unlinks leaves: the state file
	// and the quota image gone, the rest still there.
	cut := func(id string) {
		t.Helper()
		fs := filepath.Join(root, "sessions", id, "fs")
		for _, name := range []string{"fsscope.json", "disk.img"} {
			if err := os.Remove(filepath.Join(fs, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// 0: committed (the file reached the host), the removal cut.
	if err := os.WriteFile(filepath.Join(ss[0].host, "b.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The change summary, as a commit or discard keeps it in the record
	// before it starts.
	summary := map[string]any{"added": 1}
	setRecord(ss[0].id, func(r map[string]any) { r["dropping"], r["changes"] = api.OutcomeCommitted, summary })
	cut(ss[0].id)
	// 1: discarded, the removal not begun.
	setRecord(ss[1].id, func(r map[string]any) { r["dropping"], r["changes"] = api.OutcomeDiscarded, summary })
	// 2: cut by a daemon that saved no outcome.
	cut(ss[2].id)

	d = startProcDaemon(t, root, "--stop-containerd")
	t.Cleanup(d.cleanup)
	for i, s := range ss {
		got := d.inspect(s.id)
		if got.Review {
			t.Errorf("session %d after the restart: still waits for review", i)
		}
		want := []string{api.OutcomeCommitted, api.OutcomeDiscarded, ""}[i]
		if outcome := recordedOutcome(t, root, s.id); outcome != want {
			t.Errorf("session %d after the restart: outcome %q, want %q", i, outcome, want)
		}
		if _, err := os.Stat(filepath.Join(root, "sessions", s.id, "fs")); err == nil {
			t.Errorf("session %d after the restart: its workspace state is still there", i)
		}
		code, body := rawDo(t, d, "POST", "/v1/sessions/"+s.id+"/commit", `{}`)
		if code != http.StatusNotFound || !strings.Contains(body, "no changes waiting for review") {
			t.Errorf("session %d: commit after the restart = %d %s, want 404: no changes waiting for review", i, code, body)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ss[1].host, "b.txt")); err == nil {
		t.Errorf("the discarded session's change reached the host: %q", b)
	}
	for _, s := range ss {
		d.do("DELETE", "/v1/sessions/"+s.id, nil, nil)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("airlockd exit after SIGTERM: %v", err)
	}
	wantNothingLeft(t, root)
}

// recordedOutcome is the outcome a session's record gives its changes.
func recordedOutcome(t *testing.T, root, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "sessions", id, "session.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Changes *api.ChangeSummary `json:"changes"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Changes == nil {
		return ""
	}
	return rec.Changes.Outcome
}

// rawDo is procDaemon.do for answers the test expects to be errors.
func rawDo(t *testing.T, d *procDaemon, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://airlock"+path, strings.NewReader(body))
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
