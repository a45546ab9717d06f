package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// NSDialer dials from one network namespace without entering it for
// each connection. A socket belongs to the namespace it was created in
// for its whole life, so only socket(2) runs there: on one OS thread that
// joined the namespace once and stays in it until Close. The connect,
// and everything after, run on the caller's goroutine as net.Dialer's
// do. Do, by contrast, opens the namespace, starts and locks a thread
// and enters and leaves the namespace on every call, which costs a
// gateway that dials an upstream per connection more CPU than the rest
// of the dial.
type NSDialer struct {
	path string
	reqs chan socketReq
	done chan struct{}
	once sync.Once
}

type socketReq struct {
	family, sotype int
	res            chan socketRes
}

type socketRes struct {
	fd  int
	err error
}

// errDialerClosed is returned by a dial after Close.
var errDialerClosed = errors.New("netns: dialer closed")

// NewDialer returns an NSDialer for the network namespace at path. Close
// it to end its thread.
func NewDialer(path string) (*NSDialer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open netns: %w", err)
	}
	defer f.Close()
	if !IsNetns(path) {
		return nil, fmt.Errorf("%s is not a network namespace: %w", path, unix.EINVAL)
	}
	d := &NSDialer{path: path, reqs: make(chan socketReq), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		// The thread stays in the namespace until Close, then joins its
		// old one again before it is unlocked: a thread left to die
		// locked would, if it is the main thread, be parked in the
		// namespace for good instead (see Create).
		back, err := leaveLocked(func() error { return os.NewSyscallError("setns", unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)) })
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = back() }()
		errc <- nil
		for {
			select {
			case r := <-d.reqs:
				fd, err := unix.Socket(r.family, r.sotype|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					r.res <- socketRes{fd: -1, err: os.NewSyscallError("socket", err)}
					continue
				}
				r.res <- socketRes{fd: fd}
			case <-d.done:
				return
			}
		}
	}()
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("join netns %s: %w", path, err)
	}
	return d, nil
}

// Close ends the dialer's thread; later dials fail. Connections it made
// stay open.
func (d *NSDialer) Close() {
	d.once.Do(func() { close(d.done) })
}

// socket creates a non-blocking, close-on-exec socket in the namespace.
func (d *NSDialer) socket(family, sotype int) (int, error) {
	res := make(chan socketRes, 1)
	select {
	case d.reqs <- socketReq{family: family, sotype: sotype, res: res}:
	case <-d.done:
		return -1, errDialerClosed
	}
	// The thread answers every request it took.
	r := <-res
	return r.fd, r.err
}

// DialContext dials like net.Dialer.DialContext, from the namespace.
// Addresses must be literal IPs with a port: names would be resolved with
// the host's configuration. TCP and UDP are dialled on the caller's
// goroutine; other networks, and addresses with a zone, go through Do.
func (d *NSDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	var sotype int
	switch network {
	case "tcp", "tcp4", "tcp6":
		sotype = unix.SOCK_STREAM
	case "udp", "udp4", "udp6":
		sotype = unix.SOCK_DGRAM
	}
	if err != nil || sotype == 0 || ap.Addr().Zone() != "" {
		return Dialer(d.path)(ctx, network, address)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	var (
		family int
		sa     unix.Sockaddr
	)
	if ap.Addr().Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	if last := network[len(network)-1]; last == '4' && family != unix.AF_INET || last == '6' && family != unix.AF_INET6 {
		// As net.Dialer answers it.
		return Dialer(d.path)(ctx, network, address)
	}
	opErr := func(err error) error {
		var addr net.Addr = net.TCPAddrFromAddrPort(ap)
		if sotype == unix.SOCK_DGRAM {
			addr = net.UDPAddrFromAddrPort(ap)
		}
		return &net.OpError{Op: "dial", Net: network, Addr: addr, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(err)
	}
	fd, err := d.socket(family, sotype)
	if err != nil {
		return nil, opErr(err)
	}
	// f owns fd; net.FileConn takes a copy of it.
	f := os.NewFile(uintptr(fd), "netns-dial")
	defer f.Close()
	if err := connect(ctx, f, sa); err != nil {
		return nil, opErr(err)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, opErr(err)
	}
	return c, nil
}

// connect connects f's non-blocking socket to sa, waiting in the runtime's
// poller until it is connected, it fails, or ctx ends.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok {
		if err := f.SetWriteDeadline(deadline); err != nil {
			return err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	started := false
	werr := rc.Write(func(fd uintptr) bool {
		if !started {
			started = true
			switch err := unix.Connect(int(fd), sa); err {
			case nil:
				return true
			case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
				return false
			default:
				cerr = os.NewSyscallError("connect", err)
				return true
			}
		}
		// Woken: connected, failed, or (as the runtime's poller may)
		// spuriously; as net's own connect tells them apart.
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			cerr = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := unix.Errno(n); e {
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		case unix.EISCONN:
			return true
		case 0:
			_, err := unix.Getpeername(int(fd))
			return err == nil
		default:
			cerr = os.NewSyscallError("connect", e)
			return true
		}
	})
	if werr != nil {
		if err := ctx.Err(); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return os.ErrDeadlineExceeded
			}
			return err
		}
		return werr
	}
	if cerr != nil {
		return cerr
	}
	return f.SetWriteDeadline(time.Time{})
}
