package dnsproxy

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

func TestNames(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	n := NewNames(3)
	n.Record("a.test.", []netip.Addr{a}, now.Add(10*time.Second), now)
	n.Record("a.test.", []netip.Addr{a}, now.Add(5*time.Second), now) // shorter: kept longer
	n.Record("b.test.", []netip.Addr{netip.MustParseAddr("::ffff:192.0.2.2")}, now.Add(time.Second), now)
	for _, tt := range []struct {
		name allowlist.FQDN
		addr netip.Addr
		at   time.Time
		want bool
	}{
		{"a.test.", a, now.Add(9 * time.Second), true},
		{"a.test.", a, now.Add(11 * time.Second), false},
		{"a.test.", b, now, false},
		{"b.test.", b, now, true},
		{"b.test.", a, now, false},
		{"c.test.", a, now, false},
	} {
		if got := n.Has(tt.name, tt.addr, tt.at); got != tt.want {
			t.Errorf("Has(%s, %v, +%v) = %v, want %v", tt.name, tt.addr, tt.at.Sub(now), got, tt.want)
		}
	}
	// Full: the expired pair goes first, then the one closest to expiry.
	later := now.Add(2 * time.Second)
	n.Record("c.test.", []netip.Addr{a}, later.Add(time.Minute), later)
	n.Record("d.test.", []netip.Addr{a}, later.Add(time.Minute), later)
	if n.Has("b.test.", b, now) || !n.Has("c.test.", a, later) || !n.Has("d.test.", a, later) || n.Len() != 3 {
		t.Errorf("after eviction: b %v c %v d %v len %d", n.Has("b.test.", b, now), n.Has("c.test.", a, later), n.Has("d.test.", a, later), n.Len())
	}
	n.Record("e.test.", []netip.Addr{b}, later.Add(time.Hour), later)
	if n.Has("a.test.", a, later) || n.Len() != 3 {
		t.Errorf("the pair closest to expiry is still held (len %d)", n.Len())
	}
	var nilNames *Names
	nilNames.Record("a.test.", []netip.Addr{a}, now, now)
	if nilNames.Has("a.test.", a, now) {
		t.Error("a nil Names has a pair")
	}
}

// TestAnswerRecordsNames checks that an answer's pinned addresses are
// recorded for the name the client asked for, and a refused name's for
// none.
func TestAnswerRecordsNames(t *testing.T) {
	up := newUpstream(t, testZone...)
	sess := newSession(t, "s1", false, []string{"*.corp.test:443"}, nil)
	sess.policy.Names = NewNames(0)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr))

	p.query(t, "udp", "", "API.Corp.Test.", dns.TypeA, false)
	p.query(t, "udp", "", "evil.test.", dns.TypeA, false)
	now := time.Now()
	for _, a := range mustAddrs("192.0.2.10", "192.0.2.11") {
		if !sess.policy.Names.Has("api.corp.test.", a, now) {
			t.Errorf("%v is not recorded for api.corp.test", a)
		}
	}
	if n := sess.policy.Names.Len(); n != 2 {
		t.Errorf("%d pairs recorded, want 2", n)
	}
}
