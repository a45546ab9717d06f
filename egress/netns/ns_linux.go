package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// DefaultDir is where named network namespaces are bind-mounted; it is the
// directory iproute2's `ip netns` uses, so `ip netns` sees ours.
const DefaultDir = "/run/netns"

var sharedDirMu sync.Mutex

// ensureSharedDir creates dir and makes it a shared mount point, as
// `ip netns add` does, so that namespace mounts below it propagate to mount
// namespaces created later and their removal propagates too.
func ensureSharedDir(dir string) error {
	sharedDirMu.Lock()
	defer sharedDirMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("make %s a shared mount: %w", dir, err)
		}
		// Not a mount point yet: bind it onto itself first.
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", dir, err)
		}
	}
}

// Create makes a new network namespace and bind-mounts it at dir/name, so
// that it outlives this process, and returns that path. It fails with
// errdefs.ErrAlreadyExists if the path exists.
//
// The namespace is made on a locked OS thread that unshares, mounts the
// new namespace and joins its old one again before it is unlocked. It is
// not left to die locked in the new namespace: when that thread is the
// main thread, the runtime cannot end it and parks it instead, so the
// namespace would outlive Remove, and /proc/self/ns/net (the main
// thread's) would name it as the process's own.
func Create(dir, name string) (_ string, retErr error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("netns name %q: %w", name, errdefs.ErrInvalidArgument)
	}
	if err := ensureSharedDir(dir); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("netns %s: %w", path, errdefs.ErrAlreadyExists)
		}
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(path)
		}
	}()

	errc := make(chan error, 1)
	go func() {
		back, err := leaveLocked(func() error { return os.NewSyscallError("unshare", unix.Unshare(unix.CLONE_NEWNET)) })
		if err != nil {
			errc <- err
			return
		}
		src := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		merr := os.NewSyscallError("mount", unix.Mount(src, path, "none", unix.MS_BIND, ""))
		if err := back(); err != nil {
			merr = errors.Join(merr, err)
		}
		errc <- merr
	}()
	if err := <-errc; err != nil {
		return "", fmt.Errorf("create netns %s: %w", path, err)
	}
	return path, nil
}

// Remove unmounts and deletes a namespace made by Create. The namespace
// itself lives on while a process, socket or open file still refers to it.
// A missing path is not an error.
func Remove(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// IsNetns reports whether path is a network namespace (a mounted one, or a
// /proc ns link).
func IsNetns(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}

// Do runs fn on an OS thread that has joined the network namespace at path,
// and returns fn's error. Sockets fn creates belong to that namespace for
// their whole life, so fn can open listeners and connections that the
// caller then uses from any goroutine. Goroutines started by fn do not run
// in the namespace.
func Do(path string, fn func() error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer f.Close()
	if !IsNetns(path) {
		return fmt.Errorf("%s is not a network namespace: %w", path, errdefs.ErrInvalidArgument)
	}
	return doFd(int(f.Fd()), fn)
}

// doFd is Do for an open namespace file. It follows gVisor's joinNetNS:
// lock the thread, enter, run, and restore; if restoring fails the thread
// stays locked and the runtime terminates it with the goroutine.
func doFd(fd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		back, err := leaveLocked(func() error { return os.NewSyscallError("setns", unix.Setns(fd, unix.CLONE_NEWNET)) })
		if err != nil {
			errc <- err
			return
		}
		ferr := fn()
		if err := back(); err != nil {
			ferr = errors.Join(ferr, err)
		}
		errc <- ferr
	}()
	return <-errc
}

// leaveLocked locks the calling goroutine to its thread, keeps the
// thread's network namespace, and calls leave to move the thread out of
// it. back joins the kept namespace again and unlocks the thread. If
// leave fails, the thread is unlocked where it was; if joining again
// fails, the thread stays locked, so that the runtime ends it with its
// goroutine. A thread must not be left to die locked in another
// namespace: the main thread cannot die, and the runtime parks it
// instead, in that namespace for good (see Create).
func leaveLocked(leave func() error) (back func() error, _ error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("open current netns: %w", err)
	}
	if err := leave(); err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() error {
		defer orig.Close()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("restore netns: %w", os.NewSyscallError("setns", err))
		}
		runtime.UnlockOSThread()
		return nil
	}, nil
}

// DialFunc dials like net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Dialer returns a DialFunc whose connections are made in the network
// namespace at path. Addresses must be literal IPs: names would be resolved
// with the host's configuration.
func Dialer(path string) DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		var c net.Conn
		err := Do(path, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, address)
			return err
		})
		return c, err
	}
}

// Listen is net.Listen in the network namespace at path.
func Listen(path, network, address string) (net.Listener, error) {
	var l net.Listener
	err := Do(path, func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}

// ListenPacket is net.ListenPacket in the network namespace at path.
func ListenPacket(path, network, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := Do(path, func() error {
		var err error
		c, err = net.ListenPacket(network, address)
		return err
	})
	return c, err
}

// writeSysctl writes a /proc/sys value. Under /proc/sys/net the namespace
// is the one of the thread that opens the file, so callers run it inside Do.
func writeSysctl(name, value string) error {
	p := filepath.Join("/proc/sys", filepath.FromSlash(name))
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", name, value, err)
	}
	return nil
}
