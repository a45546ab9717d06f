package l7

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// countQueue is a queue that counts the verdicts each packet gets.
type countQueue struct {
	mu       sync.Mutex
	verdicts map[uint32]int
}

func (q *countQueue) Receive() ([]nfq.Packet, error) { return nil, net.ErrClosed }

func (q *countQueue) SetVerdict(id uint32, _ nfq.Verdict, _ *uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.verdicts[id]++
	return nil
}

// invariantWorld drives a fast path with random packets of a few
// sessions, clients and servers, and the calls of revisions and of the
// kernel's connection ends, and checks its books after each step.
type invariantWorld struct {
	t       testing.TB
	r       *rand.Rand
	q       *countQueue
	s       *Server
	fp      *fastPath
	mu      sync.Mutex
	regs    map[netip.Addr]*Session
	allowed map[string]bool // per session: allowed.test may be reached
	id      uint32
	servers []netip.AddrPort
	clients []netip.Addr
	// streams the clients and servers send from.
	hello, evil, second []byte
	hrr, sh             []byte
	// scripts are connections that go their way, one step at a time.
	scripts map[fastKey]*script
	// payloads are the packets' data, by id.
	payloads map[uint32][]byte
}

// script is a connection as a client and a server would carry it: its
// SYN, the server's SYN-ACK, the client's stream and the server's, each
// sent on in pieces with the other's bytes acknowledged.
type script struct {
	isn            uint32
	synAcked       bool
	client, server []byte
	sent, srvSent  int
}

func newInvariantWorld(t testing.TB, seed uint64, fillers int) *invariantWorld {
	w := &invariantWorld{t: t, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), q: &countQueue{verdicts: map[uint32]int{}},
		regs: map[netip.Addr]*Session{}, allowed: map[string]bool{}, scripts: map[fastKey]*script{}, payloads: map[uint32][]byte{},
		servers: []netip.AddrPort{netip.MustParseAddrPort("10.214.0.20:443"), netip.MustParseAddrPort("10.214.0.21:443")},
	}
	for i := range 3 {
		a := netip.AddrFrom4([4]byte{10, 213, 0, byte(3 + i)})
		w.clients = append(w.clients, a)
		id := fmt.Sprintf("s%d", i)
		w.allowed[id] = true
		w.regs[a] = w.registration(id)
	}
	for i := range fillers {
		id := fmt.Sprintf("f%d", i)
		w.regs[netip.AddrFrom4([4]byte{10, 213, 1, byte(i)})] = w.registration(id)
	}
	maxConns, maxSession := 4, 3
	if fillers > 0 {
		// Room for the fillers' connections.
		maxConns, maxSession = 64*fillers, 64
	}
	s, err := New(Config{
		Sessions: func(a netip.Addr) (*Session, bool) {
			w.mu.Lock()
			defer w.mu.Unlock()
			sess, ok := w.regs[a]
			return sess, ok
		},
		OriginalDst:     func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:            func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout:     10 * time.Second,
		MaxConns:        maxConns,
		MaxSessionConns: maxSession,
	})
	if err != nil {
		t.Fatal(err)
	}
	w.s = s
	w.fp = newFastPath(s, w.q, testMarks)
	s.fast.Store(w.fp)
	w.hello = clientHello(t, "allowed.test")
	w.evil = clientHello(t, "evilxxx.test")
	w.second = append(bytes.Clone(ccsRecord), clientHello(t, "allowed.test")...)
	w.hrr = append(retryRecordCookie(w.r.IntN(400)), ccsRecord...)
	w.sh = append(bytes.Clone(ccsRecord), serverHelloStart...)
	w.fill(fillers)
	return w
}

// fill has filler sessions hold packets of ClientHellos whose first byte
// never comes, each within its share, until the packets held of all are
// near fastMaxHeldHard.
func (w *invariantWorld) fill(fillers int) {
	for i := 0; i < fillers && w.fp.heldAll < fastMaxHeldHard-4; i++ {
		a := netip.AddrFrom4([4]byte{10, 213, 1, byte(i)})
		for c := 0; c < 64 && w.fp.heldAll < fastMaxHeldHard-4; c++ {
			src := netip.AddrPortFrom(a, uint16(20000+c))
			w.packet(tcpPacket(src, w.servers[0], 1000, nfq.SYN, nil))
			w.packet(synAckPacket(w.servers[0], src, 1000))
			refused := false
			for k := 0; k < 8; k++ {
				before := w.fp.heldAll
				w.packet(tcpPacket(src, w.servers[0], 1002+uint32(k*10), nfq.ACK, w.hello[1+k*10:1+k*10+10]))
				if w.fp.heldAll <= before {
					refused = true
					break
				}
			}
			if refused {
				break
			}
		}
	}
}

// registration is session id's, which allows allowed.test at the first
// server while w.allowed[id].
func (w *invariantWorld) registration(id string) *Session {
	allow := w.allowed[id]
	return &Session{ID: id, Audit: func(Event) {},
		Check: func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
			return Decision{Allow: allow && h.SNI == "allowed.test" && dst == w.servers[0], Reason: "checked"}
		}}
}

func (w *invariantWorld) pick(n int) int { return w.r.IntN(n) }

func (w *invariantWorld) isn() uint32 { return []uint32{1000, 1000, 1000, 5000}[w.pick(4)] }

// chunk is a random piece of b: its offset and bytes.
func (w *invariantWorld) chunk(b []byte) (int, []byte) {
	off := w.pick(len(b))
	if w.pick(3) == 0 {
		off = 0
	}
	n := 1 + w.pick(len(b)-off)
	if w.pick(2) == 0 {
		n = len(b) - off
	}
	return off, b[off : off+n]
}

func (w *invariantWorld) packet(pkt []byte) {
	w.id++
	if seg, err := nfq.ParseTCP(pkt); err == nil {
		w.payloads[w.id] = seg.Payload
	}
	w.fp.packet(nfq.Packet{ID: w.id, Payload: pkt})
}

// step does one random thing.
func (w *invariantWorld) step() string {
	client := netip.AddrPortFrom(w.clients[w.pick(len(w.clients))], uint16(40000+w.pick(3)))
	server := w.servers[0]
	if w.pick(8) == 0 {
		server = w.servers[1]
	}
	if w.pick(2) == 0 {
		return w.advance(fastKey{client: client, server: server})
	}
	switch op := w.pick(20); op {
	case 0, 1: // the client's SYN
		p := tcpPacket(client, server, w.isn(), nfq.SYN, nil)
		if w.pick(10) == 0 {
			p = append(p, 'x') // with data
			binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		}
		w.packet(p)
		return fmt.Sprintf("SYN %v", client)
	case 2, 3: // the server's SYN-ACK
		w.packet(synAckPacket(server, client, w.isn()))
		return fmt.Sprintf("SYN-ACK %v", client)
	case 4, 5, 6, 7: // the client's bytes
		var stream []byte
		switch w.pick(4) {
		case 0:
			stream = w.evil
		case 1:
			stream = append(bytes.Clone(w.hello), w.second...)
		case 2:
			stream = append(bytes.Clone(w.hello), "early data"...)
		default:
			stream = w.hello
		}
		off, data := w.chunk(stream)
		flags := byte(nfq.ACK)
		if w.pick(30) == 0 {
			flags |= nfq.URG
		}
		w.packet(tcpPacket(client, server, w.isn()+1+uint32(off), flags, data))
		return fmt.Sprintf("data %v %d+%d", client, off, len(data))
	case 8, 9, 10: // the server's bytes
		stream := w.sh
		if w.pick(2) == 0 {
			stream = append(bytes.Clone(w.hrr), w.sh...)
		}
		off, data := w.chunk(stream)
		isn := w.isn()
		ack := isn + 1 + uint32([]int{0, len(w.hello), len(w.hello) + len(w.second), w.pick(3000)}[w.pick(4)])
		p := tcpPacket(server, client, serverISN+1+uint32(off), nfq.ACK, data)
		binary.BigEndian.PutUint32(p[28:], ack)
		w.packet(p)
		return fmt.Sprintf("answer %v %d+%d ack %d", client, off, len(data), ack-isn-1)
	case 11: // the server's reset
		w.packet(tcpPacket(server, client, serverISN+1, nfq.RST|nfq.ACK, nil))
		return "RST"
	case 12, 13: // time passes
		d := []time.Duration{0, 6 * time.Second, 11 * time.Second, time.Minute}[w.pick(4)]
		w.fp.sweepAt(time.Now().Add(d))
		return fmt.Sprintf("sweep +%v", d)
	case 14: // a revision: allowed.test withdrawn or given back
		id := fmt.Sprintf("s%d", w.pick(len(w.clients)))
		w.mu.Lock()
		w.allowed[id] = !w.allowed[id]
		reg := w.registration(id)
		for a, r := range w.regs {
			if r.ID == id {
				w.regs[a] = reg
			}
		}
		w.mu.Unlock()
		w.s.recheckFast(reg)
		return fmt.Sprintf("recheck %s allowed %v", id, w.allowed[id])
	case 15: // a revision's sweep of the kernel's passed connections
		w.mu.Lock()
		reg := w.regs[client.Addr()]
		w.mu.Unlock()
		w.s.FastKeep(reg, client, server, w.pick(2) == 0)
		return fmt.Sprintf("FastKeep %v", client)
	case 16: // a passed connection ends
		w.s.FastFlowEnded(client, server, uint32(w.pick(2)), 1, 1)
		return fmt.Sprintf("ended %v", client)
	case 17: // events lost
		w.s.FastReconcile(nil, time.Now().Add(time.Hour))
		return "reconcile"
	case 18: // a session's network removed
		id := fmt.Sprintf("s%d", w.pick(len(w.clients)))
		w.s.closeFast(id)
		return "closeFast " + id
	default: // an empty ACK of the client's
		w.packet(tcpPacket(client, server, w.isn()+1+uint32(w.pick(len(w.hello)+1)), nfq.ACK, nil))
		return "ACK"
	}
}

// advance takes connection k's script one step on: a new one at its SYN.
func (w *invariantWorld) advance(k fastKey) string {
	sc := w.scripts[k]
	if sc == nil || w.pick(40) == 0 {
		sc = &script{isn: w.isn() + uint32(w.pick(3)), server: w.sh}
		switch w.pick(4) {
		case 0:
			sc.client = w.evil
		case 1:
			sc.client = append(bytes.Clone(w.hello), w.second...)
			sc.server = append(bytes.Clone(w.hrr), w.sh...)
		case 2:
			sc.client = append(bytes.Clone(w.hello), "early data"...)
		default:
			sc.client = append(bytes.Clone(w.hello), w.second[:w.pick(len(w.second))]...)
			sc.server = append(bytes.Clone(w.hrr), w.sh...)
		}
		w.scripts[k] = sc
		w.packet(tcpPacket(k.client, k.server, sc.isn, nfq.SYN, nil))
		return fmt.Sprintf("script SYN %v", k.client)
	}
	if !sc.synAcked {
		sc.synAcked = true
		w.packet(synAckPacket(k.server, k.client, sc.isn))
		return fmt.Sprintf("script SYN-ACK %v", k.client)
	}
	if w.pick(2) == 0 && sc.sent < len(sc.client) {
		off := sc.sent
		if w.pick(8) == 0 {
			off = w.pick(off + 1) // sent again
		}
		end := len(sc.client)
		if off < len(w.hello) && w.pick(20) != 0 {
			end = len(w.hello) // the hello written on its own
		}
		if w.pick(2) == 0 {
			end = off + 1 + w.pick(end-off)
		}
		w.packet(tcpPacket(k.client, k.server, sc.isn+1+uint32(off), nfq.ACK, sc.client[off:end]))
		sc.sent = max(sc.sent, end)
		return fmt.Sprintf("script data %v %d", k.client, off)
	}
	n := 0
	if sc.srvSent < len(sc.server) {
		n = 1 + w.pick(len(sc.server)-sc.srvSent)
	}
	p := tcpPacket(k.server, k.client, serverISN+1+uint32(sc.srvSent), nfq.ACK, sc.server[sc.srvSent:sc.srvSent+n])
	binary.BigEndian.PutUint32(p[28:], sc.isn+1+uint32(sc.sent))
	w.packet(p)
	sc.srvSent += n
	return fmt.Sprintf("script answer %v %d ack %d", k.client, n, sc.sent)
}

// check checks the fast path's books: its counts are the sums of what
// they count, none negative, and every packet it was given is either
// held by one connection or has had one verdict.
func (w *invariantWorld) check() error {
	fp := w.fp
	fp.mu.Lock()
	defer fp.mu.Unlock()
	undecided, synOnly, heldBy := map[string]int{}, map[string]int{}, map[string]int{}
	held := map[uint32]int{}
	heldAll := 0
	for k, f := range fp.flows {
		if f.counted {
			undecided[f.session]++
			if f.decided && (!f.pass || f.marked) {
				return fmt.Errorf("%v: decided (pass %v, marked %v) and counted among the undecided", k, f.pass, f.marked)
			}
		}
		if f.syn {
			synOnly[f.session]++
			if f.decided || f.counted {
				return fmt.Errorf("%v: awaiting its SYN-ACK, and decided %v, counted %v", k, f.decided, f.counted)
			}
		}
		if len(f.held) > 0 && f.decided && (!f.pass || f.marked) {
			return fmt.Errorf("%v: decided (pass %v, marked %v) and holds %d packets", k, f.pass, f.marked, len(f.held))
		}
		for _, h := range f.held {
			held[h.id]++
			// Its bytes are in the stream the gateway checks: a copy
			// of them with other bytes is refused.
			p := w.payloads[h.id]
			data := p[len(p)-int(h.end-h.off):]
			if limit := int64(f.checked + MaxPeek); h.end > limit {
				data = data[:max(0, limit-h.off)]
			}
			if !streamHolds(&f.client, h.off, data) {
				return fmt.Errorf("%v: packet %d held, its bytes at %d not in the stream checked", k, h.id, h.off)
			}
		}
		heldBy[f.session] += len(f.held)
		heldAll += len(f.held)
	}
	all := 0
	for s, n := range fp.undecided {
		if n <= 0 || n != undecided[s] {
			return fmt.Errorf("session %s: %d undecided counted, %d connections counted", s, n, undecided[s])
		}
		all += n
	}
	if len(fp.undecided) != len(undecided) || all != fp.undecidedAll {
		return fmt.Errorf("undecided: %v (all %d), connections counted %v", fp.undecided, fp.undecidedAll, undecided)
	}
	if fmt.Sprint(fp.synOnly) != fmt.Sprint(synOnly) {
		return fmt.Errorf("awaiting their SYN-ACK: %v counted, %v connections", fp.synOnly, synOnly)
	}
	for s, n := range heldBy {
		if n == 0 {
			delete(heldBy, s)
		}
	}
	if fmt.Sprint(fp.heldBy) != fmt.Sprint(heldBy) || fp.heldAll != heldAll {
		return fmt.Errorf("held: %v (all %d) counted, %v (all %d) held", fp.heldBy, fp.heldAll, heldBy, heldAll)
	}
	passedBy := map[string]int{}
	for k, p := range fp.passed {
		passedBy[p.ev.Session]++
		if p.elem == nil || p.elem.Value.(fastKey) != k {
			return fmt.Errorf("%v: passed, not in its session's order", k)
		}
	}
	if fmt.Sprint(fp.passedBy) != fmt.Sprint(passedBy) {
		return fmt.Errorf("passed: %v counted, %v", fp.passedBy, passedBy)
	}
	for s, l := range fp.order {
		if l.Len() != passedBy[s] {
			return fmt.Errorf("session %s: %d in order, %d passed", s, l.Len(), passedBy[s])
		}
	}
	w.q.mu.Lock()
	defer w.q.mu.Unlock()
	for id := uint32(1); id <= w.id; id++ {
		if n := w.q.verdicts[id] + held[id]; n != 1 {
			return fmt.Errorf("packet %d: %d verdicts, held %d times", id, w.q.verdicts[id], held[id])
		}
	}
	return nil
}

// streamHolds reports whether s holds data at off.
func streamHolds(s *stream, off int64, data []byte) bool {
	for i, b := range data {
		at := off + int64(i)
		if at < int64(len(s.buf)) {
			if s.buf[at] != b {
				return false
			}
			continue
		}
		found := false
		for o, d := range s.ooo {
			if o <= at && at < o+int64(len(d)) && d[at-o] == b {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// runInvariants runs n random steps of seed, checking after each, and at
// the end lets the peek timeout pass: nothing is held or counted then.
func runInvariants(t testing.TB, seed uint64, n, fillers int) {
	w := newInvariantWorld(t, seed, fillers)
	var log []string
	fail := func(err error) {
		if len(log) > 30 {
			log = log[len(log)-30:]
		}
		t.Fatalf("seed %d, after %d steps: %v\nlast steps:\n%s", seed, len(log), err, fmt.Sprint(log))
	}
	for range n {
		log = append(log, w.step())
		if err := w.check(); err != nil {
			fail(err)
		}
	}
	// Undecided and awaiting connections refused, then forgotten past
	// the keep of decided ones.
	w.fp.sweepAt(time.Now().Add(time.Minute))
	w.fp.sweepAt(time.Now().Add(2 * time.Minute))
	if err := w.check(); err != nil {
		fail(err)
	}
	w.fp.mu.Lock()
	defer w.fp.mu.Unlock()
	if w.fp.undecidedAll != 0 || w.fp.heldAll != 0 || len(w.fp.synOnly) != 0 || len(w.fp.flows) != 0 {
		t.Fatalf("seed %d: past the peek timeout: %d undecided, %d held, %v awaiting a SYN-ACK, %d connections", seed,
			w.fp.undecidedAll, w.fp.heldAll, w.fp.synOnly, len(w.fp.flows))
	}
}

// TestFastInvariants drives the fast path with random packets of three
// sessions (SYNs at two numbers, SYN-ACKs, pieces of ClientHellos, of
// retry requests and ServerHellos, resets), time passing, revisions,
// connection ends and reconciliations, and checks after each step that
// the undecided, held and passed counts are the sums of what they count
// and that every packet is held once or has had one verdict (a packet
// given none holds the kernel's queue for ever; two, an error from the
// kernel).
func TestFastInvariants(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 30
	}
	for seed := range uint64(seeds) {
		runInvariants(t, seed, 400, 0)
	}
}

// TestFastInvariantsHardBound is TestFastInvariants with the packets held
// of all sessions near fastMaxHeldHard (by 20 other sessions): the
// connections of the session holding the most are refused to make room,
// and each session is held to its share.
func TestFastInvariantsHardBound(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		runInvariants(t, seed, 400, 20)
	}
}

// FuzzFastInvariants is TestFastInvariants at the fuzzer's seeds.
func FuzzFastInvariants(f *testing.F) {
	f.Add(uint64(1), uint16(400), false)
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, full bool) {
		fillers := 0
		if full {
			fillers = 20
		}
		runInvariants(t, seed, int(n%2000), fillers)
	})
}
