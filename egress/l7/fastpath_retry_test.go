package l7

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// fastHarness is a fast path on a fake queue whose one session may reach
// allowed.test at server, with the session's audit.
type fastHarness struct {
	t      *testing.T
	q      *fakeQueue
	fp     *fastPath
	client netip.Addr
	server netip.AddrPort
	mu     sync.Mutex
	events []Event
	id     uint32
}

func newFastHarness(t *testing.T) *fastHarness {
	h := &fastHarness{t: t, client: netip.MustParseAddr("10.213.0.3"), server: netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)}
	sess := &Session{ID: "s1",
		Check: func(dst netip.AddrPort, hello Hello, _ time.Time) Decision {
			if strings.EqualFold(hello.SNI, "allowed.test") && dst == h.server {
				return Decision{Allow: true, Reason: "allowed"}
			}
			return Decision{Reason: "not allowed: " + hello.SNI}
		},
		Audit: func(ev Event) { h.mu.Lock(); h.events = append(h.events, ev); h.mu.Unlock() },
	}
	s, err := New(Config{
		Sessions:    func(a netip.Addr) (*Session, bool) { return sess, a == h.client },
		OriginalDst: func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:        func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.q = newFakeQueue()
	h.fp = newFastPath(s, h.q, testMarks)
	return h
}

// send hands the fast path a packet (synchronously) and returns its
// verdict, "" if it is held.
func (h *fastHarness) send(pkt []byte) string {
	h.id++
	h.fp.packet(nfq.Packet{ID: h.id, Payload: pkt})
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	return h.q.verdicts[h.id]
}

func (h *fastHarness) verdict(id uint32) string {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	return h.q.verdicts[id]
}

func (h *fastHarness) fromClient(port uint16, seq uint32, flags byte, data []byte) string {
	return h.send(tcpPacket(netip.AddrPortFrom(h.client, port), h.server, seq, flags, data))
}

// answer is the server's bytes data at offset off of its stream,
// acknowledging the client's bytes before ack.
func (h *fastHarness) answer(port uint16, off, ack uint32, data []byte) string {
	p := tcpPacket(h.server, netip.AddrPortFrom(h.client, port), serverISN+1+off, nfq.ACK, data)
	binary.BigEndian.PutUint32(p[28:], ack)
	return h.send(p)
}

// connect opens a connection from port (SYN, SYN-ACK) with the client's
// initial sequence number 1000.
func (h *fastHarness) connect(port uint16) {
	h.t.Helper()
	if v := h.fromClient(port, 1000, nfq.SYN, nil); v != "accept" {
		h.t.Fatalf("SYN: %s", v)
	}
	if v := h.send(synAckPacket(h.server, netip.AddrPortFrom(h.client, port), 1000)); v != "accept" {
		h.t.Fatalf("SYN-ACK: %s", v)
	}
}

func (h *fastHarness) refusal(port uint16, reason string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.events, func(e Event) bool {
		return e.Client.Port() == port && e.Action == ActionRefused && strings.Contains(e.Reason, reason)
	})
}

// TestFastAttackHelloRetry: after the server's HelloRetryRequest, the
// client's second ClientHello is read by the server anew, its name
// included (a stack that does not compare it with the first serves it).
// The connection was marked passed at the server's acknowledgement of the
// first, and the second went through unchecked, whether sent after the
// retry request or at once behind the first (held by the server until it
// had answered). Now the second is checked, bytes after the first are
// held until the server's answer is known, and a second of another name is
// refused.
func TestFastAttackHelloRetry(t *testing.T) {
	first := clientHello(t, "allowed.test")
	other := clientHello(t, "other.test")
	hrr := retryRecord()
	ack1 := uint32(1001 + len(first))

	t.Run("second hello after the retry request", func(t *testing.T) {
		h := newFastHarness(t)
		h.connect(40001)
		if v := h.fromClient(40001, 1001, nfq.ACK, first); v != "accept" {
			t.Fatalf("the first ClientHello: %s", v)
		}
		if v := h.answer(40001, 0, ack1, hrr); v != "accept" {
			t.Fatalf("the server's HelloRetryRequest: %s (it must reach the client, unmarked)", v)
		}
		if v := h.fromClient(40001, ack1, nfq.ACK, append(bytes.Clone(ccsRecord), other...)); v != "refuse" {
			t.Errorf("a second ClientHello for other.test: %s", v)
		}
		if !h.refusal(40001, "second ClientHello") {
			t.Errorf("the refusal is not audited: %+v", h.events)
		}
	})
	t.Run("second hello sent at once", func(t *testing.T) {
		h := newFastHarness(t)
		h.connect(40002)
		if v := h.fromClient(40002, 1001, nfq.ACK, first); v != "accept" {
			t.Fatalf("the first ClientHello: %s", v)
		}
		if v := h.fromClient(40002, ack1, nfq.ACK, other); v != "" {
			t.Fatalf("bytes after the first ClientHello, before the server answered: %s (they must wait)", v)
		}
		held := h.id
		if v := h.answer(40002, 0, ack1, hrr); v != "refuse" {
			t.Errorf("the server's HelloRetryRequest, a second ClientHello for other.test held: %s", v)
		}
		if v := h.verdict(held); v != "refuse" {
			t.Errorf("the second ClientHello for other.test: %s", v)
		}
	})
	t.Run("in the first hello's segment", func(t *testing.T) {
		h := newFastHarness(t)
		h.connect(40003)
		if v := h.fromClient(40003, 1001, nfq.ACK, append(bytes.Clone(first), other...)); v != "refuse" {
			t.Errorf("two ClientHellos in one segment: %s", v)
		}
	})
	t.Run("a second retry request", func(t *testing.T) {
		h := newFastHarness(t)
		h.connect(40004)
		h.fromClient(40004, 1001, nfq.ACK, first)
		h.answer(40004, 0, ack1, hrr)
		again := clientHello(t, "allowed.test")
		if v := h.fromClient(40004, ack1, nfq.ACK, again); v != "accept" {
			t.Fatalf("a second ClientHello of the same name: %s", v)
		}
		if v := h.answer(40004, uint32(len(hrr)), ack1+uint32(len(again)), hrr); v != "refuse" {
			t.Errorf("a second HelloRetryRequest: %s", v)
		}
	})
	t.Run("empty urgent pointer", func(t *testing.T) {
		// An empty segment's urgent pointer names a byte of a later one,
		// which the server's stack takes out of the stream.
		h := newFastHarness(t)
		h.connect(40005)
		p := tcpPacket(netip.AddrPortFrom(h.client, 40005), h.server, 1001, nfq.ACK|nfq.URG, nil)
		binary.BigEndian.PutUint16(p[38:], 20)
		if v := h.send(p); v == "accept" {
			t.Errorf("an empty segment with an urgent pointer into the ClientHello: %s", v)
		}
	})
}

// TestFastHelloRetry: a client that gets a HelloRetryRequest and sends a
// second ClientHello of the same name (after a change cipher spec record)
// is passed, its early bytes held until the server's ServerHello, then
// passed with it.
func TestFastHelloRetry(t *testing.T) {
	first := clientHello(t, "allowed.test")
	hrr := append(retryRecord(), ccsRecord...)
	h := newFastHarness(t)
	h.connect(40001)
	if v := h.fromClient(40001, 1001, nfq.ACK, first); v != "accept" {
		t.Fatalf("the first ClientHello: %s", v)
	}
	ack1 := uint32(1001 + len(first))
	if v := h.answer(40001, 0, ack1, hrr[:20]); v != "accept" {
		t.Fatalf("the first bytes of the HelloRetryRequest: %s", v)
	}
	if v := h.answer(40001, 20, ack1, hrr[20:]); v != "accept" {
		t.Fatalf("the rest of the HelloRetryRequest: %s", v)
	}
	second := append(bytes.Clone(ccsRecord), clientHello(t, "allowed.test")...)
	if v := h.fromClient(40001, ack1, nfq.ACK, second[:100]); v != "" {
		t.Fatalf("part of the second ClientHello: %s, want held", v)
	}
	part := h.id
	if v := h.fromClient(40001, ack1+100, nfq.ACK, second[100:]); v != "accept" {
		t.Fatalf("the rest of the second ClientHello: %s", v)
	}
	if v := h.verdict(part); v != "accept" {
		t.Errorf("the second ClientHello's first segment: %s", v)
	}
	ack2 := ack1 + uint32(len(second))
	if v := h.fromClient(40001, ack2, nfq.ACK, []byte("early")); v != "" {
		t.Fatalf("bytes after the second ClientHello before the server answered: %s, want held", v)
	}
	early := h.id
	if v := h.answer(40001, uint32(len(hrr)), ack2, serverHelloStart); v != "pass" {
		t.Errorf("the ServerHello after the retry: %s", v)
	}
	if v := h.verdict(early); v != "pass" {
		t.Errorf("the bytes held until the ServerHello: %s", v)
	}
	if v := h.fromClient(40001, ack2+5, nfq.ACK, []byte("late")); v != "pass" {
		t.Errorf("a packet of the marked connection: %s", v)
	}
}

// TestFastAttackMultipath: a Multipath TCP connection's options map its
// subflows' bytes into the stream the server reads: the bytes checked on
// one subflow need not be the ones the server reads first. Its SYN is
// refused (and audited), so that the client connects with plain TCP.
func TestFastAttackMultipath(t *testing.T) {
	h := newFastHarness(t)
	syn := tcpPacket(netip.AddrPortFrom(h.client, 40001), h.server, 1000, nfq.SYN, nil)
	// Options: a no-operation, then MP_CAPABLE (kind 30, length 4).
	syn = append(syn[:40], 1, 30, 4, 0x01, 0, 0, 0, 0)
	syn[32] = 7 << 4 // data offset: 28 bytes
	binary.BigEndian.PutUint16(syn[2:], uint16(len(syn)))
	if v := h.send(syn); v != "refuse" {
		t.Errorf("a SYN with MP_CAPABLE: %s", v)
	}
	if !h.refusal(40001, "Multipath TCP") {
		t.Errorf("not audited: %+v", h.events)
	}
}

// TestFastAttackNoSynAck: a server answer on a connection whose SYN-ACK
// the gateway never saw cannot be read from its first byte: refused.
func TestFastAttackNoSynAck(t *testing.T) {
	h := newFastHarness(t)
	h.fromClient(40001, 1000, nfq.SYN, nil)
	first := clientHello(t, "allowed.test")
	h.fromClient(40001, 1001, nfq.ACK, first)
	if v := h.answer(40001, 0, uint32(1001+len(first)), serverHelloStart); v == "pass" {
		t.Errorf("an answer with no SYN-ACK seen: %s", v)
	}
}

// TestFastSmallSegmentsCheap: a ClientHello in many small segments is
// checked once, when it is whole: each segment was checked anew with all
// the bytes before it (quadratic work, one session's connections holding
// the queue every session shares).
func TestFastSmallSegmentsCheap(t *testing.T) {
	h := newFastHarness(t)
	hello := clientHello(t, "allowed.test")
	h.connect(40001)
	size := len(hello)/100 + 1
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	n := 0
	for off := 0; off < len(hello); off += size {
		v := h.fromClient(40001, 1001+uint32(off), nfq.ACK, hello[off:min(off+size, len(hello))])
		n++
		if off+size < len(hello) && v != "" {
			t.Fatalf("segment %d: %s before the hello was whole", n, v)
		}
	}
	runtime.ReadMemStats(&ms1)
	if v := h.verdict(h.id); v != "accept" {
		t.Fatalf("the hello's last segment: %s", v)
	}
	per := float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
	t.Logf("%d segments of %d bytes: %.1f allocations a segment", n, size, per)
	if per > 20 {
		t.Errorf("%.1f allocations a segment of a ClientHello in %d segments: the hello is parsed at every segment", per, n)
	}
}

// TestFastAttackSessionsFillQueue: sessions acting together held up to
// 256 packets each of ClientHellos never completed, and sixteen filled
// the kernel's queue (4096), which then dropped every other session's
// SYNs and hellos. Past fastMaxHeldAll, a session above its share is
// refused its next held packet: the held packets of all stay below the
// queue's length, and another session's hello is still taken.
func TestFastAttackSessionsFillQueue(t *testing.T) {
	m := newManySessions(t, 200, 0, 0)
	fp, q, server, addr := m.fp, m.q, m.server, sessionAddr
	var id uint32
	send := func(src netip.AddrPort, seq uint32, flags byte, data []byte) {
		id++
		for _, p := range synAnswered(id, tcpPacket(src, server, seq, flags, data)) {
			fp.packet(p)
		}
	}
	hello := clientHello(t, "allowed.test")
	// Sessions each hold what they can: hellos whose first byte never
	// comes, 8 segments a connection.
	for i := range 199 {
		for c := range 40 {
			src := netip.AddrPortFrom(addr(i), uint16(20000+c))
			send(src, 1000, nfq.SYN, nil)
			for k := range 8 {
				send(src, 1002+uint32(k*10), nfq.ACK, hello[1+k*10:1+k*10+10])
			}
		}
	}
	q.mu.Lock()
	held := 0
	for i := uint32(1); i <= id; i++ {
		if _, ok := q.verdicts[i]; !ok {
			held++
		}
	}
	q.mu.Unlock()
	t.Logf("199 sessions: %d packets held", held)
	if held >= 4096-256 {
		t.Errorf("%d packets held of sessions acting together: the kernel's queue (4096) fills", held)
	}
	// Another session's hello is still taken.
	src := netip.AddrPortFrom(addr(199), 30000)
	send(src, 1000, nfq.SYN, nil)
	send(src, 1001, nfq.ACK, hello[:100])
	send(src, 1101, nfq.ACK, hello[100:])
	q.mu.Lock()
	v := q.verdicts[id]
	q.mu.Unlock()
	if v != "accept" {
		t.Errorf("another session's ClientHello: %q", v)
	}
}

// TestFastHelloRetryLong: a retry request longer than the bytes of the
// server's kept to read it (a cookie) is followed by its answer to the
// second ClientHello, read from where the retry request ends.
func TestFastHelloRetryLong(t *testing.T) {
	first := clientHello(t, "allowed.test")
	hrr := retryRecord()
	cookie := bytes.Repeat([]byte{0x77}, 3000)
	hrr = append(hrr, cookie...)
	hrr[3], hrr[4] = byte((len(hrr)-5)>>8), byte(len(hrr)-5)
	h := newFastHarness(t)
	h.connect(40001)
	h.fromClient(40001, 1001, nfq.ACK, first)
	ack1 := uint32(1001 + len(first))
	for off := 0; off < len(hrr); off += 1000 {
		if v := h.answer(40001, uint32(off), ack1, hrr[off:min(off+1000, len(hrr))]); v != "accept" {
			t.Fatalf("the retry request's bytes at %d: %s", off, v)
		}
	}
	second := clientHello(t, "allowed.test")
	if v := h.fromClient(40001, ack1, nfq.ACK, second); v != "accept" {
		t.Fatalf("the second ClientHello: %s", v)
	}
	ack2 := ack1 + uint32(len(second))
	if v := h.answer(40001, uint32(len(hrr)), ack2, append(bytes.Clone(ccsRecord), serverHelloStart...)); v != "pass" {
		t.Errorf("the ServerHello after a long retry request: %s", v)
	}
}

// TestFastAttackUndecidedPool: a SYN took one of MaxConns places among
// the undecided at once, also one to an address the session may not reach
// (never answered), until the peek timeout; sessions acting together (or
// one, with MaxSessionConns near MaxConns) filled them, and every other
// session's connection was refused at its SYN. A place is taken now when
// the server answers, and at MaxConns a session with more than one more
// than the newcomer gives up its oldest.
func TestFastAttackUndecidedPool(t *testing.T) {
	m := newManySessions(t, 8, 16, 8)
	server, addr := m.server, sessionAddr
	blocked := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.99"), 443)
	fp, q := m.fp, m.q
	var id uint32
	send := func(src, dst netip.AddrPort, seq uint32, flags byte, data []byte) string {
		id++
		fp.packet(nfq.Packet{ID: id, Payload: tcpPacket(src, dst, seq, flags, data)})
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.verdicts[id]
	}
	synAck := func(src, dst netip.AddrPort) string {
		id++
		fp.packet(nfq.Packet{ID: id, Payload: synAckPacket(dst, src, 1000)})
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.verdicts[id]
	}
	// Session 0 sends SYNs to an address it may not reach: never
	// answered, they take none of the places.
	for c := range 8 {
		send(netip.AddrPortFrom(addr(0), uint16(20000+c)), blocked, 1000, nfq.SYN, nil)
	}
	// Sessions 1 and 2 fill the places with connections the server
	// answered and that never send their hello.
	for i := 1; i <= 2; i++ {
		for c := range 8 {
			src := netip.AddrPortFrom(addr(i), uint16(20000+c))
			send(src, server, 1000, nfq.SYN, nil)
			synAck(src, server)
		}
	}
	if fp.undecidedAll != 16 {
		t.Fatalf("%d undecided, want the 16 places taken", fp.undecidedAll)
	}
	// Session 3's connection is still taken and checked; one of session
	// 1's or 2's gives up its place.
	src := netip.AddrPortFrom(addr(3), 30000)
	if v := send(src, server, 1000, nfq.SYN, nil); v != "accept" {
		t.Fatalf("another session's SYN: %q", v)
	}
	synAck(src, server)
	if v := send(src, server, 1001, nfq.ACK, clientHello(t, "allowed.test")); v != "accept" {
		t.Errorf("another session's ClientHello, the places taken by others: %q", v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !slices.ContainsFunc(m.events, func(e Event) bool {
		return (e.Session == "s1" || e.Session == "s2") && e.Action == ActionRefused && strings.Contains(e.Reason, "the most")
	}) {
		t.Errorf("no connection of the sessions holding the most refused to make room: %+v", m.events)
	}
}

// manySessions is a fast path on a fake queue with sessions s0, s1, ...
// at sessionAddr(0), sessionAddr(1), ..., each allowed allowed.test at
// server, and their audit.
type manySessions struct {
	fp     *fastPath
	q      *fakeQueue
	server netip.AddrPort
	mu     sync.Mutex
	events []Event
}

func sessionAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 213, byte(1 + i>>8), byte(i)}) }

// newManySessions is n sessions' fast path, with the bounds maxConns and
// maxSessionConns (0: the defaults) and a peek timeout of a minute.
func newManySessions(t *testing.T, n, maxConns, maxSessionConns int) *manySessions {
	m := &manySessions{server: netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)}
	sessions := map[netip.Addr]*Session{}
	for i := range n {
		sessions[sessionAddr(i)] = &Session{ID: fmt.Sprintf("s%d", i),
			Audit: func(ev Event) { m.mu.Lock(); m.events = append(m.events, ev); m.mu.Unlock() },
			Check: func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
				return Decision{Allow: h.SNI == "allowed.test" && dst == m.server}
			}}
	}
	s, err := New(Config{
		Sessions:        func(a netip.Addr) (*Session, bool) { sess, ok := sessions[a]; return sess, ok },
		OriginalDst:     func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:            func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout:     time.Minute,
		MaxConns:        maxConns,
		MaxSessionConns: maxSessionConns,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.q = newFakeQueue()
	m.fp = newFastPath(s, m.q, testMarks)
	return m
}
