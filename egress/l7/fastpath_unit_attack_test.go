package l7

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// fastUnitServer is a Server whose one session, s1 at client, may reach
// allowed.test at server; MaxConns and MaxSessionConns are maxConns.
func fastUnitServer(t *testing.T, client netip.Addr, server netip.AddrPort, maxConns int) *Server {
	t.Helper()
	sess := &Session{ID: "s1",
		Check: func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
			if h.SNI == "allowed.test" && dst == server {
				return Decision{Allow: true, Reason: "allowed"}
			}
			return Decision{Reason: "not allowed: " + h.SNI}
		},
		Audit: func(Event) {},
	}
	s, err := New(Config{
		Sessions:        func(a netip.Addr) (*Session, bool) { return sess, a == client },
		OriginalDst:     func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:            func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout:     10 * time.Second,
		MaxConns:        maxConns,
		MaxSessionConns: maxConns,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fastUnitServe is fastUnitServer serving a fake queue until the test
// ends, with its session's client address and the allowed server.
func fastUnitServe(t *testing.T, maxConns int) (*Server, *fakeQueue, netip.Addr, netip.AddrPort) {
	t.Helper()
	client := netip.MustParseAddr("10.213.0.3")
	server := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)
	s := fastUnitServer(t, client, server, maxConns)
	q := newFakeQueue()
	done := make(chan struct{})
	go func() { _ = s.ServeQueue(t.Context(), q, testMarks); close(done) }()
	t.Cleanup(func() { close(q.in); <-done })
	return s, q, client, server
}

// TestFastAttackTrimMinInt32: a segment whose offset from isn+1 is
// exactly 2^31 made the trimming of bytes before the first negate
// MinInt32, a negative slice index: the gateway process panicked.
func TestFastAttackTrimMinInt32(t *testing.T) {
	client := netip.MustParseAddr("10.213.0.3")
	server := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)
	s := fastUnitServer(t, client, server, 0)
	q := newFakeQueue()
	fp := newFastPath(s, q, testMarks)
	c := netip.AddrPortFrom(client, 40001)
	for _, p := range synAnswered(1, tcpPacket(c, server, 1000, nfq.SYN, nil)) {
		fp.packet(p)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("packet() panicked (the gateway process dies): %v", r)
		}
	}()
	fp.packet(nfq.Packet{ID: 2, Payload: tcpPacket(c, server, 1000+1+0x80000000, nfq.ACK, []byte("hello"))})
}

// TestFastAttackUnackedBounded: passed connections whose ClientHello the
// server has not acknowledged count among their client's undecided ones
// (MaxConns), and keep only the hello's bytes: they were unbounded, each
// keeping up to 64 KiB until the peek timeout.
func TestFastAttackUnackedBounded(t *testing.T) {
	s, q, client, server := fastUnitServe(t, 2)
	hello := clientHello(t, "allowed.test")
	// The hello followed by ~60 KiB of application data, the hello's
	// segment sent last: all of it contiguous when it is complete.
	tail := bytes.Repeat([]byte{'x'}, 60<<10)
	var id uint32
	send := func(port uint16, seq uint32, flags byte, data []byte) uint32 {
		id++
		q.in <- synAnswered(id, tcpPacket(netip.AddrPortFrom(client, port), server, seq, flags, data))
		return id
	}
	const n = 50
	refused := 0
	for i := range n {
		port := uint16(41000 + i)
		if v := q.wait(t, send(port, 1000, nfq.SYN, nil)); v != "accept" {
			// Past MaxConns: refused at its SYN.
			refused++
			continue
		}
		off := uint32(len(hello))
		for c := 0; c < len(tail); c += 1400 {
			send(port, 1001+off+uint32(c), nfq.ACK, tail[c:min(c+1400, len(tail))])
		}
		if v := q.wait(t, send(port, 1001, nfq.ACK, hello)); v != "accept" {
			t.Fatalf("hello %d: %s", i, v)
		}
	}
	fp := s.fast.Load()
	fp.mu.Lock()
	total, flows := 0, 0
	for _, f := range fp.flows {
		if f.decided && f.pass && !f.marked {
			flows++
			total += len(f.client.buf)
			for _, d := range f.client.ooo {
				total += len(d)
			}
		}
	}
	und := fp.undecidedAll
	fp.mu.Unlock()
	t.Logf("MaxConns 2: %d passed-unacked flows, %d checked bytes kept, undecidedAll=%d", flows, total, und)
	if refused != n-2 {
		t.Errorf("%d of %d connections refused at their SYN with MaxConns 2 and none acknowledged; want %d", refused, n, n-2)
	}
	if flows > 2 || total > 2*(len(hello)+MaxPeek) || und > 2 {
		t.Errorf("%d connections awaiting the server's ACK with MaxConns 2 (%d bytes held, %d undecided)", flows, total, und)
	}
}

// TestFastAttackURGResent: a copy of the checked ClientHello sent again
// with an urgent byte inside it (the server's stack takes it out of what
// it reads) is refused, as a held packet with URG is.
func TestFastAttackURGResent(t *testing.T) {
	_, q, client, server := fastUnitServe(t, 0)
	hello := clientHello(t, "allowed.test")
	c := netip.AddrPortFrom(client, 40001)
	q.in <- synAnswered(1, tcpPacket(c, server, 1000, nfq.SYN, nil))
	q.in <- []nfq.Packet{{ID: 2, Payload: tcpPacket(c, server, 1001, nfq.ACK, hello)}}
	if v := q.wait(t, 2); v != "accept" {
		t.Fatal(v)
	}
	p := tcpPacket(c, server, 1001, nfq.ACK|nfq.URG, hello)
	binary.BigEndian.PutUint16(p[38:], 20) // urgent pointer inside the hello
	q.in <- []nfq.Packet{{ID: 3, Payload: p}}
	if v := q.wait(t, 3); v == "accept" {
		t.Errorf("a copy of the checked hello with URG inside it: %s", v)
	}
}

// TestFastAttackEvictedUnacked: a passed connection whose ClientHello the
// server had not acknowledged, pushed out of the record by later ones
// (fastMaxSessionPassed), escaped a revision that withdrew its name (the
// revision's sweep judges only conntrack entries marked passed), and the
// server's ACK then marked it passed. Pushed out unacknowledged, it is
// refused.
func TestFastAttackEvictedUnacked(t *testing.T) {
	s, q, client, server := fastUnitServe(t, 0)
	hello := clientHello(t, "allowed.test")
	var id uint32
	send := func(c netip.AddrPort, seq uint32, flags byte, data []byte) uint32 {
		id++
		q.in <- synAnswered(id, tcpPacket(c, server, seq, flags, data))
		return id
	}
	ack := func(c netip.AddrPort, n uint32) uint32 {
		id++
		q.in <- []nfq.Packet{{ID: id, Payload: ackPacket(server, c, n)}}
		return id
	}
	victim := netip.AddrPortFrom(client, 1024)
	send(victim, 1000, nfq.SYN, nil)
	if v := q.wait(t, send(victim, 1001, nfq.ACK, hello)); v != "accept" {
		t.Fatal(v)
	}
	for i := range fastMaxSessionPassed {
		c := netip.AddrPortFrom(client, uint16(2000+i))
		send(c, 1000, nfq.SYN, nil)
		send(c, 1001, nfq.ACK, hello)
		last := ack(c, 1001+uint32(len(hello)))
		if i == fastMaxSessionPassed-1 {
			q.wait(t, last)
		}
	}
	// The revision: allowed.test withdrawn.
	revised := &Session{ID: "s1", Check: func(netip.AddrPort, Hello, time.Time) Decision { return Decision{Reason: "withdrawn"} }}
	n := s.recheckFast(revised)
	t.Logf("recheck cut %d", n)
	if v := q.wait(t, ack(victim, 1001+uint32(len(hello)))); v == "pass" {
		t.Errorf("the server's ACK of a connection passed before a revision that withdrew its name: %s", v)
	}
}
