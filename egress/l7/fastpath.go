package l7

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
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
	// fastMaxSessionHeld bounds the packets held for one session's
	// undecided connections: the kernel's queue, which every session
	// shares, holds 4096 (egress's nfq.Config), and one session filling it
	// would have the queue drop every other session's SYN and
	// ClientHello. A ClientHello is a few packets; past the bound, the
	// connection whose packet would be held is refused.
	fastMaxSessionHeld = 256
	// fastMaxHeldAll bounds the packets held for all sessions before
	// each is held to its share: past it, a session holding more than
	// fastMaxHeldAll divided among the sessions holding any has the
	// connection whose packet would be held refused, so that the kernel's
	// queue (4096) never fills with held packets, whatever sessions act
	// together, and a session holding little still has its hellos taken.
	fastMaxHeldAll = 2048
	// fastMaxHeldHard is the most packets held for all sessions: at it,
	// a connection of the session holding the most is refused to make
	// room.
	fastMaxHeldHard = 3584
	// fastMaxServerSegs bounds the server's segments kept past a gap in
	// its first bytes.
	fastMaxServerSegs = 64
	// fastDecidedKeep is how long a decided connection's verdict is
	// kept for its packets still in the queue.
	fastDecidedKeep = 5 * time.Second
)

type fastKey struct{ client, server netip.AddrPort }

// heldPacket is a packet the fast path holds: its data's place in the
// client's stream.
type heldPacket struct {
	id       uint32
	off, end int64
}

// fastFlow is a connection the fast path holds or has decided.
//
// Its states: undecided (its first ClientHello not yet whole), then
// passed and awaiting the server's answer, then marked in the kernel. A
// passed connection is marked when the server has acknowledged every
// byte of the ClientHello checked and its answer is not a
// HelloRetryRequest; until then every byte the client sends past the
// hello is held (a second ClientHello sent at once would be read by the
// server after its retry request), and a copy of the hello's bytes must
// be the bytes checked. After a retry request, the client's second
// ClientHello is checked (the same name) before it goes on.
type fastFlow struct {
	session string
	start   time.Time
	isn     uint32 // the client's initial sequence number (from its SYN)
	held    []heldPacket
	client  stream // its bytes from isn+1
	// decided: pass says how; at is when.
	decided, pass bool
	at            time.Time
	// checked is how many of the client's bytes are the ClientHellos
	// checked; hello is the first's.
	checked int
	hello   Hello
	// retried: the server asked for a second ClientHello; second: the
	// connection awaits it.
	retried, second bool
	// synAcked: the server's SYN-ACK acknowledged isn+1, so the server
	// has a connection whose first byte is the one the gateway takes for
	// it (a SYN at another number on a connection the server holds is
	// answered with an ACK, and the server reads on from the first).
	synAcked bool
	// ackedAll: the server has acknowledged every byte checked; marked:
	// the connection is marked passed in the kernel.
	ackedAll, marked bool
	// The server's side: its initial sequence number (from its SYN-ACK),
	// and its bytes from serverBase on, where its answer to the last
	// hello checked starts.
	sisn       uint32
	sisnKnown  bool
	server     stream
	serverBase int
	// counted: the connection counts among its session's undecided ones
	// (MaxSessionConns, MaxConns), from the server's SYN-ACK until it is
	// refused or marked; syn: it counts among those whose SYN the server
	// has not answered (a SYN to an address the session may not reach is
	// never answered, and takes no place of another session's).
	counted, syn bool
}

// stream is one direction's first bytes of a connection: buf from the
// first byte on, as far as it has no gap; segments past a gap wait in ooo,
// by offset.
type stream struct {
	buf []byte
	ooo map[int64][]byte
}

// add puts data at offset off (the bytes at or past limit are not kept),
// and reports false if it says other of any byte than what is known: two
// segments that differ on the same bytes (which the receiver keeps is its
// stack's choice, not the gateway's).
func (s *stream) add(off int64, data []byte, limit int) bool {
	if off >= int64(limit) || len(data) == 0 {
		return true
	}
	if off+int64(len(data)) > int64(limit) {
		data = data[:int64(limit)-off]
	}
	o, end := int(off), int(off)+len(data)
	if o < len(s.buf) {
		hi := min(end, len(s.buf))
		if !bytes.Equal(s.buf[o:hi], data[:hi-o]) {
			return false
		}
	}
	for oo, d := range s.ooo {
		lo, hi := max(int(oo), o), min(int(oo)+len(d), end)
		if lo < hi && !bytes.Equal(d[lo-int(oo):hi-int(oo)], data[lo-o:hi-o]) {
			return false
		}
	}
	switch {
	case end <= len(s.buf):
		return true
	case o > len(s.buf):
		if s.ooo == nil {
			s.ooo = map[int64][]byte{}
		}
		if len(s.ooo[off]) < len(data) {
			s.ooo[off] = bytes.Clone(data)
		}
		return true
	}
	s.buf = append(s.buf, data[len(s.buf)-o:]...)
	for grew := true; grew; {
		grew = false
		for oo, d := range s.ooo {
			if int(oo) > len(s.buf) {
				continue
			}
			if e := int(oo) + len(d); e > len(s.buf) {
				s.buf = append(s.buf, d[len(s.buf)-int(oo):]...)
			}
			delete(s.ooo, oo)
			grew = true
		}
	}
	return true
}

// from is s's bytes from offset n on, as a stream of their own (a retry
// request longer than the bytes kept leaves it empty: its later segments
// are trimmed as bytes before the first).
func (s *stream) from(n int) stream {
	var out stream
	if n < len(s.buf) {
		out.buf = bytes.Clone(s.buf[n:])
	}
	for o, d := range s.ooo {
		switch {
		case int(o) >= n:
			out.add(o-int64(n), d, flightPeek)
		case int(o)+len(d) > n:
			out.add(0, d[n-int(o):], flightPeek)
		}
	}
	return out
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
	// elem is its place in its session's order (fastPath.order).
	elem *list.Element
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
	undecided map[string]int // per session
	// +checklocks:mu
	undecidedAll int // of all sessions, bounded by MaxConns
	// +checklocks:mu
	synOnly map[string]int // per session, bounded by MaxSessionConns
	// +checklocks:mu
	heldBy map[string]int // packets held, per session
	// +checklocks:mu
	heldAll int // packets held, of all sessions
	// +checklocks:mu
	passed map[fastKey]*passedFlow
	// +checklocks:mu
	passedBy map[string]int // per session
	// order is each session's passed connections, oldest first.
	// +checklocks:mu
	order map[string]*list.List
}

func newFastPath(s *Server, q PacketQueue, marks FastConfig) *fastPath {
	return &fastPath{s: s, q: q, marks: marks, flows: map[fastKey]*fastFlow{}, undecided: map[string]int{}, synOnly: map[string]int{},
		heldBy: map[string]int{}, passed: map[fastKey]*passedFlow{}, passedBy: map[string]int{}, order: map[string]*list.List{}}
}

// rememberLocked adds a passed connection, and returns those it pushes
// out: one the bounds do, one on the same ports.
//
// +checklocks:fp.mu
func (fp *fastPath) rememberLocked(k fastKey, p *passedFlow) (out []*passedFlow, refuse []uint32) {
	if old := fp.forgetLocked(k); old != nil {
		out = append(out, old)
	}
	var evicted *passedFlow
	switch id := p.ev.Session; {
	case fp.passedBy[id] >= fastMaxSessionPassed:
		evicted, refuse = fp.evictOldestLocked(id)
	case len(fp.passed) >= fastMaxPassed:
		top := ""
		for s, n := range fp.passedBy {
			if n > fp.passedBy[top] {
				top = s
			}
		}
		evicted, refuse = fp.evictOldestLocked(top)
	}
	if evicted != nil {
		out = append(out, evicted)
	}
	fp.passed[k] = p
	fp.passedBy[p.ev.Session]++
	l := fp.order[p.ev.Session]
	if l == nil {
		l = list.New()
		fp.order[p.ev.Session] = l
	}
	p.elem = l.PushBack(k)
	return out, refuse
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
	id := p.ev.Session
	if fp.passedBy[id]--; fp.passedBy[id] <= 0 {
		delete(fp.passedBy, id)
	}
	if l := fp.order[id]; l != nil && p.elem != nil {
		l.Remove(p.elem)
		if l.Len() == 0 {
			delete(fp.order, id)
		}
	}
	p.elem = nil
	return p
}

// ServeQueue decides the connections the kernel's fast path holds in q
// until it returns (q's Receive fails, as when it is closed, or ctx
// ends). A connection's SYN and its packets without data go on at once
// (the kernel's rules decide whether the session may reach the address
// at all); those with data are held until they make a whole ClientHello,
// which is checked as a connection passed through is (Session.Check: the
// SNI bound to the address's pins) and audited. Refused, its packets are
// sent through the rules again with marks.Refuse, and the client gets a
// TCP reset. Passed, they go on (marks.Seen), the client's bytes after the
// hello are held, and the server's packets are read until it has
// acknowledged the hello and answered it: a HelloRetryRequest has the
// client's second ClientHello checked (the same name) in its turn; any
// other answer is sent on with marks.Pass, which marks the connection, and
// the kernel forwards the rest of it without the gateway. A connection
// whose first bytes are not a ClientHello (plain HTTP on a fast port),
// whose hello is not whole or not answered within the peek timeout or
// MaxPeek bytes, holds urgent data (which the server's stack takes out of
// the stream the gateway checked), whose SYN the gateway did not see, that
// is Multipath TCP, or whose session terminates its name's TLS, is
// refused. A SYN on the four ends of a decided connection starts a new
// one, checked on its own. MaxConns bounds the undecided connections of
// all sessions, MaxSessionConns those of one; the packets held are
// bounded per connection, per session and in all (each session held to
// its share of the kernel's queue).
func (s *Server) ServeQueue(ctx context.Context, q PacketQueue, marks FastConfig) error {
	fp := newFastPath(s, q, marks)
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

// outcome is what handling a packet decided, carried out once fp.mu is
// released: the kernel's verdicts, in this order, and the audit.
type outcome struct {
	// passed, if set, is a connection just passed: its conntrack id is
	// looked up before any of its packets goes on, so that its end (told
	// by the entry's events) finds it.
	passed    *passedFlow
	passedKey fastKey
	letGo     []uint32
	pass      []uint32
	refuse    []uint32
	drop      []uint32
	events    []Event
	// terminate: a connection refused because its name's TLS must be
	// terminated (FastConfig.Terminate).
	terminate *Event
}

// apply carries out o. It is called without fp.mu.
func (fp *fastPath) apply(o *outcome) {
	if o.passed != nil && fp.marks.FlowID != nil {
		if id, ok := fp.marks.FlowID(o.passedKey.client, o.passedKey.server); ok {
			fp.mu.Lock()
			if fp.passed[o.passedKey] == o.passed {
				o.passed.ev.Conntrack = id
			}
			fp.mu.Unlock()
			for i := range o.events {
				if o.events[i].Action == ActionAllowed && o.events[i].Client == o.passedKey.client && o.events[i].Dst == o.passedKey.server {
					o.events[i].Conntrack = id
				}
			}
		}
	}
	for _, id := range o.letGo {
		fp.letGo(id)
	}
	for _, id := range o.pass {
		fp.verdict(id, true)
	}
	for _, id := range o.refuse {
		fp.verdict(id, false)
	}
	for _, id := range o.drop {
		_ = fp.q.SetVerdict(id, nfq.Drop, nil)
	}
	for _, ev := range o.events {
		fp.emit(ev)
	}
	if o.terminate != nil && fp.marks.Terminate != nil {
		fp.marks.Terminate(o.terminate.Session, o.terminate.Dst)
	}
}

// mptcpOption is TCP's option kind of Multipath TCP (RFC 8684).
const mptcpOption = 30

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
	sess, ok := fp.s.cfg.Sessions(src.Addr())
	if !ok {
		// The server's side of a session's connection.
		fp.reply(p, seg, fastKey{client: dst, server: src})
		return
	}
	k := fastKey{client: src, server: dst}
	now := time.Now()
	var o outcome
	defer fp.apply(&o)
	fp.mu.Lock()
	defer fp.mu.Unlock()
	f := fp.flows[k]
	switch {
	case seg.Flags&nfq.SYN != 0 && len(seg.Payload) > 0:
		// Data in a SYN (TCP Fast Open) would reach the server before
		// any check: dropped, the client sends its SYN again without it.
		o.drop = append(o.drop, p.ID)
	case seg.Flags&nfq.SYN != 0 && seg.Flags&nfq.ACK == 0:
		fp.synLocked(&o, p, seg, k, f, sess.ID, now)
	case f == nil:
		// A connection whose SYN the gateway never saw: one it held
		// before a restart, or whose conntrack entry expired or was
		// deleted (a revision cut it), so that its next packet made a
		// new one. Nothing can be known of its first bytes, and an ACK
		// let go would open the way back for the server's data.
		o.refuse = append(o.refuse, p.ID)
	case f.decided && (!f.pass || f.marked):
		// Queued before the connection's mark was set: the same fate.
		if f.pass {
			o.pass = append(o.pass, p.ID)
		} else {
			o.refuse = append(o.refuse, p.ID)
		}
	case len(seg.Payload) == 0 && seg.Flags&nfq.URG == 0:
		o.letGo = append(o.letGo, p.ID)
	default:
		fp.clientDataLocked(&o, p, seg, k, f, now)
	}
}

// synLocked decides a client's SYN. The queue sees a SYN only while the
// connection's conntrack entry is undecided: after a decision, a SYN on
// the same four ends is a new connection (the client reset the last one
// and connected again from its port), which inherits nothing. A SYN with
// another number on an undecided one is such a connection too: the held
// bytes of the one before are not its own.
//
// +checklocks:fp.mu
func (fp *fastPath) synLocked(o *outcome, p nfq.Packet, seg nfq.TCP, k fastKey, f *fastFlow, session string, now time.Time) {
	if f != nil && (f.decided || f.isn != seg.Seq && len(f.held) > 0) {
		if !f.decided {
			o.drop = append(o.drop, fp.finishLocked(f, false, now)...)
		} else {
			o.drop = append(o.drop, fp.settleLocked(f)...)
		}
		f = nil
		// The connection before on these four ends is over: audited
		// now, so that the new one's end is not taken for its.
		if reused := fp.forgetLocked(k); reused != nil {
			o.events = append(o.events, reused.ended(now, 0, 0, "ended when its ports were used again: its bytes are not counted"))
		}
	}
	if hasOption(seg.Options, mptcpOption) {
		// Multipath TCP maps the bytes of its subflows into the stream
		// the server reads by options of its own: the bytes the gateway
		// checks need not be the ones the server takes as the start of
		// the stream.
		if f != nil {
			o.refuse = append(o.refuse, fp.finishLocked(f, false, now)...)
		}
		delete(fp.flows, k)
		o.refuse = append(o.refuse, p.ID)
		o.events = append(o.events, Event{Time: now, Kind: KindConnection, Session: session, Client: k.client, Dst: k.server,
			Proto: ProtoTLS, Action: ActionRefused, Kernel: true,
			Reason: "airlock: a Multipath TCP connection (the gateway checks the bytes of one path; refused so that the client connects with plain TCP)"})
		return
	}
	if f == nil {
		// Its place among the undecided is taken when the server
		// answers; a session at its own bound is refused now.
		if fp.synOnly[session] >= fp.s.cfg.MaxSessionConns || fp.undecided[session] >= fp.s.cfg.MaxSessionConns {
			delete(fp.flows, k)
			o.refuse = append(o.refuse, p.ID)
			return
		}
		f = &fastFlow{session: session, start: now, isn: seg.Seq, syn: true}
		fp.flows[k] = f
		fp.synOnly[session]++
	}
	if f.isn != seg.Seq {
		// A SYN sent again keeps its number; one at another number is
		// not the connection the server answered, if it did.
		f.isn, f.synAcked, f.sisnKnown = seg.Seq, false, false
	}
	o.letGo = append(o.letGo, p.ID)
}

// streamOffset is where seg's data starts in a stream whose first byte
// has sequence number first, and the data from there: bytes before the
// first (a segment that starts before it) are trimmed by the receiver's
// stack, which keeps the rest, and so by the gateway.
func streamOffset(seg nfq.TCP, first uint32) (int64, []byte) {
	payload := seg.Payload
	off := int64(int32(seg.Seq - first))
	if off < 0 {
		if -off >= int64(len(payload)) {
			return 0, nil
		}
		return 0, payload[-off:]
	}
	return off, payload
}

// hasOption reports whether TCP options opts hold one of kind.
func hasOption(opts []byte, kind byte) bool {
	for i := 0; i < len(opts); {
		switch opts[i] {
		case 0: // end of options
			return false
		case 1: // no-operation
			i++
			continue
		}
		if opts[i] == kind {
			return true
		}
		if i+1 >= len(opts) || opts[i+1] < 2 {
			return false
		}
		i += int(opts[i+1])
	}
	return false
}

// clientDataLocked decides a packet with data (or urgent data) a client
// sends on connection f, undecided or passed and not yet marked.
//
// +checklocks:fp.mu
func (fp *fastPath) clientDataLocked(o *outcome, p nfq.Packet, seg nfq.TCP, k fastKey, f *fastFlow, now time.Time) {
	off, payload := streamOffset(seg, f.isn+1)
	end := off + int64(len(payload))
	checked := int64(f.checked)
	var perr error
	switch {
	case !f.synAcked:
		// The client's kernel sends data once it has the server's
		// SYN-ACK, which the gateway sees first: data before it is
		// another stack's, or follows a SYN at another number, which the
		// server, keeping the connection it has, would read on from its
		// first.
		perr = errors.New("data before the server's SYN-ACK to the client's SYN")
	case seg.Flags&nfq.URG != 0:
		// The server's stack takes the urgent byte out of the stream its
		// application reads (unless SO_OOBINLINE), also a byte of a later
		// segment that an empty one's urgent pointer names: the gateway
		// would check bytes the server does not parse.
		perr = errors.New("urgent data before the server answered the ClientHello (the server would read other bytes than the gateway checks)")
	case f.decided && end <= checked:
		// A copy of bytes checked (the first may have died past the
		// gateway, and the server would read the copy).
		if !bytes.Equal(payload, f.client.buf[off:end]) {
			perr = errors.New("the ClientHello was sent again with other bytes than the gateway checked (the first copy did not reach the server)")
			break
		}
		o.letGo = append(o.letGo, p.ID)
		return
	case f.decided && off < checked:
		perr = errors.New("a segment carries bytes of the ClientHello checked and bytes after it, before the server answered")
	case end > checked+MaxPeek:
		// Bytes past those the stream keeps would be held unread, then
		// let go with a later hello's that cover them.
		perr = fmt.Errorf("more than %d bytes sent past the ClientHello checked before the server answered it", MaxPeek)
	}
	if perr == nil {
		f.held = append(f.held, heldPacket{id: p.ID, off: off, end: end})
		fp.heldBy[f.session]++
		fp.heldAll++
		switch {
		case fp.heldBy[f.session] > fastMaxSessionHeld:
			perr = fmt.Errorf("more than %d packets of the session's connections held for their ClientHellos", fastMaxSessionHeld)
		case fp.heldAll > fastMaxHeldAll && fp.heldBy[f.session] > fastMaxHeldAll/len(fp.heldBy):
			perr = fmt.Errorf("the gateway holds %d packets of all sessions' connections, and this session more than its share", fp.heldAll)
		case f.decided && len(f.held) > fastMaxHeld:
			perr = fmt.Errorf("more than %d packets sent before the server answered the ClientHello", fastMaxHeld)
		case !f.client.add(off, payload, f.checked+MaxPeek):
			// Two segments that say different things of the same bytes:
			// which the server keeps is its stack's choice, not the
			// gateway's.
			perr = errors.New("segments overlap with different bytes")
		}
		if perr == nil && fp.heldAll > fastMaxHeldHard {
			// Room is made once the packet is checked as any other:
			// were its bytes not in the stream, a copy of them with
			// other bytes (sent again from a rewritten file's pages)
			// would be checked while the server reads this one.
			fp.makeRoomLocked(o, k, now)
		}
	} else {
		o.refuse = append(o.refuse, p.ID)
	}
	switch {
	case !f.decided:
		fp.firstHelloLocked(o, k, f, perr, now)
	case perr != nil:
		fp.refuseAwaitingLocked(o, k, f, "airlock: "+perr.Error(), now)
	case f.second:
		fp.secondHelloLocked(o, k, f, now)
	}
}

// makeRoomLocked refuses a connection of the session holding the most
// packets (not k), with its held packets: the held packets of all are at
// their hard bound.
//
// +checklocks:fp.mu
func (fp *fastPath) makeRoomLocked(o *outcome, k fastKey, now time.Time) {
	top := ""
	for s, n := range fp.heldBy {
		if n > fp.heldBy[top] {
			top = s
		}
	}
	for vk, f := range fp.flows {
		if vk == k || f.session != top || len(f.held) == 0 {
			continue
		}
		why := fmt.Sprintf("airlock: the gateway holds %d packets of all sessions' connections, and this session the most", fp.heldAll)
		if f.decided {
			fp.refuseAwaitingLocked(o, vk, f, why, now)
			return
		}
		o.events = append(o.events, Event{Time: f.start, Kind: KindConnection, Session: f.session, Client: vk.client, Dst: vk.server,
			Proto: ProtoTLS, Action: ActionRefused, Kernel: true, Duration: now.Sub(f.start), Reason: why})
		o.refuse = append(o.refuse, fp.finishLocked(f, false, now)...)
		return
	}
}

// firstHelloLocked decides undecided connection f once its first
// ClientHello is whole (or perr says why it is refused before).
//
// +checklocks:fp.mu
func (fp *fastPath) firstHelloLocked(o *outcome, k fastKey, f *fastFlow, perr error, now time.Time) {
	data := f.client.buf
	var h Hello
	end := 0
	switch {
	case perr != nil:
	case len(data) > 0 && data[0] != recordHandshake:
		h.Proto = ProtoHTTP
		perr = errors.New("the first bytes are not a TLS ClientHello (the gateway forwards only TLS on this port)")
	case len(data) > 0:
		if end, perr = helloRecords(data); perr == nil && end > 0 {
			h, _, perr = Peek(bytes.NewReader(data[:end]))
		}
	}
	if perr == nil && end == 0 {
		if len(data) < MaxPeek && len(f.held) < fastMaxHeld {
			return // not whole yet
		}
		perr = ErrPeekTooLong
	}
	ev, pass, terminate := fp.decide(k, f, h, perr, len(data))
	if pass && straddles(f.held, end) {
		pass = false
		ev.Action, ev.Reason = ActionRefused, "airlock: bytes after the ClientHello in the segment that ends it, before the server answered (TLS early data is not taken on this path)"
	}
	if !pass {
		o.refuse = append(o.refuse, fp.finishLocked(f, false, now)...)
	} else {
		f.decided, f.pass, f.at = true, true, now
		f.checked, f.hello = end, h
		o.letGo = append(o.letGo, fp.releaseLocked(f)...)
		// Audited now, and again when it ends (FastFlowEnded), with its
		// bytes.
		passed := &passedFlow{ev: *ev, hello: h}
		evicted, refuse := fp.rememberLocked(k, passed)
		o.passed, o.passedKey = passed, k
		o.refuse = append(o.refuse, refuse...)
		for _, e := range evicted {
			why := "no longer followed (too many connections): its bytes are not counted, and a revision of its session ends it"
			if e.refused {
				why = "refused: too many connections followed, and the server had not yet acknowledged its ClientHello"
			}
			o.events = append(o.events, e.ended(now, 0, 0, why))
		}
	}
	if ev == nil {
		return
	}
	if terminate {
		o.terminate = ev
	}
	ev.Duration = time.Since(ev.Time)
	o.events = append(o.events, *ev)
}

// secondHelloLocked checks connection f's second ClientHello, sent after
// the server's HelloRetryRequest, once it is whole.
//
// +checklocks:fp.mu
func (fp *fastPath) secondHelloLocked(o *outcome, k fastKey, f *fastFlow, now time.Time) {
	end, err := secondHello(f.client.buf[f.checked:], f.hello)
	if err == nil && end == 0 {
		if len(f.held) < fastMaxHeld {
			return // not whole yet
		}
		err = ErrPeekTooLong
	}
	if err == nil && straddles(f.held, f.checked+end) {
		err = errors.New("bytes after the second ClientHello in the segment that ends it, before the server answered")
	}
	if err != nil {
		fp.refuseAwaitingLocked(o, k, f, "airlock: "+err.Error(), now)
		return
	}
	f.checked += end
	f.second, f.ackedAll = false, false
	o.letGo = append(o.letGo, fp.releaseLocked(f)...)
}

// straddles reports whether a held packet carries bytes both before and
// at or after end: one the server must have for the hello, and bytes that
// must wait for its answer.
func straddles(held []heldPacket, end int) bool {
	return slices.ContainsFunc(held, func(h heldPacket) bool { return h.off < int64(end) && h.end > int64(end) })
}

// releaseLocked takes f's held packets whose bytes are all checked off
// the hold, and returns their ids, in the order the kernel queued them.
//
// +checklocks:fp.mu
func (fp *fastPath) releaseLocked(f *fastFlow) []uint32 {
	var ids []uint32
	f.held = slices.DeleteFunc(f.held, func(h heldPacket) bool {
		if h.end <= int64(f.checked) {
			ids = append(ids, h.id)
			return true
		}
		return false
	})
	fp.unholdLocked(f.session, len(ids))
	slices.Sort(ids) // the kernel numbers packets in the order it queued them
	return ids
}

// refuseAwaitingLocked refuses connection f, passed and awaiting the
// server's answer, with its held packets, and audits why.
//
// +checklocks:fp.mu
func (fp *fastPath) refuseAwaitingLocked(o *outcome, k fastKey, f *fastFlow, why string, now time.Time) {
	f.pass = false
	o.refuse = append(o.refuse, fp.settleLocked(f)...)
	if pf := fp.forgetLocked(k); pf != nil {
		ev := pf.ended(now, 0, 0, "")
		ev.Action, ev.Reason = ActionRefused, why+"; the connection is refused"
		o.events = append(o.events, ev)
	}
}

// reply decides a packet the server of connection k sends while the
// connection is not yet marked: it goes on (its SYN-ACK's number and its
// first bytes noted), until the server has acknowledged the whole
// ClientHello of a connection passed and its answer is known: a
// HelloRetryRequest has the client's second ClientHello checked, any
// other answer marks the connection passed, by this packet's verdict.
func (fp *fastPath) reply(p nfq.Packet, seg nfq.TCP, k fastKey) {
	now := time.Now()
	var o outcome
	defer fp.apply(&o)
	fp.mu.Lock()
	defer fp.mu.Unlock()
	f := fp.flows[k]
	switch {
	case f == nil:
		// A connection the gateway does not know (held before a
		// restart): refused, as its client's packets are.
		o.refuse = append(o.refuse, p.ID)
		return
	case f.decided && (!f.pass || f.marked):
		if f.pass {
			o.pass = append(o.pass, p.ID)
		} else {
			o.refuse = append(o.refuse, p.ID)
		}
		return
	case seg.Flags&nfq.SYN != 0:
		if seg.Flags&nfq.ACK != 0 && seg.Ack == f.isn+1 && len(f.server.buf) == 0 && len(f.server.ooo) == 0 {
			f.sisn, f.sisnKnown, f.synAcked = seg.Seq, true, true
		}
		o.letGo = append(o.letGo, p.ID)
		if !f.synAcked || f.decided || f.counted {
			return
		}
		// The server answered: the connection now takes one of the
		// session's places among the undecided.
		fp.unsynLocked(f)
		if why := fp.admitLocked(&o, f.session, now); why != "" {
			// Its client's next packet is refused (and reset).
			o.refuse = append(o.refuse, fp.finishLocked(f, false, now)...)
			o.events = append(o.events, Event{Time: f.start, Kind: KindConnection, Session: f.session, Client: k.client, Dst: k.server,
				Proto: ProtoTLS, Action: ActionRefused, Kernel: true, Duration: now.Sub(f.start), Reason: "airlock: " + why})
			return
		}
		f.counted = true
		fp.undecided[f.session]++
		fp.undecidedAll++
		return
	case !f.sisnKnown:
		if f.decided {
			fp.refuseAwaitingLocked(&o, k, f, "airlock: the server's SYN-ACK was not seen, so its answer to the ClientHello cannot be read", now)
			o.refuse = append(o.refuse, p.ID)
			return
		}
		o.letGo = append(o.letGo, p.ID)
		return
	}
	off, payload := streamOffset(seg, f.sisn+1+uint32(f.serverBase))
	// The server's stack is not the adversary here: bytes it sends twice
	// differently are its own matter (the first kept).
	// At most fastMaxServerSegs segments past a gap are kept: an allowed
	// server that sends many out of order costs no more than that.
	if len(f.server.ooo) < fastMaxServerSegs {
		f.server.add(off, payload, flightPeek)
		if keep := serverKeep(f.server.buf); keep > flightPeek {
			f.server.add(off, payload, keep)
		}
	}
	if !f.decided || seg.Flags&nfq.RST != 0 {
		o.letGo = append(o.letGo, p.ID)
		return
	}
	if seg.Flags&nfq.ACK != 0 && int32(seg.Ack-(f.isn+1+uint32(f.checked))) >= 0 {
		f.ackedAll = true
	}
	ans := flightMore
	n := 0
	if !f.second && f.ackedAll && len(f.server.buf) > 0 {
		ans, n = serverFlight(f.server.buf)
	}
	switch ans {
	case flightMore:
		o.letGo = append(o.letGo, p.ID)
	case flightRetry:
		if f.retried {
			fp.refuseAwaitingLocked(&o, k, f, "airlock: the server asked for a third ClientHello (a second HelloRetryRequest)", now)
			o.refuse = append(o.refuse, p.ID)
			return
		}
		// The retry request goes on to the client; the bytes it sends
		// next are held until its second ClientHello is checked (it may
		// be among those held already).
		f.retried, f.second, f.ackedAll = true, true, false
		f.serverBase += n
		f.server = f.server.from(n)
		o.letGo = append(o.letGo, p.ID)
		fp.secondHelloLocked(&o, k, f, now)
		if !f.pass {
			// The client's bytes after the first hello were no second
			// one of the same name: the retry request does not reach it.
			o.letGo = slices.DeleteFunc(o.letGo, func(id uint32) bool { return id == p.ID })
			o.refuse = append(o.refuse, p.ID)
		}
	case flightHello:
		// The server has read the hellos checked and answered: the
		// connection is marked passed by this packet, and what the
		// client sent after its hello goes on.
		f.marked = true
		held := make([]uint32, 0, len(f.held))
		for _, h := range f.held {
			held = append(held, h.id)
		}
		slices.Sort(held)
		fp.settleLocked(f)
		if pf := fp.passed[k]; pf != nil {
			pf.marked = now
		}
		o.pass = append(o.pass, p.ID)
		o.pass = append(o.pass, held...)
	}
}

// emit audits ev in its session, if the session is still the client's.
func (fp *fastPath) emit(ev Event) {
	if sess, ok := fp.s.cfg.Sessions(ev.Client.Addr()); ok && sess.ID == ev.Session && sess.Audit != nil {
		sess.Audit(ev)
	}
}

// evictOldestLocked forgets session id's passed connection that was
// passed first, and returns it with the packets to refuse.
//
// +checklocks:fp.mu
func (fp *fastPath) evictOldestLocked(id string) (*passedFlow, []uint32) {
	l := fp.order[id]
	if l == nil || l.Len() == 0 {
		return nil, nil
	}
	oldest := l.Front().Value.(fastKey)
	of := fp.passed[oldest]
	var refuse []uint32
	// One not yet marked is refused: no revision would find it (it is
	// not marked passed in the kernel yet), and the server's answer
	// would mark it.
	if f := fp.flows[oldest]; f != nil && f.decided && f.pass && !f.marked {
		f.pass = false
		refuse = fp.settleLocked(f)
		of.refused = true
	}
	return fp.forgetLocked(oldest), refuse
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
	// One whose conntrack id is being looked up (its held packets wait
	// for it) is not yet marked passed in the kernel: an end now is an
	// earlier connection's on the same ports, told late.
	if p == nil || p.ev.Conntrack == 0 && p.marked.IsZero() || id != 0 && p.ev.Conntrack != 0 && id != p.ev.Conntrack {
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
	var refuse []uint32
	fp.mu.Lock()
	var ks []fastKey
	if l := fp.order[sess.ID]; l != nil {
		for e := l.Front(); e != nil; e = e.Next() {
			ks = append(ks, e.Value.(fastKey))
		}
	}
	for _, k := range ks {
		p := fp.passed[k]
		if sess.Check(k.server, p.hello, p.ev.Time).Allow && !terminates(sess, p.hello) {
			continue
		}
		cuts = append(cuts, cut{k, p})
		fp.forgetLocked(k)
		// Its packets still queued, and those of the conntrack entry
		// the cut makes anew, are refused, not passed as decided.
		if f := fp.flows[k]; f != nil {
			f.pass = false
			refuse = append(refuse, fp.settleLocked(f)...)
		}
	}
	fp.mu.Unlock()
	for _, id := range refuse {
		fp.verdict(id, false)
	}
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

// finishLocked decides undecided connection f and returns its held
// packets' ids, in the order the kernel queued them.
//
// +checklocks:fp.mu
func (fp *fastPath) finishLocked(f *fastFlow, pass bool, now time.Time) []uint32 {
	f.decided, f.pass, f.at = true, pass, now
	fp.unsynLocked(f)
	if !pass {
		if f.counted {
			f.counted = false
			fp.uncount(f.session)
		}
		// Nothing reads a refused connection's bytes again: they are
		// not kept while its verdict is (fastDecidedKeep).
		f.client, f.server = stream{}, stream{}
	}
	return fp.takeHeldLocked(f)
}

// takeHeldLocked takes all of f's held packets off the hold, and returns
// their ids, in the order the kernel queued them.
//
// +checklocks:fp.mu
func (fp *fastPath) takeHeldLocked(f *fastFlow) []uint32 {
	ids := make([]uint32, 0, len(f.held))
	for _, h := range f.held {
		ids = append(ids, h.id)
	}
	fp.unholdLocked(f.session, len(ids))
	f.held = nil
	slices.Sort(ids)
	return ids
}

// unholdLocked takes n packets off session's held ones.
//
// +checklocks:fp.mu
func (fp *fastPath) unholdLocked(session string, n int) {
	fp.heldAll -= n
	if fp.heldBy[session] -= n; fp.heldBy[session] <= 0 {
		delete(fp.heldBy, session)
	}
}

// admitLocked says why session may not have another connection
// undecided ("" if it may): past MaxSessionConns of its own, or MaxConns
// of all unless a session with more than one more than it gives up its
// oldest (refused, to o), so that sessions acting together cannot keep
// another's connections off the fast path.
//
// +checklocks:fp.mu
func (fp *fastPath) admitLocked(o *outcome, session string, now time.Time) string {
	n := fp.undecided[session]
	if n >= fp.s.cfg.MaxSessionConns {
		return fmt.Sprintf("more than %d connections of the session undecided on the fast path", fp.s.cfg.MaxSessionConns)
	}
	if fp.undecidedAll < fp.s.cfg.MaxConns {
		return ""
	}
	top := session
	for s, c := range fp.undecided {
		if c > fp.undecided[top] {
			top = s
		}
	}
	if fp.undecided[top] <= n+1 || !fp.evictUndecidedLocked(o, top, now) {
		return fmt.Sprintf("more than %d connections of all sessions undecided on the fast path", fp.s.cfg.MaxConns)
	}
	return ""
}

// evictUndecidedLocked refuses session's oldest connection counted
// among the undecided, and reports whether there was one.
//
// +checklocks:fp.mu
func (fp *fastPath) evictUndecidedLocked(o *outcome, session string, now time.Time) bool {
	var oldest *fastFlow
	var ok fastKey
	for k, f := range fp.flows {
		if f.session == session && f.counted && (oldest == nil || f.start.Before(oldest.start)) {
			oldest, ok = f, k
		}
	}
	if oldest == nil {
		return false
	}
	why := fmt.Sprintf("airlock: %d connections of all sessions undecided on the fast path, and this session the most", fp.undecidedAll)
	if oldest.decided {
		fp.refuseAwaitingLocked(o, ok, oldest, why, now)
		return true
	}
	o.events = append(o.events, Event{Time: oldest.start, Kind: KindConnection, Session: session, Client: ok.client, Dst: ok.server,
		Proto: ProtoTLS, Action: ActionRefused, Kernel: true, Duration: now.Sub(oldest.start), Reason: why})
	o.refuse = append(o.refuse, fp.finishLocked(oldest, false, now)...)
	return true
}

// unsynLocked takes f off its session's connections not yet answered.
//
// +checklocks:fp.mu
func (fp *fastPath) unsynLocked(f *fastFlow) {
	if !f.syn {
		return
	}
	f.syn = false
	if fp.synOnly[f.session]--; fp.synOnly[f.session] <= 0 {
		delete(fp.synOnly, f.session)
	}
}

// uncount takes one connection off session's undecided ones.
//
// +checklocks:fp.mu
func (fp *fastPath) uncount(session string) {
	fp.undecidedAll--
	fp.undecided[session]--
	if fp.undecided[session] <= 0 {
		delete(fp.undecided, session)
	}
}

// settleLocked ends the wait of passed connection f for the server's
// answer (it came, or the connection is refused or forgotten): it no
// longer counts among its session's undecided ones, and the bytes kept
// go. It returns the ids of the packets still held (to refuse, unless
// the connection is marked).
//
// +checklocks:fp.mu
func (fp *fastPath) settleLocked(f *fastFlow) []uint32 {
	if f.counted {
		f.counted = false
		fp.uncount(f.session)
	}
	f.client, f.server = stream{}, stream{}
	return fp.takeHeldLocked(f)
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

// sweep refuses connections whose ClientHello is not whole, or whose
// server has not answered it, within the peek timeout, and forgets
// decided ones after fastDecidedKeep.
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
			fp.sweepAt(now)
		}
	}
}

// sweepAt is one round of sweep at now.
func (fp *fastPath) sweepAt(now time.Time) {
	var o outcome
	fp.mu.Lock()
	for k, f := range fp.flows {
		switch {
		case f.decided && f.pass && !f.marked && now.Sub(f.at) > fp.s.cfg.PeekTimeout:
			// The server never answered the ClientHello (or the
			// client never sent its second): its next packet,
			// either way, is refused.
			why := "airlock: the server did not answer the ClientHello within the peek timeout"
			if f.second {
				why = "airlock: no second ClientHello within the peek timeout after the server's HelloRetryRequest"
			}
			fp.refuseAwaitingLocked(&o, k, f, why, now)
		case f.decided && now.Sub(f.at) > fastDecidedKeep && (!f.pass || f.marked):
			delete(fp.flows, k)
		case !f.decided && now.Sub(f.start) > fp.s.cfg.PeekTimeout:
			if len(f.held) > 0 {
				if sess, ok := fp.s.cfg.Sessions(k.client.Addr()); ok {
					o.events = append(o.events, Event{Time: f.start, Kind: KindConnection, Session: sess.ID, Client: k.client, Dst: k.server,
						Proto: ProtoTLS, Action: ActionRefused, Kernel: true, Duration: now.Sub(f.start),
						Reason: "airlock: the ClientHello was not whole within the peek timeout"})
				}
			}
			o.refuse = append(o.refuse, fp.finishLocked(f, false, now)...)
		}
	}
	fp.mu.Unlock()
	fp.apply(&o)
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
	var o outcome
	defer fp.apply(&o)
	fp.mu.Lock()
	defer fp.mu.Unlock()
	p, ok := fp.passed[k]
	if !ok {
		if f := fp.flows[k]; f != nil && !f.decided {
			return true
		}
		if f := fp.flows[k]; unknownCut && f != nil && f.decided {
			o.refuse = append(o.refuse, fp.settleLocked(f)...)
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
		o.refuse = append(o.refuse, fp.settleLocked(f)...)
		delete(fp.flows, k)
	}
	o.events = append(o.events, p.ended(time.Now(), 0, 0, "closed: the session's egress policy was revised; its bytes are not counted"))
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
