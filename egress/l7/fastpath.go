package l7

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// PacketQueue is a queue of packets the kernel holds for the gateway's
// decision (egress/nfq's Queue in the gateway namespace).
type PacketQueue interface {
	Receive() ([]nfq.Packet, error)
	SetVerdict(id uint32, v nfq.Verdict, mark *uint32) error
}

// FastConfig is how the fast path acts on the kernel's connections.
type FastConfig struct {
	// Pass and Refuse are the marks its verdicts give a connection's held
	// packets, which the gateway's rules make the connection's (see
	// egress/nft's fast path).
	Pass, Refuse uint32
	// Seen is the mark of a packet let go on undecided (a SYN, a packet
	// without data), which the rules send past the queue to the
	// session's own: the gateway never accepts a packet outright, which
	// would end the hook's rules there.
	Seen uint32
	// Cut ends a passed connection from client to server (its conntrack
	// entry deleted: its next packet comes back to the queue, with no
	// SYN seen, and is refused); nil: Recheck cannot end them.
	Cut func(client, server netip.AddrPort) error
	// FlowID returns the conntrack id of the connection from client to
	// server: its end is told by the entry's events, and a connection on
	// the same ports later is another entry. Nil: not known.
	FlowID func(client, server netip.AddrPort) (uint32, bool)
	// Terminate is told of a connection refused because the gateway must
	// terminate its name's TLS (reached by address, where no answer put
	// the address in the session's terminate sets): the session's next
	// connection there goes to the listener. Nil: none.
	Terminate func(session string, dst netip.AddrPort)
}

// fastMaxPassed bounds the passed connections the fast path remembers
// for Recheck and their end's audit event, fastMaxSessionPassed those of
// one session; past either, the oldest of the session with the most is
// forgotten: its end is audited at once, without its bytes, and a
// revision of its session ends it (a connection the fast path does not
// know is not kept). One session cannot push out another's below its
// share.
const (
	fastMaxPassed        = 65536
	fastMaxSessionPassed = 8192
)

// Bounds of the fast path's held state.
const (
	// fastMaxHeld bounds the packets held for one connection's
	// ClientHello (MaxPeek bytes in small segments).
	fastMaxHeld = 128
	// fastMaxClientHeld bounds the packets held for one client address's
	// undecided connections: the kernel's queue, which every session
	// shares, holds 4096 (egress's nfq.Config), and one client filling it
	// would have the queue drop every other session's SYN and
	// ClientHello. A ClientHello is a few packets; past the bound, the
	// connection whose packet would be held is refused.
	fastMaxClientHeld = 256
	// fastDecidedKeep is how long a decided connection's verdict is
	// kept for its packets still in the queue.
	fastDecidedKeep = 5 * time.Second
)

type fastKey struct{ client, server netip.AddrPort }

// fastFlow is a connection the fast path holds or has decided.
type fastFlow struct {
	start time.Time
	isn   uint32 // the client's initial sequence number (from its SYN)
	held  []uint32
	segs  map[uint32][]byte // data by offset from isn+1
	// decided: pass says how; at is when.
	decided, pass bool
	at            time.Time
	// checked are the bytes a passed connection's ClientHello was checked
	// in (from isn+1); until the server acknowledges them all (acked),
	// every copy the client sends again must be the same.
	checked []byte
	acked   bool
	// counted: a passed connection awaiting the server's
	// acknowledgement still counts among its client's undecided ones
	// (MaxSessionConns, MaxConns) until settled.
	counted bool
}

// passedFlow is a connection the fast path passed, until its end.
type passedFlow struct {
	ev    Event // its decision's audit event (Time is its start)
	hello Hello
	// marked is when the connection was marked passed in the kernel (the
	// server acknowledged its ClientHello); zero until then.
	marked time.Time
	// refused: pushed out of the record before it was marked, and
	// refused.
	refused bool
}

// ended is p's end's audit event: why, if its bytes are not known.
func (p *passedFlow) ended(now time.Time, up, dn int64, why string) Event {
	ev := p.ev
	ev.Action, ev.Reason = ActionClosed, why
	ev.BytesUp, ev.BytesDn = up, dn
	ev.Duration = now.Sub(ev.Time)
	return ev
}

// fastPath is the state of ServeQueue.
type fastPath struct {
	s     *Server
	q     PacketQueue
	marks FastConfig
	mu    sync.Mutex
	// +checklocks:mu
	flows map[fastKey]*fastFlow
	// +checklocks:mu
	undecided map[netip.Addr]int // per client address
	// +checklocks:mu
	undecidedAll int // of all clients, bounded by MaxConns
	// +checklocks:mu
	heldBy map[netip.Addr]int // packets held, per client address
	// +checklocks:mu
	passed map[fastKey]*passedFlow
	// +checklocks:mu
	passedBy map[string]int // per session
}

// rememberLocked adds a passed connection, and returns those it pushes
// out: one the bounds do, one on the same ports.
//
// +checklocks:fp.mu
func (fp *fastPath) rememberLocked(k fastKey, p *passedFlow) []*passedFlow {
	var out []*passedFlow
	if old := fp.forgetLocked(k); old != nil {
		out = append(out, old)
	}
	var evicted *passedFlow
	switch id := p.ev.Session; {
	case fp.passedBy[id] >= fastMaxSessionPassed:
		evicted = fp.evictOldestLocked(id)
	case len(fp.passed) >= fastMaxPassed:
		top := ""
		for s, n := range fp.passedBy {
			if n > fp.passedBy[top] {
				top = s
			}
		}
		evicted = fp.evictOldestLocked(top)
	}
	if evicted != nil {
		out = append(out, evicted)
	}
	fp.passed[k] = p
	fp.passedBy[p.ev.Session]++
	return out
}

// forgetLocked removes the passed connection k, and returns it.
//
// +checklocks:fp.mu
func (fp *fastPath) forgetLocked(k fastKey) *passedFlow {
	p := fp.passed[k]
	if p == nil {
		return nil
	}
	delete(fp.passed, k)
	if fp.passedBy[p.ev.Session]--; fp.passedBy[p.ev.Session] <= 0 {
		delete(fp.passedBy, p.ev.Session)
	}
	return p
}

// ServeQueue decides the connections the kernel's fast path holds in q
// until it returns (q's Receive fails, as when it is closed, or ctx
// ends). A connection's SYN and its packets without data go on at once
// (the kernel's rules decide whether the session may reach the address
// at all); those with data are held until they make a whole ClientHello,
// which is checked as a connection passed through is (Session.Check: the
// SNI bound to the address's pins) and audited. They are then sent
// through the rules again with marks.Pass, and the rest of the connection
// is forwarded by the kernel without the gateway, or with marks.Refuse,
// and the client gets a TCP reset. A connection whose first bytes are not
// a ClientHello (plain HTTP on a fast port), whose hello is not whole
// within the peek timeout or MaxPeek bytes, holds urgent data (which the
// server's stack takes out of the stream the gateway checked), whose SYN
// the gateway did not see, or whose session terminates its name's TLS, is
// refused. A SYN on the four ends of a decided connection starts a new
// one, checked on its own. MaxConns bounds the undecided connections of
// all clients, MaxSessionConns those of one.
func (s *Server) ServeQueue(ctx context.Context, q PacketQueue, marks FastConfig) error {
	fp := &fastPath{s: s, q: q, marks: marks, flows: map[fastKey]*fastFlow{}, undecided: map[netip.Addr]int{},
		heldBy: map[netip.Addr]int{}, passed: map[fastKey]*passedFlow{}, passedBy: map[string]int{}}
	s.fast.Store(fp)
	defer s.fast.CompareAndSwap(fp, nil)
	// The connections it passed outlive it (the kernel forwards them);
	// their ends will not be seen: each is audited as it stops.
	defer fp.flushPassed(nil, "open when the gateway stopped (the kernel forwards it on): its bytes are not counted")
	stop := make(chan struct{})
	defer close(stop)
	go fp.sweep(ctx, stop)
	for {
		pkts, err := q.Receive()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			log.G(ctx).Warn("l7: fast path queue", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		for _, p := range pkts {
			fp.packet(p)
		}
	}
}

func (fp *fastPath) verdict(id uint32, pass bool) {
	mark := fp.marks.Refuse
	if pass {
		mark = fp.marks.Pass
	}
	_ = fp.q.SetVerdict(id, nfq.Repeat, &mark)
}

// letGo sends a packet of an undecided connection on to the session's
// rules (FastConfig.Seen).
func (fp *fastPath) letGo(id uint32) {
	mark := fp.marks.Seen
	_ = fp.q.SetVerdict(id, nfq.Repeat, &mark)
}

func (fp *fastPath) packet(p nfq.Packet) {
	fp.s.fastPackets.Add(1)
	seg, err := nfq.ParseTCP(p.Payload)
	if err != nil {
		// The rules queue TCP only (`meta l4proto tcp`: an ICMP error of
		// the connection goes on): this is TCP behind IPv6 extension
		// headers, or broken, and never seen whole.
		_ = fp.q.SetVerdict(p.ID, nfq.Drop, nil)
		return
	}
	src, dst := unmapAP(seg.Src), unmapAP(seg.Dst)
	if _, ok := fp.s.cfg.Sessions(src.Addr()); !ok {
		// The server's side of a session's connection.
		fp.reply(p, seg, fastKey{client: dst, server: src})
		return
	}
	k := fastKey{client: src, server: dst}
	now := time.Now()
	fp.mu.Lock()
	f := fp.flows[k]
	var drop []uint32
	switch {
	case seg.Flags&nfq.SYN != 0 && len(seg.Payload) > 0:
		// Data in a SYN (TCP Fast Open) would reach the server before
		// any check: dropped, the client sends its SYN again without it.
		fp.mu.Unlock()
		_ = fp.q.SetVerdict(p.ID, nfq.Drop, nil)
		return
	case seg.Flags&nfq.SYN != 0 && seg.Flags&nfq.ACK == 0:
		// The queue sees a SYN only while the connection's conntrack
		// entry is undecided: after a decision, a SYN on the same four
		// ends is a new connection (the client reset the last one and
		// connected again from its port), which inherits nothing. A SYN
		// with another number on an undecided one is such a connection
		// too: the held bytes of the one before are not its own.
		var reused *passedFlow
		if f != nil && (f.decided || f.isn != seg.Seq && len(f.held) > 0) {
			if !f.decided {
				drop = fp.finish(k.client.Addr(), f, false, now)
			} else {
				fp.settleLocked(k, f)
			}
			f = nil
			// The connection before on these four ends is over: audited
			// now, so that the new one's end is not taken for its.
			reused = fp.forgetLocked(k)
		}
		if reused != nil {
			defer fp.emit(reused.ended(now, 0, 0, "ended when its ports were used again: its bytes are not counted"))
		}
		if f == nil {
			if fp.undecided[k.client.Addr()] >= fp.s.cfg.MaxSessionConns || fp.undecidedAll >= fp.s.cfg.MaxConns {
				delete(fp.flows, k)
				fp.mu.Unlock()
				fp.drop(drop)
				fp.verdict(p.ID, false)
				return
			}
			f = &fastFlow{start: now, segs: map[uint32][]byte{}}
			fp.flows[k] = f
			fp.undecided[k.client.Addr()]++
			fp.undecidedAll++
		}
		f.isn = seg.Seq // a SYN sent again keeps its number
		fp.mu.Unlock()
		fp.drop(drop)
		fp.letGo(p.ID)
		return
	case f != nil && f.decided && f.pass && !f.acked:
		fp.resent(p, seg, k, f, now) // unlocks
		return
	case f != nil && f.decided:
		// Queued before the connection's mark was set: the same fate.
		fp.mu.Unlock()
		fp.verdict(p.ID, f.pass)
		return
	case f == nil:
		// A connection whose SYN the gateway never saw: one it held
		// before a restart, or whose conntrack entry expired or was
		// deleted (a revision cut it), so that its next packet made a
		// new one. Nothing can be known of its first bytes, and an ACK
		// let go would open the way back for the server's data.
		fp.mu.Unlock()
		fp.verdict(p.ID, false)
		return
	case len(seg.Payload) == 0:
		fp.mu.Unlock()
		fp.letGo(p.ID)
		return
	}
	f.held = append(f.held, p.ID)
	fp.heldBy[k.client.Addr()]++
	// Bytes before the first (a segment that starts before isn+1) are
	// trimmed by the server's stack, which keeps the rest: so does the
	// gateway.
	payload := seg.Payload
	off := seg.Seq - f.isn - 1
	if rel := int64(int32(off)); rel < 0 {
		if -rel >= int64(len(payload)) {
			payload = nil
		} else {
			payload = payload[-rel:]
		}
		off = 0
	}
	var h Hello
	var peeked []byte
	var perr error
	complete := false
	if fp.heldBy[k.client.Addr()] > fastMaxClientHeld {
		perr, complete = fmt.Errorf("more than %d packets of the client's connections held for their ClientHellos", fastMaxClientHeld), true
	} else if seg.Flags&nfq.URG != 0 {
		// The server's stack takes the urgent byte out of the stream its
		// application reads (unless SO_OOBINLINE): the gateway would
		// check bytes the server does not parse.
		perr, complete = errors.New("urgent data in the ClientHello (the server would read other bytes than the gateway checks)"), true
	} else if off < MaxPeek && len(payload) > 0 {
		if f.conflicts(off, payload) {
			// Two segments that say different things of the same bytes:
			// which the server keeps is its stack's choice, not the
			// gateway's.
			perr, complete = errors.New("segments overlap with different bytes"), true
		} else if len(f.segs[off]) < len(payload) {
			f.segs[off] = bytes.Clone(payload)
		}
	}
	data := f.contiguous()
	switch {
	case complete:
	case len(data) > 0 && data[0] != 0x16:
		h.Proto = ProtoHTTP
		perr, complete = errors.New("the first bytes are not a TLS ClientHello (the gateway forwards only TLS on this port)"), true
	case len(data) > 0:
		h, peeked, perr = Peek(bytes.NewReader(data))
		complete = perr == nil || !errors.Is(perr, io.ErrUnexpectedEOF) && !errors.Is(perr, io.EOF)
	}
	if !complete && (len(f.held) >= fastMaxHeld || len(data) >= MaxPeek) {
		perr, complete = ErrPeekTooLong, true
	}
	if !complete {
		fp.mu.Unlock()
		return
	}
	ev, pass, terminate := fp.decide(k, f, h, perr, len(data))
	held := fp.finish(k.client.Addr(), f, pass, now)
	if pass {
		// The bytes the server parses as the ClientHello.
		f.checked = data[:helloEnd(data, len(peeked))]
	}
	var passed *passedFlow
	var evicted []*passedFlow
	if pass && ev != nil {
		// Audited now, and again when it ends (FastFlowEnded), with its
		// bytes.
		passed = &passedFlow{ev: *ev, hello: h}
		evicted = fp.rememberLocked(k, passed)
	}
	fp.mu.Unlock()
	if passed != nil && fp.marks.FlowID != nil {
		// Known before its packets go on, so that its end (told by its
		// entry's events) finds it.
		if id, ok := fp.marks.FlowID(k.client, k.server); ok {
			ev.Conntrack = id
			fp.mu.Lock()
			if fp.passed[k] == passed {
				passed.ev.Conntrack = id
			}
			fp.mu.Unlock()
		}
	}
	// Passed, the held packets go on without the mark: the connection is
	// marked when the server acknowledges the bytes checked (reply).
	for _, id := range held {
		if pass {
			fp.letGo(id)
		} else {
			fp.verdict(id, false)
		}
	}
	for _, e := range evicted {
		why := "no longer followed (too many connections): its bytes are not counted, and a revision of its session ends it"
		if e.refused {
			why = "refused: too many connections followed, and the server had not yet acknowledged its ClientHello"
		}
		fp.emit(e.ended(now, 0, 0, why))
	}
	if ev == nil {
		return
	}
	if terminate && fp.marks.Terminate != nil {
		fp.marks.Terminate(ev.Session, k.server)
	}
	ev.Duration = time.Since(ev.Time)
	fp.emit(*ev)
}

// reply decides a packet the server of connection k sends while the
// connection is undecided: it goes on, until the server acknowledges the
// whole ClientHello of a connection passed, whose mark its packet then
// sets.
func (fp *fastPath) reply(p nfq.Packet, seg nfq.TCP, k fastKey) {
	fp.mu.Lock()
	f := fp.flows[k]
	switch {
	case f == nil:
		// A connection the gateway does not know (held before a
		// restart): refused, as its client's packets are.
		fp.mu.Unlock()
		fp.verdict(p.ID, false)
		return
	case !f.decided:
		fp.mu.Unlock()
		fp.letGo(p.ID)
		return
	case !f.pass || f.acked:
		fp.mu.Unlock()
		fp.verdict(p.ID, f.pass)
		return
	}
	end := f.isn + 1 + uint32(len(f.checked))
	if seg.Flags&nfq.ACK == 0 || seg.Flags&nfq.RST != 0 || int32(seg.Ack-end) < 0 {
		fp.mu.Unlock()
		fp.letGo(p.ID)
		return
	}
	f.acked = true
	fp.settleLocked(k, f)
	if pf := fp.passed[k]; pf != nil {
		pf.marked = time.Now()
	}
	fp.mu.Unlock()
	fp.verdict(p.ID, true)
}

// resent decides a packet the client of connection k, passed, sends
// before the server acknowledged its ClientHello: a copy of bytes checked
// must be the bytes checked (the first may have died past the gateway,
// and the server would read the copy); the connection is refused if it
// is not. Called with fp.mu held; unlocks it.
func (fp *fastPath) resent(p nfq.Packet, seg nfq.TCP, k fastKey, f *fastFlow, now time.Time) {
	start := int64(int32(seg.Seq - f.isn - 1))
	lo, hi := max(start, 0), min(start+int64(len(seg.Payload)), int64(len(f.checked)))
	// Urgent data: the server's stack would take a byte out of what it
	// reads.
	if seg.Flags&nfq.URG == 0 && (lo >= hi || bytes.Equal(seg.Payload[lo-start:hi-start], f.checked[lo:hi])) {
		fp.mu.Unlock()
		fp.letGo(p.ID)
		return
	}
	f.pass = false
	fp.settleLocked(k, f)
	pf := fp.forgetLocked(k)
	fp.mu.Unlock()
	fp.verdict(p.ID, false)
	if pf != nil {
		ev := pf.ended(now, 0, 0, "")
		ev.Action = ActionRefused
		ev.Reason = "airlock: the ClientHello was sent again with other bytes than the gateway checked, or urgent data (the first copy did not reach the server); the connection is refused"
		fp.emit(ev)
	}
}

// emit audits ev in its session, if the session is still the client's.
func (fp *fastPath) emit(ev Event) {
	if sess, ok := fp.s.cfg.Sessions(ev.Client.Addr()); ok && sess.ID == ev.Session && sess.Audit != nil {
		sess.Audit(ev)
	}
}

// evictOldestLocked forgets session id's passed connection that started
// first.
//
// +checklocks:fp.mu
func (fp *fastPath) evictOldestLocked(id string) *passedFlow {
	var oldest fastKey
	var of *passedFlow
	for k, p := range fp.passed {
		if p.ev.Session == id && (of == nil || p.ev.Time.Before(of.ev.Time)) {
			oldest, of = k, p
		}
	}
	if of == nil {
		return nil
	}
	// One the server has not yet acknowledged is refused: no revision
	// would find it (it is not marked passed in the kernel yet), and its
	// acknowledgement would mark it.
	if f := fp.flows[oldest]; f != nil && f.decided && f.pass && !f.acked {
		f.pass = false
		fp.settleLocked(oldest, f)
		of.refused = true
	}
	return fp.forgetLocked(oldest)
}

// FastFlowEnded audits the end of a connection the fast path passed, as
// the kernel saw it (client and server its original direction; id its
// conntrack entry's, 0 if not known; the bytes of its IP packets each
// way, headers included). The end of an entry other than the one the
// fast path passed on those ports (an earlier connection's, told late) is
// not taken for its. It reports whether the connection was one the fast
// path knew.
func (s *Server) FastFlowEnded(client, server netip.AddrPort, id uint32, bytesUp, bytesDn uint64) bool {
	fp := s.fast.Load()
	if fp == nil {
		return false
	}
	k := fastKey{client: unmapAP(client), server: unmapAP(server)}
	fp.mu.Lock()
	p := fp.passed[k]
	if p == nil || id != 0 && p.ev.Conntrack != 0 && id != p.ev.Conntrack {
		fp.mu.Unlock()
		return false
	}
	fp.forgetLocked(k)
	fp.mu.Unlock()
	fp.emit(p.ended(time.Now(), int64(bytesUp), int64(bytesDn), ""))
	return true
}

// FastFlow names a connection the kernel tracks: client and server its
// original direction, ID its conntrack entry's id.
type FastFlow struct {
	Client, Server netip.AddrPort
	ID             uint32
}

// FastReconcile audits the end of every connection the fast path passed
// before cutoff that is not among live (the kernel's passed connections
// now): its end's event was lost (the kernel drops connection tracking
// events when their reader falls behind). It returns how many.
func (s *Server) FastReconcile(live []FastFlow, cutoff time.Time) int {
	fp := s.fast.Load()
	if fp == nil {
		return 0
	}
	ids := make(map[fastKey]uint32, len(live))
	for _, f := range live {
		ids[fastKey{client: unmapAP(f.Client), server: unmapAP(f.Server)}] = f.ID
	}
	var gone []*passedFlow
	fp.mu.Lock()
	for k, p := range fp.passed {
		// One not yet marked in the kernel, or marked after the events
		// were lost, is not judged by this dump.
		if p.marked.IsZero() || !p.marked.Before(cutoff) {
			continue
		}
		if id, ok := ids[k]; ok && (id == 0 || p.ev.Conntrack == 0 || id == p.ev.Conntrack) {
			continue
		}
		gone = append(gone, fp.forgetLocked(k))
	}
	fp.mu.Unlock()
	now := time.Now()
	for _, p := range gone {
		fp.emit(p.ended(now, 0, 0, "its end was not seen (connection tracking events were lost): its bytes are not counted"))
	}
	return len(gone)
}

// recheckFast decides again, under sess (revised), on the connections of
// sess.ID the fast path passed: one sess now refuses, or whose name it
// now terminates, is cut and audited. It returns how many.
func (s *Server) recheckFast(sess *Session) int {
	fp := s.fast.Load()
	if fp == nil {
		return 0
	}
	type cut struct {
		k fastKey
		p *passedFlow
	}
	var cuts []cut
	fp.mu.Lock()
	for k, p := range fp.passed {
		if p.ev.Session != sess.ID {
			continue
		}
		if sess.Check(k.server, p.hello, p.ev.Time).Allow && !terminates(sess, p.hello) {
			continue
		}
		cuts = append(cuts, cut{k, p})
		fp.forgetLocked(k)
		// Its packets still queued, and those of the conntrack entry
		// the cut makes anew, are refused, not passed as decided.
		if f := fp.flows[k]; f != nil {
			f.pass = false
			fp.settleLocked(k, f)
		}
	}
	fp.mu.Unlock()
	for _, c := range cuts {
		ev := c.p.ended(time.Now(), 0, 0, "closed: the session's egress policy was revised; its bytes are not counted")
		if fp.marks.Cut != nil {
			if err := fp.marks.Cut(c.k.client, c.k.server); err != nil {
				ev.Reason += " (ending it failed: " + err.Error() + ")"
			}
		}
		fp.emit(ev)
	}
	return len(cuts)
}

// flushPassed audits and forgets the passed connections match selects
// (nil: all), with why they are no longer followed.
func (fp *fastPath) flushPassed(match func(*passedFlow) bool, why string) {
	var ps []*passedFlow
	fp.mu.Lock()
	for k, p := range fp.passed {
		if match == nil || match(p) {
			ps = append(ps, fp.forgetLocked(k))
		}
	}
	fp.mu.Unlock()
	now := time.Now()
	for _, p := range ps {
		fp.emit(p.ended(now, 0, 0, why))
	}
}

// closeFast forgets session id's passed connections (its network is
// being removed: they end with it) and audits them, without their bytes.
func (s *Server) closeFast(id string) {
	if fp := s.fast.Load(); fp != nil {
		fp.flushPassed(func(p *passedFlow) bool { return p.ev.Session == id },
			"open when the session's network was removed: its bytes are not counted")
	}
}

// finish decides client's undecided connection f and returns its held
// packets' ids.
//
// +checklocks:fp.mu
func (fp *fastPath) finish(client netip.Addr, f *fastFlow, pass bool, now time.Time) []uint32 {
	held := f.finish(pass, now)
	if pass {
		// Counted until the server acknowledges its ClientHello.
		f.counted = true
	} else {
		fp.uncount(client)
	}
	fp.heldBy[client] -= len(held)
	if fp.heldBy[client] <= 0 {
		delete(fp.heldBy, client)
	}
	return held
}

// uncount takes one connection off client's undecided ones.
//
// +checklocks:fp.mu
func (fp *fastPath) uncount(client netip.Addr) {
	fp.undecidedAll--
	fp.undecided[client]--
	if fp.undecided[client] <= 0 {
		delete(fp.undecided, client)
	}
}

// settleLocked ends the wait of passed connection k, f for the server's
// acknowledgement (it came, or the connection is refused or forgotten):
// it no longer counts among its client's undecided ones, and its checked
// bytes go.
//
// +checklocks:fp.mu
func (fp *fastPath) settleLocked(k fastKey, f *fastFlow) {
	if f.counted {
		f.counted = false
		fp.uncount(k.client.Addr())
	}
	f.checked = nil
}

// drop drops the held packets of a connection that was replaced.
func (fp *fastPath) drop(ids []uint32) {
	for _, id := range ids {
		_ = fp.q.SetVerdict(id, nfq.Drop, nil)
	}
}

// decide checks a connection's ClientHello; the event is nil for a
// client of no session. terminate says it was refused because its name's
// TLS must be terminated.
func (fp *fastPath) decide(k fastKey, f *fastFlow, h Hello, perr error, n int) (ev *Event, pass, terminate bool) {
	sess, ok := fp.s.cfg.Sessions(k.client.Addr())
	if !ok {
		return nil, false, false
	}
	if h.Proto == "" {
		h.Proto = ProtoTLS
	}
	ev = &Event{Time: f.start, Kind: KindConnection, Session: sess.ID, Client: k.client, Dst: k.server,
		Proto: h.Proto, SNI: h.SNI, BytesUp: int64(n), Kernel: true}
	if perr != nil {
		ev.Action, ev.Reason = ActionRefused, "airlock: "+perr.Error()
		return ev, false, false
	}
	d := sess.Check(k.server, h, f.start)
	ev.Rule = d.Rule
	if !d.Allow {
		ev.Action, ev.Reason = ActionRefused, d.Reason
		return ev, false, false
	}
	if terminates(sess, h) {
		ev.Action, ev.Reason = ActionRefused, fmt.Sprintf("airlock: TLS to %s must be terminated (HTTP rules, a secret or inspect), and this connection to %v was not sent to the gateway's listener; connect again", h.SNI, k.server.Addr())
		return ev, false, true
	}
	ev.Action, ev.Reason = ActionAllowed, d.Reason
	return ev, true, false
}

// helloEnd is the length of the TLS records at the start of data that
// carry the whole first handshake message (a ClientHello may span
// several); read is what the check read, returned if data does not parse
// so.
func helloEnd(data []byte, read int) int {
	var msg []byte
	for off := 0; off+5 <= len(data); {
		n := int(data[off+3])<<8 | int(data[off+4])
		if data[off] != 0x16 || off+5+n > len(data) {
			break
		}
		msg = append(msg, data[off+5:off+5+n]...)
		off += 5 + n
		if len(msg) >= 4 && len(msg) >= 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return off
		}
	}
	return min(read, len(data))
}

// contiguous is the data from the connection's first byte on, as far as
// it has no gap.
func (f *fastFlow) contiguous() []byte {
	var out []byte
	for {
		seg, ok := f.segs[uint32(len(out))]
		if !ok {
			// A segment sent again may start inside what is there.
			var best []byte
			for off, d := range f.segs {
				if off < uint32(len(out)) && off+uint32(len(d)) > uint32(len(out)) {
					if tail := d[uint32(len(out))-off:]; len(tail) > len(best) {
						best = tail
					}
				}
			}
			if best == nil {
				return out
			}
			seg = best
		}
		out = append(out, seg...)
	}
}

// conflicts reports whether data at off differs from bytes of the held
// segments it overlaps.
func (f *fastFlow) conflicts(off uint32, data []byte) bool {
	end := off + uint32(len(data))
	for o, d := range f.segs {
		e := o + uint32(len(d))
		lo, hi := max(o, off), min(e, end)
		if lo < hi && !bytes.Equal(d[lo-o:hi-o], data[lo-off:hi-off]) {
			return true
		}
	}
	return false
}

// finish records the decision and returns the held packets' ids.
func (f *fastFlow) finish(pass bool, now time.Time) []uint32 {
	held := f.held
	f.decided, f.pass, f.at, f.held, f.segs = true, pass, now, nil, nil
	slices.Sort(held) // the kernel numbers packets in the order it queued them
	return held
}

// sweep refuses connections whose ClientHello is not whole within the
// peek timeout, and forgets decided ones after fastDecidedKeep.
func (fp *fastPath) sweep(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case now := <-t.C:
			var events []*Event
			var refuse []uint32
			fp.mu.Lock()
			var unacked []*passedFlow
			for k, f := range fp.flows {
				switch {
				case f.decided && f.pass && !f.acked && now.Sub(f.at) > fp.s.cfg.PeekTimeout:
					// The server never acknowledged the ClientHello: its
					// next packet, either way, is refused.
					f.pass = false
					fp.settleLocked(k, f)
					if pf := fp.forgetLocked(k); pf != nil {
						unacked = append(unacked, pf)
					}
				case f.decided && now.Sub(f.at) > fastDecidedKeep && (!f.pass || f.acked):
					fp.settleLocked(k, f)
					delete(fp.flows, k)
				case !f.decided && now.Sub(f.start) > fp.s.cfg.PeekTimeout:
					if len(f.held) > 0 {
						if sess, ok := fp.s.cfg.Sessions(k.client.Addr()); ok {
							events = append(events, &Event{Time: f.start, Kind: KindConnection, Session: sess.ID, Client: k.client, Dst: k.server,
								Proto: ProtoTLS, Action: ActionRefused, Kernel: true, Duration: now.Sub(f.start),
								Reason: "airlock: the ClientHello was not whole within the peek timeout"})
						}
					}
					refuse = append(refuse, fp.finish(k.client.Addr(), f, false, now)...)
				}
			}
			fp.mu.Unlock()
			for _, id := range refuse {
				fp.verdict(id, false)
			}
			for _, ev := range events {
				fp.emit(*ev)
			}
			for _, pf := range unacked {
				fp.emit(pf.ended(now, 0, 0, "refused: the server did not acknowledge the ClientHello within the peek timeout"))
			}
		}
	}
}

// FastKeep reports whether the connection from client to server, if the
// fast path passed it, is still allowed under sess, the session's revised
// registration: its ClientHello checked again as of its admission, as
// Recheck checks the listener's. A connection it passed and no longer
// allows is forgotten, so that its next packet, on the new conntrack
// entry a revision's cut leaves it, is refused. A connection it holds
// undecided is kept (decided under sess); one it does not know (passed
// before a restart, or forgotten) is kept unless unknownCut.
func (s *Server) FastKeep(sess *Session, client, server netip.AddrPort, unknownCut bool) bool {
	fp := s.fast.Load()
	if fp == nil {
		return !unknownCut
	}
	k := fastKey{client: unmapAP(client), server: unmapAP(server)}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	p, ok := fp.passed[k]
	if !ok {
		if f := fp.flows[k]; f != nil && !f.decided {
			return true
		}
		if f := fp.flows[k]; unknownCut && f != nil && f.decided {
			fp.settleLocked(k, f)
			delete(fp.flows, k)
		}
		return !unknownCut
	}
	if p.ev.Session == sess.ID && sess.Check(server, p.hello, p.ev.Time).Allow && !terminates(sess, p.hello) {
		return true
	}
	fp.forgetLocked(k)
	// A connection undecided on the same four ends is a new one, decided
	// under sess in its turn: only a decided one is forgotten.
	if f := fp.flows[k]; f != nil && f.decided {
		fp.settleLocked(k, f)
		delete(fp.flows, k)
	}
	go fp.emit(p.ended(time.Now(), 0, 0, "closed: the session's egress policy was revised; its bytes are not counted")) // fp.mu is held
	return false
}

// FastPackets is how many packets the fast path's queue has brought the
// gateway (ServeQueue): a connection's SYN, its first packets up to its
// ClientHello, and none once it is decided.
func (s *Server) FastPackets() uint64 { return s.fastPackets.Load() }

func unmapAP(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// appendReason adds why to an event's reason ("; " between them).
func appendReason(reason, why string) string {
	if reason == "" {
		return why
	}
	return reason + "; " + why
}
