package l7

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func TestRelayRequests(t *testing.T) {
	onlyA := func(h Hello) Decision {
		if h.Host == "a.test" {
			return Decision{Allow: true}
		}
		return Decision{Reason: "not a.test: " + h.Host}
	}
	get := "GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"
	post := "POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"
	chunkedPost := "POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n"
	tests := []struct {
		name        string
		in          string
		wantOut     string // what reaches the server
		wantStopped string // the host of the request stopped at; "-" none
		wantReason  string
	}{
		{name: "one request", in: get, wantOut: get, wantStopped: "-"},
		{name: "keep-alive requests", in: get + post + chunkedPost + get, wantOut: get + post + chunkedPost + get, wantStopped: "-"},
		{name: "leading CRLF", in: get + "\r\n" + get, wantOut: get + "\r\n" + get, wantStopped: "-"},
		{name: "second request for another host", in: get + "GET / HTTP/1.1\r\nHost: b.test\r\n\r\n" + get, wantOut: get, wantStopped: "b.test", wantReason: "not a.test"},
		{name: "host hidden in the body is not a request", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 34\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n", wantOut: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 34\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n", wantStopped: "-"},
		{name: "content-length and chunked", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", wantStopped: "a.test", wantReason: "both"},
		{name: "differing content-lengths", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", wantStopped: "a.test", wantReason: "differing"},
		{name: "signed content-length", in: "POST / HTTP/1.1\r\nHost: a.test\r\nContent-Length: +3\r\n\r\nabc", wantStopped: "a.test", wantReason: "Content-Length"},
		{name: "transfer-encoding not chunked", in: "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip\r\n\r\nabc", wantStopped: "a.test", wantReason: "does not end in chunked"},
		// An Upgrade the server never grants must not turn the check off for
		// what follows (the second request here would reach b.test).
		{name: "upgrade refused", in: "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: x\r\n\r\nGET /secret HTTP/1.1\r\nHost: b.test\r\n\r\n", wantOut: "", wantStopped: "a.test", wantReason: "upgrades over plain HTTP are refused"},
		{name: "websocket upgrade refused", in: "GET / HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05frame", wantOut: "", wantStopped: "a.test", wantReason: "upgrades over plain HTTP are refused"},
		{name: "garbage after a request", in: get + "\x16\x03\x01", wantOut: get, wantStopped: "", wantReason: "airlock:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			n, stopped, reason, _ := relayRequests(bufio.NewReader(strings.NewReader(tt.in)), &out, onlyA)
			if out.String() != tt.wantOut || n != int64(out.Len()) {
				t.Errorf("server got %q (%d counted), want %q", out.String(), n, tt.wantOut)
			}
			switch {
			case tt.wantStopped == "-" && stopped != nil:
				t.Errorf("stopped at %+v: %s", stopped, reason)
			case tt.wantStopped != "-" && (stopped == nil || stopped.Host != tt.wantStopped || !strings.Contains(reason, tt.wantReason)):
				t.Errorf("stopped at %+v (%q), want host %q and a reason with %q", stopped, reason, tt.wantStopped, tt.wantReason)
			}
		})
	}
}

// FuzzRelayRequests checks that whatever reaches the server is a prefix
// of what the client sent, and that every request line passed on was for
// the allowed host.
func FuzzRelayRequests(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n"))
	f.Add([]byte("POST /x HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var hosts []string
		var out bytes.Buffer
		_, _, _, _ = relayRequests(bufio.NewReader(bytes.NewReader(in)), &out, func(h Hello) Decision {
			hosts = append(hosts, h.Host)
			return Decision{Allow: h.Host == "a.test"}
		})
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("the server got bytes the client did not send")
		}
		if len(hosts) > 0 && out.Len() > 0 && hosts[0] != "a.test" {
			t.Fatalf("a request for %q reached the server", hosts[0])
		}
	})
}
