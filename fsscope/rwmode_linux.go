package fsscope

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// unsafeBits are the mode bits an rw workspace may not keep from a
// session: a setuid or setgid file runs the sandbox's code as its owner
// for whoever executes it on the host, and a world-writable one lets any
// host user change what the operator runs next.
const unsafeBits = unix.S_ISUID | unix.S_ISGID | 0o002

// normaliseRW removes setuid, setgid and world-write bits from the
// regular files and directories of rw workspaces that changed since the
// session started (by ctime, so the host's own entries keep theirs), one
// audit event each. It runs when the sandbox is gone; while it runs, an rw
// workspace is the host directory itself and such bits are visible on the
// host (the sandbox's mount is nosuid, so they have no effect inside it).
//
// The walk is relative to directory fds, one open at a time, never by
// path: the sandbox may nest directories deeper than a path can name
// (PATH_MAX), and a path walk would stop there, before what follows.
func (s *Session) normaliseRW(audit func(Event)) error {
	for _, w := range s.st.Workspaces {
		if w.Mode != policies.ModeRW {
			continue
		}
		n := &rwNormaliser{w: w, started: s.st.Started, audit: audit}
		if err := n.run(); err != nil {
			return err
		}
	}
	return nil
}

type rwNormaliser struct {
	w       wsState
	started int64
	audit   func(Event)
	stack   []string // the path of the directory being walked, by element
}

// rel is name's path in the workspace; built only when needed, as the
// walk may be very deep.
func (n *rwNormaliser) rel(name string) string {
	return path.Join(append(slices.Clone(n.stack), name)...)
}

func (n *rwNormaliser) run() error {
	fd, err := unix.Open(n.w.HostPath, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: n.w.HostPath, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	if err := n.fix(fd, ".", true, &st); err != nil {
		unix.Close(fd)
		return err
	}
	fd, err = n.dir(fd, &st)
	if fd >= 0 {
		unix.Close(fd)
	}
	return err
}

// fix clears the unsafe bits of name in dirfd (st its lstat; root: the
// workspace itself, opened as dirfd with name ".") if the
// sandbox left them.
func (n *rwNormaliser) fix(dirfd int, name string, root bool, st *unix.Stat_t) error {
	typ := st.Mode & unix.S_IFMT
	bad := st.Mode & unsafeBits
	if typ != unix.S_IFREG && typ != unix.S_IFDIR || bad == 0 || st.Ctim.Nano() < n.started {
		return nil
	}
	flags := unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOFOLLOW | unix.O_CLOEXEC
	if typ == unix.S_IFDIR {
		flags |= unix.O_DIRECTORY
	}
	rel := ""
	if !root {
		rel = n.rel(name)
	}
	hostPath := path.Join(n.w.HostPath, rel)
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Resolve: resolveBeneath})
	if err != nil {
		return &os.PathError{Op: "openat2", Path: hostPath, Err: err}
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino {
		return fmt.Errorf("%s: replaced while its mode was being normalised", hostPath)
	}
	mode := st.Mode & 0o7777
	if err := unix.Fchmod(fd, mode&^bad); err != nil {
		return &os.PathError{Op: "chmod", Path: hostPath, Err: err}
	}
	if n.audit != nil {
		n.audit(Event{Time: time.Now(), Type: EventModeNormalised, Path: path.Join(n.w.Target, rel), HostPath: hostPath,
			Reason: fmt.Sprintf("the sandbox left mode %04o; now %04o (no setuid, setgid or world-write in an rw workspace)", mode, mode&^bad)})
	}
	return nil
}

// dir walks the directory open as fd (st its stat) and returns an fd of
// the same directory: to come back up from a subdirectory it opens ".."
// and checks that it is the directory it left, so that only one
// directory is open at a time however deep the tree.
func (n *rwNormaliser) dir(fd int, st *unix.Stat_t) (int, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return fd, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fd, err
	}
	slices.Sort(names)
	for _, name := range names {
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, name, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fd, &os.PathError{Op: "stat", Path: path.Join(n.w.HostPath, n.rel(name)), Err: err}
		}
		if err := n.fix(fd, name, false, &cst); err != nil {
			return fd, err
		}
		if cst.Mode&unix.S_IFMT != unix.S_IFDIR || cst.Dev != st.Dev {
			continue
		}
		cfd, err := unix.Openat2(fd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
		if err != nil {
			return fd, &os.PathError{Op: "openat2", Path: path.Join(n.w.HostPath, n.rel(name)), Err: err}
		}
		var got unix.Stat_t
		if err := unix.Fstat(cfd, &got); err != nil || got.Dev != cst.Dev || got.Ino != cst.Ino {
			unix.Close(cfd)
			return fd, fmt.Errorf("%s: replaced during the walk", path.Join(n.w.HostPath, n.rel(name)))
		}
		unix.Close(fd)
		n.stack = append(n.stack, name)
		cfd, err = n.dir(cfd, &got)
		n.stack = n.stack[:len(n.stack)-1]
		if err != nil {
			return cfd, err
		}
		fd, err = unix.Openat(cfd, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(cfd)
		if err != nil {
			return -1, err
		}
		if err := unix.Fstat(fd, &got); err != nil || got.Dev != st.Dev || got.Ino != st.Ino {
			return fd, fmt.Errorf("%s: moved during the walk", path.Join(n.w.HostPath, strings.Join(n.stack, "/")))
		}
	}
	return fd, nil
}
