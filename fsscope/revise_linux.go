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
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// MaxRevisedMasks bounds the entries one revision's deny_read patterns
// may mask in a session: each is a mark the kernel keeps.
const MaxRevisedMasks = 20000

// WorkspaceRevision is what Session.Revise changed.
type WorkspaceRevision struct {
	// Rules are the targets of the workspaces whose commit rules changed.
	Rules []string
	// DenyRead are the deny_read patterns added, per workspace target.
	DenyRead map[string][]string
	// Masked are the sandbox paths the added patterns matched, each with
	// its pattern: every open of them from the sandbox is refused from
	// now on.
	Masked []MaskedPath
}

// Changed reports whether the revision changed anything.
func (r WorkspaceRevision) Changed() bool { return len(r.Rules) > 0 || len(r.DenyRead) > 0 }

// Revise applies ws, the workspaces of a revised policy in the order of
// the running one (each with the same host path, target and mode), to
// the live session:
//
//   - The commit rules (protect, protect_refs, git_allow,
//     preserve_untracked, on_exit) are replaced; they decide the next
//     commit, Diff and Finish. What was committed before stands.
//   - deny_read patterns may be added (not removed: a mask made with the
//     sandbox stays) to an overlay workspace while its sandbox runs with
//     the read audit: every entry of the workspace as the sandbox sees it
//     now that an added pattern matches (a directory with everything
//     beneath it) is marked, and from then on every open of it from the
//     sandbox, under any name (a hard link, a rename), is refused and
//     reported. What the sandbox read or copied before stays read: a
//     revision cannot take that back, nor reach a descriptor already
//     open. A commit may not write a path an added pattern covers.
//
// The state is written before it returns, so a restarted daemon commits
// under the revised rules and marks the revised masks again. Patterns
// that do not compile, a pattern removed, or more than MaxRevisedMasks
// entries refuse the revision, and nothing changes. Undo puts the
// workspaces back as they were (for a revision refused by a later step).
func (s *Session) Revise(ctx context.Context, ws []policies.Workspace) (_ WorkspaceRevision, undo func(), _ error) {
	out, marked, prev, err := s.revise(ctx, ws)
	if err != nil || !out.Changed() {
		return out, func() {}, err
	}
	return out, func() {
		unlock, err := s.lock()
		if err != nil {
			log.G(ctx).Error("fsscope: put the workspaces back", "error", err)
			return
		}
		defer unlock()
		s.st.Workspaces = prev
		if s.ra != nil {
			_ = s.ra.unwatchLive(marked)
		}
		s.watchedLive = slices.DeleteFunc(s.watchedLive, func(m viewMark) bool { return slices.Contains(marked, m) })
		if err := s.saveLocked(); err != nil {
			log.G(ctx).Error("fsscope: put the workspaces back", "error", err)
		}
	}, nil
}

func (s *Session) revise(ctx context.Context, ws []policies.Workspace) (out WorkspaceRevision, marked []viewMark, prev []wsState, _ error) {
	unlock, err := s.lock()
	if err != nil {
		return out, nil, nil, err
	}
	defer unlock()
	if len(ws) != len(s.st.Workspaces) {
		return out, nil, nil, fmt.Errorf("fsscope: %d workspaces revised, the session has %d: %w", len(ws), len(s.st.Workspaces), errdefs.ErrInvalidArgument)
	}
	next := slices.Clone(s.st.Workspaces)
	type pending struct {
		i     int
		added []string
	}
	var masks []pending
	for i, w := range ws {
		cur := &next[i]
		if path.Clean(w.Target) != cur.Target || w.Mode != cur.Mode {
			return out, nil, nil, fmt.Errorf("fsscope: workspace %s: its target and mode cannot change: %w", cur.Target, errdefs.ErrInvalidArgument)
		}
		if _, err := glob.NewSet(w.Protect, true); err != nil {
			return out, nil, nil, fmt.Errorf("workspace %s: protect: %w: %w", cur.Target, err, errdefs.ErrInvalidArgument)
		}
		if _, err := refPatterns(w.ProtectRefs); err != nil {
			return out, nil, nil, fmt.Errorf("workspace %s: protect_refs: %w: %w", cur.Target, err, errdefs.ErrInvalidArgument)
		}
		if _, err := glob.NewSet(w.GitAllow, true); err != nil {
			return out, nil, nil, fmt.Errorf("workspace %s: git_allow: %w: %w", cur.Target, err, errdefs.ErrInvalidArgument)
		}
		deny := denyPatterns(w.DenyRead, w.DefaultDenyRead)
		var added []string
		for _, p := range deny {
			if !slices.Contains(cur.DenyRead, p) && !slices.Contains(added, p) {
				added = append(added, p)
			}
		}
		for _, p := range cur.DenyRead {
			if !slices.Contains(deny, p) {
				return out, nil, nil, fmt.Errorf("workspace %s: deny_read %q: %s: %w", cur.Target, p, policies.ReasonDenyReadLifted, errdefs.ErrFailedPrecondition)
			}
		}
		if len(added) > 0 {
			if _, err := glob.NewSet(added, true); err != nil {
				return out, nil, nil, fmt.Errorf("workspace %s: deny_read: %w: %w", cur.Target, err, errdefs.ErrInvalidArgument)
			}
			switch {
			case cur.Mode != policies.ModeOverlay:
				return out, nil, nil, fmt.Errorf("workspace %s: deny_read: %s: %w", cur.Target, policies.ReasonDenyReadMode, errdefs.ErrFailedPrecondition)
			case !s.st.Live || s.ra == nil:
				return out, nil, nil, fmt.Errorf("workspace %s: deny_read: patterns are added live only while the sandbox runs, with the read audit (fanotify): %w", cur.Target, errdefs.ErrFailedPrecondition)
			}
			masks = append(masks, pending{i, added})
			cur.DenyRead = append(slices.Clone(cur.DenyRead), added...)
			cur.RevisedDenyRead = append(slices.Clone(cur.RevisedDenyRead), added...)
			if out.DenyRead == nil {
				out.DenyRead = map[string][]string{}
			}
			out.DenyRead[cur.Target] = added
		}
		onExit := w.OnExit
		if cur.Mode == policies.ModeOverlay && onExit == "" {
			onExit = policies.OnExitReview
		}
		if slices.Equal(cur.Protect, w.Protect) && slices.Equal(cur.ProtectRefs, w.ProtectRefs) && slices.Equal(cur.GitAllow, w.GitAllow) &&
			cur.PreserveUntracked == w.PreserveUntracked && cur.OnExit == onExit {
			continue
		}
		cur.Protect, cur.ProtectRefs, cur.GitAllow = slices.Clone(w.Protect), slices.Clone(w.ProtectRefs), slices.Clone(w.GitAllow)
		cur.PreserveUntracked, cur.OnExit = w.PreserveUntracked, onExit
		out.Rules = append(out.Rules, cur.Target)
	}
	if !out.Changed() {
		return out, nil, nil, nil
	}

	// Find every entry the added patterns match, then mark them all; a
	// failure unmarks what was marked.
	total := 0
	for _, m := range masks {
		cur := &next[m.i]
		found, err := s.liveMatchesLocked(m.i, m.added, nil)
		if err != nil {
			return WorkspaceRevision{}, nil, nil, err
		}
		if total += len(found); total > MaxRevisedMasks {
			return WorkspaceRevision{}, nil, nil, fmt.Errorf("workspace %s: deny_read %q matches more than %d entries: %w", cur.Target, m.added, MaxRevisedMasks, errdefs.ErrInvalidArgument)
		}
		for _, f := range found {
			ms, ok, err := s.markLiveLocked(m.i, cur, f)
			marked = append(marked, ms...)
			if err == nil && !ok {
				err = fmt.Errorf("%s: the host's file changed since the session started, and the sandbox's copy of it cannot be masked", path.Join(cur.Target, f.Path))
			}
			if err != nil {
				_ = s.ra.unwatchLive(marked)
				return WorkspaceRevision{}, nil, nil, fmt.Errorf("workspace %s: deny_read: %w", cur.Target, err)
			}
			cur.RevisedMasks = append(cur.RevisedMasks, f)
			out.Masked = append(out.Masked, MaskedPath{Path: path.Join(cur.Target, f.Path), Rule: f.Rule})
		}
	}
	prev = s.st.Workspaces
	s.st.Workspaces = next
	if err := s.saveLocked(); err != nil {
		s.st.Workspaces = prev
		_ = s.ra.unwatchLive(marked)
		return WorkspaceRevision{}, nil, nil, fmt.Errorf("fsscope: record the revision: %w", err)
	}
	s.watchedLive = append(s.watchedLive, marked...)
	log.G(ctx).Info("fsscope: workspaces revised", "rules", out.Rules, "masked", len(out.Masked))
	return out, marked, prev, nil
}

// markLiveLocked marks the entry f of overlay workspace i (ws) that a
// revised deny_read pattern matched, in the layers the overlay reads it
// from: the upper layer's copy (one the sandbox changed) and the host's
// inode the overlay shows from its lower layer. The overlay opens its
// layers' inodes on the sandbox's behalf, for a read as for a copy-up (a
// hard link, a chmod, a rename), so each of those opens is refused to
// this session's sandbox; an open from anywhere else (the host's
// programs, another session's sandbox) passes. (The overlay's own inode is not marked: the kernel opens the
// layer's inode to hand the event over, and would wait on itself.) A
// directory is marked in the overlay, so that it cannot be listed. It
// returns the marks made, also when it fails part way, and whether the
// entry was found in a layer.
func (s *Session) markLiveLocked(i int, ws *wsState, f liveMask) ([]viewMark, bool, error) {
	var marks []viewMark
	var ost unix.Stat_t
	if err := unix.Stat(s.wsMnt(i), &ost); err != nil {
		return nil, false, &os.PathError{Op: "stat", Path: s.wsMnt(i), Err: err}
	}
	mark := func(root string) error {
		key, err := s.ra.watchLive(s.raOwner, ost.Dev, s.st.SandboxNS, ws.Target, root, f.Path, path.Join(ws.Target, f.Path), f.Rule)
		if err == nil {
			marks = append(marks, viewMark{root: root, rel: f.Path, key: key, sandbox: ost.Dev, host: root == ws.HostPath})
		}
		return err
	}
	if f.Dir {
		// A directory's listing: the overlay's own inode. (The overlay
		// opens its layers' directories unseen by fanotify, so marking
		// it cannot make the kernel wait on itself either.)
		return marks, true, mark(s.wsMnt(i))
	}
	found := false
	upper := filepath.Join(s.wsUpper(i), "upper")
	if fd, st, err := openBeneath(upper, f.Path); err == nil {
		unix.Close(fd)
		if !isWhiteout(&st) {
			found = true
			if err := mark(upper); err != nil {
				return marks, found, err
			}
		}
	}
	// The host's inode, if it is the one the overlay's lower layer holds:
	// the one the session's baseline knows.
	var known *entry
	if b, err := s.baselineLocked(i); err == nil {
		known = b.get(f.Path)
	}
	if fd, st, err := openBeneath(ws.HostPath, f.Path); err == nil {
		unix.Close(fd)
		if known != nil && known.Ino == st.Ino && known.Mode&sIFMT == st.Mode&unix.S_IFMT {
			found = true
			if err := mark(ws.HostPath); err != nil {
				return marks, found, err
			}
		}
	}
	return marks, found, nil
}

// liveMatchesLocked walks workspace i as the sandbox sees it (its overlay
// mount on the host) and returns the entries from the host (the session's
// baseline has them) that one of pats matches, with everything from the
// host beneath a matched directory, and the entries whose inode is one of
// keys (a revised mask the sandbox renamed). What the sandbox made itself
// is its own content, and not masked. Symlinks are not masked: what they
// lead to is, under its own name.
func (s *Session) liveMatchesLocked(i int, pats []string, keys map[fileKey]string) ([]liveMask, error) {
	set, err := glob.NewSet(pats, true)
	if err != nil {
		return nil, err
	}
	b, err := s.baselineLocked(i)
	if err != nil {
		return nil, err
	}
	t, err := openTree(s.wsMnt(i))
	if err != nil {
		return nil, err
	}
	defer t.Close()
	var out []liveMask
	var under []string // matched directories, "dir/" with their pattern in rules
	rules := map[string]string{}
	err = t.walk("", func(rel string, st *unix.Stat_t) (bool, error) {
		if rel == "" {
			return true, nil
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return false, nil
		}
		rule := ""
		for _, d := range under {
			if strings.HasPrefix(rel, d) {
				rule = rules[d]
				break
			}
		}
		if rule == "" {
			if p, ok := set.Match(rel, isDir); ok {
				rule = p
			} else if r, ok := keys[fileKey{st.Dev, st.Ino}]; ok {
				rule = r
			}
		}
		if rule == "" {
			return true, nil
		}
		if isDir {
			under = append(under, rel+"/")
			rules[rel+"/"] = rule
		}
		// Only what came from the host holds its content: what the
		// sandbox made is its own (so it cannot flood a revision
		// either). A renamed mask is found by its inode.
		if _, byKey := keys[fileKey{st.Dev, st.Ino}]; b.get(rel) == nil && !byKey {
			return true, nil
		}
		out = append(out, liveMask{Path: rel, Rule: rule, Dir: isDir, Dev: st.Dev, Ino: st.Ino})
		if len(out) > MaxRevisedMasks {
			return false, fmt.Errorf("deny_read %q matches more than %d entries: %w", pats, MaxRevisedMasks, errdefs.ErrInvalidArgument)
		}
		return true, nil
	})
	return out, err
}

// watchRevisedLocked marks again, for a session loaded by a restarted
// daemon, the entries the revised deny_read patterns match now and the
// inodes they matched when revised (wherever the sandbox moved them).
func (s *Session) watchRevisedLocked(ctx context.Context) {
	for i, w := range s.st.Workspaces {
		if len(w.RevisedDenyRead) == 0 {
			continue
		}
		keys := map[fileKey]string{}
		for _, m := range w.RevisedMasks {
			keys[fileKey{m.Dev, m.Ino}] = m.Rule
		}
		found, err := s.liveMatchesLocked(i, w.RevisedDenyRead, keys)
		if err != nil {
			log.G(ctx).Warn("fsscope: revised deny_read masks will not be enforced", "workspace", w.Target, "error", err)
			continue
		}
		for _, f := range found {
			ms, ok, err := s.markLiveLocked(i, &w, f)
			s.watchedLive = append(s.watchedLive, ms...)
			if err == nil && !ok {
				err = errors.New("found in no layer")
			}
			if err != nil {
				log.G(ctx).Warn("fsscope: a revised deny_read mask will not be enforced", "path", path.Join(w.Target, f.Path), "error", err)
			}
		}
	}
}

// SetSandbox records the mount namespace of the session's sandbox, as
// /proc/PID/ns/mnt of a process in it names it: revised deny_read masks
// refuse the opens of every process in it, wherever it chroots (the
// sandbox may neither unshare nor setns). It is kept in the state, for a
// restarted daemon. Without it a sandbox is told by where its mounts
// are, which chroot moves.
func (s *Session) SetSandbox(ns string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if s.st.SandboxNS == ns {
		return nil
	}
	s.st.SandboxNS = ns
	if s.ra != nil {
		for i := range s.st.Workspaces {
			var st unix.Stat_t
			if unix.Stat(s.wsMnt(i), &st) == nil {
				s.ra.setLiveNS(st.Dev, ns)
			}
		}
	}
	return s.saveLocked()
}
