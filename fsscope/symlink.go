package fsscope

import (
	"fmt"
	"path"
	"strings"
)

// maxLinkHops bounds symlink resolution, as the kernel's MAXSYMLINKS.
const maxLinkHops = 40

// symlinkEscape returns why c, a symlink the sandbox made or retargeted,
// points out of the workspace, or "". Commit never follows a link, but the
// next tool the operator runs in the checkout does, often as root; so a
// link is committed only when its target, resolved against its own
// location through the workspace as it will be after the commit, stays
// inside the workspace. Absolute targets always leave it: the host path
// the sandbox saw at its mount point is not the workspace on the host.
func (e *ruleEnv) symlinkEscape(c Change) string {
	if c.Type != TypeSymlink || c.Kind == KindDeleted || c.Kind == KindMode {
		return ""
	}
	if path.IsAbs(c.LinkTarget) {
		return fmt.Sprintf("%s -> %s: an absolute target leaves the workspace", c.Path, c.LinkTarget)
	}
	hops := 0
	if _, ok := e.resolveLink(parentRel(c.Path), c.LinkTarget, &hops, nil); !ok {
		if hops > maxLinkHops {
			return fmt.Sprintf("%s -> %s: too many levels of symbolic links", c.Path, c.LinkTarget)
		}
		return fmt.Sprintf("%s -> %s: the target, resolved from %s, leaves the workspace", c.Path, c.LinkTarget, "/"+parentRel(c.Path))
	}
	return ""
}

// resolveLink resolves target against dir (both workspace-relative) in the
// workspace as the change set leaves it, following symlinks on the way.
// It returns the resolved path, or false when resolution leaves the
// workspace or loops. Components that do not exist resolve lexically.
// visit, if not nil, sees every path resolution looks up.
func (e *ruleEnv) resolveLink(dir, target string, hops *int, visit func(string)) (string, bool) {
	if path.IsAbs(target) {
		return "", false
	}
	cur := dir
	for _, el := range strings.Split(target, "/") {
		switch el {
		case "", ".":
			continue
		case "..":
			if cur == "" {
				return "", false
			}
			cur = parentRel(cur)
			continue
		}
		next := joinRel(cur, el)
		if visit != nil {
			visit(next)
		}
		t, isLink := e.linkTarget(next)
		if !isLink {
			cur = next
			continue
		}
		if *hops++; *hops > maxLinkHops {
			return "", false
		}
		r, ok := e.resolveLink(cur, t, hops, visit)
		if !ok {
			return "", false
		}
		cur = r
	}
	return cur, true
}

// redirectedLinks finds the host's symlinks the change set does not touch
// that resolved inside the workspace when the session started and leave
// it (or loop) after the change set, such as cur -> lib/../keep once lib
// becomes a link to ".": each change resolution passes through is
// returned with the reason it is rejected.
func (e *ruleEnv) redirectedLinks() map[string]string {
	out := map[string]string{}
	if len(e.changes) == 0 {
		return out
	}
	before := &ruleEnv{base: e.base, byPath: map[string]int{}}
	for _, en := range e.base.entries {
		if !en.isSymlink() {
			continue
		}
		if _, changed := e.byPath[en.Path]; changed {
			continue
		}
		hops := 0
		if _, ok := before.resolveLink(parentRel(en.Path), en.Link, &hops, nil); !ok {
			// Already out on the host: not the sandbox's doing.
			continue
		}
		var via []string
		hops = 0
		_, ok := e.resolveLink(parentRel(en.Path), en.Link, &hops, func(p string) {
			if _, changed := e.byPath[p]; changed {
				via = append(via, p)
			}
		})
		if ok {
			continue
		}
		for _, p := range via {
			if _, dup := out[p]; !dup {
				out[p] = fmt.Sprintf("the host's link %s -> %s would then leave the workspace (or loop) through %s", en.Path, en.Link, p)
			}
		}
	}
	return out
}

// linkTarget returns rel's symlink target after the change set, and
// whether rel is a symlink then.
func (e *ruleEnv) linkTarget(rel string) (string, bool) {
	if i, ok := e.byPath[rel]; ok {
		c := e.changes[i]
		switch {
		case c.Kind == KindDeleted:
			return "", false
		case c.Type == TypeSymlink && c.Kind != KindMode:
			return c.LinkTarget, true
		case c.Kind == KindAdded || c.Kind == KindType || c.Kind == KindRenamed:
			return "", false
		}
	}
	if b := e.base.get(rel); b != nil && b.isSymlink() {
		return b.Link, true
	}
	return "", false
}
