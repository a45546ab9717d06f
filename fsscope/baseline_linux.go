package fsscope

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"

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

// snapshot walks a workspace and records every entry beneath its root, in
// walk order (see walkCompare).
func snapshot(ctx context.Context, t *tree) ([]entry, error) {
	var entries []entry
	err := scan(ctx, t, func(e *entry, hash bool) error {
		if hash {
			h, err := hashFile(t, e.Path)
			if err != nil {
				return err
			}
			e.Hash = h
		}
		entries = append(entries, *e)
		return nil
	})
	return entries, err
}

// scan walks a workspace and calls fn with every entry beneath its root,
// in walk order, as snapshot records it but without its content hash:
// hash reports whether snapshot records one, which is left to fn.
func scan(ctx context.Context, t *tree, fn func(e *entry, hash bool) error) error {
	return t.walk("", func(rel string, st *unix.Stat_t) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		e := entryFromStat(rel, st)
		hash := false
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
			hash = true
		}
		if err := fn(&e, hash); err != nil {
			return false, err
		}
		return !e.Mount, nil
	})
}

// errNotRegular: a path to hash is no longer a regular file.
var errNotRegular = errors.New("not a regular file")

// hashFile returns the hex SHA-256 of the regular file rel. The file is
// opened non-blocking and checked once open, so that a FIFO or device put
// in its place neither blocks nor gets read.
func hashFile(t *tree, rel string) (string, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), t.errPath(rel))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", &os.PathError{Op: "stat", Path: t.errPath(rel), Err: err}
	}
	if st.Mode&sIFMT != sIFREG {
		return "", &os.PathError{Op: "hash", Path: t.errPath(rel), Err: errNotRegular}
	}
	h := sha256.New()
	if _, err := copyPooled(h, f); err != nil {
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
