package dnsproxy

import (
	"context"
	"crypto/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// realSession is a session of a real gateway (its uplink an empty
// namespace): its Pin writes the kernel's nftables set.
func realSession(t *testing.T) (*netns.Gateway, *netns.Session) {
	t.Helper()
	testutil.RequiresRoot(t)
	p := "t" + strings.ToLower(rand.Text()[:5])
	up, err := netns.Create(netns.DefaultDir, p+"-world")
	if err != nil {
		t.Fatal(err)
	}
	g, err := netns.NewGateway(t.Context(), netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: up}})
	if err != nil {
		_ = netns.Remove(up)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("close gateway: %v", err)
		}
		if left, err := netns.Leftovers(netns.DefaultDir, p, up); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
		if err := netns.Remove(up); err != nil {
			t.Errorf("remove uplink namespace: %v", err)
		}
	})
	s, err := g.AddSession(t.Context(), "s1", netns.SessionConfig{IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	return g, s
}

// TestAnswerAddressesThatAreNeverPinned has the upstream answer allowed
// names with addresses a session must not reach, and checks what the
// client sees, what the audit says and what the kernel's allow set holds.
func TestAnswerAddressesThatAreNeverPinned(t *testing.T) {
	g, ns := realSession(t)
	var host netip.Addr
	addrs, err := netns.LocalAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.Is4() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			host = a
			break
		}
	}
	if !host.IsValid() {
		t.Fatal("the host has no IPv4 address besides loopback")
	}
	other := ns.Addr().Next().Next() // another session's address in the pool
	nat64 := func(v4 netip.Addr) string {
		b := netip.MustParseAddr("64:ff9b::").As16()
		v := v4.As4()
		copy(b[12:], v[:])
		return netip.AddrFrom16(b).String()
	}

	up := newUpstream(t,
		"loopback.corp.test. 60 IN A 127.0.0.1",
		"metadata.corp.test. 60 IN A 169.254.169.254",
		"wireserver.corp.test. 60 IN A 168.63.129.16",
		"alibaba.corp.test. 60 IN A 100.100.100.200",
		"pool.corp.test. 60 IN A "+other.String(),
		"uplink.corp.test. 60 IN A "+g.UplinkPeerAddr().String(),
		"host.corp.test. 60 IN A "+host.String(),
		"private.corp.test. 60 IN A 10.99.0.1",
		"cgnat.corp.test. 60 IN A 100.64.1.1",
		"rfc1918.corp.test. 60 IN A 192.168.1.1",
		"ula.corp.test. 60 IN AAAA fd00::1",
		"imds6.corp.test. 60 IN AAAA fd00:ec2::254",
		"nat64.corp.test. 60 IN AAAA 64:ff9b::a9fe:a9fe",
		"mapped.corp.test. 60 IN AAAA ::ffff:127.0.0.1",
		"linklocal6.corp.test. 60 IN AAAA fe80::1",
		"sixtofour.corp.test. 60 IN AAAA 2002:a9fe:a9fe::1",
		"sixtofour6.corp.test. 60 IN AAAA 2002:7f00:1::1",
		"localnat64.corp.test. 60 IN AAAA 64:ff9b:1::7f00:1",
		"teredo.corp.test. 60 IN AAAA 2001:0:4136:e378:8000:63bf:80ff:fffe",
		"pool64.corp.test. 60 IN AAAA "+nat64(other),
		"host64.corp.test. 60 IN AAAA "+nat64(host),
		"world.corp.test. 60 IN A 10.214.0.77",
		"mine.corp.test. 60 IN A 172.20.0.5",
		"public.corp.test. 60 IN A 192.0.2.10",
		"public.corp.test. 60 IN AAAA 2001:db8::10",
		"mixed.corp.test. 60 IN A 169.254.169.254",
		"mixed.corp.test. 60 IN A 10.99.0.2",
		"mixed.corp.test. 60 IN A 192.0.2.11",
	)
	list, err := allowlist.Compile([]string{"*.corp.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	audit := &auditLog{}
	pol := &SessionPolicy{
		ID: "s1", Allowlist: list, IPv6: true, Pinner: ns, Audit: audit.add,
		// The manifest's allow_private: a private range of its own, and
		// ranges that cover the pool and the host, which stay refused.
		AllowPrivate: []netip.Prefix{
			netip.MustParsePrefix("172.20.0.0/16"),
			netip.MustParsePrefix("10.0.0.0/8"),
			netip.PrefixFrom(host, 32),
			// NAT64 forms of the pool and the host stay refused even
			// where a manifest's range covers them.
			netip.MustParsePrefix("64:ff9b::/96"),
		},
	}
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), pol)
	p := startProxy(t, &sessions, WithUpstreams(up.addr),
		WithNeverPin("the daemon's session pool", g.SessionPools()...),
		WithNeverPin("the gateway's uplink subnet", g.UplinkNets()...),
		WithLocalAddrs(netns.LocalAddrs, 0),
		WithAllowPrivate(netip.MustParsePrefix("10.214.0.0/24")),
	)
	// The session's own allow_private covers 10.0.0.0/8 in the first
	// round; the second round drops it, so that only the daemon's
	// --allow-private range (10.214.0.0/24) is allowed.
	refused := []struct {
		name   string
		qtype  uint16
		reason string
	}{
		{"loopback.corp.test.", dns.TypeA, "loopback"},
		{"metadata.corp.test.", dns.TypeA, "cloud metadata service"},
		{"wireserver.corp.test.", dns.TypeA, "Azure"},
		{"alibaba.corp.test.", dns.TypeA, "Alibaba"},
		{"pool.corp.test.", dns.TypeA, "session pool"},
		{"uplink.corp.test.", dns.TypeA, "uplink subnet"},
		{"host.corp.test.", dns.TypeA, "address of the host"},
		{"cgnat.corp.test.", dns.TypeA, "CGNAT"},
		{"rfc1918.corp.test.", dns.TypeA, "private range 192.168.0.0/16"},
		{"ula.corp.test.", dns.TypeAAAA, "unique local range fc00::/7"},
		{"imds6.corp.test.", dns.TypeAAAA, "AWS"},
		{"nat64.corp.test.", dns.TypeAAAA, "through NAT64"},
		{"mapped.corp.test.", dns.TypeAAAA, "IPv4-mapped"},
		{"linklocal6.corp.test.", dns.TypeAAAA, "link-local"},
		{"sixtofour.corp.test.", dns.TypeAAAA, "cloud metadata service through 6to4"},
		{"sixtofour6.corp.test.", dns.TypeAAAA, "loopback through 6to4"},
		{"localnat64.corp.test.", dns.TypeAAAA, "loopback through NAT64"},
		{"teredo.corp.test.", dns.TypeAAAA, "Teredo"},
		{"pool64.corp.test.", dns.TypeAAAA, "session pool"},
		{"host64.corp.test.", dns.TypeAAAA, "address of the host"},
	}
	for _, c := range refused {
		resp := p.query(t, "udp", "", c.name, c.qtype, true)
		ede, _ := edeOf(resp)
		if resp.Rcode != dns.RcodeRefused || len(resp.Answer) != 0 || ede == nil || ede.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(ede.ExtraText, c.reason) {
			t.Errorf("%s: rcode %s answer %v EDE %v, want REFUSED with %q", c.name, dns.RcodeToString[resp.Rcode], resp.Answer, ede, c.reason)
		}
		ev := audit.last(t)
		if ev.Name != c.name || ev.Action != ActionRefused || len(ev.Dropped) != 1 || !strings.Contains(ev.Dropped[0].Reason, c.reason) || len(ev.Answers) != 0 {
			t.Errorf("%s: audit %+v", c.name, ev)
		}
	}
	for _, c := range []struct {
		name  string
		qtype uint16
		want  []netip.Addr
	}{
		{"world.corp.test.", dns.TypeA, mustAddrs("10.214.0.77")},
		{"private.corp.test.", dns.TypeA, mustAddrs("10.99.0.1")}, // the session's 10.0.0.0/8
		{"mine.corp.test.", dns.TypeA, mustAddrs("172.20.0.5")},
		{"public.corp.test.", dns.TypeA, mustAddrs("192.0.2.10")},
		{"public.corp.test.", dns.TypeAAAA, mustAddrs("2001:db8::10")},
		{"mixed.corp.test.", dns.TypeA, mustAddrs("10.99.0.2", "192.0.2.11")},
	} {
		resp := p.query(t, "udp", "", c.name, c.qtype, true)
		if got := addrsOf(resp); resp.Rcode != dns.RcodeSuccess || !slices.Equal(got, c.want) {
			t.Errorf("%s %s: rcode %s answer %v, want %v", c.name, dns.Type(c.qtype), dns.RcodeToString[resp.Rcode], got, c.want)
		}
	}
	ev := audit.last(t)
	if ev.Action != ActionAllowed || len(ev.Dropped) != 1 || ev.Dropped[0].Addr != netip.MustParseAddr("169.254.169.254") ||
		!strings.Contains(ev.Dropped[0].Reason, "cloud metadata") {
		t.Errorf("mixed answer: audit %+v, want the metadata address dropped", ev)
	}

	// Without the session's 10.0.0.0/8, only the daemon's range stays.
	pol2 := *pol
	pol2.AllowPrivate = nil
	sessions.Set(netip.MustParseAddr("127.0.0.1"), &pol2)
	resp := p.query(t, "udp", "", "private.corp.test.", dns.TypeA, true)
	if ede, _ := edeOf(resp); resp.Rcode != dns.RcodeRefused || ede == nil || !strings.Contains(ede.ExtraText, "10.99.0.1 is in private range 10.0.0.0/8") ||
		!strings.Contains(ede.ExtraText, "allow_private") {
		t.Errorf("private address outside the allowed ranges: %v", resp)
	}
	resp = p.query(t, "udp", "", "mixed.corp.test.", dns.TypeA, true)
	if got := addrsOf(resp); !slices.Equal(got, mustAddrs("192.0.2.11")) {
		t.Errorf("mixed answer without allow_private: %v", got)
	}
	if ev := audit.last(t); len(ev.Dropped) != 2 {
		t.Errorf("mixed answer without allow_private: audit %+v, want two dropped", ev)
	}

	// The kernel's allow set holds the allowed addresses and nothing else.
	pins, err := ns.Pinned(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for _, pn := range pins {
		if !slices.Contains(got, pn.Addr) {
			got = append(got, pn.Addr)
		}
	}
	slices.SortFunc(got, netip.Addr.Compare)
	want := mustAddrs("10.99.0.1", "10.99.0.2", "10.214.0.77", "172.20.0.5", "192.0.2.10", "192.0.2.11", "2001:db8::10")
	slices.SortFunc(want, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Errorf("pinned in the kernel: %v, want %v", got, want)
	}
}

// TestCachedAnswerKeepsThePin answers a name from upstream and then from
// the cache, pinning into a real session's nftables sets: the hit asks no
// longer than the pin of the stored answer, so the kernel's entry is left
// as it is (its remaining life goes on shrinking), while the client's TTL
// stays within it. Once the entry expired, the next answer pins it again.
func TestCachedAnswerKeepsThePin(t *testing.T) {
	_, ns := realSession(t)
	up := newUpstream(t, "x.corp.test. 60 IN A 192.0.2.10", "short.corp.test. 1 IN A 192.0.2.11")
	list, err := allowlist.Compile([]string{"*.corp.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), &SessionPolicy{ID: "s1", Allowlist: list, Pinner: ns})
	p := startProxy(t, &sessions, WithUpstreams(up.addr), WithTTLBounds(time.Second, time.Minute))
	remaining := func(a netip.Addr) (time.Duration, bool) {
		t.Helper()
		pins, err := ns.Pinned(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, pn := range pins {
			if pn.Addr == a {
				return pn.Expires, true
			}
		}
		return 0, false
	}
	x := netip.MustParseAddr("192.0.2.10")

	if resp := p.query(t, "udp", "", "x.corp.test.", dns.TypeA, true); !slices.Equal(addrsOf(resp), []netip.Addr{x}) {
		t.Fatalf("miss: %v", resp)
	}
	first, ok := remaining(x)
	if !ok || first < 59*time.Second {
		t.Fatalf("after the miss: pinned %v (%v), want about 60s", ok, first)
	}
	// Half a second into the next whole second of the entry's age: a pin
	// made anew would last the answer's TTL (58s), the one left alone
	// about half a second longer.
	time.Sleep(1500 * time.Millisecond)
	resp := p.query(t, "udp", "", "x.corp.test.", dns.TypeA, true)
	if !slices.Equal(addrsOf(resp), []netip.Addr{x}) || up.count("x.corp.test.") != 1 {
		t.Fatalf("hit: %v, upstream asked %d times", resp, up.count("x.corp.test."))
	}
	ttl := time.Duration(resp.Answer[0].Header().Ttl) * time.Second
	if ttl != 58*time.Second {
		t.Errorf("cached answer's TTL %v, want 58s (60s aged 1.5s, rounded up)", ttl)
	}
	left, ok := remaining(x)
	if !ok {
		t.Fatal("the pin is gone after the hit")
	}
	if left > first-time.Second || left < ttl+200*time.Millisecond {
		t.Errorf("after the hit the pin has %v left (%v after the miss, answer's TTL %v): want it left alone, above the TTL", left, first, ttl)
	}

	// A 1s answer: pinned for 1s, gone after it, pinned again by the
	// next answer (from upstream: the cache's entry expired too).
	y := netip.MustParseAddr("192.0.2.11")
	p.query(t, "udp", "", "short.corp.test.", dns.TypeA, true)
	if _, ok := remaining(y); !ok {
		t.Fatal("short.corp.test not pinned")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := remaining(y); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the 1s pin did not expire within 5s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if resp := p.query(t, "udp", "", "short.corp.test.", dns.TypeA, true); !slices.Equal(addrsOf(resp), []netip.Addr{y}) {
		t.Fatalf("after expiry: %v", resp)
	}
	if _, ok := remaining(y); !ok {
		t.Error("an answer after the pin expired did not pin it again")
	}
}
