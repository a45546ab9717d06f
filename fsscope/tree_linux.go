package fsscope

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// resolveBeneath is how every path below a tree root is resolved: never
// above the root, through no symlink (not even a last component, unless the
// caller opens it O_PATH|O_NOFOLLOW), no magic link and no mount crossing.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// tree is a directory used as the root of symlink-free path resolution
// (openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV). Paths
// given to its methods are slash-separated and relative; "" or "." is the
// root itself.
type tree struct {
	fd   int
	path string
	dev  uint64
}

// openHostTree opens a host path a session is given (a workspace or mount
// root) as a tree root. No component of dir may be a symlink: the daemon
// resolves and admits host paths before Setup, so a symlink here means the
// path changed since, and following it would give the session what
// admission never saw.
func openHostTree(dir string) (*tree, error) {
	fd, err := openHostPath(dir, unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return &tree{fd: fd, path: dir, dev: st.Dev}, nil
}

// openHostPath opens dir (O_PATH, with flags) refusing a symlink in any
// component, as openHostTree.
func openHostPath(dir string, flags int) (int, error) {
	if !filepath.IsAbs(dir) {
		return -1, fmt.Errorf("host path %q is not absolute: %w", dir, errdefs.ErrInvalidArgument)
	}
	how := &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_CLOEXEC | flags), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, filepath.Clean(dir), how)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP):
			return -1, fmt.Errorf("host path %s goes through a symlink (it changed since it was resolved and admitted): %w", dir, errdefs.ErrFailedPrecondition)
		case err != nil:
			return -1, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// openTree opens dir as a tree root. dir itself must not be a symlink.
func openTree(dir string) (*tree, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: dir, Err: err}
	}
	return &tree{fd: fd, path: dir, dev: st.Dev}, nil
}

func (t *tree) Close() error {
	if t == nil || t.fd < 0 {
		return nil
	}
	err := unix.Close(t.fd)
	t.fd = -1
	return err
}

func (t *tree) errPath(rel string) string { return path.Join(t.path, rel) }

func relOrDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// open opens rel beneath the root. flags get O_CLOEXEC|O_NOFOLLOW added.
func (t *tree) open(rel string, flags int, mode uint32) (int, error) {
	how := &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
		Mode:    uint64(mode),
		Resolve: resolveBeneath,
	}
	for {
		fd, err := unix.Openat2(t.fd, relOrDot(rel), how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: t.errPath(rel), Err: err}
		}
		return fd, nil
	}
}

// openFile opens rel for reading as an *os.File; rel must be a regular file.
func (t *tree) openFile(rel string) (*os.File, error) {
	fd, err := t.open(rel, unix.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), t.errPath(rel)), nil
}

// parent opens the directory holding rel (O_PATH) and returns it with the
// last element of rel.
func (t *tree) parent(rel string) (int, string, error) {
	dir, name := path.Split(rel)
	if name == "" || name == "." || name == ".." {
		return -1, "", &os.PathError{Op: "resolve", Path: t.errPath(rel), Err: unix.EINVAL}
	}
	fd, err := t.open(strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

// lstat stats rel without following a final symlink.
func (t *tree) lstat(rel string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if rel == "" || rel == "." {
		if err := unix.Fstat(t.fd, &st); err != nil {
			return nil, &os.PathError{Op: "stat", Path: t.path, Err: err}
		}
		return &st, nil
	}
	fd, err := t.open(rel, unix.O_PATH, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: t.errPath(rel), Err: err}
	}
	return &st, nil
}

// readlink reads the symlink rel.
func (t *tree) readlink(rel string) (string, error) {
	pfd, name, err := t.parent(rel)
	if err != nil {
		return "", err
	}
	defer unix.Close(pfd)
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(pfd, name, buf)
		if err != nil {
			return "", &os.PathError{Op: "readlink", Path: t.errPath(rel), Err: err}
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// readDir returns the sorted names in the directory rel.
func (t *tree) readDir(rel string) ([]string, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), t.errPath(rel))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}

// getxattr reads an extended attribute of rel (a directory or file, not a
// symlink). A missing attribute is "" with no error.
func (t *tree) getxattr(rel, name string) (string, error) {
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, 256)
	n, err := unix.Fgetxattr(fd, name, buf)
	switch {
	case errors.Is(err, unix.ENODATA):
		return "", nil
	case err != nil:
		return "", &os.PathError{Op: "getxattr " + name, Path: t.errPath(rel), Err: err}
	}
	return string(buf[:n]), nil
}

// syncfs flushes the filesystem holding the tree to disk.
func (t *tree) syncfs() error {
	fd, err := t.open("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// walkFunc is called for every entry of a walk, parents before children.
// Returning descend=false for a directory skips its contents.
type walkFunc func(rel string, st *unix.Stat_t) (descend bool, err error)

// walk visits rel and everything beneath it in lexical order, without
// following symlinks and without entering other filesystems (a mount point
// is visited but not entered: overlayfs and non-recursive binds do not show
// what is mounted beneath a layer either).
func (t *tree) walk(rel string, fn walkFunc) error {
	st, err := t.lstat(rel)
	if err != nil {
		return err
	}
	return t.walkEntry(rel, st, fn)
}

func (t *tree) walkEntry(rel string, st *unix.Stat_t, fn walkFunc) error {
	descend, err := fn(rel, st)
	if err != nil || !descend || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != t.dev {
		return err
	}
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), t.errPath(rel))
	names, err := f.Readdirnames(-1)
	if err != nil && err != io.EOF {
		f.Close()
		return err
	}
	slices.Sort(names)
	type child struct {
		name string
		st   unix.Stat_t
	}
	children := make([]child, 0, len(names))
	for _, name := range names {
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			f.Close()
			return &os.PathError{Op: "stat", Path: t.errPath(path.Join(rel, name)), Err: err}
		}
		children = append(children, child{name, cst})
	}
	f.Close()
	for i := range children {
		c := &children[i]
		if err := t.walkEntry(joinRel(rel, c.name), &c.st, fn); err != nil {
			return err
		}
	}
	return nil
}

// isWhiteout reports whether st is an overlayfs whiteout (char device 0/0).
func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// testHookUnlink, when set, runs before each entry emptyDir removes; an
// error stops the removal there (a daemon killed in the middle of it).
var testHookUnlink func(rel string) error

// removeAllBeneath removes rel and everything beneath it without following
// symlinks and without descending into another filesystem: a mount found
// inside is an error, never something to delete through.
func (t *tree) removeAllBeneath(rel string) error {
	st, err := t.lstat(rel)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := t.emptyDir(rel, st.Dev); err != nil {
			return err
		}
	}
	if rel == "" || rel == "." {
		return nil
	}
	pfd, name, err := t.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: t.errPath(rel), Err: err}
	}
	return nil
}

// emptyDir removes everything inside the directory rel (on device dev),
// working relative to the directory's descriptor.
func (t *tree) emptyDir(rel string, dev uint64) error {
	if dev != t.dev {
		return fmt.Errorf("remove %s: %w (a filesystem is mounted there)", t.errPath(rel), unix.EBUSY)
	}
	fd, err := t.open(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), t.errPath(rel))
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		if len(names) == 0 {
			if err != nil && err != io.EOF {
				return err
			}
			return nil
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return &os.PathError{Op: "stat", Path: t.errPath(joinRel(rel, name)), Err: err}
			}
			flags := 0
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				if err := t.emptyDir(joinRel(rel, name), st.Dev); err != nil {
					return err
				}
				flags = unix.AT_REMOVEDIR
			}
			if testHookUnlink != nil {
				if err := testHookUnlink(joinRel(rel, name)); err != nil {
					return err
				}
			}
			if err := unix.Unlinkat(fd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
				return &os.PathError{Op: "remove", Path: t.errPath(joinRel(rel, name)), Err: err}
			}
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
}

// removeStateDir removes dir (a session's private state) after checking
// that nothing is mounted beneath it.
func removeStateDir(dir string) error {
	if m, err := mountsUnder(dir); err != nil {
		return err
	} else if len(m) > 0 {
		return fmt.Errorf("remove %s: %d mounts remain beneath it (%s): %w", dir, len(m), m[0], unix.EBUSY)
	}
	// The state file goes first: a daemon killed in the middle of the
	// removal leaves a directory that Load says holds no session (and
	// Cleanup finishes), never a session that lost part of itself (its
	// quota image, its baselines) and fails every operation.
	if testHookUnlink != nil {
		if err := testHookUnlink(stateFile); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, stateFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	t, err := openTree(dir)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	err = t.removeAllBeneath("")
	t.Close()
	if err != nil {
		return err
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
