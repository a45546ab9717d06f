package dnsproxy

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
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
