package fsscope

import (
	"path"
	"strings"
)

// joinRel joins a relative directory and a name; the root is "".
func joinRel(dir, name string) string {
	if dir == "" || dir == "." {
		return name
	}
	return dir + "/" + name
}

// within reports whether p is dir or beneath it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// isGitConfigFile reports whether rel is a config file of the git
// directory gd: config, config.worktree, worktrees/NAME/config.worktree.
func isGitConfigFile(gd, rel string) bool {
	r, ok := strings.CutPrefix(rel, joinRel(gd, ""))
	if gd == "" {
		r, ok = rel, true
	}
	if !ok {
		return false
	}
	if r == "config" || r == "config.worktree" {
		return true
	}
	parts := strings.Split(r, "/")
	return len(parts) == 3 && parts[0] == "worktrees" && parts[2] == "config.worktree"
}

func depth(p string) int { return strings.Count(path.Clean(p), "/") }
