//go:build fastattack

package egress_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// Attacks on the L7 fast path that still succeed (go test -tags
// fastattack): see the report of each test.

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
