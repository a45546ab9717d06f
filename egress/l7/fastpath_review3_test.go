package l7

import (
	"bytes"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// bigHello is a ClientHello for name whose records are total bytes long:
// a padding extension first, the server_name extension last.
func bigHello(t *testing.T, name string, total int) []byte {
	t.Helper()
	sni := []byte{0, 0, 0, byte(len(name) + 5), 0, byte(len(name) + 3), 0, 0, byte(len(name))}
	sni = append(sni, name...)
	nrec := 1 // records needed
	for nrec*16384 < total-5*nrec {
		nrec++
	}
	bodyLen := total - 5*nrec - 4
	fixed := 2 + 32 + 1 + 2 + 2 + 2 + 2 // version, random, sid, suites, compression, extensions' length
	padLen := bodyLen - fixed - 4 - len(sni)
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...)
	body = append(body, 0, 0, 2, 0xc0, 0x2f, 1, 0)
	extLen := 4 + padLen + len(sni)
	body = append(body, byte(extLen>>8), byte(extLen))
	body = append(body, 0, 0x15, byte(padLen>>8), byte(padLen))
	body = append(body, make([]byte, padLen)...)
	body = append(body, sni...)
	msg := append([]byte{1, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	var out []byte
	for len(msg) > 0 {
		n := min(len(msg), 16384)
		out = append(out, recordHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	if len(out) != total {
		t.Fatalf("bigHello: %d bytes, want %d", len(out), total)
	}
	return out
}

// TestFastAttackHeldPastPeekUnchecked: while a connection is undecided,
// the client's stream is kept up to MaxPeek bytes; a held segment past
// them is not added to it (its bytes compared with none). Once the first
// ClientHello is passed, the stream is kept up to checked+MaxPeek: a
// second ClientHello (after a HelloRetryRequest) that reaches past MaxPeek
// is checked from its own segments, and the segment held since before,
// carrying other bytes at the same offsets (another name), is let go with
// them, ahead of them (the kernel's order): the server reads its bytes,
// which no one checked.
func TestFastAttackHeldPastPeekUnchecked(t *testing.T) {
	first := clientHello(t, "allowed.test")
	hrr := retryRecord()
	ack1 := uint32(1001 + len(first))
	total := MaxPeek - 136
	second := bigHello(t, "allowed.test", total)
	if h, _, err := Peek(bytes.NewReader(second)); err != nil || h.SNI != "allowed.test" {
		t.Fatalf("the big hello does not parse: %v %+v", err, h)
	}
	nameOff := len(first) + total - len("allowed.test") // in the client's stream
	if nameOff < MaxPeek {
		t.Fatalf("the name at %d is not past MaxPeek", nameOff)
	}
	h := newFastHarness(t)
	h.connect(40001)
	// Past MaxPeek before the hello: its bytes would not be kept. It is
	// refused at once (and the connection with it); were it held, its
	// bytes must not go on unchecked with the second hello's.
	v := h.fromClient(40001, 1001+uint32(nameOff), nfq.ACK, []byte("forbidd.test"))
	evil := h.id
	if v != "" {
		if v == "accept" || v == "pass" {
			t.Errorf("a segment past MaxPeek before the hello: %s", v)
		}
		return
	}
	if v := h.fromClient(40001, 1001, nfq.ACK, first); v != "accept" {
		t.Fatalf("the first ClientHello: %s", v)
	}
	if v := h.answer(40001, 0, ack1, hrr); v != "accept" {
		t.Fatalf("the HelloRetryRequest: %s", v)
	}
	var last string
	for off := 0; off < len(second); off += 8192 {
		last = h.fromClient(40001, ack1+uint32(off), nfq.ACK, second[off:min(off+8192, len(second))])
	}
	if last != "accept" {
		t.Fatalf("the second ClientHello (allowed.test) was not passed: %s", last)
	}
	if v := h.verdict(evil); v == "accept" || v == "pass" {
		t.Errorf("the held segment whose bytes (another name) were never checked: %s, the server reads them as the second ClientHello's", v)
	}
}
