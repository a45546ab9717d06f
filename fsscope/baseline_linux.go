package fsscope

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"golang.org/x/sys/unix"
)

// hashLimit bounds the files hashed for the baseline on filesystems with
// coarse timestamps; bigger files rely on size, inode and times.
const hashLimit = 16 << 20

// entryFromStat fills an entry from a stat result.
func entryFromStat(rel string, st *unix.Stat_t) entry {
	return entry{
		Path:  rel,
		Mode:  st.Mode,
		UID:   st.Uid,
		GID:   st.Gid,
		Size:  st.Size,
		Ino:   st.Ino,
		Nlink: uint64(st.Nlink),
		Mtime: st.Mtim.Nano(),
		Ctime: st.Ctim.Nano(),
	}
}

// coarseTimes reports whether a file's timestamps look like they come from
// a filesystem without sub-second resolution, where a rewrite within the
// same second keeps mtime and ctime.
func coarseTimes(st *unix.Stat_t) bool {
	return st.Mtim.Nsec == 0 && st.Ctim.Nsec == 0
}

// snapshot walks a workspace and records every entry beneath its root.
func snapshot(ctx context.Context, t *tree) ([]entry, error) {
	var entries []entry
	err := t.walk("", func(rel string, st *unix.Stat_t) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		e := entryFromStat(rel, st)
		switch {
		case st.Dev != t.dev:
			e.Mount = true
		case e.isSymlink():
			target, err := t.readlink(rel)
			if err != nil {
				return false, err
			}
			e.Link = target
		case e.isRegular() && coarseTimes(st) && st.Size <= hashLimit:
			h, err := hashFile(t, rel)
			if err != nil {
				return false, err
			}
			e.Hash = h
		}
		entries = append(entries, e)
		return !e.Mount, nil
	})
	return entries, err
}

// hashFile returns the hex SHA-256 of the regular file rel.
func hashFile(t *tree, rel string) (string, error) {
	f, err := t.openFile(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// matchesBaseline reports whether the host path, as it is now (st), is the
// one the session saw (e). Directories compare by identity and metadata
// only: their size and times change whenever an entry inside does, and
// entries are checked one by one.
func matchesBaseline(t *tree, e *entry, st *unix.Stat_t) (bool, error) {
	if st.Mode != e.Mode || st.Ino != e.Ino || st.Uid != e.UID || st.Gid != e.GID {
		return false, nil
	}
	if e.isDir() {
		return true, nil
	}
	if st.Size != e.Size || st.Mtim.Nano() != e.Mtime || st.Ctim.Nano() != e.Ctime {
		return false, nil
	}
	if e.isSymlink() {
		target, err := t.readlink(e.Path)
		if err != nil {
			return false, err
		}
		return target == e.Link, nil
	}
	if e.Hash != "" {
		h, err := hashFile(t, e.Path)
		if err != nil {
			return false, err
		}
		return h == e.Hash, nil
	}
	return true, nil
}
