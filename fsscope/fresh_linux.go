package fsscope

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Fresh reports whether every workspace's host tree is still exactly as
// Setup scanned it: the same entries (paths, types, modes, owners, inode
// numbers, link counts, sizes, mtimes and ctimes, symlink targets, mount
// points, and content hashes where Setup recorded them), so that the
// deny_read masks, the sanitized git config copies and the baselines
// computed at Setup still hold. When the tree is not fresh, reason names
// the first difference ("path /host/dir/x added", "... removed", "...
// changed (mode)"); err is set only when the check itself failed. It reads
// the host trees and changes nothing, on disk or in the mounts.
//
// A session without workspaces is fresh. Extra mounts are not checked. A
// session loaded from disk was not scanned in this process and is never
// fresh.
//
// Fresh walks each tree once, like the scan at Setup, and hashes a file's
// content only where Setup did (a filesystem with whole-second
// timestamps) and all of its metadata still matches. A change made while
// Fresh walks a part of the tree it has already passed is not seen.
func (s *Session) Fresh(ctx context.Context) (fresh bool, reason string, err error) {
	s.mu.Lock()
	ws := slices.Clone(s.st.Workspaces)
	scans := s.scans
	s.mu.Unlock()
	if len(scans) != len(ws) {
		return false, "not scanned in this process", nil
	}
	for i := range ws {
		reason, err := freshTree(ctx, &ws[i], scans[i])
		if err != nil {
			return false, "", fmt.Errorf("fresh: workspace %s: %w", ws[i].HostPath, err)
		}
		if reason != "" {
			return false, reason, nil
		}
	}
	return true, "", nil
}

// errStale stops a walk at the first difference.
var errStale = errors.New("tree changed")

// freshTree compares workspace w's host tree with the entries Setup
// scanned, and returns why they differ ("" when they do not).
func freshTree(ctx context.Context, w *wsState, was []entry) (string, error) {
	t, err := openTree(w.HostPath)
	if changedUnder(err) {
		return fmt.Sprintf("workspace %s is gone", w.HostPath), nil
	}
	if err != nil {
		return "", err
	}
	defer t.Close()
	root, err := t.lstat("")
	if err != nil {
		return "", err
	}
	if root.Ino != w.RootIno || root.Dev != w.RootDev {
		return fmt.Sprintf("workspace %s was replaced", w.HostPath), nil
	}
	// A directory's size, link count and times change with the entries
	// it holds, which are compared one by one; such a difference is
	// reported only when no entry beneath it tells more (something was
	// created and removed again, say).
	k, reason, dirReason := 0, "", ""
	err = scan(ctx, t, func(now *entry, hash bool) error {
		if k >= len(was) || now.Path != was[k].Path {
			reason = staleReason(w.HostPath, was, k, now)
			return errStale
		}
		if d := entryDiff(&was[k], now); d != "" {
			if !now.isDir() || !sameDirIdentity(&was[k], now) {
				reason = staleReason(w.HostPath, was, k, now)
				return errStale
			}
			if dirReason == "" {
				dirReason = staleReason(w.HostPath, was, k, now)
			}
		}
		// The metadata matches, so hash is set exactly when Setup hashed
		// the file (only on filesystems with whole-second timestamps).
		if hash || was[k].Hash != "" {
			h := ""
			if hash {
				var err error
				if h, err = hashFile(t, now.Path); err != nil {
					return err
				}
			}
			if h != was[k].Hash {
				reason = staleReason(w.HostPath, was, k, now)
				return errStale
			}
		}
		k++
		return nil
	})
	switch {
	case errors.Is(err, errStale):
		return reason, nil
	case changedUnder(err):
		p := w.HostPath
		var pe *os.PathError
		if errors.As(err, &pe) {
			p = pe.Path
		}
		return fmt.Sprintf("path %s changed during the check", p), nil
	case err != nil:
		return "", err
	case k < len(was):
		return staleReason(w.HostPath, was, k, nil), nil
	}
	return dirReason, nil
}

// sameDirIdentity reports whether two entries of a directory differ at
// most in what changes with the entries it holds.
func sameDirIdentity(was, now *entry) bool {
	n := *now
	n.Size, n.Nlink, n.Mtime, n.Ctime = was.Size, was.Nlink, was.Mtime, was.Ctime
	return entryDiff(was, &n) == ""
}

// changedUnder reports whether err shows a path changing while it was
// looked at: gone, no longer a directory, now a symlink or a mount point,
// no longer a symlink (readlink) or a regular file (hash).
func changedUnder(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) ||
		errors.Is(err, unix.EXDEV) || errors.Is(err, errNotRegular) {
		return true
	}
	var pe *os.PathError
	return errors.As(err, &pe) && pe.Op == "readlink" && errors.Is(pe.Err, unix.EINVAL)
}
