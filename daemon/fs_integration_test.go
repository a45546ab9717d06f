package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

func writeTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWorkspaceReviewAndCommit(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	initial := map[string]string{
		"a.txt": "one\n", "c.txt": "delete me\n", ".env": "TOKEN=s3cret\n",
		"config/prod/app.yaml": "replicas: 3\n", "src/main.go": "package main\n",
	}
	writeTree(t, host, initial)

	p := policy("sh", "-c", `
cd /workspace
if cat .env 2>/dev/null; then echo "LEAK"; fi
echo two >> a.txt
echo new > b.txt
rm c.txt
echo "replicas: 0" > config/prod/app.yaml
mv src/main.go src/app.go
ln -s /etc/shadow s
ln -s src/app.go inside
echo done`)
	p.Workspaces = []policies.Workspace{{
		HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true,
		Protect: []string{"config/prod/**"}, OnExit: policies.OnExitReview,
	}}
	r := runSession(t, p)
	if r.exit != 0 || strings.Contains(r.stdout, "LEAK") || !strings.Contains(r.stdout, "done") {
		t.Fatalf("session: exit %d stdout %q stderr %q", r.exit, r.stdout, r.stderr)
	}
	if got := readTree(t, host); !equalTrees(got, initial) {
		t.Fatalf("the host workspace changed before commit: %v", got)
	}
	insp, err := h.Daemon.Inspect(ctx, r.id)
	if err != nil || !insp.Review {
		t.Fatalf("inspect: review=%v err=%v, want changes waiting for review", insp != nil && insp.Review, err)
	}
	if err := h.Daemon.Remove(ctx, r.id, false); err == nil {
		t.Fatal("remove without force dropped changes waiting for review")
	}

	cs, err := h.Daemon.Diff(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	verdicts := map[string]string{}
	for _, w := range cs.Workspaces {
		for _, c := range w.Changes {
			kinds[c.Path] = string(c.Kind)
		}
		for _, r := range w.Rejected {
			verdicts[strings.TrimPrefix(r.Path, "/workspace/")] = r.Rule
		}
	}
	for path, kind := range map[string]string{"a.txt": "modified", "b.txt": "added", "c.txt": "deleted",
		"config/prod/app.yaml": "modified", "src/app.go": "renamed", "s": "added", "inside": "added"} {
		if kinds[path] != kind {
			t.Errorf("diff: %s is %q, want %q (all: %v)", path, kinds[path], kind, kinds)
		}
	}
	// The diff says what a commit would refuse, and why.
	if want := map[string]string{"config/prod/app.yaml": "protect", "s": "symlink_escape"}; fmt.Sprint(verdicts) != fmt.Sprint(want) {
		t.Errorf("diff verdicts %v, want %v", verdicts, want)
	}

	// Its summary: symlinks add no bytes, a rename counts as modified.
	sum, err := h.Daemon.ChangeSummary(ctx, r.id)
	if want := (api.ChangeSummary{Added: 3, Modified: 3, Deleted: 1, Bytes: 8 + 4 + 12 + 13, Rejected: 2}); err != nil || sum == nil || *sum != want {
		t.Errorf("change summary: %+v (%v), want %+v", sum, err, want)
	}

	res, err := h.Daemon.Commit(ctx, r.id, api.CommitRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed || len(res.Rejected) == 0 {
		t.Fatalf("commit with a protected change: %+v, want nothing applied and a rejection", res)
	}
	if got := readTree(t, host); !equalTrees(got, initial) {
		t.Fatalf("a refused commit changed the host: %v", got)
	}
	res, err = h.Daemon.Commit(ctx, r.id, api.CommitRequest{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || len(res.Rejected) != 2 {
		t.Fatalf("partial commit: %+v", res)
	}
	if _, err := os.Lstat(filepath.Join(host, "s")); err == nil {
		t.Error("a symlink to /etc/shadow was committed")
	}
	if target, err := os.Readlink(filepath.Join(host, "inside")); err != nil || target != "src/app.go" {
		t.Errorf("inside -> %q, %v; want src/app.go", target, err)
	}
	want := map[string]string{
		"a.txt": "one\ntwo\n", "b.txt": "new\n", ".env": "TOKEN=s3cret\n",
		"config/prod/app.yaml": "replicas: 3\n", "src/app.go": "package main\n", "inside": "package main\n",
	}
	if got := readTree(t, host); !equalTrees(got, want) {
		t.Errorf("host after partial commit:\n got %v\nwant %v", got, want)
	}
	evs, err := h.Daemon.Audit(ctx, r.id)
	if err != nil {
		t.Fatal(err)
	}
	var rejected bool
	for _, ev := range evs {
		if ev.Layer == "fs" && ev.Action == "rejected" && strings.HasSuffix(ev.Subject, "config/prod/app.yaml") && ev.Fields["rule"] == "protect" {
			rejected = true
		}
	}
	if !rejected {
		t.Errorf("no audit event for the rejected change: %+v", evs)
	}
}

func TestWorkspaceDiscardAndOnExitCommit(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	writeTree(t, host, map[string]string{"a.txt": "one\n"})
	ws := policies.Workspace{HostPath: host, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitReview}

	p := policy("sh", "-c", "echo changed > /w/a.txt")
	p.Workspaces = []policies.Workspace{ws}
	r := runSession(t, p)
	if err := h.Daemon.Discard(caller.With(ctx, "carol (uid 1000)"), r.id); err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, host); got["a.txt"] != "one\n" {
		t.Errorf("discard changed the host: %v", got)
	}
	// The audit says who discarded what.
	if evs, err := h.Daemon.Audit(ctx, r.id); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(evs, func(ev api.AuditEvent) bool { return ev.Layer == "fs" && ev.Action == "discarded" }); i < 0 ||
		evs[i].Fields["by"] != "carol (uid 1000)" || fmt.Sprint(evs[i].Fields["modified"]) != "1" {
		t.Errorf("no audit event of carol's discard of one modified file: %+v", evs)
	}
	if _, err := h.Daemon.Diff(ctx, r.id); err == nil {
		t.Error("diff after discard still finds changes to review")
	}
	// The changes discarded stay summarised, though no one asked for a
	// summary before.
	if sum, err := h.Daemon.ChangeSummary(ctx, r.id); err != nil || sum == nil || *sum != (api.ChangeSummary{Modified: 1, Bytes: 8, Outcome: api.OutcomeDiscarded}) {
		t.Errorf("change summary after discard: %+v (%v), want one modified file of 8 bytes, discarded", sum, err)
	}

	ws.OnExit = policies.OnExitCommit
	p.Workspaces = []policies.Workspace{ws}
	r = runSession(t, p)
	if got := readTree(t, host); got["a.txt"] != "changed\n" {
		t.Errorf("on_exit = commit did not apply the change: %v", got)
	}
	if insp, err := h.Daemon.Inspect(ctx, r.id); err != nil || insp.Review {
		t.Errorf("after on_exit commit: review=%v err=%v", insp.Review, err)
	}
	if evs, err := h.Daemon.Audit(ctx, r.id); err != nil {
		t.Fatal(err)
	} else if i := slices.IndexFunc(evs, func(ev api.AuditEvent) bool { return ev.Layer == "fs" && ev.Action == "applied" }); i < 0 || evs[i].Fields["by"] != "commit policy" {
		t.Errorf("no audit event of the change applied by the commit policy: %+v", evs)
	}

	// A read-only workspace cannot be written.
	ro := policies.Workspace{HostPath: host, Target: "/w", Mode: policies.ModeRO, DefaultDenyRead: true}
	p = policy("sh", "-c", "echo x > /w/a.txt && echo WROTE")
	p.Workspaces = []policies.Workspace{ro}
	r = runSession(t, p)
	if strings.Contains(r.stdout, "WROTE") || readTree(t, host)["a.txt"] != "changed\n" {
		t.Errorf("read-only workspace was written: %q", r.stdout)
	}
	_ = context.Background()
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
