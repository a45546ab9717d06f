package egress_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestReviseCutsEvictedNameConnection: a connection to a name's address
// outlives the name's pin (expired pins leave connections open). The
// session then resolves enough other allowed names to fill the bounded
// record of names (dnsproxy.DefaultMaxNames pairs), which drops the
// expired pairs, among them the one the connection was opened under. A
// revision withdrawing that name still ends the connection: the revised
// policy allows its destination neither by a pin nor by a name nor by an
// entry. The kept names' pins the full record dropped the names of stay:
// no entry that could have pinned them was withdrawn.
func TestReviseCutsEvictedNameConnection(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix, Net: netip.MustParsePrefix("10.214.0.0/16"), TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close world: %v", err)
		}
	})
	drop := netip.MustParseAddr("10.214.0.20")
	if err := w.AddHost("drop.test", drop); err != nil {
		t.Fatal(err)
	}
	// 256 names of 17 addresses each: 4352 pairs.
	const names, per = 256, 17
	for i := range names {
		for j := range per {
			k := i*per + j
			a := netip.AddrFrom4([4]byte{10, 214, byte(1 + k/250), byte(1 + k%250)})
			if err := w.AddRecord(fmt.Sprintf("f%d.flood.test", i), a); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg := egress.Config{
		Uplink:       "netns:" + w.NetnsName(),
		DNSUpstreams: []string{w.DNSAddr().String()},
		AllowPrivate: []netip.Prefix{w.Net()},
	}
	p, err := egress.Open(ctx, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	var audit auditLog
	eg := &policies.Egress{Allow: []string{"drop.test:7", "*.flood.test"}}
	s := addSession(t, p, "s1", eg, &audit)
	t.Cleanup(func() { _ = p.Remove(context.Background(), "s1", audit.emit) })

	if r := query(t, s, "drop.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("drop.test: %v", r)
	}
	c := dial(t, s, netip.AddrPortFrom(drop, 7))
	defer c.Close()
	echo := func() error {
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			return err
		}
		buf := make([]byte, 5)
		_, err := c.Read(buf)
		return err
	}
	if err := echo(); err != nil {
		t.Fatalf("echo before: %v", err)
	}
	// The pin expires (TTL floor 5 s); the connection stays.
	time.Sleep(6 * time.Second)
	if err := echo(); err != nil {
		t.Fatalf("echo after the pin expired: %v", err)
	}
	for i := range names {
		var r *dns.Msg
		for try := 0; try < 5; try++ {
			if r = queryNoFatal(t, s, fmt.Sprintf("f%d.flood.test", i)); r != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if r == nil || r.Rcode != dns.RcodeSuccess {
			t.Fatalf("flood name %d: %v", i, r)
		}
		time.Sleep(15 * time.Millisecond)
	}

	revised := &policies.Egress{Allow: []string{"*.flood.test"}}
	rev, err := p.Revise(ctx, "s1", egress.SessionConfig{Egress: revised, Audit: audit.emit, PolicyVersion: 2})
	if err != nil {
		t.Fatalf("revise: %v", err)
	}
	t.Logf("revision: unpinned %d, cut %d", len(rev.Unpinned), rev.Cut)
	if r := query(t, s, "drop.test"); r.Rcode != dns.RcodeRefused {
		t.Fatalf("withdrawn drop.test still resolves: %v", r)
	}
	for _, u := range rev.Unpinned {
		if !strings.HasPrefix(u, drop.String()) {
			t.Errorf("the revision unpinned %s, a kept name's (unpinned: %v)", u, rev.Unpinned)
		}
	}
	var last error
	for try := 0; try < 20 && last == nil; try++ {
		last = echo()
		time.Sleep(200 * time.Millisecond)
	}
	if last == nil {
		t.Errorf("the connection to withdrawn drop.test (%v:7) echoes on after the revision (cut %d)", drop, rev.Cut)
	}
}

// queryNoFatal is query without failing the test on a lost answer (the
// proxy's rate limit drops UDP queries over it).
func queryNoFatal(t *testing.T, s *egress.Session, name string) *dns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	conn, err := netns.Dialer(s.NetnsPath())(ctx, "udp", resolver(t, s).String())
	if err != nil {
		return nil
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(4096, false)
	c := &dns.Client{Net: "udp", Timeout: time.Second, UDPSize: 4096}
	r, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn, UDPSize: 4096})
	if err != nil {
		return nil
	}
	return r
}
