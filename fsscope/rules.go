package fsscope

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

// trackState is what git says about a path.
type trackState int

const (
	untracked trackState = iota
	tracked
	ignored
)

// ruleEnv holds what the commit rules need about one workspace: its
// settings, what the session saw, the change set, and ways to read the
// host's and the sandbox's versions of a file and to ask git.
type ruleEnv struct {
	ws      *wsState
	base    *baseline
	changes []Change
	// readOld returns a regular file's host content, readNew the
	// sandbox's; both return nil, nil for a missing file.
	readOld, readNew func(rel string) ([]byte, error)
	// gitStatus reports, for a worktree (relative to the workspace root)
	// and paths relative to it, which ones git tracks or ignores.
	gitStatus func(worktree string, paths []string) (map[string]trackState, error)

	byPath map[string]int
	// coupled maps a change to the changes it needs committed with it
	// (refValues); evaluate sets it.
	coupled map[int][]int
}

// refPatterns compiles protect_refs patterns: globs over full ref names
// ("refs/heads/main", "refs/tags/*"; "*" stays within one element). An
// entry starting with "!" is an exception that un-protects the refs the
// rest of it matches; entries are read in order and the last one matching
// a ref decides, as in a .gitignore file:
// ["refs/heads/**", "!refs/heads/alex/*"] protects every branch but alex's.
func refPatterns(pats []string) (*glob.List, error) {
	anchored := make([]string, len(pats))
	for i, p := range pats {
		switch {
		case p == "!":
			// Left as is: NewList rejects an exception without a pattern.
			anchored[i] = p
		case strings.HasPrefix(p, "!"):
			anchored[i] = "!/" + p[1:]
		default:
			anchored[i] = "/" + p
		}
	}
	return glob.NewList(anchored, false)
}

// protectedRef returns the protect_refs entry that protects ref, without
// its anchoring slash, or false when no entry does (none matches, or the
// last matching one is an exception).
func protectedRef(refs *glob.List, ref string) (string, bool) {
	pat, ok := refs.Match(ref, false)
	return strings.TrimPrefix(pat, "/"), ok
}

// evaluate applies the rules to every change and returns the rejections
// by change index.
func (e *ruleEnv) evaluate() (map[int]Rejection, error) {
	e.byPath = make(map[string]int, len(e.changes))
	for i, c := range e.changes {
		e.byPath[c.Path] = i
	}
	rej := map[int]Rejection{}
	reject := func(i int, rule, reason string) {
		if _, ok := rej[i]; !ok {
			rej[i] = Rejection{Path: e.changes[i].Path, Rule: rule, Reason: reason}
		}
	}
	protect, err := glob.NewSet(e.ws.Protect, true)
	if err != nil {
		return nil, err
	}
	refs, err := refPatterns(e.ws.ProtectRefs)
	if err != nil {
		return nil, err
	}
	gitAllow, err := glob.NewSet(e.ws.GitAllow, true)
	if err != nil {
		return nil, err
	}
	gc, err := e.gitCodePaths()
	if err != nil {
		return nil, err
	}
	// Patterns a revision added while the sandbox ran: what they cover
	// holds content the sandbox may not read, which a commit may remove
	// but not write.
	revisedDeny, err := glob.NewSet(e.ws.RevisedDenyRead, true)
	if err != nil {
		return nil, err
	}
	for i, c := range e.changes {
		switch c.Type {
		case TypeDevice, TypeFIFO, TypeSocket:
			if c.Kind != KindDeleted {
				reject(i, RuleSpecialFile, fmt.Sprintf("%s files are never committed", c.Type))
				continue
			}
		}
		if c.Kind != KindDeleted {
			if maskedBy(e.ws.Masks, c.Path) {
				reject(i, RuleDenyRead, fmt.Sprintf("deny_read masks %s: a commit may remove it, not write it", c.Path))
			} else if pat, ok := revisedDeny.Covers(c.Path, c.Type == TypeDir); ok {
				reject(i, RuleDenyRead, fmt.Sprintf("deny_read %q (added by a revision) covers %s: a commit may remove it, not write it", pat, c.Path))
			} else if m, ok := maskBelow(e.ws.Masks, c.Path); ok && c.Type != TypeDir {
				// A symlink or file in place of a masked file's directory
				// would put whatever it leads to at the masked path.
				reject(i, RuleDenyRead, fmt.Sprintf("deny_read masks %s: a commit may not make %s other than a directory", m, c.Path))
			}
		}
		for _, p := range changePaths(&c) {
			if refs.Len() > 0 && inGitDir(p) {
				// With protect_refs, a repository's own storage is governed by
				// the ref rules and git_exec; protect governs the working tree.
				continue
			}
			if pat, ok := protect.Covers(p, c.Type == TypeDir); ok {
				reject(i, RuleProtect, fmt.Sprintf("%s matches protect pattern %q", p, pat))
			}
		}
		if reason, err := e.gitExec(c, gc); err != nil {
			return nil, err
		} else if reason != "" {
			reject(i, RuleGitExec, reason)
		}
		if refs.Len() > 0 {
			if reason, err := e.refChange(c, refs); err != nil {
				return nil, err
			} else if reason != "" {
				reject(i, RuleProtectRefs, reason)
			}
		}
		if reason := e.gitMeta(c, gitAllow); reason != "" {
			reject(i, RuleGitMeta, reason)
		}
		if reason := e.symlinkEscape(c); reason != "" {
			reject(i, RuleSymlinkEscape, reason)
		}
	}
	if refs.Len() > 0 {
		if err := e.refValues(refs, reject); err != nil {
			return nil, err
		}
	}
	redirected := e.redirectedLinks()
	for _, p := range sortedKeys(redirected) {
		reject(e.byPath[p], RuleSymlinkEscape, redirected[p])
	}
	if e.ws.PreserveUntracked {
		if err := e.untracked(reject); err != nil {
			return nil, err
		}
	}
	return rej, nil
}

// changePaths returns the paths a change touches.
func changePaths(c *Change) []string {
	if c.OldPath != "" {
		return []string{c.Path, c.OldPath}
	}
	return []string{c.Path}
}

// exists looks a path up in the session's view after the change set: the
// sandbox's type for a path it created, nothing for one it deleted, the
// host's type otherwise.
func (e *ruleEnv) exists(rel string) (mode uint32, ok bool) {
	if i, found := e.byPath[rel]; found {
		c := e.changes[i]
		if c.Kind == KindDeleted {
			return 0, false
		}
		if c.Kind == KindAdded || c.Kind == KindType || c.Kind == KindRenamed {
			return typeBits(c.Type), true
		}
	}
	if b := e.base.get(rel); b != nil {
		return b.Mode & sIFMT, true
	}
	return 0, false
}

func typeBits(t string) uint32 {
	switch t {
	case TypeDir:
		return sIFDIR
	case TypeSymlink:
		return sIFLNK
	case TypeFile:
		return sIFREG
	}
	return 0
}

// gitDirOf returns the innermost git directory strictly containing rel: a
// directory named .git, or one git would take for a git directory, before
// or after the change set.
func (e *ruleEnv) gitDirOf(rel string) (string, bool) {
	for d := parentRel(rel); ; d = parentRel(d) {
		if e.isGitDir(d) {
			return d, true
		}
		if d == "" {
			return "", false
		}
	}
}

// isGitDir reports whether d is a git directory before or after the
// change set.
func (e *ruleEnv) isGitDir(d string) bool {
	if m, ok := e.existsEither(d); d != "" && (!ok || m != sIFDIR) {
		return false
	}
	if path.Base(d) == ".git" {
		return true
	}
	// As git's is_git_directory: HEAD, and objects/ and refs/ or a
	// commondir file naming where they are. git follows symlinks for all
	// of them (a HEAD symlink to refs/..., objects and refs as symlinks
	// to directories, a commondir symlink to a file), so any type counts.
	if _, ok := e.existsEither(joinRel(d, "HEAD")); !ok {
		return false
	}
	_, okO := e.existsEither(joinRel(d, "objects"))
	_, okR := e.existsEither(joinRel(d, "refs"))
	if okO && okR {
		return true
	}
	_, okC := e.existsEither(joinRel(d, "commondir"))
	return okC
}

// existsEither looks rel up after the change set, or else on the host as
// the session saw it.
func (e *ruleEnv) existsEither(rel string) (uint32, bool) {
	if m, ok := e.exists(rel); ok {
		return m, true
	}
	if b := e.base.get(rel); b != nil {
		return b.Mode & sIFMT, true
	}
	return 0, false
}

// parentRel returns the directory of rel; the root's parent is the root.
func parentRel(rel string) string {
	d := path.Dir(rel)
	if d == "." || d == "/" {
		return ""
	}
	return d
}

// gitDirs lists the git directories of a baseline: ".git" directories and
// bare repositories (a directory holding HEAD, objects/ and refs/).
func gitDirs(b *baseline) []string {
	e := &ruleEnv{base: b, byPath: map[string]int{}}
	var out []string
	for _, en := range b.entries {
		if en.isDir() && e.isGitDir(en.Path) {
			out = append(out, en.Path)
		}
	}
	return out
}

// gitCode is what the host's git runs or reads as config, found in the
// repositories the session saw: a change to any of it would run the
// sandbox's code the next time someone uses git on the host.
type gitCode struct {
	// hookDirs hold hooks: hooks/ of every git directory, core.hooksPath
	// when it names a directory inside the workspace (and, for husky's
	// "X/_", X, whose scripts the hooks there run).
	hookDirs []string
	// configs are config files other than a git directory's own:
	// include.path and includeIf.*.path targets inside the workspace,
	// followed through nested includes.
	configs map[string]bool
	// runs are workspace files that installed hooks or command-running
	// config name (a script a hook or core.fsmonitor runs, a hook
	// framework's config such as .pre-commit-config.yaml), with what
	// names them.
	runs map[string]string
}

// hookFrameworkConfigs are worktree files from which hook frameworks read
// the commands their installed hooks run.
var hookFrameworkConfigs = []string{
	".pre-commit-config.yaml", ".pre-commit-config.yml", "lefthook.yml", "lefthook.yaml", ".lefthook.yml",
	".lefthook.yaml", "lefthook-local.yml", "lefthook-local.yaml", ".lefthook-local.yml", ".lefthook-local.yaml",
}

// pathTokens splits a shell command or script into the words that could
// name a file: separated by blanks, quotes, "=" and shell punctuation.
func pathTokens(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return strings.ContainsRune(" \t\n\r\"'`=;&|()<>$!{}", r)
	})
}

// gitCodePaths finds the hooks, configs and scripts the host's git would
// run or read in the repositories the session saw.
func (e *ruleEnv) gitCodePaths() (*gitCode, error) {
	gc := &gitCode{configs: map[string]bool{}, runs: map[string]string{}}
	// inWorkspace maps a path a config names, relative to base (a
	// workspace-relative directory), to a workspace path.
	inWorkspace := func(base, p string) (string, bool) {
		if p == "" || strings.HasPrefix(p, "~") || strings.HasPrefix(p, "%(prefix)") {
			return "", false
		}
		if path.IsAbs(p) {
			rel, ok := strings.CutPrefix(path.Clean(p), strings.TrimSuffix(e.ws.HostPath, "/")+"/")
			return rel, ok
		}
		rel := path.Clean(joinRel(base, p))
		if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", false
		}
		return rel, true
	}
	// named records the workspace files that text run from dir names.
	named := func(dir, text, by string) {
		for _, tok := range pathTokens(text) {
			if !strings.Contains(tok, "/") && !strings.HasPrefix(tok, ".") {
				continue
			}
			if f, ok := inWorkspace(dir, tok); ok {
				if b := e.base.get(f); b != nil && !b.isDir() {
					gc.runs[f] = by
				}
			}
		}
	}
	type cfg struct{ file, gd string }
	var queue []cfg
	// hookWT is the worktree each hook directory's hooks run in.
	hookWT := map[string]string{}
	addHookDir := func(d, wt string) {
		gc.hookDirs = append(gc.hookDirs, d)
		hookWT[d] = wt
	}
	worktreeOfGitDir := func(gd string) string {
		if path.Base(gd) == ".git" {
			return parentRel(gd)
		}
		return gd
	}
	for _, gd := range gitDirs(e.base) {
		addHookDir(joinRel(gd, "hooks"), worktreeOfGitDir(gd))
		queue = append(queue, cfg{joinRel(gd, "config"), gd}, cfg{joinRel(gd, "config.worktree"), gd})
	}
	seen := map[string]bool{}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if seen[c.file] {
			continue
		}
		seen[c.file] = true
		data, err := e.readOld(c.file)
		if err != nil {
			return nil, err
		}
		wt := worktreeOfGitDir(c.gd)
		for _, it := range parseGitConfig(data) {
			if !it.hasVar {
				continue
			}
			v := it.v
			switch {
			case v.Section == "core" && v.Subsection == "" && v.Key == "hookspath":
				// Relative to the worktree (the directory above .git, or a
				// bare repository itself).
				if d, ok := inWorkspace(wt, v.Value); ok {
					addHookDir(d, wt)
					if path.Base(d) == "_" {
						addHookDir(parentRel(d), wt)
					}
				}
			case v.Key == "path" && (v.Section == "include" && v.Subsection == "" || v.Section == "includeif"):
				// Relative to the including file's directory.
				if f, ok := inWorkspace(parentRel(c.file), v.Value); ok {
					gc.configs[f] = true
					queue = append(queue, cfg{f, c.gd})
				}
			case isGitExecKey(v):
				named(wt, v.Value, c.file+": "+v.Name())
			}
		}
	}
	// Installed hooks: the files they name, and hook frameworks' configs.
	for _, en := range e.base.entries {
		if en.isDir() || strings.HasSuffix(en.Path, ".sample") {
			continue
		}
		for _, hd := range gc.hookDirs {
			if parentRel(en.Path) != hd {
				continue
			}
			wt := hookWT[hd]
			for _, f := range hookFrameworkConfigs {
				gc.runs[joinRel(wt, f)] = "the installed hook " + en.Path
			}
			if data, err := e.readOld(en.Path); err == nil && len(data) <= 1<<20 {
				named(wt, string(data), "the installed hook "+en.Path)
			}
		}
	}
	return gc, nil
}

// gitExec returns why c would let git run a command on the host, or "".
func (e *ruleEnv) gitExec(c Change, gc *gitCode) (string, error) {
	if c.Kind == KindDeleted {
		return "", nil
	}
	for _, hd := range gc.hookDirs {
		if c.Type != TypeDir && within(c.Path, hd) && !strings.HasSuffix(c.Path, ".sample") {
			return fmt.Sprintf("%s is a git hook: git would run it on the host", c.Path), nil
		}
	}
	// hooks/ of a git directory the session made (git_allow may let the
	// directory itself through, never its hooks).
	if gd, ok := e.gitDirOf(c.Path); ok && c.Type != TypeDir && !strings.HasSuffix(c.Path, ".sample") {
		if sub := relTo(c.Path, gd); gd == "" && strings.HasPrefix(c.Path, "hooks/") || gd != "" && strings.HasPrefix(sub, "hooks/") {
			return fmt.Sprintf("%s is a git hook: git would run it on the host", c.Path), nil
		}
	}
	if by, ok := gc.runs[c.Path]; ok {
		return fmt.Sprintf("%s is run by the host's git (named by %s): a change would run the sandbox's code there", c.Path, by), nil
	}
	if c.Type != TypeFile {
		return "", nil
	}
	if gd, ok := e.gitDirOf(c.Path); !(ok && isGitConfigFile(gd, c.Path)) && !gc.configs[c.Path] {
		return "", nil
	}
	oldData, err := e.readOld(c.Path)
	if err != nil {
		return "", err
	}
	if c.Kind == KindRenamed {
		oldData = nil
	}
	newData, err := e.readNew(c.Path)
	if err != nil {
		return "", err
	}
	if keys := gitExecChanges(oldData, newData); len(keys) > 0 {
		return fmt.Sprintf("%s sets %s, which make git run commands or read files named by the sandbox on the host", c.Path, strings.Join(keys, ", ")), nil
	}
	return "", nil
}

// refChange returns why c changes a protected ref, or "".
func (e *ruleEnv) refChange(c Change, refs *glob.List) (string, error) {
	for _, p := range changePaths(&c) {
		gd, ok := e.gitDirOf(p)
		if !ok {
			continue
		}
		sub := strings.TrimPrefix(p, joinRel(gd, ""))
		if gd == "" {
			sub = p
		}
		if c.Type == TypeFile && c.Kind != KindDeleted && p == c.Path && isGitConfigFile(gd, p) {
			// A protected branch's upstream decides what the operator's
			// next git pull moves it to.
			oldData, err := e.readOld(p)
			if err != nil {
				return "", err
			}
			newData, err := e.readNew(p)
			if err != nil {
				return "", err
			}
			for _, b := range gitUpstreamChanges(oldData, newData) {
				if pat, ok := protectedRef(refs, "refs/heads/"+b); ok {
					return fmt.Sprintf("%s changes the upstream of branch %s, protected by %q: git pull would move it there", p, b, pat), nil
				}
			}
		}
		// Loose refs and packed-refs are judged by the refs' values
		// (refValues).
		switch {
		case c.Type == TypeDir:
		case strings.HasPrefix(sub, "logs/refs/"):
			ref := strings.TrimPrefix(sub, "logs/")
			pat, ok := protectedRef(refs, ref)
			if !ok {
				break
			}
			if c.Kind == KindDeleted || p != c.Path || c.Type != TypeFile {
				return fmt.Sprintf("%s is the log of ref %s, protected by %q", p, ref, pat), nil
			}
			oldData, err := e.oldRegular(p)
			if err != nil {
				return "", err
			}
			newData, err := e.readNew(p)
			if err != nil {
				return "", err
			}
			if !reflogPruned(oldData, newData) {
				return fmt.Sprintf("%s adds to the log of ref %s, protected by %q: git would offer the entries as its earlier values", p, ref, pat), nil
			}
		case sub == "MERGE_HEAD" && c.Kind != KindDeleted && p == c.Path:
			// The operator's next commit on the branch HEAD names records
			// the commits listed here as its parents.
			head := joinRel(gd, "HEAD")
			read := e.readOld
			if i, ok := e.byPath[head]; ok && e.changes[i].Kind != KindDeleted {
				read = e.readNew
			}
			data, err := read(head)
			if err != nil {
				return "", err
			}
			if ref, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "ref:"); ok {
				ref = strings.TrimSpace(ref)
				if pat, ok := protectedRef(refs, ref); ok {
					return fmt.Sprintf("%s leaves a merge in progress on %s, protected by %q: the next git commit there would make the sandbox's commits its parents", p, ref, pat), nil
				}
			}
		case strings.HasPrefix(sub, "reftable/"):
			return fmt.Sprintf("%s belongs to a reftable ref store, which cannot be checked against protect_refs", p), nil
		}
	}
	return "", nil
}

// parsePackedRefs reads a packed-refs file into ref name -> object id.
// As git, it takes any blank (space, tab, CR) after the object id. A ref
// listed more than once maps to all its ids: which one git uses depends
// on where its binary search lands.
func parsePackedRefs(data []byte) map[string]string {
	refs := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		i := strings.IndexAny(line, " \t\r\n")
		if i < 0 {
			continue
		}
		oid, name := line[:i], strings.TrimSpace(line[i+1:])
		if prev, ok := refs[name]; ok {
			oid = prev + " " + oid
		}
		refs[name] = oid
	}
	return refs
}

// changedPackedRefs lists refs added, removed or moved between two
// packed-refs files (nil means the file does not exist).
func changedPackedRefs(oldData, newData []byte) []string {
	return changedPacked(parsePackedRefs(oldData), parsePackedRefs(newData))
}

// deletion returns the path whose host entry a change removes (a file or
// symlink), or "".
func deletion(c *Change) string {
	switch {
	case c.Kind == KindDeleted && c.Type != TypeDir:
		return c.Path
	case c.Kind == KindRenamed:
		return c.OldPath
	case c.Kind == KindType && c.OldType != TypeDir:
		return c.Path
	}
	return ""
}

// untracked rejects deletions of files git does not track (untracked or
// ignored), the damage of `git clean -fdx`. Deleting git's own files is
// allowed (git gc and friends do it) unless the repository itself goes.
func (e *ruleEnv) untracked(reject func(int, string, string)) error {
	byWorktree := map[string][]int{}
	for i, c := range e.changes {
		d := deletion(&c)
		if c.Kind == KindDeleted && c.Type == TypeDir {
			// Directories are not tracked; but a repository goes as a whole.
			if gd, ok := e.gitDirOf(c.Path); ok {
				if _, headKept := e.exists(joinRel(gd, "HEAD")); !headKept {
					reject(i, RulePreserveUntracked, fmt.Sprintf("%s belongs to the git repository %s, which the change set deletes", c.Path, gd))
				}
			}
			continue
		}
		if d == "" {
			continue
		}
		if gd, ok := e.gitDirOf(d); ok {
			if _, headKept := e.exists(joinRel(gd, "HEAD")); !headKept {
				reject(i, RulePreserveUntracked, fmt.Sprintf("%s belongs to the git repository %s, which the change set deletes", d, gd))
			}
			continue
		}
		wt, ok := e.worktreeOf(d)
		if !ok {
			reject(i, RulePreserveUntracked, fmt.Sprintf("%s is not tracked by git (no repository contains it)", d))
			continue
		}
		byWorktree[wt] = append(byWorktree[wt], i)
	}
	for _, wt := range sortedKeys(byWorktree) {
		idxs := byWorktree[wt]
		rels := make([]string, len(idxs))
		for k, i := range idxs {
			rels[k] = relTo(deletion(&e.changes[i]), wt)
		}
		states, err := e.gitStatus(wt, rels)
		if err != nil {
			for _, i := range idxs {
				reject(i, RulePreserveUntracked, fmt.Sprintf("cannot tell whether git tracks %s: %v", deletion(&e.changes[i]), err))
			}
			continue
		}
		for k, i := range idxs {
			switch states[rels[k]] {
			case tracked:
			case ignored:
				reject(i, RulePreserveUntracked, fmt.Sprintf("%s is ignored by git: deleting it would lose data git cannot restore", deletion(&e.changes[i])))
			default:
				reject(i, RulePreserveUntracked, fmt.Sprintf("%s is not tracked by git: deleting it would lose data git cannot restore", deletion(&e.changes[i])))
			}
		}
	}
	return nil
}

// worktreeOf returns the innermost directory containing rel that has a
// .git entry on the host (directory or gitfile).
func (e *ruleEnv) worktreeOf(rel string) (string, bool) {
	for d := parentRel(rel); ; d = parentRel(d) {
		if e.base.get(joinRel(d, ".git")) != nil {
			return d, true
		}
		if d == "" {
			return "", false
		}
	}
}

func relTo(rel, dir string) string {
	if dir == "" {
		return rel
	}
	return strings.TrimPrefix(rel, dir+"/")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// createsDir reports whether a change makes a new directory.
func createsDir(c *Change) bool {
	return c.Type == TypeDir && (c.Kind == KindAdded || c.Kind == KindType)
}

// removesDir reports whether a change removes a host directory.
func removesDir(c *Change) bool {
	return c.Kind == KindDeleted && c.Type == TypeDir || c.Kind == KindType && c.OldType == TypeDir
}

// blockDependents extends blocked (change index -> reason) with the changes
// that cannot be applied without a blocked one: everything inside a new
// directory that is not created, and the removal of a directory that
// keeps a blocked entry.
func blockDependents(changes []Change, blocked map[int]string) map[int]string {
	out := map[int]string{}
	isBlocked := func(i int) bool {
		_, a := blocked[i]
		_, b := out[i]
		return a || b
	}
	byPath := make(map[string]int, len(changes))
	for i := range changes {
		byPath[changes[i].Path] = i
	}
	// Changes inside a blocked new directory (or inside one of those).
	for i := range changes {
		if isBlocked(i) {
			continue
		}
		for _, p := range changePaths(&changes[i]) {
			for d := parentRel(p); d != ""; d = parentRel(d) {
				j, ok := byPath[d]
				if ok && createsDir(&changes[j]) && isBlocked(j) {
					out[i] = fmt.Sprintf("needs directory %s, which is not committed", d)
					break
				}
			}
			if _, ok := out[i]; ok {
				break
			}
		}
	}
	// Directory removals above any blocked change.
	for i := range changes {
		if !isBlocked(i) {
			continue
		}
		for _, p := range changePaths(&changes[i]) {
			for d := parentRel(p); d != ""; d = parentRel(d) {
				j, ok := byPath[d]
				if ok && removesDir(&changes[j]) && !isBlocked(j) {
					out[j] = fmt.Sprintf("contains %s, which is not committed", changes[i].Path)
				}
			}
		}
	}
	return out
}

// inGitDir reports whether a workspace path lies inside a repository's .git
// directory.
func inGitDir(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".git" {
			return true
		}
	}
	return false
}
