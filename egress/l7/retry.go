package l7

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// A TLS 1.3 server that cannot use the key shares of a ClientHello
// answers with a HelloRetryRequest, and the client sends a second
// ClientHello on the same connection. The server reads the second one
// anew, its server name included: some stacks check that it repeats the
// first (Go's), others do not. A connection passed on the strength of its
// first ClientHello must have its second checked too, and no byte the
// client sends after the first may reach the server before the server's
// answer to the first is known (a second ClientHello sent at once, ahead
// of the retry request, would be read by the server unchecked).

// TLS record content types.
const (
	recordChangeCipherSpec = 0x14
	recordHandshake        = 0x16
)

// helloRetryRandom is the Random of a ServerHello that is a
// HelloRetryRequest (RFC 8446, 4.1.3).
var helloRetryRandom = []byte{
	0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11,
	0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
	0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E,
	0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
}

// flight is what the server's first bytes after a ClientHello say.
type flight int

const (
	// flightMore: more bytes are needed to tell.
	flightMore flight = iota
	// flightHello: a ServerHello, or anything but a retry request (an
	// alert, a server that is not TLS): the server has taken the
	// ClientHello checked.
	flightHello
	// flightRetry: a HelloRetryRequest: the client's next ClientHello
	// is read by the server, and must be checked.
	flightRetry
)

// flightPeek bounds the server's bytes read to judge its answer: change
// cipher spec records (6 bytes each, compatibility mode) and the first 43
// bytes of a handshake record.
const flightPeek = 256

// serverFlight judges the server's first bytes b after a ClientHello.
// For a retry request, n is the length of b up to the end of the record
// that carries it, with the change cipher spec records before it: the
// server's answer to the second ClientHello starts after them.
func serverFlight(b []byte) (f flight, n int) {
	off, more := skipCCS(b)
	if more {
		// Inside change cipher spec records: more to come (a server that
		// sends flightPeek bytes of them is not answered, and the
		// connection is refused at the peek timeout).
		return flightMore, 0
	}
	rec := b[off:]
	if len(rec) == 0 {
		return flightMore, 0
	}
	if rec[0] != recordHandshake {
		return flightHello, 0
	}
	// Record header (5), handshake header (4), legacy_version (2),
	// random (32).
	if len(rec) < 43 {
		return flightMore, 0
	}
	if rec[5] != 2 || !bytes.Equal(rec[11:43], helloRetryRandom) {
		return flightHello, 0
	}
	return flightRetry, off + 5 + (int(rec[3])<<8 | int(rec[4]))
}

// serverKeep is how many of the server's bytes, from where its answer
// starts, are kept to read it: flightPeek, and when they show a handshake
// record (a retry request may carry a cookie of some KiB), the bytes past
// its end, where the answer to the second ClientHello starts.
func serverKeep(b []byte) int {
	off, more := skipCCS(b)
	if more || len(b)-off < 5 || b[off] != recordHandshake {
		return flightPeek
	}
	n := int(b[off+3])<<8 | int(b[off+4])
	if n > 1<<14+256 { // longer than a TLS record may be
		return flightPeek
	}
	return max(flightPeek, off+5+n+flightPeek)
}

// skipCCS is the length of the change cipher spec records at the start of
// b (a TLS 1.3 peer in compatibility mode sends one before its second
// flight); more says b ends inside one.
func skipCCS(b []byte) (n int, more bool) {
	for {
		if len(b)-n < 1 || b[n] != recordChangeCipherSpec {
			return n, false
		}
		if len(b)-n < 5 {
			return n, true
		}
		l := int(b[n+3])<<8 | int(b[n+4])
		if len(b)-n < 5+l {
			return n, true
		}
		n += 5 + l
	}
}

// helloRecords walks the handshake records at the start of data that
// carry its first handshake message (a ClientHello may span several):
// end is their length once the message is whole, 0 while more bytes are
// needed. err says why they cannot carry a ClientHello the server reads as
// the gateway does: a record of another type before the message ends, a
// message past MaxPeek, or bytes after the message in its last record (a
// second ClientHello there would be read by the server after a retry
// request, unchecked). It reads record headers only: the check runs once
// the hello is whole, not at every segment of one that is not.
func helloRecords(data []byte) (end int, err error) {
	var hdr [4]byte
	got := 0 // message bytes seen
	for off := 0; off+5 <= len(data); {
		if data[off] != recordHandshake {
			return 0, errors.New("l7: a record that is not a handshake's inside the ClientHello")
		}
		n := int(data[off+3])<<8 | int(data[off+4])
		if got < 4 {
			copy(hdr[got:], data[off+5:min(off+5+n, len(data))])
		}
		if got+min(n, len(data)-off-5) >= 4 {
			if need := 4 + (int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])); need > MaxPeek {
				return 0, ErrPeekTooLong
			}
		}
		if off+5+n > len(data) {
			return 0, nil
		}
		got += n
		off += 5 + n
		if got < 4 {
			continue
		}
		switch need := 4 + (int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])); {
		case got == need:
			return off, nil
		case got > need:
			return 0, errors.New("l7: bytes after the ClientHello in its last record (the server would read them as a second handshake message, unchecked)")
		}
	}
	return 0, nil
}

// secondHello checks a connection's second ClientHello (data: the
// client's bytes after the first's records, change cipher spec records
// included), sent after the server's retry request: end is the length of
// data up to the end of its records, 0 while it is not whole. err says why
// the connection is refused: something else in its place, or a name
// other than the first's, which was checked (a server that does not
// compare the two would serve it).
func secondHello(data []byte, first Hello) (end int, err error) {
	off, more := skipCCS(data)
	if more {
		return 0, nil
	}
	rest := data[off:]
	if len(rest) > 0 && rest[0] != recordHandshake {
		return 0, errors.New("l7: after the server's HelloRetryRequest, the client sent something other than a second ClientHello")
	}
	n, err := helloRecords(rest)
	if err != nil {
		return 0, fmt.Errorf("the second ClientHello (after the server's HelloRetryRequest): %w", err)
	}
	if n == 0 {
		if len(data) >= MaxPeek {
			return 0, ErrPeekTooLong
		}
		return 0, nil
	}
	h, _, err := Peek(bytes.NewReader(rest[:n]))
	if err != nil {
		return 0, fmt.Errorf("the second ClientHello (after the server's HelloRetryRequest): %w", err)
	}
	if h.Proto != ProtoTLS || !strings.EqualFold(h.SNI, first.SNI) {
		return 0, fmt.Errorf("l7: the second ClientHello (after the server's HelloRetryRequest) asks for %q, the first asked for %q", h.SNI, first.SNI)
	}
	return off + n, nil
}
