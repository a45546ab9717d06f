package authgate

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildWorkspace makes dir (empty or missing) the git checkout files
// describe: the tracked files committed on branch main with their content
// at HEAD (File.Committed when set), then the working copies of tracked
// files that differ from HEAD and the untracked files written beside them.
// Whether an untracked file is ignored is the workspace's .gitignore's
// business, as in any checkout. git runs with an environment of its own:
// no user or system configuration, author and committer "alex".
func BuildWorkspace(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	home, err := os.MkdirTemp("", "authgate-git-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	env := GitEnv(home)
	git := func(args ...string) error {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("git %s in %s: %w: %s", strings.Join(args, " "), dir, err, bytes.TrimSpace(out.Bytes()))
		}
		return nil
	}
	if err := git("init", "-q", "--template=", "-b", "main"); err != nil {
		return err
	}
	var tracked []string
	for _, f := range files {
		if f.Tracked {
			c := f.Content
			if f.Committed != nil {
				c = *f.Committed
			}
			if err := writeWorkspaceFile(dir, f.Path, c); err != nil {
				return err
			}
			tracked = append(tracked, f.Path)
		}
	}
	if len(tracked) > 0 {
		if err := git(append([]string{"add", "-f", "--"}, tracked...)...); err != nil {
			return err
		}
	}
	if err := git("commit", "-q", "--allow-empty", "-m", "initial"); err != nil {
		return err
	}
	for _, f := range files {
		if !f.Tracked || f.Committed != nil {
			if err := writeWorkspaceFile(dir, f.Path, f.Content); err != nil {
				return err
			}
		}
	}
	return nil
}

// GitEnv is the environment BuildWorkspace runs git in, with home as HOME:
// the process's environment without the user's or the system's git
// configuration, author and committer alex <alex@bench.test>, the C
// locale.
func GitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=alex", "GIT_AUTHOR_EMAIL=alex@bench.test",
		"GIT_COMMITTER_NAME=alex", "GIT_COMMITTER_EMAIL=alex@bench.test",
		"LC_ALL=C",
	)
}

func writeWorkspaceFile(dir, p, content string) error {
	full := filepath.Join(dir, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, []byte(content), 0o644)
}
