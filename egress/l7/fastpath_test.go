package l7

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// fakeQueue stands for the kernel's queue in tests of the fast path's
// decisions (the real queue is tested in egress/nfq and, with the
// gateway's rules, in egress's TestL7FastPath).
type fakeQueue struct {
	in       chan []nfq.Packet
	mu       sync.Mutex
	verdicts map[uint32]string // "accept", "pass", "refuse", "drop"
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{in: make(chan []nfq.Packet, 16), verdicts: map[uint32]string{}}
}

func (q *fakeQueue) Receive() ([]nfq.Packet, error) {
	p, ok := <-q.in
	if !ok {
		return nil, net.ErrClosed
	}
	return p, nil
}

func (q *fakeQueue) SetVerdict(id uint32, v nfq.Verdict, mark *uint32) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case v == nfq.Repeat && mark != nil && *mark == testMarks.Seen:
		q.verdicts[id] = "accept" // on to the session's own rules
	case v == nfq.Accept:
		// Ends the hook's rules: the session's own never decide.
		q.verdicts[id] = "accepted past the session's rules"
	case v == nfq.Repeat && mark != nil && *mark == testMarks.Pass:
		q.verdicts[id] = "pass"
	case v == nfq.Repeat && mark != nil && *mark == testMarks.Refuse:
		q.verdicts[id] = "refuse"
	default:
		q.verdicts[id] = "drop"
	}
	return nil
}

// wait returns the verdict on id once given.
func (q *fakeQueue) wait(t *testing.T, id uint32) string {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		q.mu.Lock()
		v, ok := q.verdicts[id]
		q.mu.Unlock()
		if ok {
			return v
		}
	}
	t.Fatalf("no verdict on packet %d", id)
	return ""
}

func (q *fakeQueue) pending(id uint32) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.verdicts[id]
	return !ok
}

var testMarks = FastConfig{Pass: 2, Refuse: 3, Seen: 4}

// tcpPacket is an IPv4 packet of a TCP segment from src to dst.
func tcpPacket(src, dst netip.AddrPort, seq uint32, flags byte, data []byte) []byte {
	p := make([]byte, 40, 40+len(data))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:], uint16(40+len(data)))
	p[8], p[9] = 64, 6
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(p[12:], s4[:])
	copy(p[16:], d4[:])
	binary.BigEndian.PutUint16(p[20:], src.Port())
	binary.BigEndian.PutUint16(p[22:], dst.Port())
	binary.BigEndian.PutUint32(p[24:], seq)
	p[32] = 5 << 4
	p[33] = flags
	return append(p, data...)
}

// serverISN is the initial sequence number of the tests' servers.
const serverISN = 7777

// synAckPacket is the server's SYN-ACK to client's SYN numbered isn.
func synAckPacket(server, client netip.AddrPort, isn uint32) []byte {
	p := tcpPacket(server, client, serverISN, nfq.SYN|nfq.ACK, nil)
	binary.BigEndian.PutUint32(p[28:], isn+1)
	return p
}

// synAnswered is the packet pkt (id), and if it is a client's bare SYN
// (to port 443), the server's SYN-ACK to it (id with the top bit set): the
// fast path takes a connection's data only once the server's SYN-ACK has
// acknowledged its SYN.
func synAnswered(id uint32, pkt []byte) []nfq.Packet {
	out := []nfq.Packet{{ID: id, Payload: pkt}}
	seg, err := nfq.ParseTCP(pkt)
	if err == nil && seg.Flags&(nfq.SYN|nfq.ACK) == nfq.SYN && len(seg.Payload) == 0 && seg.Dst.Port() == 443 {
		out = append(out, nfq.Packet{ID: id | 1<<31, Payload: synAckPacket(seg.Dst, seg.Src, seg.Seq)})
	}
	return out
}

// serverHelloStart is the start of a ServerHello record: enough for the
// fast path to tell it from a HelloRetryRequest.
var serverHelloStart = append([]byte{recordHandshake, 3, 3, 0, 60, 2, 0, 0, 56, 3, 3}, bytes.Repeat([]byte{0x42}, 32)...)

// ackPacket is the server's answer to client's ClientHello, acknowledging
// every byte before ack (sent after synAckPacket).
func ackPacket(server, client netip.AddrPort, ack uint32) []byte {
	return answerPacket(server, client, ack, serverHelloStart)
}

// answerPacket is the server's first bytes data, acknowledging every byte
// of client's before ack.
func answerPacket(server, client netip.AddrPort, ack uint32, data []byte) []byte {
	p := tcpPacket(server, client, serverISN+1, nfq.ACK, data)
	binary.BigEndian.PutUint32(p[28:], ack)
	return p
}

// TestFastPathDecisions: the fast path's state machine on the packets
// the kernel would queue. A ClientHello in three segments, the last
// first and one sent twice, is held whole, then passed, each packet
// once; a packet of the decided connection still in the queue gets the
// same; data with no SYN seen, plain HTTP and a name the session does not
// allow are refused, and audited; a hello not whole within the peek
// timeout is refused by the sweep; a client past MaxSessionConns
// undecided connections is refused at its SYN.
func TestFastPathDecisions(t *testing.T) {
	client := netip.MustParseAddr("10.213.0.3")
	server := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)
	var mu sync.Mutex
	var events []Event
	sess := &Session{ID: "s1",
		Check: func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
			if h.SNI == "allowed.test" && dst == server {
				return Decision{Allow: true, Reason: "allowed", Rule: "allowed.test"}
			}
			return Decision{Reason: "not allowed: " + h.SNI}
		},
		Audit: func(ev Event) { mu.Lock(); events = append(events, ev); mu.Unlock() },
	}
	s, err := New(Config{
		Sessions:        func(a netip.Addr) (*Session, bool) { return sess, a == client },
		OriginalDst:     func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:            func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout:     300 * time.Millisecond,
		MaxSessionConns: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	q := newFakeQueue()
	done := make(chan struct{})
	var cutMu sync.Mutex
	var cuts []string
	cfg := testMarks
	// Each connection's conntrack entry: its client port, plus 7000.
	cfg.FlowID = func(c, _ netip.AddrPort) (uint32, bool) { return uint32(c.Port()) + 7000, true }
	cfg.Cut = func(c, srv netip.AddrPort) error {
		cutMu.Lock()
		cuts = append(cuts, c.String()+">"+srv.String())
		cutMu.Unlock()
		return nil
	}
	go func() { _ = s.ServeQueue(t.Context(), q, cfg); close(done) }()
	defer func() {
		close(q.in)
		<-done
		// A connection passed and still open when the gateway stops is
		// audited then (its end will not be seen).
		mu.Lock()
		defer mu.Unlock()
		if !slices.ContainsFunc(events, func(e Event) bool {
			return e.Client.Port() == 40021 && e.Action == ActionClosed && strings.Contains(e.Reason, "gateway stopped")
		}) {
			t.Errorf("a connection open when the gateway stopped was not audited: %+v", events)
		}
	}()
	var id uint32
	send := func(port uint16, seq uint32, flags byte, data []byte) uint32 {
		id++
		q.in <- synAnswered(id, tcpPacket(netip.AddrPortFrom(client, port), server, seq, flags, data))
		return id
	}
	// ack sends the server's answer acknowledging the bytes before n.
	ack := func(port uint16, n uint32) uint32 {
		id++
		q.in <- []nfq.Packet{{ID: id, Payload: ackPacket(server, netip.AddrPortFrom(client, port), n)}}
		return id
	}
	event := func(sni, action string) Event {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			i := slices.IndexFunc(events, func(e Event) bool { return e.SNI == sni && e.Action == action })
			var ev Event
			if i >= 0 {
				ev = events[i]
			}
			mu.Unlock()
			if i >= 0 {
				return ev
			}
		}
		t.Fatalf("no %s event for %q in %+v", action, sni, events)
		return Event{}
	}

	hello := clientHello(t, "allowed.test")
	if len(hello) < 300 {
		t.Fatalf("a ClientHello of %d bytes", len(hello))
	}
	const isn = 1000
	// pass sends an allowed ClientHello on a new connection from port,
	// and the server's acknowledgement of it.
	pass := func(port uint16, isn uint32) {
		t.Helper()
		q.wait(t, send(port, isn, nfq.SYN, nil))
		if v := q.wait(t, send(port, isn+1, nfq.ACK, hello)); v != "accept" {
			t.Fatalf("an allowed ClientHello from :%d: %s", port, v)
		}
		if v := q.wait(t, ack(port, isn+1+uint32(len(hello)))); v != "pass" {
			t.Fatalf("the server's acknowledgement of an allowed ClientHello from :%d: %s", port, v)
		}
	}
	if v := q.wait(t, send(40001, isn, nfq.SYN, nil)); v != "accept" {
		t.Errorf("SYN: %s", v)
	}
	if v := q.wait(t, send(40001, isn+1, nfq.ACK, nil)); v != "accept" {
		t.Errorf("the handshake's ACK: %s", v)
	}
	a, b := 100, 250
	third := send(40001, isn+1+uint32(b), nfq.ACK|nfq.PSH, hello[b:])
	second := send(40001, isn+1+uint32(a), nfq.ACK, hello[a:b])
	again := send(40001, isn+1+uint32(a), nfq.ACK, hello[a:b])
	time.Sleep(50 * time.Millisecond)
	for _, p := range []uint32{third, second, again} {
		if !q.pending(p) {
			t.Fatalf("packet %d decided before the ClientHello was whole", p)
		}
	}
	first := send(40001, isn+1, nfq.ACK, hello[:a])
	// Allowed, they go on, the connection not yet marked: until the
	// server acknowledges the whole ClientHello, a copy of its bytes the
	// client sends again must be the same (the first may have died past
	// the gateway).
	for _, p := range []uint32{first, second, third, again} {
		if v := q.wait(t, p); v != "accept" {
			t.Errorf("packet %d of an allowed ClientHello: %s", p, v)
		}
	}
	if v := q.wait(t, send(40001, isn+1+uint32(a), nfq.ACK, hello[a:b])); v != "accept" {
		t.Errorf("the same bytes of the ClientHello again: %s", v)
	}
	if v := q.wait(t, ack(40001, isn+1+uint32(b))); v != "accept" {
		t.Errorf("the server's acknowledgement of part of the ClientHello: %s", v)
	}
	if v := q.wait(t, ack(40001, isn+1+uint32(len(hello)))); v != "pass" {
		t.Errorf("the server's acknowledgement of the whole ClientHello: %s", v)
	}
	if v := q.wait(t, send(40001, isn+1+uint32(len(hello)), nfq.ACK, []byte("late"))); v != "pass" {
		t.Errorf("a late packet of the passed connection: %s", v)
	}
	// Sent again with other bytes before the server acknowledged it: the
	// connection is refused, and audited so.
	q.wait(t, send(40004, 8000, nfq.SYN, nil))
	if v := q.wait(t, send(40004, 8001, nfq.ACK, hello)); v != "accept" {
		t.Fatalf("an allowed ClientHello: %s", v)
	}
	swapped := bytes.Replace(hello, []byte("allowed.test"), []byte("ALLOWED.TEST"), 1)
	if v := q.wait(t, send(40004, 8001+10, nfq.ACK, swapped[10:])); v != "refuse" {
		t.Errorf("the ClientHello sent again with another name: %s", v)
	}
	if v := q.wait(t, ack(40004, 8001+uint32(len(hello)))); v != "refuse" {
		t.Errorf("the server's acknowledgement of a refused connection: %s", v)
	}
	mu.Lock()
	if !slices.ContainsFunc(events, func(e Event) bool {
		return e.Client.Port() == 40004 && e.Action == ActionRefused && strings.Contains(e.Reason, "other bytes")
	}) {
		t.Errorf("no refusal audited for a ClientHello sent again with other bytes: %+v", events)
	}
	mu.Unlock()
	// A segment that starts before the first byte: the server trims what
	// comes before and keeps the rest, and so does the gateway.
	q.wait(t, send(40005, 9000, nfq.SYN, nil))
	early := send(40005, 9001-5, nfq.ACK, append([]byte("xxxxx"), clientHello(t, "other.test")...))
	if v := q.wait(t, send(40005, 9001, nfq.ACK, hello)); v != "refuse" {
		t.Errorf("allowed.test's ClientHello after a segment for other.test that starts before the first byte (which the server keeps): %s", v)
	}
	if v := q.wait(t, early); v != "refuse" {
		t.Errorf("a ClientHello for other.test in a segment starting before the first byte: %s", v)
	}
	// Audited at once, with its conntrack entry, and again at its end,
	// with the bytes the kernel counted.
	if ev := event("allowed.test", ActionAllowed); !ev.Kernel || ev.BytesUp != int64(len(hello)) || ev.Conntrack != 47001 || ev.Rule != "allowed.test" || ev.Dst != server {
		t.Errorf("decision event %+v", ev)
	}
	// The end of another entry on the same ports (an earlier connection's,
	// told late) is not its end.
	if s.FastFlowEnded(netip.AddrPortFrom(client, 40001), server, 999, 1, 1) {
		t.Error("another conntrack entry's end taken for the passed connection's")
	}
	if !s.FastFlowEnded(netip.AddrPortFrom(client, 40001), server, 47001, 1234, 5678) {
		t.Error("the end of a passed connection was not known")
	}
	if ev := event("allowed.test", ActionClosed); !ev.Kernel || ev.BytesUp != 1234 || ev.BytesDn != 5678 || ev.Rule != "allowed.test" || ev.Dst != server || ev.Conntrack != 47001 || ev.Reason != "" {
		t.Errorf("end event %+v", ev)
	}
	if s.FastFlowEnded(netip.AddrPortFrom(client, 40001), server, 47001, 1, 1) {
		t.Error("one connection's end audited twice")
	}

	// Conntrack events were lost: the connections passed before that the
	// kernel no longer has are audited as ended; those it has are kept,
	// and so is one passed after the cutoff.
	for _, port := range []uint16{40010, 40011, 40012} {
		pass(port, 5000)
	}
	// Decided before the loss, not yet acknowledged by the server: not
	// marked in the kernel, so not judged by the dump.
	q.wait(t, send(40014, 5000, nfq.SYN, nil))
	q.wait(t, send(40014, 5001, nfq.ACK, hello))
	time.Sleep(2 * time.Millisecond)
	cutoff := time.Now()
	pass(40013, 5000)
	live := []FastFlow{
		{Client: netip.AddrPortFrom(client, 40010), Server: server, ID: 47010},
		{Client: netip.AddrPortFrom(client, 40012), Server: server, ID: 1}, // another entry now
	}
	if n := s.FastReconcile(live, cutoff); n != 2 {
		t.Errorf("FastReconcile ended %d connections, want 2 (:40011 gone, :40012 another entry)", n)
	}
	mu.Lock()
	for _, port := range []uint16{40011, 40012} {
		if !slices.ContainsFunc(events, func(e Event) bool {
			return e.Action == ActionClosed && e.Client.Port() == port && strings.Contains(e.Reason, "not seen")
		}) {
			t.Errorf("no end audited for :%d after events were lost", port)
		}
	}
	mu.Unlock()
	for _, port := range []uint16{40010, 40013, 40014} {
		if !s.FastFlowEnded(netip.AddrPortFrom(client, port), server, uint32(port)+7000, 1, 1) {
			t.Errorf("the connection from :%d was forgotten by the reconciliation", port)
		}
	}

	// A revision that no longer allows the name cuts the connections the
	// fast path passed, and audits them.
	pass(40020, 2000)
	revised := *sess
	revised.Check = func(netip.AddrPort, Hello, time.Time) Decision { return Decision{Reason: "withdrawn"} }
	if n := s.Recheck(&revised); n != 1 {
		t.Errorf("Recheck cut %d connections, want 1", n)
	}
	cutMu.Lock()
	gotCuts := slices.Clone(cuts)
	cutMu.Unlock()
	if want := netip.AddrPortFrom(client, 40020).String() + ">" + server.String(); len(gotCuts) != 1 || gotCuts[0] != want {
		t.Errorf("cut %v, want %s", gotCuts, want)
	}
	mu.Lock()
	closedEv := slices.ContainsFunc(events, func(e Event) bool {
		return e.Action == ActionClosed && e.Client.Port() == 40020 && strings.Contains(e.Reason, "revised")
	})
	mu.Unlock()
	if !closedEv {
		t.Errorf("no audit of the cut connection in %+v", events)
	}
	// Its next packet (a new conntrack entry, back in the queue) is
	// refused, not passed as decided before the revision.
	if v := q.wait(t, send(40020, 2001+uint32(len(hello)), nfq.ACK, []byte("more"))); v != "refuse" {
		t.Errorf("a packet of the cut connection: %s", v)
	}

	// Passed, still open when the gateway stops.
	pass(40021, 3000)

	// Refused: another name, plain HTTP, data with no SYN.
	q.wait(t, send(40002, 5000, nfq.SYN, nil))
	if v := q.wait(t, send(40002, 5001, nfq.ACK, clientHello(t, "other.test"))); v != "refuse" {
		t.Errorf("a name not allowed: %s", v)
	}
	event("other.test", ActionRefused)
	q.wait(t, send(40003, 7000, nfq.SYN, nil))
	if v := q.wait(t, send(40003, 7001, nfq.ACK, []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"))); v != "refuse" {
		t.Errorf("plain HTTP: %s", v)
	}
	if ev := event("", ActionRefused); ev.Proto != ProtoHTTP {
		t.Errorf("plain HTTP's event %+v", ev)
	}
	if v := q.wait(t, send(40004, 9001, nfq.ACK, hello)); v != "refuse" {
		t.Errorf("data with no SYN seen: %s", v)
	}
	// An ACK of a connection whose conntrack entry went (a revision cut
	// it): let go, the server's data would flow back to the client.
	if v := q.wait(t, send(40006, 9001, nfq.ACK, nil)); v != "refuse" {
		t.Errorf("an ACK with no SYN seen: %s", v)
	}

	// Data in a SYN (TCP Fast Open) is dropped: it would reach the
	// server unchecked.
	if v := q.wait(t, send(40007, 300, nfq.SYN, hello)); v != "drop" {
		t.Errorf("a SYN with data: %s", v)
	}
	// Two segments of the same bytes that differ (an allowed name in
	// one, another in the other): the server's stack, not the gateway,
	// would choose which counts.
	q.wait(t, send(40008, 500, nfq.SYN, nil))
	other := clientHello(t, "other.test")
	firstOther := send(40008, 501, nfq.ACK, other[:200])
	if v := q.wait(t, send(40008, 501, nfq.ACK, hello)); v != "refuse" {
		t.Errorf("a segment overlapping another with different bytes: %s", v)
	}
	if v := q.wait(t, firstOther); v != "refuse" {
		t.Errorf("the segment it overlapped: %s", v)
	}

	// A hello never finished: refused by the sweep after the peek
	// timeout (it looks every second).
	q.wait(t, send(40005, 100, nfq.SYN, nil))
	stalled := send(40005, 101, nfq.ACK, hello[:50])
	if v := q.wait(t, stalled); v != "refuse" {
		t.Errorf("a stalled ClientHello: %s", v)
	}

	// At most MaxSessionConns (3) undecided connections a client.
	for port := uint16(40010); port < 40013; port++ {
		if v := q.wait(t, send(port, 1, nfq.SYN, nil)); v != "accept" {
			t.Errorf("SYN %d: %s", port, v)
		}
	}
	if v := q.wait(t, send(40013, 1, nfq.SYN, nil)); v != "refuse" {
		t.Errorf("a fourth undecided connection's SYN: %s", v)
	}
}

// TestFastPassedBounds: the passed connections remembered are bounded
// per session and in all; at the bound in all, the session with the most
// loses its oldest, so that one session's connections never push out
// another's below its share.
func TestFastPassedBounds(t *testing.T) {
	fp := newFastPath(nil, nil, FastConfig{})
	t0 := time.Now()
	n := 0
	add := func(session string) []*passedFlow {
		n++
		k := fastKey{client: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)}), 40000), server: netip.MustParseAddrPort("10.214.0.20:443")}
		fp.mu.Lock()
		defer fp.mu.Unlock()
		out, _ := fp.rememberLocked(k, &passedFlow{ev: Event{Session: session, Time: t0.Add(time.Duration(n))}})
		return out
	}
	for i := 0; i < 10; i++ {
		add("victim")
	}
	var evicted []*passedFlow
	for s := 0; s < fastMaxPassed/fastMaxSessionPassed; s++ {
		for i := 0; i < fastMaxSessionPassed; i++ {
			evicted = append(evicted, add(fmt.Sprintf("flood%d", s))...)
		}
	}
	if len(fp.passed) != fastMaxPassed {
		t.Errorf("%d passed connections remembered, want the bound %d", len(fp.passed), fastMaxPassed)
	}
	if fp.passedBy["victim"] != 10 {
		t.Errorf("the victim's connections: %d of 10 left", fp.passedBy["victim"])
	}
	if len(evicted) != 10 {
		t.Errorf("%d connections pushed out, want 10", len(evicted))
	}
	for _, p := range evicted {
		if p.ev.Session == "victim" {
			t.Errorf("the victim's connection pushed out by others'")
		}
	}
	// One session past its own bound loses its own oldest.
	fp, n = newFastPath(nil, nil, FastConfig{}), 0
	add("other")
	for i := 0; i < fastMaxSessionPassed; i++ {
		add("one")
	}
	out := add("one")
	if len(out) != 1 || out[0].ev.Session != "one" || out[0].ev.Time != t0.Add(2) || fp.passedBy["one"] != fastMaxSessionPassed || fp.passedBy["other"] != 1 {
		t.Errorf("past its bound: pushed out %d (first %+v), %d left, the other session's %d", len(out), out[0].ev, fp.passedBy["one"], fp.passedBy["other"])
	}
	total := 0
	for _, c := range fp.passedBy {
		total += c
	}
	if total != len(fp.passed) {
		t.Errorf("per-session counts add up to %d, %d remembered", total, len(fp.passed))
	}
}
