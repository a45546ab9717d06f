package fsscope

import (
	"fmt"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

// Git metadata is code: a hook, a config variable, a commondir or gitdir
// file, an alternates file or a symlink inside a git directory can make
// the host's git run the sandbox's commands or read another repository in
// place of this one. So inside every git directory (".git" directories,
// the ones under .git/modules and .git/worktrees, bare repositories, and
// any directory git would take for one) a commit accepts only the changes
// listed here as inert; everything else is rejected under RuleGitMeta
// unless the workspace's git_allow names the path. Config files that do
// change are checked key by key as well (gitExecChanges).

// gitInertFiles are the regular files git writes in ordinary use, relative
// to a git directory. A "/**" suffix takes everything under a directory.
var gitInertFiles = []string{
	// Object storage: loose objects, packs, indexes, commit graphs.
	"objects/**",
	// Refs, their logs, packed refs (governed by protect_refs).
	"refs/**", "logs/**", "packed-refs",
	// The index and its split-index parts.
	"index", "sharedindex.*",
	// State files of ordinary commands (checkout, commit, fetch, merge,
	// cherry-pick, revert, rebase, bisect, notes, tag, gc).
	"HEAD", "ORIG_HEAD", "FETCH_HEAD", "COMMIT_EDITMSG", "TAG_EDITMSG",
	"MERGE_HEAD", "MERGE_MSG", "MERGE_MODE", "MERGE_RR", "MERGE_AUTOSTASH", "SQUASH_MSG",
	"CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD", "AUTO_MERGE",
	"BISECT_LOG", "BISECT_START", "BISECT_TERMS", "BISECT_EXPECTED_REV", "BISECT_ANCESTORS_OK",
	"BISECT_NAMES", "BISECT_HEAD", "BISECT_FIRST_PARENT",
	"NOTES_MERGE_PARTIAL", "NOTES_MERGE_REF", "shallow", "gc.log", "gc.pid",
	// rerere's recorded resolutions, git-lfs's content-addressed objects.
	"rr-cache/**", "lfs/objects/**",
	// update-server-info, ignore patterns, sparse checkout.
	"info/refs", "info/exclude", "info/sparse-checkout",
	// Sample hooks: git runs only hooks named exactly after their event.
	"hooks/*.sample",
	// The repository's own config, checked key by key (gitExecKeys).
	"config", "config.worktree",
}

// gitInertDirs are directories a commit may create inside a git
// directory: those that hold inert files, and the containers of
// submodule and worktree git directories (a new git directory inside one
// is still rejected).
var gitInertDirs = []string{"objects", "refs", "logs", "rr-cache", "lfs", "lfs/objects", "info", "modules", "worktrees"}

// gitNeverInert are paths under an inert directory that are not inert:
// alternates make git read objects from another path.
var gitNeverInert = []string{"objects/info/alternates", "objects/info/http-alternates"}

// gitInert reports whether sub, a path relative to a git directory, is an
// inert file (or, with dir, an inert directory).
func gitInert(sub string, dir bool) bool {
	for _, p := range gitNeverInert {
		if sub == p {
			return false
		}
	}
	if dir {
		for _, d := range gitInertDirs {
			if sub == d {
				return true
			}
		}
	}
	for _, p := range gitInertFiles {
		if prefix, ok := strings.CutSuffix(p, "/**"); ok {
			if strings.HasPrefix(sub, prefix+"/") {
				return true
			}
			continue
		}
		if ok, _ := path.Match(p, sub); ok && !dir {
			return true
		}
	}
	return false
}

// wasGitDir reports whether d was a git directory when the session
// started.
func (e *ruleEnv) wasGitDir(d string) bool {
	mode := func(rel string) uint32 {
		if b := e.base.get(rel); b != nil {
			return b.Mode & sIFMT
		}
		return 0
	}
	if d != "" && mode(d) != sIFDIR {
		return false
	}
	if path.Base(d) == ".git" {
		return true
	}
	// Any type, as isGitDir: git follows symlinks here.
	if mode(joinRel(d, "HEAD")) == 0 {
		return false
	}
	return mode(joinRel(d, "objects")) != 0 && mode(joinRel(d, "refs")) != 0 ||
		mode(joinRel(d, "commondir")) != 0
}

// gitMeta returns why c changes git metadata in a way not known to be
// inert, or "".
func (e *ruleEnv) gitMeta(c Change, allow *glob.Set) string {
	if c.Kind == KindDeleted {
		// Removing git's files runs nothing (gc, branch -D, prune do it);
		// preserve_untracked guards the repository as a whole. But when a
		// git directory is replaced (by a symlink or a gitfile), emptying
		// it is part of the replacement, which is rejected.
		for d := parentRel(c.Path); d != ""; d = parentRel(d) {
			if i, ok := e.byPath[d]; ok && e.changes[i].Kind == KindType && e.wasGitDir(d) {
				return fmt.Sprintf("%s goes with replacing git directory %s by a %s, which is rejected", c.Path, d, e.changes[i].Type)
			}
		}
		return ""
	}
	p := c.Path
	if allow != nil {
		if _, ok := allow.Covers(p, c.Type == TypeDir); ok {
			return ""
		}
	}
	if path.Base(p) == ".git" && c.Kind != KindMode {
		switch {
		case c.Kind == KindAdded && c.Type == TypeDir:
			return fmt.Sprintf("%s is a new git directory: git would run its hooks and config on the host", p)
		case c.Type == TypeDir:
			return fmt.Sprintf("%s becomes a git directory: git would run its hooks and config on the host", p)
		default:
			return fmt.Sprintf("%s becomes a %s: git would follow it to another git directory", p, c.Type)
		}
	}
	if createsDir(&c) && e.isGitDir(p) && !e.wasGitDir(p) {
		return fmt.Sprintf("%s is a new git directory: git would run its hooks and config on the host", p)
	}
	gd, ok := e.gitDirOf(p)
	if !ok {
		return ""
	}
	if !e.wasGitDir(gd) {
		return fmt.Sprintf("%s is inside %s, a git directory the session created: git would run its hooks and config on the host", p, gitDirName(gd))
	}
	sub := relTo(p, gd)
	if gd == "" {
		sub = p
	}
	switch c.Type {
	case TypeFile, TypeDir:
	default:
		return fmt.Sprintf("%s is a %s inside git directory %s: git would follow it", p, c.Type, gitDirName(gd))
	}
	if gitInert(sub, c.Type == TypeDir) {
		if c.Type == TypeFile && c.Kind != KindMode && (sub == "index" || strings.HasPrefix(sub, "sharedindex.")) {
			return e.gitIndexCheck(p)
		}
		return ""
	}
	return fmt.Sprintf("%s is not a file git writes in ordinary use (%s in git directory %s): only inert git files are committed, or paths the workspace's git_allow names", p, sub, gitDirName(gd))
}

func gitDirName(gd string) string {
	if gd == "" {
		return "the workspace root"
	}
	return gd
}

// gitIndexCheck returns why the sandbox's index file p is not committed,
// or "": an entry git checkout would write where git never writes a
// tracked file (see gitIndexBadPath).
func (e *ruleEnv) gitIndexCheck(p string) string {
	data, err := e.readNew(p)
	if err != nil {
		return fmt.Sprintf("%s cannot be read: %v", p, err)
	}
	bad, err := gitIndexBadPath(data)
	switch {
	case err != nil:
		return fmt.Sprintf("%s is not a git index this check can read (%v)", p, err)
	case bad != "":
		return fmt.Sprintf("%s has an entry %q: git checkout would write it into the git directory or out of the worktree", p, bad)
	}
	return ""
}
