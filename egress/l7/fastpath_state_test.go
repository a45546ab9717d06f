package l7

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// TestFastRefusedKeepsNoBytes: a connection refused before its
// ClientHello was whole kept the bytes reassembled so far for the
// decided connections' keep (fastDecidedKeep), though nothing reads them
// again: a client that opens connection after connection, each sending
// as much as the congestion window lets it (ten segments) before a
// refusal, had the gateway hold that many bytes per connection.
func TestFastRefusedKeepsNoBytes(t *testing.T) {
	h := newFastHarness(t)
	// A handshake record of 14000 bytes that is no ClientHello: refused
	// once whole, at its last segment.
	const size = 14000
	junk := make([]byte, 5+size)
	junk[0], junk[1], junk[2] = recordHandshake, 3, 1
	binary.BigEndian.PutUint16(junk[3:], size)
	junk[5] = 1 // client_hello
	n := size - 4
	junk[6], junk[7], junk[8] = byte(n>>16), byte(n>>8), byte(n)
	const conns = 300
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	for i := range conns {
		port := uint16(20000 + i)
		h.connect(port)
		var v string
		for off := 0; off < len(junk); off += 1448 {
			v = h.fromClient(port, 1001+uint32(off), nfq.ACK, junk[off:min(off+1448, len(junk))])
		}
		if v != "refuse" {
			t.Fatalf("connection %d: its last segment: %q, want refuse", i, v)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	kept := 0
	h.fp.mu.Lock()
	for _, f := range h.fp.flows {
		kept += cap(f.client.buf) + cap(f.server.buf)
		for _, d := range f.client.ooo {
			kept += cap(d)
		}
	}
	h.fp.mu.Unlock()
	t.Logf("%d refused connections: %d bytes of their streams kept, heap grew by %d", conns, kept, int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))
	if kept > 0 {
		t.Errorf("refused connections keep %d bytes of their streams (%d each) until they are forgotten", kept, kept/conns)
	}
}

// retryRecordCookie is a HelloRetryRequest record with a cookie extension
// of n bytes (a server that keeps no state between the two hellos puts
// it there).
func retryRecordCookie(n int) []byte {
	ext := []byte{0, 43, 0, 2, 3, 4} // supported_versions: TLS 1.3
	ext = append(ext, 0, 44, byte((n+2)>>8), byte(n+2), byte(n>>8), byte(n))
	ext = append(ext, bytes.Repeat([]byte{0xC0}, n)...)
	body := append([]byte{3, 3}, helloRetryRandom...)
	body = append(body, 0, 0x13, 0x01, 0, byte(len(ext)>>8), byte(len(ext)))
	body = append(body, ext...)
	msg := append([]byte{2, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{recordHandshake, 3, 3, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// TestFastHelloRetryCookie: a HelloRetryRequest longer than the bytes the
// gateway keeps of the server's answer (a cookie of a few hundred bytes)
// left the server's answer to the second ClientHello past a gap the
// gateway never filled: the connection, its second hello checked and
// answered, was never marked, and was refused at the peek timeout.
func TestFastHelloRetryCookie(t *testing.T) {
	first := clientHello(t, "allowed.test")
	hrr := append(retryRecordCookie(300), ccsRecord...)
	h := newFastHarness(t)
	h.connect(40001)
	if v := h.fromClient(40001, 1001, nfq.ACK, first); v != "accept" {
		t.Fatalf("the first ClientHello: %s", v)
	}
	ack1 := uint32(1001 + len(first))
	if v := h.answer(40001, 0, ack1, hrr); v != "accept" {
		t.Fatalf("the HelloRetryRequest: %s", v)
	}
	second := append(bytes.Clone(ccsRecord), clientHello(t, "allowed.test")...)
	if v := h.fromClient(40001, ack1, nfq.ACK, second); v != "accept" {
		t.Fatalf("the second ClientHello: %s", v)
	}
	ack2 := ack1 + uint32(len(second))
	if v := h.answer(40001, uint32(len(hrr)), ack2, serverHelloStart); v != "pass" {
		t.Errorf("the ServerHello after a HelloRetryRequest of %d bytes: %q, want pass (the connection is never marked)", len(hrr), v)
	}
}

// helloSwallowing is a ClientHello record for name whose last extension
// (an unknown one, which servers skip) holds tail: the record and the
// message end where tail does, and a server reads tail as part of it.
// It returns the bytes before tail.
func helloSwallowing(t *testing.T, name string, tail []byte) []byte {
	t.Helper()
	rec := clientHello(t, name)
	if rec[0] != recordHandshake || int(binary.BigEndian.Uint16(rec[3:]))+5 != len(rec) {
		t.Fatalf("the ClientHello is not one record")
	}
	// Record (5), handshake header (4), version (2), random (32),
	// session id, cipher suites, compression methods, extensions.
	p := 5 + 4 + 2 + 32
	p += 1 + int(rec[p])
	p += 2 + int(binary.BigEndian.Uint16(rec[p:]))
	p += 1 + int(rec[p])
	extLen := p
	add := 4 + len(tail)
	out := bytes.Clone(rec)
	out = append(out, 0x7a, 0x7a, byte(len(tail)>>8), byte(len(tail)))
	binary.BigEndian.PutUint16(out[3:], binary.BigEndian.Uint16(out[3:])+uint16(add))
	hl := int(out[6])<<16 | int(out[7])<<8 | int(out[8]) + add
	out[6], out[7], out[8] = byte(hl>>16), byte(hl>>8), byte(hl)
	binary.BigEndian.PutUint16(out[extLen:], binary.BigEndian.Uint16(out[extLen:])+uint16(add))
	return out
}

// TestFastAttackSynRenumbered: a second SYN on an undecided connection
// with no data held moved the gateway's idea of the client's first byte
// (isn), while the server, its connection established on the first SYN
// (it answers a SYN on an established connection with an ACK and keeps
// it), reads the stream from the first. With the second SYN K bytes
// ahead, the gateway trimmed the first K bytes of the stream as
// retransmitted ones: a ClientHello for other.test there, whose last
// extension holds a ClientHello for allowed.test, was read by the server
// (for other.test), while the gateway checked only the one for
// allowed.test. It takes a client that writes its own packets.
func TestFastAttackSynRenumbered(t *testing.T) {
	allowed := clientHello(t, "allowed.test")
	evil := helloSwallowing(t, "other.test", allowed)
	// What the server reads: the ClientHello for other.test.
	if hl, _, err := Peek(bytes.NewReader(append(bytes.Clone(evil), allowed...))); err != nil || hl.SNI != "other.test" {
		t.Fatalf("the server's view: %+v, %v", hl, err)
	}
	h := newFastHarness(t)
	h.connect(40001)
	k := uint32(len(evil))
	// The second SYN, K bytes ahead of the first.
	if v := h.fromClient(40001, 1000+k, nfq.SYN, nil); v == "" {
		t.Fatalf("the second SYN: held")
	}
	h.fromClient(40001, 1001, nfq.ACK, evil)
	front := h.id
	h.fromClient(40001, 1001+k, nfq.ACK, allowed)
	if v := h.verdict(front); v == "accept" || v == "pass" {
		t.Errorf("a ClientHello for other.test, before the stream the gateway checked: %s", v)
	}
}

// TestFastAttackSynAgainAwaiting: a SYN on a connection passed and
// awaiting the server's answer was taken as a new connection, whatever
// its number, though the server keeps the connection it has (a SYN on
// it is answered with an ACK): after the server's HelloRetryRequest, a
// SYN numbered K bytes past the first ClientHello had the gateway take
// the bytes there, the server's second ClientHello, as retransmitted
// ones, and check what follows as a new connection's first: a second
// ClientHello for other.test, whose last extension holds one for
// allowed.test, went to the server. It takes a client that writes its
// own packets.
func TestFastAttackSynAgainAwaiting(t *testing.T) {
	first := clientHello(t, "allowed.test")
	allowed := clientHello(t, "allowed.test")
	evil := helloSwallowing(t, "other.test", allowed)
	h := newFastHarness(t)
	h.connect(40001)
	if v := h.fromClient(40001, 1001, nfq.ACK, first); v != "accept" {
		t.Fatalf("the first ClientHello: %s", v)
	}
	ack1 := uint32(1001 + len(first))
	if v := h.answer(40001, 0, ack1, retryRecord()); v != "accept" {
		t.Fatalf("the HelloRetryRequest: %s", v)
	}
	k := uint32(len(evil))
	h.fromClient(40001, ack1-1+k, nfq.SYN, nil)
	h.fromClient(40001, ack1, nfq.ACK, evil)
	front := h.id
	h.fromClient(40001, ack1+k, nfq.ACK, allowed)
	if v := h.verdict(front); v == "accept" || v == "pass" {
		t.Errorf("a second ClientHello for other.test, after the server's HelloRetryRequest: %s", v)
	}
}
