package l7

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestWebsocketIdleClosed: after an upgrade the gateway relays a
// websocket's frames for as long as it is open; one on which nothing
// moves either way is closed after the idle timeout (as a spliced
// connection is) and its request audited so, where before it held one of
// its session's connections, and the upstream's, for ever. One that keeps
// moving data, one way, stays open past it.
func TestWebsocketIdleClosed(t *testing.T) {
	const idle = 400 * time.Millisecond
	rules := []policies.HTTPHost{{Host: "allowed.test", Rules: []policies.HTTPRule{
		{Methods: []string{"GET"}, Path: "/ws*", Action: policies.HTTPAllow},
	}, Default: policies.HTTPDeny}}
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		if r.URL.Path == "/ws-ticks" {
			// A tick every 100 ms for 1.5 s, the client only reading.
			for range 15 {
				fmt.Fprint(brw, "tick\n")
				brw.Flush()
				time.Sleep(100 * time.Millisecond)
			}
			return
		}
		io.Copy(io.Discard, brw) // until the gateway closes it
	}), attackOpts{tls: true, rules: rules, idleTimeout: idle})

	upgrade := func(path string) io.ReadWriteCloser {
		req, _ := http.NewRequest("GET", "https://allowed.test"+path, nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		resp, err := g.client(false).Transport.RoundTrip(req)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade %s: %v %v", path, resp, err)
		}
		return resp.Body.(io.ReadWriteCloser)
	}

	ws := upgrade("/ws")
	defer ws.Close()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := ws.Read(make([]byte, 1)); done <- err }()
	select {
	case <-done:
		if d := time.Since(start); d < idle/2 || d > 6*idle {
			t.Errorf("an idle websocket closed after %v, want about %v", d, idle)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle websocket is still open after 5 s")
	}

	ticks := upgrade("/ws-ticks")
	defer ticks.Close()
	b, _ := io.ReadAll(bufio.NewReader(ticks))
	if n := strings.Count(string(b), "tick\n"); n != 15 {
		t.Errorf("a websocket moving data one way was cut after %d ticks", n)
	}
	ev := g.request(t, 1) // the first audited request, the idle websocket's
	if ev.Path != "/ws" || !strings.Contains(ev.Reason, "idle both ways") {
		t.Errorf("the idle websocket's request: %+v", ev)
	}
}
