package l7

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSpliceIdleClosed: a passed-through TLS connection (no rules, no
// secrets: SNI peeked, then spliced) on which nothing moves either way is
// closed after SpliceIdleTimeout and audited so, where before it held one
// of its session's connections for ever; one that keeps moving data,
// either way, stays open past it.
func TestSpliceIdleClosed(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			// Sends a byte every 50 ms for 1.5 s: the client only reads.
			for range 30 {
				io.WriteString(w, ".")
				w.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
			}
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	dst := netip.MustParseAddrPort(up.Listener.Addr().String())
	var mu sync.Mutex
	var evs []Event
	sess := &Session{
		ID:        "s1",
		Check:     func(netip.AddrPort, Hello, time.Time) Decision { return Decision{Allow: true} },
		Audit:     func(ev Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() },
		Terminate: func(string) bool { return false },
	}
	const idle = 400 * time.Millisecond
	srv, err := New(Config{
		Sessions:          func(netip.Addr) (*Session, bool) { return sess, true },
		OriginalDst:       func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil },
		Dial:              (&net.Dialer{}).DialContext,
		SpliceIdleTimeout: idle,
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
	dial := func() *tls.Conn {
		c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{ServerName: "example.test", InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Idle both ways: closed within a few checks of the timeout.
	c := dial()
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data on an idle connection")
	}
	if d := time.Since(start); d < idle/2 || d > 5*idle {
		t.Errorf("an idle spliced connection closed after %v, want about %v", d, idle)
	}

	// Data flowing one way only, for well past the timeout: stays open.
	c2 := dial()
	defer c2.Close()
	io.WriteString(c2, "GET /stream HTTP/1.1\r\nHost: example.test\r\nConnection: close\r\n\r\n")
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c2)
	if err != nil || strings.Count(string(b), "1\r\n.\r\n") != 30 || !strings.HasSuffix(string(b), "0\r\n\r\n") {
		t.Errorf("a streaming spliced connection was cut: %v after %q", err, b[max(0, len(b)-60):])
	}

	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(evs)
		var first Event
		if n > 0 {
			first = evs[0]
		}
		mu.Unlock()
		if n >= 2 {
			if first.Kind != KindConnection || !strings.Contains(first.Reason, "idle both ways") {
				t.Errorf("the idle connection's event: %+v", first)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events, want one per connection", n)
		}
	}
}
