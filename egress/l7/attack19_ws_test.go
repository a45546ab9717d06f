package l7

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackWebsocketOutlivesRevision: GET /ws is allowed, the sandbox
// upgrades it to a websocket; a revision then denies GET /ws (the name
// stays allowed). Recheck closes only connections whose name or
// destination is refused or that were spliced: the upgraded stream,
// through which requests pass unread, carries on under the withdrawn
// rule for as long as the sandbox keeps it open.
func TestAttackWebsocketOutlivesRevision(t *testing.T) {
	var cur atomic.Pointer[Session]
	allowWS := []policies.HTTPHost{{Host: "allowed.test", Rules: []policies.HTTPRule{
		{Methods: []string{"GET"}, Path: "/ws", Action: policies.HTTPAllow},
	}, Default: policies.HTTPDeny}}
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprint(brw, "echo "+line)
			brw.Flush()
		}
	}), attackOpts{tls: true, rules: allowWS, current: &cur})
	orig := cur.Load()

	upgrade := func() (*http.Response, error) {
		req, _ := http.NewRequest("GET", "https://allowed.test/ws", nil)
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		return g.client(false).Transport.RoundTrip(req)
	}
	resp, err := upgrade()
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	rw := resp.Body.(io.ReadWriteCloser)
	defer rw.Close()
	br := bufio.NewReader(rw)
	io.WriteString(rw, "one\n")
	if line, _ := br.ReadString('\n'); line != "echo one\n" {
		t.Fatalf("before the revision: %q", line)
	}

	set, err := httprule.Compile([]policies.HTTPHost{{Host: "allowed.test", Rules: []policies.HTTPRule{
		{Methods: []string{"GET"}, Path: "/ws", Action: policies.HTTPDeny},
	}, Default: policies.HTTPDeny}})
	if err != nil {
		t.Fatal(err)
	}
	revised := *orig
	revised.Version = 2
	revised.Rules = func(h string) *httprule.Host { return set.For(h) }
	cur.Store(&revised)
	closed := g.srv.Recheck(&revised)

	if resp, err := upgrade(); err == nil && resp.StatusCode == 101 {
		t.Fatalf("a new upgrade after the revision: %d", resp.StatusCode)
	}
	io.WriteString(rw, "two\n")
	done := make(chan string, 1)
	go func() { line, _ := br.ReadString('\n'); done <- line }()
	select {
	case line := <-done:
		if line == "echo two\n" {
			t.Errorf("the websocket upgraded under the withdrawn allow rule still carries messages after the revision (Recheck closed %d connections)", closed)
		}
	case <-time.After(3 * time.Second):
	}
}
