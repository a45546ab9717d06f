package fsscope

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// gitTimeout bounds one git invocation.
const gitTimeout = 2 * time.Minute

// gitEnv is the environment git runs with: no system or global config, no
// prompts, no optional locks, no fsmonitor (which would run a command
// named in the repository's config), and any owner's repository accepted
// (git runs as that owner anyway).
var gitEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/nonexistent",
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_TERMINAL_PROMPT=0",
	"GIT_OPTIONAL_LOCKS=0",
	"GIT_CONFIG_COUNT=3",
	"GIT_CONFIG_KEY_0=safe.directory",
	"GIT_CONFIG_VALUE_0=*",
	"GIT_CONFIG_KEY_1=core.fsmonitor",
	"GIT_CONFIG_VALUE_1=false",
	"GIT_CONFIG_KEY_2=core.untrackedCache",
	"GIT_CONFIG_VALUE_2=false",
}

// runGit runs git in dir as owner (when the daemon is root and owner is
// not), so that a repository cannot make git do as root what its owner
// could not.
func runGit(ctx context.Context, dir string, owner Owner, stdin []byte, args ...string) ([]byte, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git-aware rules need git: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, git, append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv
	cmd.Dir = "/"
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if os.Geteuid() == 0 && owner.UID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: owner.UID, Gid: owner.GID, Groups: []uint32{}}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("git %s in %s: %w: %s", args[0], dir, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// gitTrackState reports which of paths (relative to the worktree dir) git
// tracks, and which of the others it ignores.
func gitTrackState(ctx context.Context, dir string, owner Owner, paths []string) (map[string]trackState, error) {
	out, err := runGit(ctx, dir, owner, nil, "ls-files", "-z", "--cached")
	if err != nil {
		return nil, err
	}
	trackedSet := map[string]bool{}
	for p := range strings.SplitSeq(string(out), "\x00") {
		if p != "" {
			trackedSet[p] = true
		}
	}
	res := make(map[string]trackState, len(paths))
	var rest []string
	for _, p := range paths {
		if trackedSet[p] {
			res[p] = tracked
		} else {
			res[p] = untracked
			rest = append(rest, p)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	in := []byte(strings.Join(rest, "\x00") + "\x00")
	out, err = runGit(ctx, dir, owner, in, "check-ignore", "-z", "--stdin", "--no-index")
	var exitErr *exec.ExitError
	if err != nil && !(errors.As(err, &exitErr) && exitErr.ExitCode() == 1) {
		return nil, err
	}
	for p := range strings.SplitSeq(string(out), "\x00") {
		if _, ok := res[p]; ok && p != "" {
			res[p] = ignored
		}
	}
	return res, nil
}
