//go:build fastattack

package egress_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// Attacks on the L7 fast path that still succeed (go test -tags
// fastattack): see the report of each test.

// TestFastAttackQueueFull: the kernel's queue (nfq.Config.MaxLen 4096)
// counts every packet held for a decision, and all sessions share it. One
// session within its own bounds (fewer than MaxSessionConns undecided
// connections, each holding the ten segments its initial congestion
// window lets out, of a ClientHello it never finishes) fills it; the
// queue then drops every other session's SYN and ClientHello until the
// peek timeout, and the session can do it again at once.
func TestFastAttackQueueFull(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	victim := addSession(t, fw.p, "victim", &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}, fw.audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "victim", nil) })
	if r := query(t, victim, "allowed.test"); len(r.Answer) == 0 {
		t.Fatalf("allowed.test: %v", r)
	}
	if _, _, err := get(t, victim, fw.https, fw.w, "https://allowed.test/", ""); err != nil {
		t.Fatalf("the victim before: %v", err)
	}
	const conns, segs = 480, 10
	var held []*net.TCPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// A record header announcing 16 KiB, then a byte at a time.
	start := []byte{0x16, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc}
	t0 := time.Now()
	for i := 0; i < conns; i++ {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := fw.dialFrom(dctx, 0)
		cancel()
		if err != nil {
			// The queue is full: the session's own SYN was dropped.
			t.Logf("connection %d after %v: %v", i, time.Since(t0), err)
			break
		}
		if i%50 == 0 {
			t.Logf("connection %d after %v, %d packets to the gateway", i, time.Since(t0), fw.p.FastPackets())
		}
		held = append(held, c)
		_ = c.SetNoDelay(true)
		for j := 0; j < segs; j++ {
			if _, err := c.Write(start[j%len(start) : j%len(start)+1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	begin := time.Now()
	code, body, err := get(t, victim, fw.https, fw.w, "https://allowed.test/", "")
	if err != nil {
		t.Errorf("another session's connection while one session holds the queue: %v after %v", err, time.Since(begin).Round(time.Millisecond))
	} else {
		t.Logf("the victim: %d %q in %v", code, body, time.Since(begin))
	}
}

// TestFastAttackRevisionKeepsName: a revision that withdraws a name on
// an address another allowed name still pins ends, through the listener,
// every open connection that asked for the withdrawn name (Server.Recheck;
// the doc of Perimeter.Revise promises it); a connection the fast path
// passed is no longer the gateway's, and the conntrack sweep keeps it
// (its address is still allowed): the session goes on talking to
// other.test after other.test was withdrawn.
func TestFastAttackRevisionKeepsName(t *testing.T) { testRevisionKeepsName(t, true) }

// TestListenerRevisionEndsName: the same through the listener.
func TestListenerRevisionEndsName(t *testing.T) { testRevisionKeepsName(t, false) }

func testRevisionKeepsName(t *testing.T, fastPath bool) {
	fw := startWorld(t, fastPath)
	ctx := t.Context()
	both := &policies.Egress{Allow: []string{"allowed.test", "other.test"}, L7: policies.L7Check}
	if _, err := fw.p.Revise(ctx, "fast", egress.SessionConfig{Egress: both, Audit: fw.audit.emit, PolicyVersion: 2}); err != nil {
		t.Fatal(err)
	}
	if r := query(t, fw.fast, "other.test"); len(r.Answer) == 0 {
		t.Fatalf("other.test: %v", r)
	}
	c, err := fw.dialFrom(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "other.test", NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	roundTrip := func() (string, error) {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if body, err := roundTrip(); err != nil || body != "other.test" {
		t.Fatalf("other.test while allowed: %q %v", body, err)
	}
	only := &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}
	if _, err := fw.p.Revise(ctx, "fast", egress.SessionConfig{Egress: only, Audit: fw.audit.emit, PolicyVersion: 3}); err != nil {
		t.Fatal(err)
	}
	if body, err := roundTrip(); err == nil {
		t.Errorf("other.test on a connection opened before it was withdrawn: %q; want the connection ended", body)
	}
}
