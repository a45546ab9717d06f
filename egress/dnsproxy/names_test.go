package dnsproxy

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
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
	n.Record("c.test.", []netip.Addr{a}, now.Add(20*time.Second), now)
	for _, tt := range []struct {
		addr  netip.Addr
		since time.Time
		want  string
	}{
		{a, now, "[a.test. c.test.]"},
		{a, now.Add(15 * time.Second), "[c.test.]"},
		{a, now.Add(time.Hour), "[]"},
		{b, now.Add(time.Hour), "[]"},
		{b, time.Time{}, "[b.test.]"},
		{netip.MustParseAddr("::ffff:192.0.2.2"), time.Time{}, "[b.test.]"},
	} {
		if got := fmt.Sprint(n.NamesOf(tt.addr, tt.since)); got != tt.want {
			t.Errorf("NamesOf(%v, %v) = %s, want %s", tt.addr, tt.since, got, tt.want)
		}
	}
	n = NewNames(3)
	n.Record("a.test.", []netip.Addr{a}, now.Add(10*time.Second), now)
	n.Record("b.test.", []netip.Addr{b}, now.Add(time.Second), now)
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

// TestNamesKeep: the pairs of kept names are evicted only when no other
// pair is left, expired or not, so that resolving many names cannot push
// out a pin the L7 gateway guards.
func TestNamesKeep(t *testing.T) {
	now := time.Unix(1000, 0)
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	n := NewNames(2)
	n.Keep(func(name allowlist.FQDN) bool { return name == "ruled.test." })
	n.Record("ruled.test.", []netip.Addr{a}, now.Add(-time.Minute), now.Add(-2*time.Minute)) // expired
	for i := range 10 {
		n.Record(allowlist.FQDN(fmt.Sprintf("n%d.test.", i)), []netip.Addr{b}, now.Add(time.Hour), now)
	}
	if got := fmt.Sprint(n.NamesOf(a, time.Time{})); got != "[ruled.test.]" || n.Len() != 2 {
		t.Errorf("NamesOf(a) = %s, len %d; want the kept pair", got, n.Len())
	}
	n = NewNames(2)
	n.Keep(func(allowlist.FQDN) bool { return true })
	n.Record("x.test.", []netip.Addr{a}, now.Add(-time.Minute), now)
	n.Record("y.test.", []netip.Addr{a}, now.Add(time.Hour), now)
	n.Record("z.test.", []netip.Addr{a}, now.Add(time.Hour), now)
	if got := fmt.Sprint(n.NamesOf(a, time.Time{})); got != "[y.test. z.test.]" {
		t.Errorf("all kept: NamesOf(a) = %s; want the expired pair gone", got)
	}
}

// TestNamesKeepChains: a pair keeps the CNAME targets its answer went
// through, and a later answer's targets are added, not substituted.
func TestNamesKeepChains(t *testing.T) {
	n := NewNames(0)
	now := time.Now()
	a := netip.MustParseAddr("192.0.2.1")
	n.RecordChain("alias.test.", []allowlist.FQDN{"mid.test.", "target.test."}, []netip.Addr{a}, now.Add(time.Minute), now)
	n.RecordChain("alias.test.", []allowlist.FQDN{"other.test."}, []netip.Addr{a}, now.Add(time.Minute), now)
	n.Record("plain.test.", []netip.Addr{a}, now.Add(time.Minute), now)
	got := n.Chains()[a]
	slices.SortFunc(got, func(x, y []allowlist.FQDN) int { return strings.Compare(string(x[0]), string(y[0])) })
	want := [][]allowlist.FQDN{{"alias.test.", "mid.test.", "target.test.", "other.test."}, {"plain.test."}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("chains of %v: %v, want %v", a, got, want)
	}
}
