package l7

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// fastAttackServer serves a fake queue for two sessions' clients, a and
// b; each allows allowed.test on server.
func fastAttackServer(t *testing.T, cfg Config) (q *fakeQueue, send func(src netip.AddrPort, seq uint32, flags byte, data []byte) uint32) {
	t.Helper()
	a, b := netip.MustParseAddr("10.213.0.3"), netip.MustParseAddr("10.213.0.4")
	server := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)
	check := func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
		if h.SNI == "allowed.test" && dst == server {
			return Decision{Allow: true, Reason: "allowed", Rule: "allowed.test"}
		}
		return Decision{Reason: "not allowed: " + h.SNI}
	}
	sa, sb := &Session{ID: "a", Check: check}, &Session{ID: "b", Check: check}
	cfg.Sessions = func(addr netip.Addr) (*Session, bool) {
		switch addr {
		case a:
			return sa, true
		case b:
			return sb, true
		}
		return nil, false
	}
	cfg.OriginalDst = func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") }
	cfg.Dial = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	q = newFakeQueue()
	done := make(chan struct{})
	go func() { _ = s.ServeQueue(t.Context(), q, testMarks); close(done) }()
	t.Cleanup(func() { close(q.in); <-done })
	var id uint32
	send = func(src netip.AddrPort, seq uint32, flags byte, data []byte) uint32 {
		id++
		q.in <- synAnswered(id, tcpPacket(src, server, seq, flags, data))
		return id
	}
	return q, send
}

// TestFastAttackFlowsOfOneSession: the connections a client has had
// decided in the last fastDecidedKeep do not count towards MaxConns. They
// did, with no bound of the session's own: one session that opened and
// ended connections quickly (each refused at its first byte, or passed)
// filled the flows, and every other session's new connection was refused
// at its SYN. Through the listener, a session holds at most
// MaxSessionConns of MaxConns, and an ended connection frees its slot.
func TestFastAttackFlowsOfOneSession(t *testing.T) {
	q, send := fastAttackServer(t, Config{PeekTimeout: 10 * time.Second, MaxConns: 8, MaxSessionConns: 4})
	a := netip.MustParseAddr("10.213.0.3")
	for port := uint16(30000); port < 30008; port++ {
		src := netip.AddrPortFrom(a, port)
		if v := q.wait(t, send(src, 1, nfq.SYN, nil)); v != "accept" {
			t.Fatalf("session a's SYN %d: %s", port, v)
		}
		// One undecided at a time: refused at its first byte.
		if v := q.wait(t, send(src, 2, nfq.ACK, []byte("x"))); v != "refuse" {
			t.Fatalf("session a's %d: %s", port, v)
		}
	}
	b := netip.AddrPortFrom(netip.MustParseAddr("10.213.0.4"), 30000)
	if v := q.wait(t, send(b, 1, nfq.SYN, nil)); v != "accept" {
		t.Errorf("session b's first connection, with session a holding none open: %s", v)
	}
}

// TestFastAttackReusedTupleUnit: a SYN with a new initial sequence number
// on the four-tuple of a connection passed a moment ago (the client reset
// it and connected again from the same port) starts a new connection,
// whose ClientHello is checked; it must not inherit the pass.
func TestFastAttackReusedTupleUnit(t *testing.T) {
	q, send := fastAttackServer(t, Config{PeekTimeout: 10 * time.Second})
	src := netip.AddrPortFrom(netip.MustParseAddr("10.213.0.3"), 30000)
	q.wait(t, send(src, 1000, nfq.SYN, nil))
	if v := q.wait(t, send(src, 1001, nfq.ACK, clientHello(t, "allowed.test"))); v != "accept" {
		t.Fatalf("allowed.test: %s", v)
	}
	if v := q.wait(t, send(src, 900000, nfq.SYN, nil)); v == "pass" {
		t.Errorf("the SYN of a new connection on the passed one's four-tuple: %s", v)
	}
	if v := q.wait(t, send(src, 900001, nfq.ACK, clientHello(t, "other.test"))); v != "refuse" {
		t.Errorf("other.test on the reused four-tuple: %s", v)
	}
}

// TestFastAttackUrgentUnit: a segment with the urgent flag while the
// ClientHello is undecided is refused: the server's stack takes the
// urgent byte out of the stream its application reads, so the bytes the
// gateway checks are not those the server parses.
func TestFastAttackUrgentUnit(t *testing.T) {
	q, send := fastAttackServer(t, Config{PeekTimeout: 10 * time.Second})
	src := netip.AddrPortFrom(netip.MustParseAddr("10.213.0.3"), 30000)
	q.wait(t, send(src, 1000, nfq.SYN, nil))
	if v := q.wait(t, send(src, 1001, nfq.ACK|0x20, clientHello(t, "allowed.test"))); v != "refuse" {
		t.Errorf("a ClientHello with an urgent byte: %s", v)
	}
}
