package fsscope

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// gitFixture is a repository as an operator's checkout looks: a clone of
// a local origin, with a submodule, refs packed, and an untracked file.
type gitFixture struct {
	host, origin, subsrc string
}

// newGitFixture builds the repositories once; copy() gives each case its
// own checkout of them.
func newGitFixture(t *testing.T) *gitFixture {
	t.Helper()
	root := tempDir(t)
	f := &gitFixture{
		host:   filepath.Join(root, "host"),
		origin: filepath.Join(root, "origin.git"),
		subsrc: filepath.Join(root, "subsrc"),
	}
	writeFiles(t, f.subsrc, map[string]string{"lib.txt": "lib\n"})
	git(t, f.subsrc, "init", "-q", "-b", "main")
	git(t, f.subsrc, "add", ".")
	git(t, f.subsrc, "commit", "-q", "-m", "lib")
	writeFiles(t, f.host, map[string]string{"tracked.txt": "t\n", "src/a.go": "package a\n", ".gitignore": "*.log\n"})
	git(t, f.host, "init", "-q", "-b", "main")
	git(t, f.host, "add", ".")
	git(t, f.host, "commit", "-q", "-m", "initial")
	git(t, f.host, "-c", "protocol.file.allow=always", "submodule", "add", "-q", f.subsrc, "sub")
	git(t, f.host, "commit", "-q", "-m", "submodule")
	git(t, f.host, "branch", "feature")
	git(t, f.host, "tag", "v1")
	git(t, root, "init", "-q", "--bare", f.origin)
	git(t, f.host, "remote", "add", "origin", f.origin)
	git(t, f.host, "push", "-q", "origin", "main", "feature")
	git(t, f.host, "fetch", "-q", "origin")
	git(t, f.host, "branch", "-q", "--set-upstream-to=origin/main", "main")
	git(t, f.host, "pack-refs", "--all")
	writeFiles(t, f.host, map[string]string{"untracked.txt": "u\n"})
	chownTree(t, root, hostOwner)
	return f
}

// copy returns a fresh copy of the fixture's checkout (its origin and
// submodule source are shared: the host commands only read them).
func (f *gitFixture) copy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(tempDir(t), "host")
	if out, err := exec.Command("cp", "-a", f.host, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	return dst
}

// operatorGit runs git in dir the way the workspace's owner would on the
// host: as that user, with git's own defaults (no hardened environment:
// fsmonitor, hooks and pagers are live). Failures are returned, not fatal:
// a trick may leave git unable to work, which is not the point here.
func operatorGit(t *testing.T, dir, home string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=op", "GIT_AUTHOR_EMAIL=op@host", "GIT_COMMITTER_NAME=op", "GIT_COMMITTER_EMAIL=op@host"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: hostOwner.UID, Gid: hostOwner.GID, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// commitSettings are the workspace settings every git case runs under.
var commitSettings = []struct {
	name  string
	apply func(*policies.Workspace)
}{
	{"default", func(*policies.Workspace) {}},
	{"preserve_untracked", func(w *policies.Workspace) { w.PreserveUntracked = true }},
	{"branches", func(w *policies.Workspace) {
		// The benchmark's clean-up-branches policy.
		w.Protect = []string{"**"}
		w.ProtectRefs = []string{"refs/heads/main", "refs/tags/*"}
		w.PreserveUntracked = true
	}},
}

// gitTrick is something a sandbox can plant in a checkout to make the
// operator's git run its code, or move refs it may not move.
type gitTrick struct {
	name string
	// before prepares the host checkout (as its owner's own setup would).
	before string
	// script runs in the sandbox's view of the workspace, with $CANARY,
	// $ORIGIN and $HOSTPATH replaced by their paths. Anything it makes run on the host must
	// touch a file under $CANARY.
	script string
	// rejected are workspace paths the commit must refuse.
	rejected []string
	// allow is the workspace's git_allow.
	allow []string
	// refsOnly: the trick moves refs through the operator's git, which
	// only protect_refs forbids; it is checked under settings with it.
	refsOnly bool
}

var gitTricks = []gitTrick{
	{
		name: "commondir redirect",
		script: `mkdir .git/c; cp -r .git/objects .git/refs .git/packed-refs .git/c/
printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch $CANARY/commondir-fsmonitor; false"\n' > .git/c/config
mkdir .git/c/hooks; printf '#!/bin/sh\ntouch $CANARY/commondir-hook\n' > .git/c/hooks/pre-commit; chmod +x .git/c/hooks/pre-commit
git rev-parse origin/main~1 > .git/c/refs/heads/main
echo c > .git/commondir`,
		rejected: []string{".git/commondir", ".git/c/config", ".git/c/hooks/pre-commit", ".git/c/refs/heads/main"},
	},
	{
		name: "config as a symlink",
		script: `printf '[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch $CANARY/symlink-config; false"\n' > evil.conf
ln -sf ../evil.conf .git/config`,
		rejected: []string{".git/config"},
	},
	{
		name: "gpg.ssh.defaultKeyCommand",
		script: `git config -f .git/config commit.gpgsign true
git config -f .git/config gpg.format ssh
git config -f .git/config gpg.ssh.defaultKeyCommand "sh -c 'touch $CANARY/gpg-ssh'"`,
		rejected: []string{".git/config"},
	},
	{
		name:     "absolute core.hooksPath inside the workspace",
		before:   `git config -f .git/config core.hooksPath "$HOSTPATH/.githooks"; mkdir .githooks`,
		script:   `printf '#!/bin/sh\ntouch $CANARY/abs-hookspath\n' > .githooks/pre-commit; chmod +x .githooks/pre-commit`,
		rejected: []string{".githooks/pre-commit"},
	},
	{
		name: ".git replaced by a symlink",
		script: `cp -a .git evilgit; printf '#!/bin/sh\ntouch $CANARY/git-symlink\n' > evilgit/hooks/pre-commit; chmod +x evilgit/hooks/pre-commit
git config -f evilgit/config core.fsmonitor "touch $CANARY/git-symlink-fsmonitor; false"
rm -rf .git; ln -s evilgit .git`,
		rejected: []string{".git"},
	},
	{
		name: ".git replaced by a gitfile",
		script: `cp -a .git evilgit; printf '#!/bin/sh\ntouch $CANARY/gitfile\n' > evilgit/hooks/pre-commit; chmod +x evilgit/hooks/pre-commit
rm -rf .git; echo "gitdir: evilgit" > .git`,
		rejected: []string{".git"},
	},
	{
		name: "new nested repository",
		script: `mkdir nested; git -C nested init -q
git config -f nested/.git/config core.fsmonitor "touch $CANARY/nested; false"
printf '#!/bin/sh\ntouch $CANARY/nested-hook\n' > nested/.git/hooks/pre-commit; chmod +x nested/.git/hooks/pre-commit`,
		rejected: []string{"nested/.git"},
	},
	{
		name: "submodule's git directory",
		script: `git config -f .git/modules/sub/config core.fsmonitor "touch $CANARY/submodule-fsmonitor; false"
printf '#!/bin/sh\ntouch $CANARY/submodule-hook\n' > .git/modules/sub/hooks/post-checkout; chmod +x .git/modules/sub/hooks/post-checkout`,
		rejected: []string{".git/modules/sub/config", ".git/modules/sub/hooks/post-checkout"},
	},
	{
		name: "new submodule git directory",
		script: `cp -a .git/modules/sub .git/modules/evil
printf '#!/bin/sh\ntouch $CANARY/new-module\n' > .git/modules/evil/hooks/post-checkout; chmod +x .git/modules/evil/hooks/post-checkout`,
		rejected: []string{".git/modules/evil"},
	},
	{
		name: "new worktree",
		script: `mkdir -p .git/worktrees/evil; echo ../.. > .git/worktrees/evil/commondir; echo /nonexistent/.git > .git/worktrees/evil/gitdir
echo "ref: refs/heads/main" > .git/worktrees/evil/HEAD
printf '[core]\n\tfsmonitor = "touch $CANARY/worktree; false"\n' > .git/worktrees/evil/config.worktree`,
		rejected: []string{".git/worktrees/evil"},
	},
	{
		name: "new bare repository",
		script: `git init -q --bare bare
printf '#!/bin/sh\ntouch $CANARY/bare-hook\n' > bare/hooks/reference-transaction; chmod +x bare/hooks/reference-transaction`,
		rejected: []string{"bare/HEAD", "bare/hooks"},
	},
	{
		name: "git directory by HEAD and commondir",
		script: `mkdir cd; echo "ref: refs/heads/main" > cd/HEAD; echo ../.git > cd/commondir
printf '[core]\n\tfsmonitor = "touch $CANARY/headcommondir; false"\n' > cd/config`,
		rejected: []string{"cd/HEAD", "cd/commondir", "cd/config"},
	},
	{
		name:     "included config inside the worktree",
		before:   `printf '[user]\n\tname = op\n' > shared.gitconfig; git config -f .git/config include.path ../shared.gitconfig`,
		script:   `printf '[core]\n\tfsmonitor = "touch $CANARY/include; false"\n' >> shared.gitconfig`,
		rejected: []string{"shared.gitconfig"},
	},
	{
		name:     "include.path added",
		script:   `printf '[core]\n\tfsmonitor = "touch $CANARY/include-added; false"\n' > inc.conf; git config -f .git/config include.path ../inc.conf`,
		rejected: []string{".git/config"},
	},
	{
		name:     "alternates",
		script:   `echo /tmp > .git/objects/info/alternates`,
		rejected: []string{".git/objects/info/alternates"},
	},
	{
		name:     "info/attributes",
		script:   `mkdir -p .git/info; echo '* filter=x' > .git/info/attributes`,
		rejected: []string{".git/info/attributes"},
	},
	{
		name:     "HEAD as a symlink",
		script:   `ln -sf refs/heads/feature .git/HEAD`,
		rejected: []string{".git/HEAD"},
	},
	{
		name:     "hooks directory as a symlink",
		script:   `mkdir myhooks; printf '#!/bin/sh\ntouch $CANARY/hooks-symlink\n' > myhooks/pre-commit; chmod +x myhooks/pre-commit; rm -rf .git/hooks; ln -s ../myhooks .git/hooks`,
		rejected: []string{".git/hooks"},
	},
	{
		name:     "config.worktree",
		script:   `git config -f .git/config extensions.worktreeConfig true; printf '[core]\n\tfsmonitor = "touch $CANARY/config-worktree; false"\n' > .git/config.worktree`,
		rejected: []string{".git/config.worktree"},
	},
	{
		name:     "hook made executable",
		before:   `printf '#!/bin/sh\ntouch $CANARY/chmod-hook\n' > .git/hooks/post-commit; chmod -x .git/hooks/post-commit`,
		script:   `chmod +x .git/hooks/post-commit`,
		rejected: []string{".git/hooks/post-commit"},
	},
	{
		name:     "sample hook renamed",
		script:   `printf '#!/bin/sh\ntouch $CANARY/sample\n' > .git/hooks/pre-commit.sample; mv .git/hooks/pre-commit.sample .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit`,
		rejected: []string{".git/hooks/pre-commit"},
	},
	{
		name: "rebase in progress with an exec line",
		script: `mkdir .git/rebase-merge; echo "exec touch $CANARY/rebase" > .git/rebase-merge/git-rebase-todo
git rev-parse HEAD > .git/rebase-merge/orig-head; git rev-parse HEAD > .git/rebase-merge/onto; echo refs/heads/main > .git/rebase-merge/head-name; touch .git/rebase-merge/interactive`,
		rejected: []string{".git/rebase-merge"},
	},
	{
		name:     "url.insteadOf to a local path",
		script:   `git config -f .git/config url./tmp/evil.git.insteadOf "$ORIGIN"`,
		rejected: []string{".git/config"},
	},
	{
		name:     "fsmonitor script in the worktree",
		before:   `printf '#!/bin/sh\nexit 1\n' > fsmon.sh; chmod +x fsmon.sh; git config -f .git/config core.fsmonitor ./fsmon.sh`,
		script:   `printf '#!/bin/sh\ntouch $CANARY/fsmon-script\nexit 1\n' > fsmon.sh`,
		rejected: []string{"fsmon.sh"},
	},
	{
		name: "script an installed hook runs",
		before: `mkdir -p scripts; printf '#!/bin/sh\nexit 0\n' > scripts/check.sh; chmod +x scripts/check.sh
printf '#!/bin/sh\nexec ./scripts/check.sh\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit`,
		script:   `printf '#!/bin/sh\ntouch $CANARY/hook-script\n' > scripts/check.sh`,
		rejected: []string{"scripts/check.sh"},
	},
	{
		name: "hook framework config",
		before: `printf 'repos: []\n' > .pre-commit-config.yaml
printf '#!/usr/bin/env bash\nexec pre-commit hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit`,
		script:   `printf 'repos:\n- repo: local\n  hooks:\n  - {id: x, name: x, entry: touch $CANARY/framework, language: system}\n' > .pre-commit-config.yaml`,
		rejected: []string{".pre-commit-config.yaml"},
	},
	{
		name: "husky",
		before: `git config -f .git/config core.hooksPath .husky/_; mkdir -p .husky/_
printf '#!/bin/sh\n. "$(dirname "$0")/../pre-commit"\n' > .husky/_/pre-commit; chmod +x .husky/_/pre-commit; printf 'true\n' > .husky/pre-commit`,
		script:   `printf 'touch $CANARY/husky\n' > .husky/pre-commit`,
		rejected: []string{".husky/pre-commit"},
	},
	{
		name:  "hooks of a new repository git_allow lets through",
		allow: []string{"nested/.git"},
		script: `mkdir nested; git -C nested init -q
git config -f nested/.git/config core.fsmonitor "touch $CANARY/allowed-nested; false"
printf '#!/bin/sh\ntouch $CANARY/allowed-nested-hook\n' > nested/.git/hooks/pre-commit; chmod +x nested/.git/hooks/pre-commit`,
		rejected: []string{"nested/.git/hooks/pre-commit", "nested/.git/config"},
	},
	{
		// git takes src for a git directory (is_git_directory follows
		// symlinks): a git command run in src uses its config.
		name: "git directory by symlinked objects and refs",
		script: `cd src; echo "ref: refs/heads/main" > HEAD; ln -s ../.git/objects objects; ln -s ../.git/refs refs
printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch $CANARY/symlinked-gitdir; false"\n' > config`,
		rejected: []string{"src/HEAD", "src/objects", "src/refs", "src/config"},
	},
	{
		// The operator's global "st" alias, redefined in the repository:
		// an alias without "!" still runs commands through -c.
		name:     "alias with -c",
		script:   `git config -f .git/config alias.st "-c core.fsmonitor='touch $CANARY/alias-c; false' status"`,
		rejected: []string{".git/config"},
	},
	{
		name:     "alias to submodule foreach",
		script:   `git config -f .git/config alias.st "submodule foreach touch $CANARY/alias-foreach"`,
		rejected: []string{".git/config"},
	},
	{
		// The operator's fetch moves a tag to the sandbox's commit.
		name: "fetch refspec into a tag",
		script: `c=$(git -c user.name=a -c user.email=a@a commit-tree -p HEAD -m evil HEAD^{tree}); git update-ref refs/heads/evil $c
git config -f .git/config remote.origin.url .
git config -f .git/config --add remote.origin.fetch "+refs/heads/evil:refs/tags/v1"`,
		rejected: []string{".git/config"},
	},
	{
		// The operator's fetch deletes the tags origin does not have.
		name:     "fetch prunes tags",
		script:   `git config -f .git/config remote.origin.prune true; git config -f .git/config remote.origin.pruneTags true`,
		rejected: []string{".git/config"},
	},
	{
		name:     "fetch refspec dwimmed into a branch",
		script:   `git config -f .git/config --add remote.origin.fetch "+refs/heads/main:feature"`,
		rejected: []string{".git/config"},
	},
	{
		// The operator's git pull fast-forwards main to the sandbox's
		// commit, through a changed upstream.
		name: "upstream of a protected branch",
		script: `c=$(git -c user.name=a -c user.email=a@a commit-tree -p HEAD -m sandbox-commit HEAD^{tree}); git update-ref refs/heads/evil $c
git config -f .git/config branch.main.remote .; git config -f .git/config branch.main.merge refs/heads/evil`,
		rejected: []string{".git/config"},
		refsOnly: true,
	},
	{
		// ... or through its remote's URL, to a bundle in the worktree.
		name: "remote URL of a protected branch's upstream",
		script: `c=$(git -c user.name=a -c user.email=a@a commit-tree -p HEAD -m sandbox-commit HEAD^{tree})
d=$(mktemp -d); git init -q --bare $d/x; cp -r .git/objects $d/x/; git -C $d/x update-ref refs/heads/main $c; git -C $d/x bundle create -q "$PWD/.git/objects/evil.bundle" main; rm -rf $d
git config -f .git/config remote.origin.url .git/objects/evil.bundle`,
		rejected: []string{".git/config"},
		refsOnly: true,
	},
	{
		// The operator's git then creates world-writable (and setgid)
		// directories and refs any local user may change.
		name:     "core.sharedRepository",
		script:   `git config -f .git/config core.sharedRepository 0777`,
		rejected: []string{".git/config"},
	},
	{
		// git checkout/restore writes whatever path the index names,
		// .git/hooks included (git refuses such paths only in trees).
		name: "index entry in .git",
		script: `b=$(printf '#!/bin/sh\ntouch $CANARY/index-hook\n' | git hash-object -w --stdin)
git update-index --add --cacheinfo 100755,$b,.gis/hooks/post-commit
perl -0777 -i -MDigest::SHA=sha1 -pe 's{\.gis/hooks/post-commit}{.git/hooks/post-commit}; substr($_, -20) = sha1(substr($_, 0, -20))' .git/index
git ls-files | grep -qx .git/hooks/post-commit`,
		rejected: []string{".git/index"},
	},
	{
		// git reads "<oid><TAB><ref>" lines too, and finds a duplicate
		// by binary search in a sorted file.
		name: "packed-refs with a tab and a duplicate",
		script: `e=$(git -c user.name=a -c user.email=a@a commit-tree -p HEAD -m sandbox-commit HEAD^{tree})
sed -i "s|^.* refs/heads/main\$|$e\trefs/heads/main\n&|" .git/packed-refs
printf '%s\trefs/tags/v9\n' $e >> .git/packed-refs
test "$(git rev-parse main)" = $e`,
		rejected: []string{".git/packed-refs"},
		refsOnly: true,
	},
	{
		// A merge left in progress: the operator's next commit on main
		// records the sandbox's commit as a parent.
		name: "merge in progress",
		script: `c=$(git -c user.name=a -c user.email=a@a commit-tree -p HEAD -m sandbox-commit HEAD^{tree})
echo $c > .git/MERGE_HEAD; echo "Merge" > .git/MERGE_MSG; echo >> tracked.txt`,
		rejected: []string{".git/MERGE_HEAD"},
		refsOnly: true,
	},
	{
		// Not rejected (a worktree file), but git ignores commands from
		// .gitmodules: the canary proves it.
		name:   ".gitmodules update command",
		script: `git config -f .gitmodules submodule.sub.update "!touch $CANARY/gitmodules"`,
	},
}

// hostCommands are what an operator does in a checkout after a commit.
// Each may fail; what matters is that none runs a sandbox's command.
var hostCommands = [][]string{
	{"status"},
	{"st"},
	{"log", "-1", "--format=%H"},
	{"diff", "HEAD"},
	{"commit", "-qam", "operator's commit"},
	{"restore", "."},
	{"commit", "-q", "--allow-empty", "-m", "operator's second commit"},
	{"fetch", "-q", "origin"},
	{"pull", "-q", "--ff-only"},
	{"submodule", "update", "--init"},
	{"submodule", "foreach", "git status"},
}

// TestGitTricksNeverRunOnHost commits each trick under each setting, then
// runs the operator's everyday git commands in the checkout: no command
// the sandbox wrote runs, and main never moves.
func TestGitTricksNeverRunOnHost(t *testing.T) {
	f := newGitFixture(t)
	mainBefore := strings.TrimSpace(git(t, f.host, "rev-parse", "main"))
	// Refs no host command of the operator moves.
	keptRefs := map[string]string{}
	for _, r := range []string{"refs/heads/feature", "refs/tags/v1"} {
		keptRefs[r] = strings.TrimSpace(git(t, f.host, "rev-parse", r))
	}
	for _, set := range commitSettings {
		for _, tr := range gitTricks {
			w := overlayWS("")
			set.apply(&w)
			if tr.refsOnly && len(w.ProtectRefs) == 0 {
				continue
			}
			t.Run(set.name+"/"+tr.name, func(t *testing.T) {
				host := f.copy(t)
				canary := tempDir(t)
				home := tempDir(t)
				for _, d := range []string{canary, home} {
					if err := os.Chmod(d, 0o777); err != nil {
						t.Fatal(err)
					}
				}
				// The operator's own global config: a common alias.
				writeFiles(t, home, map[string]string{".gitconfig": "[alias]\n\tst = status\n"})
				vars := strings.NewReplacer("$CANARY", canary, "$ORIGIN", f.origin, "$HOSTPATH", host)
				sh := func(dir, script string) {
					t.Helper()
					cmd := exec.Command("sh", "-ec", vars.Replace(script))
					cmd.Dir, cmd.Env = dir, gitEnv
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("%s: %v\n%s", script, err, out)
					}
				}
				if tr.before != "" {
					sh(host, tr.before)
					chownTree(t, host, hostOwner)
				}
				w = overlayWS(host)
				set.apply(&w)
				w.GitAllow = tr.allow
				s := setup(t, policyWith(w), hostOwner)
				sh(merged(s, 0), tr.script)
				stop(t, s)
				res, err := s.Commit(t.Context(), CommitOptions{Partial: true})
				if err != nil {
					t.Fatalf("Commit: %v", err)
				}
				rejected := map[string]string{}
				for _, r := range res.Rejected {
					rejected[strings.TrimPrefix(r.Path, "/workspace/")] = r.Rule + ": " + r.Reason
				}
				for _, p := range tr.rejected {
					if _, ok := rejected[p]; !ok {
						t.Errorf("%s was not rejected (applied: %v)", p, res.Applied)
					}
				}
				if got, err := operatorGit(t, host, home, "rev-parse", "main"); err != nil || strings.TrimSpace(got) != mainBefore {
					t.Errorf("main is %q (%v), was %s", got, err, mainBefore)
				}
				dirs := []string{host}
				for _, d := range []string{"nested", "bare", "cd", "sub", "src"} {
					if exists(filepath.Join(host, d)) {
						dirs = append(dirs, filepath.Join(host, d))
					}
				}
				for _, d := range dirs {
					for _, args := range hostCommands {
						if out, err := operatorGit(t, d, home, args...); err != nil {
							t.Logf("host git %v in %s: %v\n%s", args, d, err, out)
						}
					}
				}
				operatorGit(t, filepath.Join(host, "bare"), home, "fetch", "-q", f.origin, "main:main")
				if out, _ := operatorGit(t, host, home, "log", "--format=%s", "main"); strings.Contains(out, "sandbox-commit") {
					t.Errorf("after the operator's git, main holds the sandbox's commit:\n%s", out)
				}
				for r, want := range keptRefs {
					if got, err := operatorGit(t, host, home, "rev-parse", r); err != nil || strings.TrimSpace(got) != want {
						t.Errorf("after the operator's git, %s is %q (%v), was %s", r, got, err, want)
					}
				}
				if out, err := exec.Command("find", host, "!", "-type", "l", "-perm", "/o+w,u+s,g+s", "-print", "-quit").CombinedOutput(); err != nil || len(out) > 0 {
					t.Errorf("after the operator's git, a world-writable, setuid or setgid entry: %s (%v)", out, err)
				}
				if ran, _ := os.ReadDir(canary); len(ran) > 0 {
					var names []string
					for _, e := range ran {
						names = append(names, e.Name())
					}
					t.Errorf("the host's git ran the sandbox's commands: %v (rejected: %v)", names, rejected)
				}
			})
		}
	}
}

// TestGitOrdinaryWorkCommits: everyday git work in the sandbox (a tracking
// branch, push -u, branch -D, gc, pack-refs, rebase, commit) commits with
// no git rule refusing it, and the host repository is sound afterwards.
func TestGitOrdinaryWorkCommits(t *testing.T) {
	f := newGitFixture(t)
	work := `git checkout -q -b topic --track origin/main
echo more >> tracked.txt; git commit -qam topic
git push -q -u origin topic
git branch -q -D feature
git checkout -q -b base2 topic; echo b > b.txt; git add b.txt; git commit -qm base2
git checkout -q topic; echo c > c.txt; git add c.txt; git commit -qm c
git rebase -q base2
git gc -q
git pack-refs --all
git stash list >/dev/null
git checkout -q main`
	for _, set := range commitSettings {
		t.Run(set.name, func(t *testing.T) {
			host := f.copy(t)
			w := overlayWS(host)
			set.apply(&w)
			s := setup(t, policyWith(w), hostOwner)
			// The sandbox's git pushes to a local origin owned by another
			// user: safe.directory must reach the receive-pack it runs.
			home := tempDir(t)
			writeFiles(t, home, map[string]string{".gitconfig": "[safe]\n\tdirectory = *\n"})
			// The subtests share the origin: each pushes its own branch.
			topic := "topic_" + set.name
			cmd := exec.Command("sh", "-ec", strings.ReplaceAll(work, "topic", topic))
			cmd.Dir = merged(s, 0)
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
				"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			stop(t, s)
			res, err := s.Commit(t.Context(), CommitOptions{Partial: true})
			if err != nil {
				t.Fatalf("Commit: %v", err)
			}
			for _, r := range res.Rejected {
				switch r.Rule {
				case RuleGitMeta, RuleGitExec, RuleSymlinkEscape:
					t.Errorf("ordinary git work rejected: %+v", r)
				}
			}
			git(t, host, "fsck", "--no-progress")
			if set.name == "default" {
				if got := git(t, host, "config", "branch."+topic+".remote"); strings.TrimSpace(got) != "origin" {
					t.Errorf("branch.%s.remote = %q", topic, got)
				}
				if out := git(t, host, "branch", "--list", "feature"); out != "" {
					t.Errorf("feature not deleted: %q", out)
				}
				if out := git(t, host, "log", "-1", "--format=%s", topic); strings.TrimSpace(out) != "c" {
					t.Errorf("%s = %q", topic, out)
				}
			}
		})
	}
}
