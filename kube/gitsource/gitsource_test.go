package gitsource

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
)

var who = Identity{Name: "airlock node agent", Email: "node-agent@airlock.invalid"}

func TestFetchBranchTagAndCommit(t *testing.T) {
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "one\n", "src/a.go": "package a\n"})
	first := srv.Rev("repo", "main")
	second := srv.Commit("repo", "main", map[string]string{"README": "two\n"}, "second")
	srv.Tag("repo", "main", "v1")
	srv.Commit("repo", "feature", map[string]string{"FEATURE": "x\n"}, "feature")

	for _, tc := range []struct {
		name, ref, commit, branch, readme string
		depth                             int
	}{
		{name: "head", ref: "", commit: second, branch: "", readme: "two\n", depth: 1},
		{name: "branch", ref: "main", commit: second, branch: "main", readme: "two\n", depth: 1},
		{name: "full history", ref: "refs/heads/main", commit: second, branch: "main", readme: "two\n"},
		{name: "tag", ref: "v1", commit: second, readme: "two\n", depth: 1},
		{name: "commit", ref: first, commit: first, readme: "one\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "src")
			f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: tc.ref, Depth: tc.depth})
			if err != nil {
				t.Fatal(err)
			}
			if f.Commit != tc.commit || f.Branch != tc.branch || f.Workspace != Workspace(dir) {
				t.Fatalf("fetched %+v, want commit %s branch %q", f, tc.commit, tc.branch)
			}
			if b, _ := os.ReadFile(filepath.Join(f.Workspace, "README")); string(b) != tc.readme {
				t.Fatalf("README %q, want %q", b, tc.readme)
			}
			if got := gittest.Git(t, f.Workspace, "rev-parse", "HEAD"); got != tc.commit {
				t.Fatalf("workspace HEAD %s, want %s", got, tc.commit)
			}
			if got := gittest.Git(t, f.Workspace, "remote", "get-url", "origin"); got != url {
				t.Fatalf("origin %q, want %q", got, url)
			}
			if got := gittest.Git(t, f.Workspace, "status", "--porcelain"); got != "" {
				t.Fatalf("workspace not clean: %q", got)
			}
			branch := gittest.Git(t, f.Workspace, "rev-parse", "--abbrev-ref", "HEAD")
			if want := cmpOr(tc.branch, "HEAD"); branch != want {
				t.Fatalf("checked out %q, want %q", branch, want)
			}
			if tc.depth == 1 {
				if n := gittest.Git(t, f.Workspace, "rev-list", "--count", "HEAD"); n != "1" {
					t.Fatalf("depth 1 fetched %s commits", n)
				}
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func TestFetchFailsCleanly(t *testing.T) {
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "x\n"})
	srv.Create("other", map[string]string{"SECRET": "other repository\n"})
	srv.Redirect("/moved.git", srv.URL+"/other.git")
	for _, tc := range []struct {
		name string
		src  Source
		want string
	}{
		{"missing branch", Source{URL: url, Ref: "nope"}, "couldn't find remote ref"},
		{"missing repository", Source{URL: srv.URL + "/none.git"}, "not found"},
		{"option as ref", Source{URL: url, Ref: "--upload-pack=touch /tmp/x"}, "write a branch or tag name"},
		{"refspec as ref", Source{URL: url, Ref: "main:refs/heads/x"}, "write a branch or tag name"},
		// A redirect would leave the repository the admission policy
		// named for one it did not.
		{"redirect", Source{URL: srv.URL + "/moved.git"}, "returned error: 302"},
		{"file transport", Source{URL: "file://" + t.TempDir()}, "transport 'file' not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "src")
			_, err := Fetch(context.Background(), dir, tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Fatalf("%s left behind after %v", dir, err)
			}
		})
	}
}

func TestFetchBounded(t *testing.T) {
	srv := gittest.NewServer(t)
	// Random: git's pack holds it at full size.
	big := make([]byte, 4<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(big)
	url := srv.Create("big", map[string]string{"blob": string(big)})
	dir := filepath.Join(t.TempDir(), "src")
	_, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1, MaxBytes: 1 << 20})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("fetch of a 4 MiB repository bounded at 1 MiB: %v, want ErrTooLarge", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("%s left behind", dir)
	}
	if _, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1, MaxBytes: 64 << 20}); err != nil {
		t.Fatalf("the same within its bound: %v", err)
	}
}

// TestPushTakesFilesNotTheSandboxRepository: the workspace's own
// repository is the sandbox's to write. A push that ran git in it would
// run what its configuration names (core.fsmonitor, hooks) as root on the
// node; Push reads its files alone, through the agent's own repository.
func TestPushTakesFilesNotTheSandboxRepository(t *testing.T) {
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "one\n", "gone.txt": "x\n", ".gitignore": "*.log\n"})
	base := srv.Rev("repo", "main")
	dir := filepath.Join(t.TempDir(), "src")
	f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	ws := f.Workspace
	if _, err := Push(context.Background(), dir, url, "airlock/none", "m", who, nil); !errors.Is(err, ErrNothingToPush) {
		t.Fatalf("push of an unchanged workspace: %v, want ErrNothingToPush", err)
	}

	// What a session wrote: changes, and a planted repository.
	marker := filepath.Join(t.TempDir(), "ran-on-host")
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(ws, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("README", "two\n", 0o644)
	write("new/file.go", "package new\n", 0o644)
	write("debug.log", "ignored\n", 0o644)
	if err := os.Remove(filepath.Join(ws, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	hook := "#!/bin/sh\ntouch " + marker + "\n"
	for _, h := range []string{"pre-commit", "post-commit", "pre-push", "reference-transaction", "post-index-change"} {
		write(".git/hooks/"+h, hook, 0o755)
	}
	write("fsmonitor.sh", hook, 0o755)
	f2, err := os.OpenFile(filepath.Join(ws, ".git", "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f2.WriteString("[core]\n\tfsmonitor = " + filepath.Join(ws, "fsmonitor.sh") + "\n\thooksPath = .git/hooks\n")
	f2.Close()

	commit, err := Push(context.Background(), dir, url, "airlock/s1", "airlock: session ns/s1", who, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a program the sandbox's repository named ran on the host")
	}
	if got := srv.Rev("repo", "airlock/s1"); got != commit {
		t.Fatalf("branch airlock/s1 at %q, want %s", got, commit)
	}
	if got := srv.Rev("repo", "main"); got != base {
		t.Fatalf("main moved to %s", got)
	}
	if parent := srv.Rev("repo", commit+"^"); parent != base {
		t.Fatalf("pushed commit's parent %s, want the fetched %s", parent, base)
	}
	files := srv.Files("repo", "airlock/s1")
	want := []string{".gitignore", "README", "fsmonitor.sh", "link", "new/file.go"}
	if !slices.Equal(files, want) {
		t.Fatalf("pushed files %q, want %q", files, want)
	}
	if got := srv.Show("repo", "airlock/s1", "README"); got != "two" {
		t.Fatalf("pushed README %q", got)
	}
	if got := srv.Show("repo", "airlock/s1", "link"); got != "/etc/shadow" {
		t.Fatalf("the symlink was pushed as %q, not as a link", got)
	}
	msg := gittest.Git(t, dir, "--git-dir", filepath.Join(dir, "base.git"), "log", "-1", "--format=%an <%ae>|%s", commit)
	if msg != "airlock node agent <node-agent@airlock.invalid>|airlock: session ns/s1" {
		t.Fatalf("commit %q", msg)
	}

	// A branch that moved meanwhile is not overwritten.
	srv.Commit("repo", "airlock/s2", map[string]string{"OTHER": "x\n"}, "someone else's")
	if _, err := Push(context.Background(), dir, url, "airlock/s2", "m", who, nil); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("push over another branch's history: %v, want it rejected", err)
	}
}

// TestPrivateRepository: a repository that takes basic authentication is
// fetched from and pushed to with the credentials given, which are kept
// out of the workspace's repository; without them git is refused (and
// does not prompt).
func TestPrivateRepository(t *testing.T) {
	srv := gittest.NewServer(t)
	url := srv.Create("private", map[string]string{"README": "private\n"})
	srv.RequireAuth("x-access-token", "s3cret-token")
	dir := filepath.Join(t.TempDir(), "src")
	if _, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1}); err == nil || !strings.Contains(err.Error(), "could not read Username") {
		t.Fatalf("fetch without credentials: %v, want git's refusal", err)
	}
	wrong := &BasicAuth{Username: "x-access-token", Token: "wrong"}
	if _, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1, Auth: wrong}); err == nil {
		t.Fatal("fetch with a wrong token succeeded")
	}
	auth := &BasicAuth{Username: "x-access-token", Token: "s3cret-token"}
	f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1, Auth: auth})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Workspace, "README"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(context.Background(), dir, url, "airlock/p", "m", who, nil); err == nil {
		t.Fatal("push without credentials succeeded")
	}
	commit, err := Push(context.Background(), dir, url, "airlock/p", "m", who, auth)
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Rev("private", "airlock/p"); got != commit {
		t.Fatalf("airlock/p at %q, want %s", got, commit)
	}
	// The token is nowhere the sandbox can read.
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), "s3cret-token") || strings.Contains(string(b), "eC1hY2Nlc3MtdG9rZW46czNjcmV0LXRva2Vu") {
				t.Errorf("%s holds the token", p)
			}
		}
		return nil
	})
}
