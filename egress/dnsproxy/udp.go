package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// UDP queries are served by a bounded pool of worker goroutines, never by
// a goroutine per query. A query needs a deep stack (message parsing, the
// handler chain, the session's audit encoding); a goroutine started per
// query grows its stack by copying, several times, on every query, while a
// worker keeps its grown stack between queries. The reader loop hands each
// query to an idle worker; when every worker is busy (slow upstreams) it
// starts another, up to maxUDPWorkers, so that a stalled upstream never
// holds up other sessions' queries; beyond that a query is dropped (and
// counted as overloaded). The first coreUDPWorkers workers stay for the
// socket's life; the others end after udpWorkerIdle without a query.
//
// On Linux the reader loop reads the queries queued on the socket in
// batches (recvmmsg, batchReader) and hands them out one by one: every
// system call costs much more than its work in a virtual machine, and
// under load one call reads many queries. Answers leave one by one, each
// from its own worker: gathering them into batches (sendmmsg) cut the
// calls of cache misses but made one worker send everyone's answers, and
// cache hits, which the workers answer at full speed, went a quarter
// slower (hack/perf.sh -only dns: x0.71-0.84 of a plain server against
// x1.04-1.05 without).
const (
	coreUDPWorkers = 64
	maxUDPWorkers  = 1024
)

// udpWorkerIdle is how long a worker beyond the core ones waits for a
// query before it ends; a variable for tests.
var udpWorkerIdle = 30 * time.Second

// aLongTimeAgo is a read deadline that unblocks a pending read at once.
var aLongTimeAgo = time.Unix(1, 0)

// packet is one UDP query and where its answer goes.
type packet struct {
	buf []byte // maxUDPRead bytes; the query is buf[:n]
	n   int
	// For *net.UDPConn sockets: the client, and the query's destination
	// address, which the answer leaves from.
	src netip.AddrPort
	pi  pktinfo
	// For other packet conns: the client.
	addr net.Addr
	oob  [oobSize]byte
	// w answers the query; it lives as long as the packet is served.
	w udpWriter
}

var packets = sync.Pool{New: func() any { return &packet{buf: make([]byte, maxUDPRead)} }}

// udpServer answers queries arriving on one packet socket: a reader loop
// hands each packet to an idle worker, starts a new worker while there are
// fewer than maxUDPWorkers, or else drops it.
type udpServer struct {
	s   *Server
	ctx context.Context
	pc  net.PacketConn
	udp *net.UDPConn // pc, when it is one: answers leave from the query's destination address
	br  *batchReader // reads udp

	work     chan *packet   // unbuffered: a send succeeds only to an idle worker
	idle     time.Duration  // udpWorkerIdle
	workers  atomic.Int32   // running; started by the reader loop, ended by idle workers
	inflight sync.WaitGroup // workers
	stopping atomic.Bool
}

// serveUDP runs the reader loop until ctx is done, Shutdown is called or
// the socket fails, then waits for queries in flight and closes pc.
func (s *Server) serveUDP(ctx context.Context, pc net.PacketConn) error {
	u := &udpServer{s: s, ctx: ctx, pc: pc, work: make(chan *packet), idle: udpWorkerIdle}
	if c, ok := pc.(*net.UDPConn); ok && c != nil {
		if err := setUDPSocketOptions(c); err != nil {
			return fmt.Errorf("dnsproxy: packet conn: %w", err)
		}
		br, err := newBatchReader(c)
		if err != nil {
			return fmt.Errorf("dnsproxy: packet conn: %w", err)
		}
		u.udp, u.br = c, br
	}
	loopDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-s.done:
		case <-loopDone:
			return
		}
		u.stopping.Store(true)
		_ = pc.SetReadDeadline(aLongTimeAgo)
	}()
	err := u.readLoop()
	if u.br != nil {
		u.br.close()
	}
	close(loopDone)
	close(u.work)

	// In-flight queries finish within their own timeout.
	finished := make(chan struct{})
	go func() {
		u.inflight.Wait()
		close(finished)
	}()
	t := time.NewTimer(s.cfg.queryTimeout)
	select {
	case <-finished:
		t.Stop()
	case <-t.C:
		if err == nil {
			err = context.DeadlineExceeded
		}
	}
	if cerr := pc.Close(); err == nil && cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	<-finished
	return err
}

func (u *udpServer) readLoop() error {
	for {
		var p *packet
		var err error
		if u.br != nil {
			p, err = u.br.read()
		} else {
			p = packets.Get().(*packet)
			p.n, p.addr, err = u.pc.ReadFrom(p.buf)
			if err != nil {
				putPacket(p)
			}
		}
		if err != nil {
			if u.stopping.Load() {
				return nil
			}
			// As miekg/dns: carry on after a transient error (EINTR,
			// ENOBUFS...), but not after a read deadline someone else set.
			var ne interface{ Temporary() bool }
			if errors.As(err, &ne) && ne.Temporary() && !errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			return err
		}
		if p.n < 12 { // shorter than a DNS header
			u.s.stats.malformed.Add(1)
			putPacket(p)
			continue
		}
		select {
		case u.work <- p:
			continue
		default:
		}
		// Only this loop adds workers, so the count cannot pass the
		// bound between the check and the add.
		if n := u.workers.Load(); n < maxUDPWorkers {
			u.workers.Add(1)
			u.inflight.Add(1)
			u.s.stats.udpWorkersStarted.Add(1)
			go u.worker(p, n < coreUDPWorkers)
		} else {
			u.s.stats.overloaded.Add(1)
			putPacket(p)
		}
	}
}

// worker serves p, then every packet handed to it until the reader loop
// ends, or, unless it is a core worker, until it waited udpWorkerIdle for
// one.
func (u *udpServer) worker(p *packet, core bool) {
	defer u.inflight.Done()
	if core {
		for ok := true; ok; p, ok = <-u.work {
			u.serve(p)
		}
		u.workers.Add(-1)
		return
	}
	idle := time.NewTimer(u.idle)
	defer idle.Stop()
	for {
		u.serve(p)
		idle.Reset(u.idle)
		var ok bool
		select {
		case p, ok = <-u.work:
		case <-idle.C:
		}
		if !ok {
			u.workers.Add(-1)
			return
		}
	}
}

func putPacket(p *packet) {
	p.n, p.src, p.pi, p.addr, p.w = 0, netip.AddrPort{}, pktinfo{}, nil, udpWriter{}
	packets.Put(p)
}

// serve parses one packet and runs the handler chain, as miekg/dns's
// Server does with this package's MsgAcceptFunc: responses are dropped,
// messages that do not parse get a FORMERR carrying the header.
func (u *udpServer) serve(p *packet) {
	defer putPacket(p)
	m := p.buf[:p.n]
	if binary.BigEndian.Uint16(m[2:])&(1<<15) != 0 { // QR
		u.s.stats.malformed.Add(1)
		return
	}
	req := new(dns.Msg)
	err := req.Unpack(m)
	// The query is parsed: its buffer now holds answers as they are packed.
	w := &p.w
	*w = udpWriter{u: u, src: p.src, pi: p.pi, addr: p.addr, buf: p.buf}
	if err != nil {
		u.s.stats.malformed.Add(1)
		req.SetRcodeFormatError(req)
		req.Zero = false
		req.Ns, req.Answer, req.Extra = nil, nil, nil
		if werr := w.WriteMsg(req); werr != nil {
			log.G(u.ctx).Debug("dns: write format error", "client", w.RemoteAddr(), "error", werr)
		}
		return
	}
	u.s.serve(u.ctx, w, req)
}

// udpWriter is the dns.ResponseWriter of one UDP query. It is valid
// until the query's handlers return.
type udpWriter struct {
	u    *udpServer
	src  netip.AddrPort
	pi   pktinfo
	addr net.Addr
	buf  []byte // for packing answers
	oob  [oobSize]byte
}

func (w *udpWriter) LocalAddr() net.Addr { return w.u.pc.LocalAddr() }

func (w *udpWriter) RemoteAddr() net.Addr {
	if w.src.IsValid() {
		return net.UDPAddrFromAddrPort(w.src)
	}
	return w.addr
}

func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.PackBuffer(w.buf)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

func (w *udpWriter) Write(b []byte) (int, error) {
	if w.u.udp != nil {
		return writeUDP(w.u.udp, w, b)
	}
	return w.u.pc.WriteTo(b, w.addr)
}

// Close does nothing: the socket is the listener's.
func (w *udpWriter) Close() error { return nil }

// TsigStatus reports no TSIG: the proxy does not verify signatures.
func (w *udpWriter) TsigStatus() error { return nil }

func (w *udpWriter) TsigTimersOnly(bool) {}

func (w *udpWriter) Hijack() {}

// setUDPSocketOptions asks for each packet's destination address, so that
// an answer leaves from the address its query was sent to even on a
// wildcard socket (miekg/dns does the same for its own UDP servers).
func setUDPSocketOptions(c *net.UDPConn) error {
	err6 := ipv6.NewPacketConn(c).SetControlMessage(ipv6.FlagDst|ipv6.FlagInterface, true)
	err4 := ipv4.NewPacketConn(c).SetControlMessage(ipv4.FlagDst|ipv4.FlagInterface, true)
	if err6 != nil && err4 != nil {
		return err4
	}
	return nil
}
