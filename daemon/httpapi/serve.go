package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/httpserve"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/sdnotify"
)

// Serve listens on the unix socket path (mode 0600, or 0660 with group
// ownership when group is set) and serves d's API until ctx is done. d
// must agree to be served there first (Daemon.ExposeAPI): every member of
// group can create sessions.
func Serve(ctx context.Context, d Daemon, socket, group string) error {
	if err := d.ExposeAPI(socket, group); err != nil {
		return err
	}
	l, err := Listen(socket, group)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           New(d),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       connContext,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.G(ctx).Info("serving API", "socket", socket)
	if err := sdnotify.Notify("READY=1\nSTATUS=serving the API on " + socket); err != nil {
		log.G(ctx).Warn("telling the service manager the daemon is ready", "error", err)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	_ = sdnotify.Notify("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Closing the listener removes the socket file.
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	return err
}

// ServeCredentials serves the credential verification endpoints h (the
// daemon's CredentialsHandler) on a TCP address until the returned server
// is closed. The address must be one services reach and sessions do not
// (the gateway's uplink side, or the host).
func ServeCredentials(ctx context.Context, h http.Handler, addr string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := httpserve.Server(h, httpserve.Default)
	go func() { _ = srv.Serve(httpserve.Listener(l, httpserve.Default)) }()
	log.G(ctx).Info("serving credential verification endpoints", "address", l.Addr().String())
	return srv, nil
}

// afterBind, when set (by tests), is called with the path a socket was
// just bound at, before its mode and owner are set.
var afterBind func(path string)

// Listen opens the API socket with restrictive permissions: mode 0600, or
// 0660 and owned by group when one is given. The socket is bound in a
// private directory (mode 0700) beside its final path, given its owner
// and mode there and then renamed into place, so it is never reachable
// with a mode that depends on the umask. The directory holding the socket
// must belong to airlockd's user and be writable by nobody else: whoever
// can write there can replace the socket.
func Listen(socket, group string) (_ net.Listener, retErr error) {
	gid := -1
	if group != "" {
		var err error
		if gid, err = LookupGroup(group); err != nil {
			return nil, err
		}
	}
	dir := dirOf(socket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		return nil, fmt.Errorf("another daemon is serving on %s: %w", socket, errdefs.ErrAlreadyExists)
	}
	tmp, err := os.MkdirTemp(dir, ".s")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bound := tmp + "/s"
	l, err := net.Listen("unix", bound)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", socket, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	defer func() {
		if retErr != nil {
			ul.Close()
		}
	}()
	if afterBind != nil {
		afterBind(bound)
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		if err := os.Chown(bound, os.Geteuid(), gid); err != nil {
			return nil, err
		}
		mode = 0o660
	}
	if err := os.Chmod(bound, mode); err != nil {
		return nil, err
	}
	if err := os.Rename(bound, socket); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(socket, &st); err != nil {
		return nil, err
	}
	return &socketListener{UnixListener: ul, path: socket, ino: st.Ino}, nil
}

// socketListener removes its socket file on Close, unless another
// listener has replaced it.
type socketListener struct {
	*net.UnixListener
	path string
	ino  uint64
}

func (l *socketListener) Close() error {
	var st syscall.Stat_t
	if err := syscall.Stat(l.path, &st); err == nil && st.Ino == l.ino {
		_ = os.Remove(l.path)
	}
	return l.UnixListener.Close()
}

// checkSocketDir refuses a socket directory that another user owns or
// that group or others may write to.
func checkSocketDir(dir string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("socket directory %s belongs to uid %d, not to airlockd's uid %d: whoever owns it can replace the socket; use a directory airlockd's user owns, such as /run/airlock: %w",
			dir, st.Uid, euid, errdefs.ErrPermissionDenied)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("socket directory %s has mode %04o: group or others can write to it and replace the socket; use a directory only airlockd's user can write to (mode 0755 or stricter): %w",
			dir, st.Mode&0o7777, errdefs.ErrPermissionDenied)
	}
	return nil
}

// LookupGroup returns the gid of a group given by name or number.
func LookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}
