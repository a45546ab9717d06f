package api

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"
)

func TestAuditRequest(t *testing.T) {
	want := []AuditEvent{
		{Session: "s1", Layer: "dns", Action: "refused", Subject: "evil.test", Reason: "not allowed"},
		{Session: "s1", Layer: "credentials", Action: "rejected", Subject: "jobs", Fields: map[string]any{"action": "jobs.cancel"}},
	}
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/sessions/s1/audit" {
			writeError(w, ClassNotFound, "no route "+r.Method+" "+r.URL.Path)
			return
		}
		writeJSON(w, http.StatusOK, want)
	}))
	got, err := c.Audit(context.Background(), "s1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Audit = %+v, want %+v", got, want)
	}
	if _, err := c.Audit(context.Background(), "other"); !IsNotFound(err) {
		t.Errorf("Audit of an unknown route: %v, want not found", err)
	}
	if _, err := c.Audit(context.Background(), ""); !IsInvalidArgument(err) {
		t.Errorf("Audit with no id: %v, want invalid argument", err)
	}
}

func TestFSRequests(t *testing.T) {
	cs := ChangeSet{Workspaces: []WorkspaceChanges{{HostPath: "/h", Target: "/workspace", Changes: []Change{{Path: "a.txt", Kind: "added", Type: "file", Mode: 0o644, Size: 3}}}}}
	result := CommitResult{Committed: false, Applied: []string{}, Rejected: []Rejection{{Path: "/workspace/a.txt", Rule: "protect", Reason: "a.txt matches protect pattern \"**\""}}}
	var gotCommit CommitRequest
	discarded := false
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/sessions/s1/diff" && r.URL.Query().Get("format") == "unified":
			w.Header().Set("Content-Type", "text/x-diff")
			_, _ = w.Write([]byte("--- a/a.txt\n+++ b/a.txt\n"))
		case r.Method == http.MethodGet && r.URL.Path == "/v1/sessions/s1/diff":
			writeJSON(w, http.StatusOK, cs)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions/s1/commit":
			if err := json.NewDecoder(r.Body).Decode(&gotCommit); err != nil {
				writeError(w, ClassInvalidArgument, err.Error())
				return
			}
			writeJSON(w, http.StatusOK, result)
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions/s1/discard":
			discarded = true
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/v1/sessions/running/commit":
			writeError(w, ClassFailedPrecondition, "session is running")
		default:
			writeError(w, ClassNotFound, "no route "+r.Method+" "+r.URL.Path)
		}
	}))
	ctx := context.Background()
	got, err := c.Diff(ctx, "s1")
	if err != nil || !reflect.DeepEqual(*got, cs) {
		t.Errorf("Diff = %+v, %v; want %+v", got, err, cs)
	}
	u, err := c.UnifiedDiff(ctx, "s1")
	if err != nil || string(u) != "--- a/a.txt\n+++ b/a.txt\n" {
		t.Errorf("UnifiedDiff = %q, %v", u, err)
	}
	res, err := c.Commit(ctx, "s1", CommitRequest{Partial: true, Targets: []string{"/workspace"}})
	if err != nil || !reflect.DeepEqual(*res, result) {
		t.Errorf("Commit = %+v, %v; want %+v", res, err, result)
	}
	if !gotCommit.Partial || !reflect.DeepEqual(gotCommit.Targets, []string{"/workspace"}) {
		t.Errorf("commit request = %+v", gotCommit)
	}
	if err := c.Discard(ctx, "s1"); err != nil || !discarded {
		t.Errorf("Discard = %v (discarded %v)", err, discarded)
	}
	if _, err := c.Commit(ctx, "running", CommitRequest{}); !IsFailedPrecondition(err) {
		t.Errorf("Commit of a running session: %v, want failed precondition", err)
	}
	if _, err := c.Diff(ctx, "gone"); !IsNotFound(err) {
		t.Errorf("Diff of an unknown session: %v, want not found", err)
	}
	for name, fn := range map[string]func() error{
		"diff":    func() error { _, err := c.Diff(ctx, ""); return err },
		"unified": func() error { _, err := c.UnifiedDiff(ctx, ""); return err },
		"commit":  func() error { _, err := c.Commit(ctx, "", CommitRequest{}); return err },
		"discard": func() error { return c.Discard(ctx, "") },
	} {
		if err := fn(); !IsInvalidArgument(err) {
			t.Errorf("%s with no id: %v, want invalid argument", name, err)
		}
	}
}
