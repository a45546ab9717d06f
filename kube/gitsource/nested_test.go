package gitsource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
)

// TestPushReadsNoRepositoryTheSandboxMade: a workspace the sandbox wrote
// directly (mode "rw", or a commit its git_allow let through) may hold a
// repository of its own below the root. `git add` takes such a directory
// for a submodule and resolves its HEAD on the host, as root, following
// the symlinks in it: to another file of the node (whose content then
// goes into the pushed commit as the submodule's id), to a fifo (git
// blocks until the push's time bound) or to /dev/zero (git reads it until
// the node runs out of memory; not run here). The push refuses the
// workspace instead, before git reads anything of it.
func TestPushReadsNoRepositoryTheSandboxMade(t *testing.T) {
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "one\n"})

	// A file of the node the sandbox cannot read: another source's
	// fetched commit id stands for any secret git would take for one.
	secret := filepath.Join(t.TempDir(), "other-session-commit")
	const secretID = "0123456789abcdef0123456789abcdef01234567"
	if err := os.WriteFile(secret, []byte(secretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	plant := func(t *testing.T, ws string, ref func(path string) error) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ws, "README"), []byte("two\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		gd := filepath.Join(ws, "sub", ".git")
		for _, d := range []string{"objects", "refs/heads"} {
			if err := os.MkdirAll(filepath.Join(gd, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(gd, "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ref(filepath.Join(gd, "refs", "heads", "main")); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name string
		ref  func(path string) error
	}{
		{"a symlink to a file of the node", func(p string) error { return os.Symlink(secret, p) }},
		{"a fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "src")
			f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1})
			if err != nil {
				t.Fatal(err)
			}
			plant(t, f.Workspace, tc.ref)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			began := time.Now()
			branch := "airlock/" + strings.ReplaceAll(tc.name, " ", "-")
			commit, err := Push(ctx, dir, url, branch, "m", who, nil)
			if took := time.Since(began); took > 10*time.Second || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("push took %s (%v): git blocked on what the sandbox planted", took, err)
			}
			if err == nil {
				tree := gittest.Git(t, dir, "--git-dir", filepath.Join(dir, "base.git"), "ls-tree", "-r", commit)
				if strings.Contains(tree, secretID) {
					t.Fatalf("the pushed commit carries a file of the node:\n%s", tree)
				}
				t.Fatalf("a workspace holding a repository of the sandbox's was pushed:\n%s", tree)
			}
			if !strings.Contains(err.Error(), "sub/.git") {
				t.Fatalf("push refused with %v, want an error naming sub/.git", err)
			}
			if got := srv.Rev("repo", branch); got != "" {
				t.Fatalf("branch %s pushed at %s", branch, got)
			}
		})
	}
}
