package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestVolumeWorkspace: a directory under the admission policy's
// volume_paths is a workspace only when the in-process caller (the
// Kubernetes node agent) names it as a volume bound to the session's
// claim (api.CreateRequest.VolumeWorkspaces): the same directory named by
// an API caller is refused, and a revision of the running session's
// policy re-admits the volume it was given.
func TestVolumeWorkspace(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	hostDir, volDir := t.TempDir(), t.TempDir()
	vol := filepath.Join(volDir, "pv-1")
	if err := os.Mkdir(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(vol, 0o777); err != nil {
		t.Fatal(err)
	}
	a, diags := policies.DecodeAdmission("admission.hcl", []byte("admission {\n  host_paths = [\""+hostDir+"\"]\n  volume_paths = [\""+volDir+"\"]\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	if err := os.WriteFile(filepath.Join(vol, "SEED"), []byte("seed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := func(denyRead ...string) []policies.Workspace {
		return []policies.Workspace{{HostPath: vol, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true, DenyRead: denyRead, OnExit: policies.OnExitReview}}
	}
	p := policy("sleep", "600")
	p.Workspaces = ws()

	// An API caller naming the volume's directory: refused, nothing made.
	cl := api.NewClient(h.Socket)
	defer cl.Close()
	if s, err := cl.CreateSession(ctx, api.CreateRequest{Policy: p}); err == nil {
		_ = h.Daemon.Remove(context.Background(), s.ID, true)
		t.Fatal("an API caller's host_path under volume_paths was admitted")
	} else if !strings.Contains(err.Error(), "is not under an admitted host path") {
		t.Errorf("an API caller's host_path under volume_paths: %v", err)
	}

	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true, VolumeWorkspaces: []string{vol}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if out, _, code := execIn(t, s.ID, nil, "cat", "/workspace/SEED"); code != 0 || out != "seed\n" {
		t.Fatalf("the volume in the sandbox: %q (exit %d)", out, code)
	}

	// A revision keeps the volume: re-admitted as it was admitted.
	revised := policy("sleep", "600")
	revised.Workspaces = ws("SEED")
	v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatalf("a revision of a session on a volume: %v", err)
	}
	if v.Revision == nil || len(v.Revision.Masked) != 1 {
		t.Errorf("revision %+v, want SEED masked", v.Revision)
	}
	if out, _, code := execIn(t, s.ID, nil, "cat", "/workspace/SEED"); code == 0 {
		t.Errorf("the revised deny_read: the sandbox still reads SEED (%q)", out)
	}
}
