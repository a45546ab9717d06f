package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// accessDenied is the alert the gateway refuses a TLS client with.
var accessDenied = []byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 49}

// countConn counts the bytes read and written through a connection.
type countConn struct {
	net.Conn
	read, written *atomic.Int64
}

func (c countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// countListener counts its connections' bytes, and keeps the first bytes
// each wrote (up to flightPeek).
type countListener struct {
	net.Listener
	read, written atomic.Int64
	mu            sync.Mutex
	firsts        [][]byte
}

func (l *countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.firsts = append(l.firsts, nil)
	i := len(l.firsts) - 1
	l.mu.Unlock()
	return &firstConn{countConn: countConn{c, &l.read, &l.written}, keep: func(p []byte) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.firsts[i] = append(l.firsts[i], p[:min(len(p), flightPeek-len(l.firsts[i]))]...)
	}}, nil
}

type firstConn struct {
	countConn
	keep func([]byte)
}

func (c *firstConn) Write(p []byte) (int, error) {
	c.keep(p)
	return c.countConn.Write(p)
}

// TestServerTLSRetry: a TLS 1.3 server that cannot use the client's key
// shares answers with a HelloRetryRequest, and the client's second
// ClientHello (the same name) passes: the handshake completes through
// the gateway, data flows, and the connection's event counts every byte
// it relayed, the retry request and the second ClientHello included.
func TestServerTLSRetry(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "tls %s %s %d", r.TLS.ServerName, r.TLS.CurveID, len(body))
	}))
	// Go's clients send X25519 family key shares only: a server that
	// takes P-384 alone asks for another.
	up.TLS = &tls.Config{CurvePreferences: []tls.CurveID{tls.CurveP384}, MinVersion: tls.VersionTLS13}
	cl := &countListener{Listener: up.Listener}
	up.Listener = cl
	up.StartTLS()
	defer up.Close()
	g := startGateway(t, up.Listener.Addr().String())

	var cread, cwritten atomic.Int64
	client := g.client("allowed.test")
	client.Transport.(*http.Transport).DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", g.addr)
		if err != nil {
			return nil, err
		}
		return countConn{c, &cread, &cwritten}, nil
	}
	payload := strings.Repeat("x", 200<<10)
	resp, err := client.Post("https://allowed.test/", "text/plain", strings.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("tls allowed.test %s %d", tls.CurveP384, len(payload)); resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("through the gateway: %d %q, want %q", resp.StatusCode, body, want)
	}
	cl.mu.Lock()
	first := slices.Clone(cl.firsts[0])
	cl.mu.Unlock()
	if f, _ := serverFlight(first); f != flightRetry {
		t.Fatalf("the server's first bytes are not a HelloRetryRequest: %x", first)
	}
	ev := g.events(t, 1)[0]
	if ev.Action != ActionAllowed || ev.SNI != "allowed.test" || ev.Kind != KindConnection {
		t.Errorf("event: %+v", ev)
	}
	// Every byte a side read came through the gateway; every byte it
	// relayed was written by the other side.
	if ev.BytesUp < cl.read.Load() || ev.BytesUp > cwritten.Load() || ev.BytesUp < int64(len(payload)) {
		t.Errorf("BytesUp %d: the client wrote %d, the server read %d", ev.BytesUp, cwritten.Load(), cl.read.Load())
	}
	if ev.BytesDn < cread.Load() || ev.BytesDn > cl.written.Load() {
		t.Errorf("BytesDn %d: the server wrote %d, the client read %d", ev.BytesDn, cl.written.Load(), cread.Load())
	}
}

// handshakeStream reads a TLS peer's handshake messages out of its
// records as a server does: across records, several in one, change
// cipher spec records skipped.
type handshakeStream struct {
	r    io.Reader
	msgs []byte
}

func (s *handshakeStream) next() ([]byte, error) {
	for {
		if len(s.msgs) >= 4 {
			if n := 4 + (int(s.msgs[1])<<16 | int(s.msgs[2])<<8 | int(s.msgs[3])); len(s.msgs) >= n {
				m := s.msgs[:n:n]
				s.msgs = s.msgs[n:]
				return m, nil
			}
		}
		var hdr [5]byte
		if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
			return nil, err
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(s.r, body); err != nil {
			return nil, err
		}
		switch hdr[0] {
		case recordChangeCipherSpec:
		case recordHandshake:
			s.msgs = append(s.msgs, body...)
		default:
			return nil, fmt.Errorf("a record of type %d", hdr[0])
		}
	}
}

// helloName is the server name of the ClientHello message m.
func helloName(m []byte) (string, error) {
	if len(m) == 0 || m[0] != 1 {
		return "", errors.New("not a ClientHello")
	}
	h, _, err := Peek(bytes.NewReader(append([]byte{recordHandshake, 3, 1, byte(len(m) >> 8), byte(len(m))}, m...)))
	return h.SNI, err
}

// laxServer is a TLS 1.3 server as lax as some are: it answers the
// ClientHellos of each connection with retries HelloRetryRequests (hrr
// as written; nil: retryRecord()), reads
// each next ClientHello anew and, once it has read the last, serves the
// name in it ("served <name>") without comparing it to the first's. The
// names each connection asked for are sent on names when it ends;
// accepted counts the connections.
type laxServer struct {
	addr     string
	names    chan []string
	accepted atomic.Int32
}

func startLaxServer(t *testing.T, retries int, hrr []byte) *laxServer {
	t.Helper()
	if hrr == nil {
		hrr = retryRecord()
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &laxServer{addr: l.Addr().String(), names: make(chan []string, 16)}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				var names []string
				defer func() { s.names <- names }()
				hs := &handshakeStream{r: c}
				for i := 0; ; i++ {
					m, err := hs.next()
					if err != nil {
						return
					}
					name, err := helloName(m)
					if err != nil {
						return
					}
					names = append(names, name)
					if i == retries {
						io.WriteString(c, "served "+name)
						return
					}
					if _, err := c.Write(hrr); err != nil {
						return
					}
				}
			})
		}
	})
	return s
}

// namesOf waits for the names of the server's next connection to end.
func (s *laxServer) namesOf(t *testing.T) []string {
	t.Helper()
	select {
	case n := <-s.names:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's connection did not end")
		return nil
	}
}

// readRecord reads one TLS record.
func readRecord(c net.Conn) ([]byte, error) {
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return hdr, err
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	_, err := io.ReadFull(c, body)
	return append(hdr, body...), err
}

func dialGateway(t *testing.T, g *gatewayTest) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// refusedRetry checks the end of an attack: after the HelloRetryRequest,
// the client got an access_denied alert and nothing of the server's, the
// server read the first ClientHello only, and the connection was audited
// as refused for reason.
func refusedRetry(t *testing.T, g *gatewayTest, c net.Conn, up *laxServer, after []byte, wantNames []string, reason string) {
	t.Helper()
	c.Close()
	if !bytes.Equal(after, accessDenied) {
		t.Errorf("the client read %q after the retry request, want an access_denied alert", after)
	}
	if names := up.namesOf(t); !slices.Equal(names, wantNames) {
		t.Errorf("the upstream read ClientHellos for %q, want %q", names, wantNames)
	}
	ev := g.events(t, 1)[0]
	if ev.Action != ActionRefused || ev.SNI != "allowed.test" || !strings.Contains(ev.Reason, reason) || !strings.HasPrefix(ev.Reason, "airlock: ") {
		t.Errorf("event: %+v; want refused for %q", ev, reason)
	}
}

// TestServerRetryAttackSecondName: a client whose first ClientHello asks
// for an allowed name answers the server's HelloRetryRequest with a
// second ClientHello for another: a server that does not compare the two
// would serve the other name. The gateway checks the second too: it is
// refused before the server reads it.
func TestServerRetryAttackSecondName(t *testing.T) {
	up := startLaxServer(t, 1, nil)
	g := startGateway(t, up.addr)
	c := dialGateway(t, g)
	if _, err := c.Write(clientHello(t, "allowed.test")); err != nil {
		t.Fatal(err)
	}
	if hrr, err := readRecord(c); err != nil || !bytes.Equal(hrr, retryRecord()) {
		t.Fatalf("the client read %x, %v; want the server's HelloRetryRequest", hrr, err)
	}
	if _, err := c.Write(clientHello(t, "other.test")); err != nil {
		t.Fatal(err)
	}
	after, _ := io.ReadAll(c)
	refusedRetry(t, g, c, up, after, []string{"allowed.test"}, "the second ClientHello")
}

// TestServerRetryAttackPipelined: the client sends its second ClientHello
// (another name) with its first, before any answer: the server, having
// sent its retry request, would read the second unchecked. The gateway
// holds the client's bytes after the first ClientHello until the server
// has answered it, and checks them as a second ClientHello.
func TestServerRetryAttackPipelined(t *testing.T) {
	up := startLaxServer(t, 1, nil)
	g := startGateway(t, up.addr)
	c := dialGateway(t, g)
	both := append(clientHello(t, "allowed.test"), clientHello(t, "other.test")...)
	if _, err := c.Write(both); err != nil {
		t.Fatal(err)
	}
	if hrr, err := readRecord(c); err != nil || !bytes.Equal(hrr, retryRecord()) {
		t.Fatalf("the client read %x, %v; want the server's HelloRetryRequest", hrr, err)
	}
	after, _ := io.ReadAll(c)
	refusedRetry(t, g, c, up, after, []string{"allowed.test"}, "the second ClientHello")
}

// TestServerRetryAttackSameRecord: the second ClientHello rides in the
// first's record, after it: a server reads it as the next handshake
// message once it has sent its retry request. Refused before the
// upstream is dialled.
func TestServerRetryAttackSameRecord(t *testing.T) {
	up := startLaxServer(t, 1, nil)
	g := startGateway(t, up.addr)
	c := dialGateway(t, g)
	first, second := clientHello(t, "allowed.test"), clientHello(t, "other.test")
	body := append(slices.Clone(first[5:]), second[5:]...)
	if _, err := c.Write(append([]byte{recordHandshake, 3, 1, byte(len(body) >> 8), byte(len(body))}, body...)); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if !bytes.Equal(got, accessDenied) {
		t.Errorf("the client read %q, want an access_denied alert", got)
	}
	ev := g.events(t, 1)[0]
	if ev.Action != ActionRefused || ev.SNI != "allowed.test" || !strings.Contains(ev.Reason, "bytes after the ClientHello") {
		t.Errorf("event: %+v", ev)
	}
	if n := up.accepted.Load(); n != 0 {
		t.Errorf("the upstream was dialled %d times", n)
	}
}

// TestServerRetryTwice: a server that answers the second ClientHello (the
// same name) with another HelloRetryRequest, which RFC 8446 forbids, is
// cut off before the client can send a third; the client never gets the
// second retry request.
func TestServerRetryTwice(t *testing.T) {
	up := startLaxServer(t, 2, nil)
	g := startGateway(t, up.addr)
	c := dialGateway(t, g)
	if _, err := c.Write(clientHello(t, "allowed.test")); err != nil {
		t.Fatal(err)
	}
	if hrr, err := readRecord(c); err != nil || !bytes.Equal(hrr, retryRecord()) {
		t.Fatalf("the client read %x, %v; want the server's HelloRetryRequest", hrr, err)
	}
	if _, err := c.Write(clientHello(t, "allowed.test")); err != nil {
		t.Fatal(err)
	}
	next, err := readRecord(c)
	if err == nil && bytes.Equal(next, retryRecord()) {
		// The old way: the third ClientHello goes through unchecked.
		if _, err := c.Write(clientHello(t, "other.test")); err != nil {
			t.Fatal(err)
		}
	}
	rest, _ := io.ReadAll(c)
	refusedRetry(t, g, c, up, append(next, rest...), []string{"allowed.test", "allowed.test"}, "second HelloRetryRequest")
}

// TestServerRetryLong: a retry request longer than the gateway reads to
// judge it (a cookie), written at once with the change cipher spec record
// that follows it in compatibility mode, reaches the client whole, and
// the second ClientHello for the same name is served.
func TestServerRetryLong(t *testing.T) {
	cookie := bytes.Repeat([]byte{0xc0}, 3000)
	ext := append([]byte{0, 44, byte((len(cookie) + 2) >> 8), byte(len(cookie) + 2), byte(len(cookie) >> 8), byte(len(cookie))}, cookie...)
	body := append([]byte{3, 3}, helloRetryRandom...)
	body = append(body, 0, 0x13, 0x01, 0, byte(len(ext)>>8), byte(len(ext)))
	body = append(body, ext...)
	body = append([]byte{2, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	hrr := append([]byte{recordHandshake, 3, 3, byte(len(body) >> 8), byte(len(body))}, body...)
	up := startLaxServer(t, 1, append(slices.Clone(hrr), ccsRecord...))
	g := startGateway(t, up.addr)
	c := dialGateway(t, g)
	if _, err := c.Write(clientHello(t, "allowed.test")); err != nil {
		t.Fatal(err)
	}
	if got, err := readRecord(c); err != nil || !bytes.Equal(got, hrr) {
		t.Fatalf("the client read %d bytes, %v; want the server's HelloRetryRequest, %d bytes", len(got), err, len(hrr))
	}
	second := append(slices.Clone(ccsRecord), clientHello(t, "ALLOWED.test")...)
	if _, err := c.Write(second); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(c)
	c.Close()
	if want := append(slices.Clone(ccsRecord), "served ALLOWED.test"...); !bytes.Equal(rest, want) {
		t.Errorf("after the retry request the client read %q, want %q", rest, want)
	}
	if names := up.namesOf(t); !slices.Equal(names, []string{"allowed.test", "ALLOWED.test"}) {
		t.Errorf("the upstream read ClientHellos for %q", names)
	}
	ev := g.events(t, 1)[0]
	if ev.Action != ActionAllowed || ev.BytesDn != int64(len(hrr)+len(ccsRecord)+len("served ALLOWED.test")) {
		t.Errorf("event: %+v", ev)
	}
}

// TestServerHelloHeld: bytes the client sends with its ClientHello reach
// the server once it has answered with something other than a retry
// request, in order; a server that does not answer within the peek
// timeout never gets them, and the connection is closed and audited so.
func TestServerHelloHeld(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		after []byte
		err   error
	}
	results := make(chan result, 2)
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for answer := true; ; answer = false {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				hs := &handshakeStream{r: c}
				if _, err := hs.next(); err != nil {
					results <- result{err: err}
					return
				}
				if answer {
					// Nothing of the client's may have come yet.
					_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
					if n, _ := c.Read(make([]byte, 1)); n != 0 {
						results <- result{err: errors.New("the client's bytes came before the server answered")}
						return
					}
					_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
					io.WriteString(c, "not TLS, not a retry")
				}
				after, err := io.ReadAll(c)
				results <- result{after, err}
			})
		}
	})
	g := startGateway(t, l.Addr().String())

	c := dialGateway(t, g)
	ch := clientHello(t, "allowed.test")
	if _, err := c.Write(append(slices.Clone(ch), "early"...)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("not TLS, not a retry"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "not TLS, not a retry" {
		t.Fatalf("the client read %q, %v", buf, err)
	}
	io.WriteString(c, " and later")
	closeWrite(c)
	if got, _ := io.ReadAll(c); len(got) != 0 {
		t.Errorf("the client read %q more", got)
	}
	if r := <-results; r.err != nil || string(r.after) != "early and later" {
		t.Errorf("the server read %q, %v after the ClientHello", r.after, r.err)
	}
	if ev := g.events(t, 1)[0]; ev.Action != ActionAllowed || ev.BytesDn != int64(len(buf)) || ev.BytesUp != int64(len(ch)+len("early and later")) {
		t.Errorf("event: %+v", ev)
	}

	// A server silent past the peek timeout.
	c2 := dialGateway(t, g)
	if _, err := c2.Write(append(clientHello(t, "allowed.test"), "early"...)); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c2); len(got) != 0 || err != nil {
		t.Errorf("the client of a silent server read %q, %v", got, err)
	}
	if r := <-results; len(r.after) != 0 {
		t.Errorf("the silent server read %q after the ClientHello", r.after)
	}
	if ev := g.events(t, 2)[1]; ev.Action != ActionAllowed || !strings.Contains(ev.Reason, "no answer to the ClientHello") {
		t.Errorf("event: %+v", ev)
	}
}
