package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// gatewayTest runs a Server on loopback whose every connection is taken
// to have been redirected from upstream, for a session that allows only
// the name "allowed.test".
type gatewayTest struct {
	addr string
	mu   sync.Mutex
	evs  []Event
}

func startGateway(t *testing.T, upstream string) *gatewayTest {
	t.Helper()
	g := &gatewayTest{}
	dst := netip.MustParseAddrPort(upstream)
	sess := &Session{
		ID: "s1",
		Check: func(d netip.AddrPort, h Hello, _ time.Time) Decision {
			if d != dst {
				return Decision{Reason: "wrong destination " + d.String()}
			}
			if strings.EqualFold(h.Name(), "allowed.test") {
				return Decision{Allow: true, Rule: "allowed.test"}
			}
			return Decision{Reason: "airlock: " + h.Name() + " is not allowed"}
		},
		Audit: func(ev Event) {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.evs = append(g.evs, ev)
		},
	}
	srv, err := New(Config{
		Sessions:    func(netip.Addr) (*Session, bool) { return sess, true },
		OriginalDst: func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil },
		Dial:        (&net.Dialer{}).DialContext,
		PeekTimeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	g.addr = l.Addr().String()
	return g
}

// events waits for n events.
func (g *gatewayTest) events(t *testing.T, n int) []Event {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		evs := append([]Event(nil), g.evs...)
		g.mu.Unlock()
		if len(evs) >= n {
			return evs
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t.Fatalf("fewer than %d events: %+v", n, g.evs)
	return nil
}

func (g *gatewayTest) client(tlsName string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", g.addr)
		},
		TLSClientConfig:   &tls.Config{ServerName: tlsName, InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
}

func TestServerHTTP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "host "+r.Host)
	}))
	defer up.Close()
	g := startGateway(t, up.Listener.Addr().String())

	resp, err := g.client("").Get("http://allowed.test/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "host allowed.test" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	ev := g.events(t, 1)[0]
	if ev.Action != ActionAllowed || ev.Kind != KindRequest || ev.Host != "allowed.test" || ev.Proto != ProtoHTTP || ev.Status != 200 || ev.BytesDn != int64(len(body)) || ev.Session != "s1" {
		t.Errorf("event of the allowed request: %+v", ev)
	}

	req, _ := http.NewRequest("GET", "http://allowed.test/", nil)
	req.Host = "other.test"
	resp, err = g.client("").Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var reason struct{ Error string }
	err = json.NewDecoder(resp.Body).Decode(&reason)
	resp.Body.Close()
	if resp.StatusCode != 403 || err != nil || !strings.Contains(reason.Error, "other.test") {
		t.Fatalf("fronted request: %d %+v %v; want 403 with a JSON reason", resp.StatusCode, reason, err)
	}
	ev = g.events(t, 2)[1]
	if ev.Action != ActionRefused || ev.Host != "other.test" || ev.Reason == "" {
		t.Errorf("event of the refused request: %+v", ev)
	}
}

func TestServerTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls "+r.TLS.ServerName)
	}))
	defer up.Close()
	g := startGateway(t, up.Listener.Addr().String())

	resp, err := g.client("allowed.test").Get("https://allowed.test/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "tls allowed.test" {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	if ev := g.events(t, 1)[0]; ev.Action != ActionAllowed || ev.SNI != "allowed.test" || ev.BytesDn == 0 {
		t.Errorf("event of the allowed connection: %+v", ev)
	}

	_, err = g.client("other.test").Get("https://allowed.test/")
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("SNI other.test: %v; want an access_denied alert", err)
	}
	if ev := g.events(t, 2)[1]; ev.Action != ActionRefused || ev.SNI != "other.test" {
		t.Errorf("event of the refused connection: %+v", ev)
	}
}

func TestServerSilentClient(t *testing.T) {
	g := startGateway(t, "127.0.0.1:9")
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes from a refused connection", n)
	}
	if ev := g.events(t, 1)[0]; ev.Action != ActionRefused || !strings.Contains(ev.Reason, "sent nothing") {
		t.Errorf("event: %+v", ev)
	}
}

// TestServerKeepAlive sends a second request for another host on a
// kept-alive connection: it never reaches the server, it is answered 403,
// and the connection is closed.
func TestServerKeepAlive(t *testing.T) {
	var mu sync.Mutex
	var hosts []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	g := startGateway(t, up.Listener.Addr().String())
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 403 || !resp.Close {
		t.Fatalf("second request for other.test: %v %v; want 403 and the connection closed", resp, err)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("the connection stayed open after a refused request")
	}
	evs := g.events(t, 2)
	if !slices.ContainsFunc(evs, func(ev Event) bool { return ev.Action == ActionRefused && ev.Host == "other.test" }) {
		t.Errorf("no refusal of other.test in %+v", evs)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(hosts, []string{"allowed.test"}) {
		t.Errorf("the server saw requests for %v", hosts)
	}
}
