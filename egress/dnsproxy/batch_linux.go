package dnsproxy

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// readBatch is how many queries one recvmmsg(2) reads at most. Under load
// a batch takes every query queued on the socket in one system call, where
// recvmsg(2) took one each; at a low rate it reads the one query there is,
// as recvmsg did.
const readBatch = 32

// mmsghdr is struct mmsghdr: a message header and the length received.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// batchReader reads queries from a UDP socket with recvmmsg(2), each with
// its client and destination address (IP_PKTINFO, IPV6_PKTINFO), into
// packets from the pool, and hands them out one by one.
type batchReader struct {
	raw   syscall.RawConn
	hdrs  [readBatch]mmsghdr
	iovs  [readBatch]unix.Iovec
	names [readBatch]unix.RawSockaddrInet6 // room for either family
	pkts  [readBatch]*packet               // received packets and buffers for the next read
	n     int                              // packets received by the last read
	next  int                              // the next of them to hand out
	err   error                            // the last read's error
	recv  func(fd uintptr) bool            // r.do, made once
	fills int                              // batches read: for tests
}

func newBatchReader(c *net.UDPConn) (*batchReader, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &batchReader{raw: raw}
	r.recv = r.do
	return r, nil
}

// read returns the next query, reading a new batch when every packet of
// the last one has been handed out. The packet is the caller's.
func (r *batchReader) read() (*packet, error) {
	if r.next == r.n {
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	i := r.next
	r.next++
	p, h := r.pkts[i], &r.hdrs[i]
	r.pkts[i] = nil
	p.n = int(h.n)
	p.src = sockaddrToAddrPort(&r.names[i])
	p.pi = parsePktinfo(p.oob[:min(int(h.hdr.Controllen), len(p.oob))])
	return p, nil
}

// fill reads one batch: at least one packet, waiting for it in the
// runtime's poller (which honours the socket's read deadline).
func (r *batchReader) fill() error {
	for i := range r.pkts {
		p := r.pkts[i]
		if p == nil {
			p = packets.Get().(*packet)
			r.pkts[i] = p
		}
		r.iovs[i] = unix.Iovec{Base: &p.buf[0]}
		r.iovs[i].SetLen(len(p.buf))
		r.hdrs[i] = mmsghdr{hdr: unix.Msghdr{
			Name:    (*byte)(unsafe.Pointer(&r.names[i])),
			Namelen: unix.SizeofSockaddrInet6,
			Iov:     &r.iovs[i],
			Control: &p.oob[0],
		}}
		r.hdrs[i].hdr.Iovlen = 1
		r.hdrs[i].hdr.SetControllen(len(p.oob))
	}
	r.n, r.next, r.err = 0, 0, nil
	if err := r.raw.Read(r.recv); err != nil {
		return err
	}
	r.fills++
	return r.err
}

// do is the syscall.RawConn Read callback: it reports false (wait until
// readable) while there is nothing to read. The call is raw, as fdRead's:
// it never blocks.
func (r *batchReader) do(fd uintptr) bool {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), readBatch, unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			r.n = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		r.err = os.NewSyscallError("recvmmsg", errno)
		return true
	}
}

// close returns the packets the reader holds to the pool.
func (r *batchReader) close() {
	for i, p := range r.pkts {
		if p != nil {
			putPacket(p)
			r.pkts[i] = nil
		}
	}
	r.n, r.next = 0, 0
}

// sockaddrToAddrPort converts a received struct sockaddr_in or
// sockaddr_in6 as the net package does, an IPv6 scope as its number.
func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.Scope_id != 0 {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, ntohs(sa.Port))
	}
	return netip.AddrPort{}
}

// ntohs reads a port stored in network byte order.
func ntohs(port uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&port))
	return uint16(b[0])<<8 | uint16(b[1])
}

// Answers are sent in batches with sendmmsg(2): a worker's answer is
// queued, and the worker that finds no send in progress sends every
// answer queued, its own and those queued while it sends, until none is
// left. At a low rate each answer is sent at once, alone, by its own
// worker; under load the answers that come while one sendmmsg runs go
// together in the next. A worker never waits for another's send: its
// answer is copied into the queue. Past maxQueuedAnswers queued, and for
// addresses the batch does not encode (an IPv6 scope given by name), a
// worker sends its answer itself with sendmsg(2), as before.
const (
	writeBatch       = 32
	maxQueuedAnswers = 256
)

// queuedAnswer is one answer waiting in a batchWriter's queue.
type queuedAnswer struct {
	b    []byte
	name unix.RawSockaddrInet6 // the client, as the socket's family has it
	nlen uint32
	oob  [oobSize]byte
	oobn int
}

// batchWriter sends answers from one UDP socket in batches.
type batchWriter struct {
	ctx    context.Context // for the sender's debug log of failed sends
	c      *net.UDPConn
	raw    syscall.RawConn
	family int // the socket's: AF_INET or AF_INET6

	mu      sync.Mutex
	queue   []*queuedAnswer // +checklocks:mu
	free    []*queuedAnswer // +checklocks:mu
	sending bool            // +checklocks:mu

	// Used by the sending worker only.
	out  []*queuedAnswer
	hdrs [writeBatch]mmsghdr
	iovs [writeBatch]unix.Iovec
	k    int                   // answers of the current sendmmsg
	sent int                   // of those, sent
	err  error                 // the current sendmmsg's error
	send func(fd uintptr) bool // w.sendmmsg, made once
	// batches counts sendmmsg calls that sent answers, answers those
	// answers: for tests.
	batches, answers int
}

func newBatchWriter(ctx context.Context, c *net.UDPConn) (*batchWriter, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var family int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		family, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, os.NewSyscallError("getsockopt", serr)
	}
	w := &batchWriter{ctx: ctx, c: c, raw: raw, family: family}
	w.send = w.sendmmsg
	return w, nil
}

// write sends b to uw's client from the address its query was sent to,
// now or in the batch being gathered. An error is that of a send made
// at once; a failed send of a batch is logged.
func (w *batchWriter) write(uw *udpWriter, b []byte) (int, error) {
	w.mu.Lock()
	if len(w.queue) >= maxQueuedAnswers {
		w.mu.Unlock()
		return writeUDP(w.c, uw, b)
	}
	var a *queuedAnswer
	if n := len(w.free); n > 0 {
		a, w.free = w.free[n-1], w.free[:n-1]
	} else {
		a = new(queuedAnswer)
	}
	if !w.encodeName(a, uw.src) {
		w.free = append(w.free, a)
		w.mu.Unlock()
		return writeUDP(w.c, uw, b)
	}
	a.b = append(a.b[:0], b...)
	a.oobn = len(pktinfoCmsg(a.oob[:], uw.pi.dst))
	w.queue = append(w.queue, a)
	if w.sending {
		w.mu.Unlock()
		return len(b), nil
	}
	w.sending = true
	for len(w.queue) > 0 {
		w.out, w.queue = w.queue, w.out[:0]
		w.mu.Unlock()
		w.sendOut()
		w.mu.Lock()
		for i, a := range w.out {
			if cap(a.b) <= maxUDPRead {
				w.free = append(w.free, a)
			}
			w.out[i] = nil
		}
	}
	w.sending = false
	w.mu.Unlock()
	return len(b), nil
}

// encodeName writes dst into a as a sockaddr of the socket's family, as
// the net package would; false if the batch cannot send to it.
func (w *batchWriter) encodeName(a *queuedAnswer, dst netip.AddrPort) bool {
	ip := dst.Addr()
	a.name = unix.RawSockaddrInet6{}
	nport := ntohs(dst.Port()) // the swap is its own inverse
	switch {
	case w.family == unix.AF_INET && (ip.Is4() || ip.Is4In6()):
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&a.name))
		sa.Family, sa.Port, sa.Addr = unix.AF_INET, nport, ip.Unmap().As4()
		a.nlen = unix.SizeofSockaddrInet4
	case w.family == unix.AF_INET6 && ip.IsValid():
		a.name.Family, a.name.Port, a.name.Addr = unix.AF_INET6, nport, ip.As16()
		if z := ip.Zone(); z != "" {
			id, err := strconv.ParseUint(z, 10, 32)
			if err != nil {
				return false
			}
			a.name.Scope_id = uint32(id)
		}
		a.nlen = unix.SizeofSockaddrInet6
	default:
		return false
	}
	return true
}

// sendOut sends the answers in w.out, writeBatch at a time, waiting for
// room in the socket's send buffer as a write would.
func (w *batchWriter) sendOut() {
	for i := 0; i < len(w.out); {
		k := min(len(w.out)-i, writeBatch)
		for j, a := range w.out[i : i+k] {
			w.iovs[j] = unix.Iovec{Base: unsafe.SliceData(a.b)}
			w.iovs[j].SetLen(len(a.b))
			w.hdrs[j] = mmsghdr{hdr: unix.Msghdr{
				Name:    (*byte)(unsafe.Pointer(&a.name)),
				Namelen: a.nlen,
				Iov:     &w.iovs[j],
			}}
			w.hdrs[j].hdr.Iovlen = 1
			if a.oobn > 0 {
				w.hdrs[j].hdr.Control = &a.oob[0]
				w.hdrs[j].hdr.SetControllen(a.oobn)
			}
		}
		w.k, w.sent, w.err = k, 0, nil
		err := w.raw.Write(w.send)
		if err == nil {
			err = w.err
		}
		if w.sent > 0 {
			w.batches++
			w.answers += w.sent
			i += w.sent
			continue
		}
		// The first answer failed: it is dropped, as a failed sendmsg's
		// answer was, and the others are sent.
		log.G(w.ctx).Debug("dns: write answer", "error", err)
		i++
	}
}

// sendmmsg is the syscall.RawConn Write callback: it reports false (wait
// until writable) while the send buffer is full. The call is raw, as
// fdWrite's: it never blocks.
func (w *batchWriter) sendmmsg(fd uintptr) bool {
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[0])), uintptr(w.k), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			w.sent = int(n)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		w.err = os.NewSyscallError("sendmmsg", errno)
		return true
	}
}
