package l7

import (
	"bytes"
	"errors"
	"testing"
)

// retryRecord is a HelloRetryRequest as a server sends it (the record and
// the start of its body; the rest is not read).
func retryRecord() []byte {
	body := append([]byte{2, 0, 0, 40, 3, 3}, helloRetryRandom...)
	body = append(body, 0, 0x13, 0x01, 0, 0, 0) // session id, suite, compression, no extensions
	return append([]byte{recordHandshake, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
}

var ccsRecord = []byte{recordChangeCipherSpec, 3, 3, 0, 1, 1}

func TestServerFlight(t *testing.T) {
	hrr := retryRecord()
	serverHello := bytes.Clone(hrr)
	serverHello[11] ^= 0xff // another random: a ServerHello
	cases := []struct {
		name string
		b    []byte
		want flight
		n    int
	}{
		{"nothing yet", nil, flightMore, 0},
		{"a record header only", hrr[:5], flightMore, 0},
		{"the random cut short", hrr[:42], flightMore, 0},
		{"a retry request", hrr, flightRetry, len(hrr)},
		{"a retry request in its first bytes", hrr[:43], flightRetry, len(hrr)},
		{"change cipher spec, then a retry request", append(bytes.Clone(ccsRecord), hrr...), flightRetry, len(ccsRecord) + len(hrr)},
		{"inside a change cipher spec", ccsRecord[:3], flightMore, 0},
		{"a server hello", serverHello, flightHello, 0},
		{"an alert", []byte{0x15, 3, 3, 0, 2, 2, 40}, flightHello, 0},
		{"not TLS", []byte("HTTP/1.1 400 Bad Request\r\n"), flightHello, 0},
	}
	for _, c := range cases {
		f, n := serverFlight(c.b)
		if f != c.want || n != c.n {
			t.Errorf("%s: serverFlight = %v, %d; want %v, %d", c.name, f, n, c.want, c.n)
		}
	}
}

// splitRecords puts the handshake message of the one record rec in
// records of at most size bytes each.
func splitRecords(rec []byte, size int) []byte {
	var out []byte
	for body := rec[5:]; len(body) > 0; {
		n := min(size, len(body))
		out = append(out, recordHandshake, rec[1], rec[2], byte(n>>8), byte(n))
		out = append(out, body[:n]...)
		body = body[n:]
	}
	return out
}

func TestHelloRecords(t *testing.T) {
	ch := clientHello(t, "allowed.test")
	split := splitRecords(ch, 3) // the handshake header split across records too
	for _, data := range [][]byte{ch, split} {
		for i := range len(data) {
			if end, err := helloRecords(data[:i]); end != 0 || err != nil {
				t.Fatalf("the first %d of %d bytes: helloRecords = %d, %v; want 0 (more to come)", i, len(data), end, err)
			}
		}
		if end, err := helloRecords(data); end != len(data) || err != nil {
			t.Fatalf("whole: helloRecords = %d, %v; want %d", end, err, len(data))
		}
		more := append(bytes.Clone(data), ccsRecord...)
		if end, err := helloRecords(more); end != len(data) || err != nil {
			t.Fatalf("followed by another record: helloRecords = %d, %v; want %d", end, err, len(data))
		}
	}
	// A second ClientHello in the first's record: the server would read
	// it after its retry request.
	second := clientHello(t, "other.test")
	body := append(bytes.Clone(ch[5:]), second[5:]...)
	coalesced := append([]byte{recordHandshake, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)
	if _, err := helloRecords(coalesced); err == nil {
		t.Fatal("two ClientHellos in one record: no error")
	}
	if _, err := helloRecords(append(bytes.Clone(split[:8]), ccsRecord...)); err == nil {
		t.Fatal("a change cipher spec record inside the ClientHello: no error")
	}
	huge := []byte{recordHandshake, 3, 1, 0, 4, 1, 0x10, 0, 0}
	if _, err := helloRecords(huge); !errors.Is(err, ErrPeekTooLong) {
		t.Fatalf("a ClientHello of 1 MiB: err = %v, want ErrPeekTooLong", err)
	}
}

func TestSecondHello(t *testing.T) {
	first := Hello{Proto: ProtoTLS, SNI: "allowed.test"}
	again := clientHello(t, "allowed.test")
	withCCS := append(bytes.Clone(ccsRecord), again...)
	if end, err := secondHello(withCCS[:len(withCCS)-1], first); end != 0 || err != nil {
		t.Fatalf("cut short: secondHello = %d, %v; want 0 (more to come)", end, err)
	}
	if end, err := secondHello(withCCS, first); end != len(withCCS) || err != nil {
		t.Fatalf("the same name after change cipher spec: secondHello = %d, %v; want %d", end, err, len(withCCS))
	}
	if end, err := secondHello(clientHello(t, "ALLOWED.test"), first); end == 0 || err != nil {
		t.Fatalf("the same name in other case: secondHello = %d, %v", end, err)
	}
	for name, data := range map[string][]byte{
		"another name":     clientHello(t, "other.test"),
		"no name":          clientHello(t, ""),
		"application data": {0x17, 3, 3, 0, 1, 0},
	} {
		if _, err := secondHello(data, first); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
