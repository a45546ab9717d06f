package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestUpdateWorkspaceLive revises a running session's workspace: a
// deny_read pattern added while it runs makes the matched file unreadable
// in the sandbox at once (also through a hard link it makes, and across a
// daemon restart), each attempt audited, while the host still reads it; a
// revised protect rule decides the next commit (the newly protected path
// refused, the one no longer protected committed). Lifting a deny_read
// pattern is refused and changes nothing.
func TestUpdateWorkspaceLive(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	writeTree(t, host, map[string]string{
		"config/prod.yaml": "PRODSECRET\n",
		"deploy/app.yaml":  "replicas: 3\n",
		"docs/guide.md":    "guide\n",
	})
	ws := func(protect []string, denyRead ...string) []policies.Workspace {
		return []policies.Workspace{{HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true,
			Protect: protect, DenyRead: denyRead, OnExit: policies.OnExitReview}}
	}
	p := policy("sleep", "600")
	p.Workspaces = ws([]string{"docs/**"})
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	sh := func(script string) (string, int) {
		out, _, code := execIn(t, s.ID, nil, "sh", "-c", script)
		return out, code
	}
	if out, code := sh("cat /workspace/config/prod.yaml"); code != 0 || out != "PRODSECRET\n" {
		t.Fatalf("before the revision: %q (exit %d)", out, code)
	}

	revised := policy("sleep", "600")
	revised.Workspaces = ws([]string{"deploy/**"}, "config/prod.yaml")
	v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatal(err)
	}
	r := v.Revision
	if r == nil || !slices.Equal(r.Workspaces, []string{"/workspace"}) || len(r.Masked) != 1 ||
		r.Masked[0] != (api.MaskedPath{Path: "/workspace/config/prod.yaml", Rule: "config/prod.yaml"}) {
		t.Fatalf("revision %+v", r)
	}

	denied := func(when string) {
		t.Helper()
		if out, code := sh("cat /workspace/config/prod.yaml"); code == 0 || strings.Contains(out, "PRODSECRET") {
			t.Errorf("%s: the sandbox read the newly denied file: %q (exit %d)", when, out, code)
		}
		// A hard link needs a copy-up of the host's file: refused, or the
		// new name refused too.
		if out, _ := sh("ln /workspace/config/prod.yaml /workspace/copy-" + strings.ReplaceAll(when, " ", "-") + " 2>/dev/null; cat /workspace/copy-* 2>/dev/null"); strings.Contains(out, "PRODSECRET") {
			t.Errorf("%s: the sandbox read the denied file through a hard link", when)
		}
		if out, code := sh("cat /workspace/docs/guide.md"); code != 0 || out != "guide\n" {
			t.Errorf("%s: another file: %q (exit %d)", when, out, code)
		}
	}
	denied("after the revision")
	if b, err := os.ReadFile(filepath.Join(host, "config/prod.yaml")); err != nil || string(b) != "PRODSECRET\n" {
		t.Errorf("the host reads %q, %v", b, err)
	}

	// Lifting the pattern is refused; nothing changes.
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: p}); err == nil || !strings.Contains(err.Error(), policies.ReasonDenyReadLifted) {
		t.Errorf("lifting deny_read: %v", err)
	}
	if got, _ := h.Daemon.Inspect(ctx, s.ID); got.PolicyVersion != 2 {
		t.Errorf("after a refused revision: version %d, want 2", got.PolicyVersion)
	}

	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	denied("after a restart")

	// The sandbox edits a path the revision protects and one it no
	// longer protects; the commit after the session ends decides by the
	// revised rules.
	if out, code := sh("echo 'replicas: 0' > /workspace/deploy/app.yaml && echo 'guide 2' > /workspace/docs/guide.md"); code != 0 {
		t.Fatalf("edit: %q", out)
	}
	if _, err := h.Daemon.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	res, err := h.Daemon.Commit(ctx, s.ID, api.CommitRequest{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{}
	for _, x := range res.Rejected {
		rejected[x.Path] = x.Rule
	}
	if rejected["/workspace/deploy/app.yaml"] != "protect" || rejected["/workspace/docs/guide.md"] != "" {
		t.Errorf("commit: rejected %v; want deploy/app.yaml refused by the revised protect rule, docs/guide.md committed", rejected)
	}
	got := readTree(t, host)
	if got["deploy/app.yaml"] != "replicas: 3\n" || got["docs/guide.md"] != "guide 2\n" || got["config/prod.yaml"] != "PRODSECRET\n" {
		t.Errorf("host after the commit: %v", got)
	}

	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	reads := 0
	var revisedEv *api.AuditEvent
	for i, ev := range evs {
		switch {
		case ev.Layer == "fs" && ev.Action == "read_denied" && ev.Subject == "/workspace/config/prod.yaml":
			reads++
			if ev.PolicyVersion != 2 {
				t.Errorf("read_denied under version %d: %+v", ev.PolicyVersion, ev)
			}
		case ev.Layer == "policy" && ev.Action == "revised":
			revisedEv = &evs[i]
		}
	}
	if reads < 2 {
		t.Errorf("%d read_denied events for the newly denied file, want one per attempt (at least 2)", reads)
	}
	if revisedEv == nil || !strings.Contains(revisedEv.Subject, "workspace") || revisedEv.Fields["masked"] != float64(1) {
		t.Errorf("revision event %+v", revisedEv)
	}
}
