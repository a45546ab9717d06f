package l7

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// TestFastAttackStaleEndTakesNew: the end of a passed connection's
// conntrack entry, told late (the events' reader behind), ended the
// record of the next connection on the same ports if it came while that
// one's conntrack id was being looked up (its record's id still 0): the
// new connection, passed and marked in the kernel, was audited as closed
// at once with the old one's bytes, and its own end never (a client
// resets a passed connection, connects again from its port, and floods
// the events so that the first one's end is read late).
func TestFastAttackStaleEndTakesNew(t *testing.T) {
	h := newFastHarness(t)
	h.fp.s.fast.Store(h.fp)
	client := netip.AddrPortFrom(h.client, 40001)
	ids := []uint32{101, 102}
	stale := false
	h.fp.marks.FlowID = func(c, s netip.AddrPort) (uint32, bool) {
		if stale {
			// The first connection's end, read while the second's id
			// is looked up.
			h.fp.s.FastFlowEnded(c, s, 101, 5000, 5000)
		}
		id := ids[0]
		ids = ids[1:]
		return id, true
	}
	hello := clientHello(t, "allowed.test")
	h.connect(40001)
	if v := h.fromClient(40001, 1001, nfq.ACK, hello); v != "accept" {
		t.Fatalf("the first connection's hello: %s", v)
	}
	if v := h.answer(40001, 0, uint32(1001+len(hello)), serverHelloStart); v != "pass" {
		t.Fatalf("the first connection's answer: %s", v)
	}
	// The client resets it and connects again from its port.
	h.fromClient(40001, 1001+uint32(len(hello)), nfq.RST|nfq.ACK, nil)
	if v := h.fromClient(40001, 90000, nfq.SYN, nil); v != "accept" {
		t.Fatalf("the second connection's SYN: %s", v)
	}
	h.send(synAckPacket(h.server, client, 90000))
	stale = true
	if v := h.fromClient(40001, 90001, nfq.ACK, hello); v != "accept" {
		t.Fatalf("the second connection's hello: %s", v)
	}
	stale = false
	p := tcpPacket(h.server, client, serverISN+1, nfq.ACK, serverHelloStart)
	binary.BigEndian.PutUint32(p[28:], 90001+uint32(len(hello)))
	if v := h.send(p); v != "pass" {
		t.Fatalf("the second connection's answer: %s", v)
	}
	if !h.fp.s.FastFlowEnded(client, h.server, 102, 100, 100) {
		t.Errorf("the second connection's end is not known: its record was ended by the first's, told late")
	}
}
