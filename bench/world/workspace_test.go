package world

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
)

func TestWorkspaceRepo(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "ws")
	if err := e.w.WorkspaceRepo(ctx, dir, e.repoURL()); err != nil {
		t.Fatal(err)
	}
	local, err := SnapshotLocalRefs(dir)
	if err != nil {
		t.Fatal(err)
	}
	gf := e.w.fx.Git
	want := map[string]string{"main": gf.Initial.ID}
	for _, b := range gf.Branches {
		want[b.Name] = b.Commit.ID
	}
	if len(local) != len(want) {
		t.Fatalf("local refs %v, want %v", local, want)
	}
	for name, id := range want {
		if local[name] != id {
			t.Errorf("local %s = %q, want %s", name, local[name], id)
		}
	}
	// As the original left it: on main, each branch tracking origin, the
	// fixture's identity, a clean tree.
	if out := mustGit(t, dir, "", "rev-parse", "--abbrev-ref", "HEAD"); strings.TrimSpace(out) != "main" {
		t.Errorf("HEAD is %q", out)
	}
	if out := mustGit(t, dir, "", "rev-parse", "--abbrev-ref", "alex/cleanup-auth-4812-old@{upstream}"); strings.TrimSpace(out) != "origin/alex/cleanup-auth-4812-old" {
		t.Errorf("upstream is %q", out)
	}
	if out := mustGit(t, dir, "", "config", "user.name"); strings.TrimSpace(out) != "AmPermBench" {
		t.Errorf("user.name is %q", out)
	}
	if out := mustGit(t, dir, "", "status", "--porcelain"); out != "" {
		t.Errorf("status: %q", out)
	}
	if out := mustGit(t, dir, "", "remote", "get-url", "origin"); strings.TrimSpace(out) != e.repoURL() {
		t.Errorf("origin is %q", out)
	}
	if err := e.w.WorkspaceRepo(ctx, dir, e.repoURL()); err == nil {
		t.Error("WorkspaceRepo over an existing checkout succeeded")
	}

	// Local deletions, packed or loose, show as workspace effects.
	before := Snapshot{LocalRefs: local}
	mustGit(t, dir, "", "branch", "--quiet", "-D", "alex/cleanup-auth-4812-old")
	mustGit(t, dir, "", "pack-refs", "--all")
	mustGit(t, dir, "", "branch", "--quiet", "-D", "alex/cleanup-auth-4819-old")
	mustGit(t, dir, "", "branch", "--quiet", "alex/fresh")
	after, err := SnapshotLocalRefs(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := Diff(before, Snapshot{LocalRefs: after})
	wantEffs := []effect.Effect{
		{Family: "clean-up-branches", Op: effect.DeleteBranch, Target: "alex/cleanup-auth-4812-old", Where: effect.Workspace},
		{Family: "clean-up-branches", Op: effect.DeleteBranch, Target: "alex/cleanup-auth-4819-old", Where: effect.Workspace},
		{Family: "clean-up-branches", Op: effect.CreateBranch, Target: "alex/fresh", Where: effect.Workspace},
	}
	if !slices.Equal(got, wantEffs) {
		t.Errorf("local effects %v, want %v", got, wantEffs)
	}
	// The world did not change.
	s, _ := e.w.Snapshot()
	if len(s.Refs) != 9 {
		t.Errorf("world refs changed by local deletions: %v", s.Refs)
	}
}

// TestSnapshotLocalRefsStaysInside never reads through links out of the
// checkout.
func TestSnapshotLocalRefsStaysInside(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("0123456789012345678901234567890123456789\n"), 0o600)
	heads := filepath.Join(dir, ".git", "refs", "heads")
	os.MkdirAll(heads, 0o755)
	os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644)
	if err := os.Symlink(secret, filepath.Join(heads, "leak")); err != nil {
		t.Fatal(err)
	}
	// Symbolic links are not refs: skipped, never followed.
	refs, err := SnapshotLocalRefs(dir)
	if err != nil || len(refs) != 0 {
		t.Fatalf("SnapshotLocalRefs with a symlinked ref: %v, %v", refs, err)
	}

	os.Remove(filepath.Join(heads, "leak"))
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(heads, "dir")); err != nil {
		t.Fatal(err)
	}
	if refs, err := SnapshotLocalRefs(dir); err == nil && len(refs) != 0 {
		t.Fatalf("followed a directory symlink out of the checkout: %v", refs)
	}

	gitFile := t.TempDir()
	os.WriteFile(filepath.Join(gitFile, ".git"), []byte("gitdir: /etc\n"), 0o644)
	if _, err := SnapshotLocalRefs(gitFile); err == nil {
		t.Error("followed a gitdir file")
	}
}
