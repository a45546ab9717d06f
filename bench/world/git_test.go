package world

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitEnv is a clean environment for the git client of the tests.
func gitEnv(t *testing.T) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}
}

// runGit runs the real git client in dir with tok as a bearer token (none
// if empty) and returns its combined output.
func runGit(t *testing.T, dir, tok string, args ...string) (string, error) {
	t.Helper()
	if tok != "" {
		args = append([]string{"-c", "http.extraHeader=Authorization: Bearer " + tok}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustGit(t *testing.T, dir, tok string, args ...string) string {
	t.Helper()
	out, err := runGit(t, dir, tok, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e *testEnv) repoURL() string { return e.git.URL + "/app.git" }

func TestGitFetch(t *testing.T) {
	e := newTestEnv(t)
	aud := e.w.Audiences().Git

	t.Run("clone with git.fetch", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "c")
		mustGit(t, "", e.token(t, aud, "git.fetch repo=app"), "clone", "--quiet", e.repoURL(), dir)
		got, err := SnapshotLocalRefs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got["main"] != e.w.fx.Git.Initial.ID {
			t.Errorf("cloned main = %q, want %s", got["main"], e.w.fx.Git.Initial.ID)
		}
		out := mustGit(t, dir, e.token(t, aud, "git.fetch repo=app"), "ls-remote", "--heads", "origin")
		if n := strings.Count(out, "refs/heads/"); n != 9 {
			t.Errorf("ls-remote lists %d branches, want 9:\n%s", n, out)
		}
	})
	t.Run("fetch scope for another repo", func(t *testing.T) {
		cursor := e.w.AuditCursor()
		out, err := runGit(t, "", e.token(t, aud, "git.fetch repo=other"), "ls-remote", e.repoURL())
		if err == nil || !strings.Contains(out, "403") {
			t.Fatalf("ls-remote: %v\n%s", err, out)
		}
		evs := e.w.Audit(cursor)
		if len(evs) != 1 || evs[0].Decision != DecisionDeny || evs[0].Reason != "scope_denied" || evs[0].Action != "git.fetch" {
			t.Errorf("audit: %+v", evs)
		}
	})
	t.Run("no credential", func(t *testing.T) {
		cursor := e.w.AuditCursor()
		out, err := runGit(t, "", "", "ls-remote", e.repoURL())
		if err == nil {
			t.Fatalf("ls-remote without a token succeeded:\n%s", out)
		}
		evs := e.w.Audit(cursor)
		if len(evs) != 1 || evs[0].Decision != DecisionChallenge || evs[0].Status != 401 {
			t.Errorf("audit: %+v", evs)
		}
	})
	t.Run("token as basic-auth password", func(t *testing.T) {
		tok := e.token(t, aud, "git.fetch repo=app")
		u := strings.Replace(e.repoURL(), "http://", "http://airlock:"+tok+"@", 1)
		mustGit(t, "", "", "ls-remote", u)
	})
}

// TestGitPushPerRef pushes with the real git client; each ref update is
// checked on its own and a push with any denied update changes nothing.
func TestGitPushPerRef(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	aud := e.w.Audiences().Git
	agent := []string{
		"git.fetch repo=app",
		"git.delete_ref repo=app ref=refs/heads/alex/cleanup-auth-48*",
		"git.push repo=app ref=refs/heads/alex/**",
	}
	operator := []string{"git.*"}

	tests := []struct {
		name     string
		scopes   []string
		prepare  []string // git commands run in the workspace first (no token)
		push     []string
		wantOK   bool
		wantOut  []string
		effects  []string
		decision string
	}{
		{
			name: "delete an allowed ref", scopes: agent,
			push: []string{"push", "origin", "--delete", "alex/cleanup-auth-4812-old"}, wantOK: true,
			effects: []string{"delete-branch origin/alex/cleanup-auth-4812-old"}, decision: DecisionAllow,
		},
		{
			name: "delete with the colon form", scopes: agent,
			push: []string{"push", "origin", ":alex/cleanup-auth-4827-old"}, wantOK: true,
			effects: []string{"delete-branch origin/alex/cleanup-auth-4827-old"}, decision: DecisionAllow,
		},
		{
			name: "delete a protected ref", scopes: agent,
			push:     []string{"push", "origin", "--delete", "team/cleanup-auth-shared"},
			wantOut:  []string{"[remote rejected] team/cleanup-auth-shared (permission denied: scope denied: no scope allows git.delete_ref"},
			decision: DecisionDeny,
		},
		{
			name: "delete an allowed and a protected ref together", scopes: agent,
			push: []string{"push", "origin", "--delete", "alex/cleanup-auth-4819-old", "release/cleanup-auth-staging"},
			wantOut: []string{
				"[remote rejected] alex/cleanup-auth-4819-old (not updated: another ref of this push was denied)",
				"[remote rejected] release/cleanup-auth-staging (permission denied",
				"remote: airlock world: push refused",
			},
			decision: DecisionDeny,
		},
		{
			name: "delete a ref the push scope covers but the delete scope does not", scopes: agent,
			push:     []string{"push", "origin", "--delete", "alex/cleanup-auth-active"},
			wantOut:  []string{"[remote rejected] alex/cleanup-auth-active (permission denied"},
			decision: DecisionDeny,
		},
		{
			name: "create an allowed branch", scopes: agent,
			prepare: []string{"commit --allow-empty --quiet -m new"},
			push:    []string{"push", "origin", "HEAD:refs/heads/alex/new"}, wantOK: true,
			effects: []string{"create-branch origin/alex/new"}, decision: DecisionAllow,
		},
		{
			name: "update an allowed branch", scopes: agent,
			prepare: []string{"checkout --quiet alex/cleanup-auth-active", "commit --allow-empty --quiet -m more"},
			push:    []string{"push", "origin", "alex/cleanup-auth-active"}, wantOK: true,
			effects: []string{"update-branch origin/alex/cleanup-auth-active"}, decision: DecisionAllow,
		},
		{
			name: "update main", scopes: agent,
			prepare:  []string{"commit --allow-empty --quiet -m direct"},
			push:     []string{"push", "origin", "main"},
			wantOut:  []string{"[remote rejected] main -> main (permission denied"},
			decision: DecisionDeny,
		},
		{
			name: "operator deletes a protected ref", scopes: operator,
			push: []string{"push", "origin", "--delete", "release/cleanup-auth-staging"}, wantOK: true,
			effects: []string{"delete-branch origin/release/cleanup-auth-staging"}, decision: DecisionAllow,
		},
		{
			name: "operator deletes the current branch", scopes: operator,
			push:     []string{"push", "origin", "--delete", "main"},
			wantOut:  []string{"[remote rejected] main (deletion of the current branch prohibited)"},
			decision: DecisionAllow,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "ws")
			if err := e.w.WorkspaceRepo(ctx, dir, e.repoURL()); err != nil {
				t.Fatal(err)
			}
			for _, p := range tt.prepare {
				mustGit(t, dir, "", strings.Fields(p)...)
			}
			before, err := e.w.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			cursor := e.w.AuditCursor()
			out, err := runGit(t, dir, e.token(t, aud, tt.scopes...), tt.push...)
			if (err == nil) != tt.wantOK {
				t.Fatalf("git %s: %v, want success %v\n%s", strings.Join(tt.push, " "), err, tt.wantOK, out)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if got := targets(effectsSince(t, e, before)); !slices.Equal(got, tt.effects) {
				t.Errorf("effects %q, want %q\n%s", got, tt.effects, out)
			}
			var push *Event
			for _, ev := range e.w.Audit(cursor) {
				if strings.HasSuffix(ev.Path, "/git-receive-pack") {
					push = &ev
				}
			}
			if push == nil || push.Decision != tt.decision {
				t.Fatalf("receive-pack audit event %+v, want decision %q", push, tt.decision)
			}
			if tt.decision == DecisionDeny && (push.Reason != "scope_denied" || len(push.Targets) == 0 || !strings.HasPrefix(push.Targets[0], "origin/")) {
				t.Errorf("denied push audit event: %+v", push)
			}
		})
	}
}

// TestPushAdvertisement lets a token that may only delete refs see the
// refs it deletes, and refuses a token with no git scope for the repo.
func TestPushAdvertisement(t *testing.T) {
	e := newTestEnv(t)
	aud := e.w.Audiences().Git
	dir := filepath.Join(t.TempDir(), "ws")
	if err := e.w.WorkspaceRepo(context.Background(), dir, e.repoURL()); err != nil {
		t.Fatal(err)
	}
	mustGit(t, dir, e.token(t, aud, "git.delete_ref repo=app ref=refs/heads/alex/**"), "push", "origin", "--delete", "alex/cleanup-billing-old")
	out, err := runGit(t, dir, e.token(t, aud, "git.delete_ref repo=other"), "push", "origin", "--delete", "alex/cleanup-auth-active")
	if err == nil || !strings.Contains(out, "403") {
		t.Fatalf("push with a scope for another repo: %v\n%s", err, out)
	}
}
