//go:build fastattack

package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
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

// TestFastAttackServerReset: the pass is the conntrack entry's mark, and
// conntrack keeps an entry for a new connection on the same four ends
// when the server was the one that reset the last: a SYN in its CLOSE
// state (no FIN seen, the last RST the server's) is "ignored" and let
// through on the old entry, which the server's SYN/ACK then brings back
// in sync (nf_conntrack_proto_tcp.c, TCP_CONNTRACK_IGNORE). The sandbox
// passes a connection for allowed.test from a port it chose, makes the
// server reset it (bytes that are no TLS record, more than the server
// reads before it closes), and connects again from the same port: the
// new connection carries the pass mark, is never queued, and its
// ClientHello for other.test reaches the server. Through the listener
// the entry's DNAT sends the new connection to the gateway, which checks
// it.
func TestFastAttackServerReset(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	port := uint16(40000 + time.Now().UnixNano()%20000)
	c, err := fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "allowed.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// No TLS record: the server answers with an alert and closes with
	// bytes unread, which resets the connection.
	junk := bytes.Repeat([]byte{0xff}, 256<<10)
	go func() { _, _ = c.Write(junk) }()
	_, err = io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Logf("the first connection ended with %v", err)
	}
	c.Close()
	_ = netns.Do(fw.gw, func() error {
		b, err := os.ReadFile("/proc/net/nf_conntrack")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, fmt.Sprintf("sport=%d ", port)) {
				t.Logf("conntrack: %s", l)
			}
		}
		return err
	})
	before := fw.p.FastPackets()
	c, err = fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatalf("dial again from port %d: %v", port, err)
	}
	defer c.Close()
	body, err := fw.getOver(c, "other.test")
	if err == nil {
		t.Errorf("other.test through allowed.test's address on the entry of a connection the server reset: %q (the gateway was given %d packets of it); want refused",
			body, fw.p.FastPackets()-before)
	} else {
		t.Logf("refused: %v", err)
	}
}
