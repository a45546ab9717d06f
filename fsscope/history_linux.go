package fsscope

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

// maxTracked bounds the tracked masked paths reported per workspace.
const maxTracked = 100

// HistoryNote is what deny_read does not cover, said once wherever tracked
// masked paths are reported.
const HistoryNote = "deny_read masks the working-tree file, not git's copy of it: " +
	"the content of a file that is or was committed can be read from .git/objects (git show HEAD:PATH); " +
	"remove the secret from the repository's history, or give the session a workspace without it"

// TrackedDenied returns the paths of the workspace w that its deny_read
// patterns (with the defaults unless w turns them off) mask and that git
// tracks in the repository at the workspace's root (at most maxTracked of
// them, sorted as git lists them). deny_read does not cover what git keeps
// of those files in .git/objects (see HistoryNote). It returns nothing when
// the workspace root holds no .git. git runs as the workspace owner, with
// no system or global config and no fsmonitor.
func TrackedDenied(ctx context.Context, w policies.Workspace) ([]string, error) {
	host, denied, owner, err := denyCheck(w)
	if err != nil {
		return nil, err
	}
	return trackedDenied(ctx, host, owner, denied)
}

// CommittedDenied returns the paths of the workspace w that its deny_read
// patterns mask and that were added in a commit reachable from any ref of
// the repository at the workspace's root, but that git no longer tracks
// (TrackedDenied lists those): their content is still in .git/objects. At
// most maxTracked, sorted. Walking the history takes time in proportion to
// it; ctx bounds it. git runs as in TrackedDenied, and shows no signature
// (which would run the repository's gpg.program) and no external diff or
// text conversion.
func CommittedDenied(ctx context.Context, w policies.Workspace) ([]string, error) {
	host, denied, owner, err := denyCheck(w)
	if err != nil {
		return nil, err
	}
	if ok, err := hasGitDir(host); !ok || err != nil {
		return nil, err
	}
	tracked, err := trackedDenied(ctx, host, owner, denied)
	if err != nil {
		return nil, err
	}
	out, err := runGit(ctx, host, owner, nil, "log", "--all", "--no-show-signature", "--no-ext-diff", "--no-textconv", "--diff-filter=A", "--name-only", "--format=", "-z")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, p := range tracked {
		seen[p] = true
	}
	var res []string
	for p := range strings.SplitSeq(string(out), "\x00") {
		p = strings.TrimLeft(p, "\n")
		if p == "" || seen[p] || !denied(p) {
			continue
		}
		seen[p] = true
		res = append(res, p)
		if len(res) == maxTracked {
			break
		}
	}
	slices.Sort(res)
	return res, nil
}

// denyCheck resolves w's host directory, its owner and its deny_read test.
func denyCheck(w policies.Workspace) (string, func(string) bool, Owner, error) {
	host, err := resolveHostDir(w.HostPath)
	if err != nil {
		return "", nil, Owner{}, err
	}
	deny, err := glob.NewSet(denyPatterns(w.DenyRead, w.DefaultDenyRead), true)
	if err != nil {
		return "", nil, Owner{}, fmt.Errorf("deny_read: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	var st unix.Stat_t
	if err := unix.Stat(host, &st); err != nil {
		return "", nil, Owner{}, &os.PathError{Op: "stat", Path: host, Err: err}
	}
	return host, func(p string) bool {
		_, ok := deny.Covers(p, false)
		return ok
	}, Owner{UID: st.Uid, GID: st.Gid}, nil
}

// hasGitDir reports whether host holds a .git directory. A .git that is
// not a directory (a worktree's or submodule's gitfile) points outside the
// workspace, where the sandbox cannot read.
func hasGitDir(host string) (bool, error) {
	fi, err := os.Lstat(filepath.Join(host, ".git"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return fi.IsDir(), nil
}

// trackedDenied lists the paths git tracks in the repository at host's
// root for which denied reports true (at most maxTracked).
func trackedDenied(ctx context.Context, host string, owner Owner, denied func(string) bool) ([]string, error) {
	if ok, err := hasGitDir(host); !ok || err != nil {
		return nil, err
	}
	out, err := runGit(ctx, host, owner, nil, "ls-files", "-z", "--cached")
	if err != nil {
		return nil, err
	}
	var res []string
	for p := range strings.SplitSeq(string(out), "\x00") {
		if p != "" && denied(p) {
			if len(res) == maxTracked {
				break
			}
			res = append(res, p)
		}
	}
	return res, nil
}

// DenyReadInfo says what deny_read hides in one workspace or mount.
type DenyReadInfo struct {
	// Target is the sandbox path of the workspace or mount.
	Target   string `json:"target"`
	HostPath string `json:"host_path"`
	// Masked lists the masks, by sandbox path, with the pattern (or the
	// reason) behind each.
	Masked []MaskedPath `json:"masked,omitempty"`
	// Tracked are masked sandbox paths git tracks in the workspace's
	// repository: their content is readable from .git/objects (HistoryNote).
	Tracked []string `json:"tracked,omitempty"`
}

// MaskedPath is one mask.
type MaskedPath struct {
	Path string `json:"path"`
	Rule string `json:"rule"`
}

// DenyRead reports, per workspace and mount in manifest order, what
// deny_read masks and which masked paths git tracks, as Setup planned them.
func (s *Session) DenyRead() []DenyReadInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []DenyReadInfo
	add := func(target, host string, masks []mask, tracked []string) {
		info := DenyReadInfo{Target: target, HostPath: host}
		for _, m := range masks {
			info.Masked = append(info.Masked, MaskedPath{Path: path.Join(target, m.Path), Rule: m.Rule})
		}
		for _, t := range tracked {
			info.Tracked = append(info.Tracked, path.Join(target, t))
		}
		out = append(out, info)
	}
	for _, w := range s.st.Workspaces {
		add(w.Target, w.HostPath, w.Masks, w.Tracked)
	}
	for _, m := range s.st.Mounts {
		add(m.Target, m.HostPath, m.Masks, nil)
	}
	return out
}
