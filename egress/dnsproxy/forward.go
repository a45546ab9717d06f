package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// exchangeFunc sends q to addr over network ("udp" or "tcp") and returns
// the reply whose id matches.
type exchangeFunc func(ctx context.Context, network, addr string, q *dns.Msg) (*dns.Msg, error)

// Idle UDP sockets to each upstream are kept for reuse, for at most
// poolMaxAge (as CoreDNS's forward plugin does), which saves a socket,
// connect and close per forwarded query.
const (
	poolMaxIdle = 64
	poolMaxAge  = 10 * time.Second
)

// upstreamPool exchanges messages with upstream servers over connections
// from dial, keeping idle UDP connections per upstream.
type upstreamPool struct {
	dial   Dialer
	idle   map[string]chan pooledConn // fixed at creation; read-only
	closed atomic.Bool
}

type pooledConn struct {
	net.Conn
	created time.Time
	// raw is the socket's descriptor, for a UDP conn that has one (see
	// exchangeFD); nil otherwise.
	raw syscall.RawConn
}

func newPooledConn(c net.Conn, network string) pooledConn {
	pc := pooledConn{Conn: c, created: time.Now()}
	if sc, ok := c.(syscall.Conn); ok && fdExchange && network == "udp" {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
		}
	}
	return pc
}

func newUpstreamPool(dial Dialer, upstreams []string) *upstreamPool {
	p := &upstreamPool{dial: dial, idle: map[string]chan pooledConn{}}
	for _, u := range upstreams {
		p.idle[u] = make(chan pooledConn, poolMaxIdle)
	}
	return p
}

// exchange sends q to addr over network and returns the reply with q's
// id. A pooled UDP socket that fails (say, from an ICMP error left over
// from an earlier query) is replaced by a fresh one once.
func (p *upstreamPool) exchange(ctx context.Context, network, addr string, q *dns.Msg) (*dns.Msg, error) {
	for attempt := 0; ; attempt++ {
		var err error
		conn, reused := p.get(network, addr)
		if !reused {
			c, err := p.dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			conn = newPooledConn(c, network)
		}
		var resp *dns.Msg
		if conn.raw != nil {
			resp, err = exchangeFD(ctx, conn, q)
		} else {
			resp, err = exchangeOn(ctx, conn.Conn, network, q)
		}
		if err != nil {
			conn.Close()
			var nerr net.Error
			if reused && attempt == 0 && ctx.Err() == nil && !(errors.As(err, &nerr) && nerr.Timeout()) {
				continue
			}
			return nil, err
		}
		p.put(network, addr, conn)
		return resp, nil
	}
}

func (p *upstreamPool) get(network, addr string) (pooledConn, bool) {
	ch := p.idle[addr]
	if network != "udp" || ch == nil {
		return pooledConn{}, false
	}
	for {
		select {
		case c := <-ch:
			if time.Since(c.created) < poolMaxAge {
				return c, true
			}
			c.Close()
		default:
			return pooledConn{}, false
		}
	}
}

func (p *upstreamPool) put(network, addr string, c pooledConn) {
	ch := p.idle[addr]
	if network != "udp" || ch == nil || p.closed.Load() || time.Since(c.created) >= poolMaxAge {
		c.Close()
		return
	}
	select {
	case ch <- c:
	default:
		c.Close()
	}
	if p.closed.Load() {
		p.close()
	}
}

// close closes the idle connections; later ones are closed when returned.
func (p *upstreamPool) close() {
	p.closed.Store(true)
	for _, ch := range p.idle {
		for {
			select {
			case c := <-ch:
				c.Close()
				continue
			default:
			}
			break
		}
	}
}

// exchangeBufs holds buffers for packing a query and reading its reply
// over UDP.
var exchangeBufs = sync.Pool{New: func() any { b := make([]byte, maxUDPRead); return &b }}

// exchangeOn writes q to conn and reads the reply. Over UDP, replies with
// another id (late answers to earlier queries, or spoofing attempts) are
// skipped, as CoreDNS's proxy does; over TCP they are an error. The read
// buffer has room to spare for servers that ignore the advertised size.
//
// The context's deadline applies as the socket's; over TCP its
// cancellation applies too. Over UDP a canceled query's read still ends by
// the deadline (its attempt's, at most the upstream timeout): the wait on
// the socket costs no timer or registration with the context.
func exchangeOn(ctx context.Context, conn net.Conn, network string, q *dns.Msg) (*dns.Msg, error) {
	d, _ := ctx.Deadline() // zero: no deadline
	if err := conn.SetDeadline(d); err != nil {
		return nil, err
	}
	if network != "udp" {
		return exchangeStream(ctx, conn, q)
	}
	bp := exchangeBufs.Get().(*[]byte)
	defer exchangeBufs.Put(bp)
	buf := *bp
	out, err := q.PackBuffer(buf)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(out); err != nil {
		return nil, err
	}
	for {
		n, err := conn.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if n < 12 || binary.BigEndian.Uint16(buf) != q.Id {
			continue // not a reply to q; a later packet may be
		}
		resp := new(dns.Msg)
		if err := resp.Unpack(buf[:n]); err != nil {
			return nil, err
		}
		return resp, nil
	}
}

// exchangeFD is exchangeOn over a UDP socket's descriptor: it writes q
// and waits for the socket to become readable before its first read, where
// a net.Conn's Read would read at once and, the reply not being there yet,
// read again once it is: one system call less per query. The wait is
// armed before the write, so that a reply that comes before the wait
// starts is not missed. The read deadline is the context's, as
// exchangeOn's.
func exchangeFD(ctx context.Context, conn pooledConn, q *dns.Msg) (*dns.Msg, error) {
	d, _ := ctx.Deadline() // zero: no deadline
	if err := conn.SetReadDeadline(d); err != nil {
		return nil, err
	}
	x := fdStates.Get().(*fdState)
	defer x.release()
	out, err := q.PackBuffer(x.buf)
	if err != nil {
		return nil, err
	}
	x.out, x.id = out, q.Id
	err = conn.raw.Read(x.step)
	if x.full {
		// The socket's send buffer is full: the net.Conn's Write waits
		// for room.
		return exchangeOn(ctx, conn.Conn, "udp", q)
	}
	if err == nil {
		err = x.err
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	resp := new(dns.Msg)
	if err := resp.Unpack(x.buf[:x.n]); err != nil {
		return nil, err
	}
	return resp, nil
}

// fdState is the state of one exchangeFD, pooled with its buffer: the
// query is packed into buf, and the reply read into it, over the query,
// once the query is written.
type fdState struct {
	buf  []byte
	out  []byte
	id   uint16
	sent bool
	full bool // the write found the send buffer full
	n    int
	err  error
	step func(fd uintptr) bool // x.do, made once
}

var fdStates = sync.Pool{New: func() any {
	x := &fdState{buf: make([]byte, maxUDPRead)}
	x.step = x.do
	return x
}}

func (x *fdState) release() {
	x.out, x.id, x.sent, x.full, x.n, x.err = nil, 0, false, false, 0, nil
	fdStates.Put(x)
}

// do is the syscall.RawConn Read callback: the first call writes the
// query and asks to wait until the socket is readable; later calls read
// until the reply to the query, or until nothing is left to read.
func (x *fdState) do(fd uintptr) bool {
	if !x.sent {
		x.sent = true
		var err error
		for {
			if _, err = fdWrite(fd, x.out); err != syscall.EINTR {
				break
			}
		}
		switch {
		case err == syscall.EAGAIN:
			x.full = true
			return true
		case err != nil:
			x.err = os.NewSyscallError("write", err)
			return true
		}
		return false // wait until readable
	}
	for {
		n, err := fdRead(fd, x.buf)
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			x.err = os.NewSyscallError("read", err)
			return true
		case n >= 12 && binary.BigEndian.Uint16(x.buf) == x.id:
			x.n = n
			return true
		}
		// Not a reply to the query; a later packet may be.
	}
}

// exchangeStream is exchangeOn over TCP.
func exchangeStream(ctx context.Context, conn net.Conn, q *dns.Msg) (*dns.Msg, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	co := &dns.Conn{Conn: conn}
	if err := co.WriteMsg(q); err != nil {
		return nil, err
	}
	resp, err := co.ReadMsg()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if resp.Id != q.Id {
		return nil, dns.ErrId
	}
	return resp, nil
}

// attemptContext is a query's context with one upstream attempt's earlier
// deadline. Deadline costs nothing; Done, which the upstream pool's UDP
// exchange never calls (its socket deadline ends the wait), makes a
// context.WithDeadline on first use, as do AfterFunc and contexts derived
// from it (a dial's). release ends it: Done is closed and Err is
// context.Canceled from then on, unless it ended before.
type attemptContext struct {
	context.Context
	deadline time.Time

	mu       sync.Mutex
	lazy     context.Context    // +checklocks:mu; made by the first Done or AfterFunc
	cancel   context.CancelFunc // +checklocks:mu
	released bool               // +checklocks:mu
}

func newAttemptContext(parent context.Context, timeout time.Duration) *attemptContext {
	d := time.Now().Add(timeout)
	if pd, ok := parent.Deadline(); ok && pd.Before(d) {
		d = pd
	}
	return &attemptContext{Context: parent, deadline: d}
}

func (c *attemptContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Err is consistent with Done: non-nil once Done is closed.
func (c *attemptContext) Err() error {
	c.mu.Lock()
	lazy, released := c.lazy, c.released
	c.mu.Unlock()
	if lazy != nil {
		return lazy.Err() // canceled by release, if it ended there
	}
	if err := c.Context.Err(); err != nil {
		return err
	}
	if released {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// startLocked makes the context that Done and AfterFunc use, unless c is
// released: then nil.
func (c *attemptContext) startLocked() context.Context {
	if c.lazy == nil && !c.released {
		c.lazy, c.cancel = context.WithDeadline(c.Context, c.deadline)
	}
	return c.lazy
}

func (c *attemptContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lazy := c.startLocked(); lazy != nil {
		return lazy.Done()
	}
	return closedChan
}

// AfterFunc lets contexts derived from c (context.WithDeadline,
// context.AfterFunc) learn of its end without a goroutine of their own.
func (c *attemptContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lazy := c.startLocked(); lazy != nil {
		return context.AfterFunc(lazy, f)
	}
	go f()
	return func() bool { return false }
}

func (c *attemptContext) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = true
	if c.cancel != nil {
		c.cancel()
	}
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// forwardHandler asks the upstream resolvers, in order, with a query of its
// own: a fresh id, recursion desired, the normalised question, and an OPT
// record advertising 1232 bytes with no options (nothing of the client's
// EDNS, such as client subnet or cookies, leaves the proxy). Over UDP first;
// a truncated answer is retried over TCP when the client came over TCP, and
// returned as-is (so the client retries over TCP) when it came over UDP.
type forwardHandler struct {
	s        *Server
	exchange exchangeFunc
}

func (h *forwardHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.RecursionDesired = true
	q.Question = []dns.Question{{Name: string(req.name), Qtype: req.qtype, Qclass: dns.ClassINET}}
	q.SetEdns0(ednsUDPSize, false)

	var errs []error
	for _, up := range h.s.cfg.upstreams {
		resp, err := h.try(ctx, req, up, q)
		if err != nil {
			h.s.stats.upstreamErrors.Add(1)
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		resp.Id = r.Id
		return dns.RcodeSuccess, w.WriteMsg(resp)
	}
	return dns.RcodeServerFailure, fmt.Errorf("forward %s %s: %w", req.name, dns.Type(req.qtype), errors.Join(errs...))
}

func (h *forwardHandler) try(ctx context.Context, req *request, up string, q *dns.Msg) (*dns.Msg, error) {
	actx := newAttemptContext(ctx, h.s.cfg.upstreamTimeout)
	defer actx.release()
	ctx = actx
	h.s.stats.forwarded.Add(1)
	resp, err := h.exchange(ctx, "udp", up, q)
	if err == nil && resp.Truncated && req.proto == "tcp" {
		h.s.stats.tcpRetries.Add(1)
		h.s.stats.forwarded.Add(1)
		resp, err = h.exchange(ctx, "tcp", up, q)
	}
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %w", up, err)
	}
	if err := checkResponse(q, resp); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", up, err)
	}
	if resp.Rcode == dns.RcodeServerFailure || resp.Rcode == dns.RcodeRefused {
		return nil, fmt.Errorf("upstream %s answered %s", up, dns.RcodeToString[resp.Rcode])
	}
	return resp, nil
}

// checkResponse makes sure resp answers q.
func checkResponse(q, resp *dns.Msg) error {
	switch {
	case resp == nil:
		return errors.New("no response")
	case !resp.Response:
		return errors.New("reply is not a response")
	case resp.Id != q.Id:
		return errors.New("reply id does not match")
	case resp.Opcode != dns.OpcodeQuery:
		return fmt.Errorf("reply opcode %s", dns.OpcodeToString[resp.Opcode])
	case len(resp.Question) != 1:
		return fmt.Errorf("reply has %d questions", len(resp.Question))
	}
	got, want := resp.Question[0], q.Question[0]
	if got.Qtype != want.Qtype || got.Qclass != want.Qclass || !strings.EqualFold(got.Name, want.Name) {
		return fmt.Errorf("reply is for %s %s, not %s %s", got.Name, dns.Type(got.Qtype), want.Name, dns.Type(want.Qtype))
	}
	return nil
}
