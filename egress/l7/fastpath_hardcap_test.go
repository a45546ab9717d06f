package l7

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// fastSessions is a fast path on a fake queue with n sessions, each at
// its own address, which may reach allowed.test at server.
type fastSessions struct {
	t      *testing.T
	q      *fakeQueue
	fp     *fastPath
	server netip.AddrPort
	id     uint32
}

func fastSessionAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 213, byte(i >> 8), byte(i)})
}

func newFastSessions(t *testing.T, n int) *fastSessions {
	server := netip.AddrPortFrom(netip.MustParseAddr("10.214.0.20"), 443)
	sessions := map[netip.Addr]*Session{}
	for i := range n {
		sessions[fastSessionAddr(i)] = &Session{ID: fmt.Sprintf("s%d", i), Audit: func(Event) {},
			Check: func(dst netip.AddrPort, h Hello, _ time.Time) Decision {
				return Decision{Allow: h.SNI == "allowed.test" && dst == server, Reason: "checked"}
			}}
	}
	s, err := New(Config{
		Sessions:    func(a netip.Addr) (*Session, bool) { sess, ok := sessions[a]; return sess, ok },
		OriginalDst: func(*net.TCPConn) (netip.AddrPort, error) { return netip.AddrPort{}, errors.New("unused") },
		Dial:        func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("unused") },
		PeekTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	q := newFakeQueue()
	return &fastSessions{t: t, q: q, fp: newFastPath(s, q, testMarks), server: server}
}

// send hands the fast path a packet (with the server's SYN-ACK after a
// bare SYN) and returns its verdict, "" if it is held.
func (h *fastSessions) send(src netip.AddrPort, seq uint32, flags byte, data []byte) (uint32, string) {
	h.id++
	for _, p := range synAnswered(h.id, tcpPacket(src, h.server, seq, flags, data)) {
		h.fp.packet(p)
	}
	return h.id, h.verdict(h.id)
}

func (h *fastSessions) verdict(id uint32) string {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	return h.q.verdicts[id]
}

func (h *fastSessions) heldAll() int {
	h.fp.mu.Lock()
	defer h.fp.mu.Unlock()
	return h.fp.heldAll
}

// fill has sessions from 1 on hold packets of ClientHellos whose first
// byte never comes (8 a connection) until the fast path holds want in
// all, each session within its share; it returns the next session free.
func (h *fastSessions) fill(want int, sessions int) int {
	h.t.Helper()
	hello := clientHello(h.t, "allowed.test")
	i := 1
	for ; i < sessions && h.heldAll() < want; i++ {
		for c := 0; h.heldAll() < want; c++ {
			src := netip.AddrPortFrom(fastSessionAddr(i), uint16(20000+c))
			h.send(src, 1000, nfq.SYN, nil)
			refused := false
			for k := 0; k < 8 && h.heldAll() < want; k++ {
				if _, v := h.send(src, 1002+uint32(k*10), nfq.ACK, hello[1+k*10:1+k*10+10]); v != "" {
					refused = true
					break
				}
			}
			if refused {
				break // past its share: the next session
			}
		}
	}
	if got := h.heldAll(); got != want {
		h.t.Fatalf("%d packets held, want %d", got, want)
	}
	return i
}

// TestFastAttackHardCapUnchecked: a packet held while the packets held
// for all sessions were past fastMaxHeldHard had a connection of the
// session holding the most refused to make room, and skipped the checks
// after that: its bytes were never put in the stream the gateway checks,
// nor compared with another copy. A ClientHello for evil.test held then,
// and a copy of the same bytes for allowed.test sent after (a Linux
// client's retransmission of data sent with sendfile(2) from a file it
// rewrote meanwhile carries the file's new bytes), were both let go once
// the copy was checked: the server read the first, evil.test's.
func TestFastAttackHardCapUnchecked(t *testing.T) {
	allowed := clientHello(t, "allowed.test")
	evil := clientHello(t, "evilxxx.test")
	if len(evil) != len(allowed) {
		t.Fatalf("hellos of %d and %d bytes", len(evil), len(allowed))
	}
	h := newFastSessions(t, 64)
	attacker := h.fill(fastMaxHeldHard, 63)
	t.Logf("%d sessions hold %d packets", attacker-1, h.heldAll())
	src := netip.AddrPortFrom(fastSessionAddr(attacker), 30000)
	h.send(src, 1000, nfq.SYN, nil)
	first, v := h.send(src, 1001, nfq.ACK, evil)
	if v == "" {
		// Held (not whole to the gateway, as when its bytes were not
		// put in the stream): its copy for allowed.test comes.
		t.Logf("held after the hello for evil.test: %d", h.heldAll())
		h.send(src, 1001, nfq.ACK, allowed)
		v = h.verdict(first)
	}
	if v == "accept" || v == "pass" {
		t.Errorf("a ClientHello for evil.test held at the hard bound, its bytes then sent again for allowed.test: %s (the server reads evil.test's)", v)
	}
}
