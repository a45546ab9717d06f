package egress_test

import (
	"context"
	"crypto/rand"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackUDPOnL7PortPastGateway: a host with http rules allowed only on
// the gateway's ports (what policies' beyond now demands) is still
// reachable over UDP on those ports other than 443 while UDP was closed to
// pins on 443 alone, so HTTP/3 on 8443 (l7_ports) or on 80 passed the
// gateway and its rules by. UDP is now closed on every port the gateway
// checks.
func TestAttackUDPOnL7PortPastGateway(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	gitHost := netip.MustParseAddr("10.214.0.30")
	if err := w.AddHost("git.test", gitHost); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{80, 443, 8443} {
		if err := w.AddUDPEcho(netip.AddrPortFrom(gitHost, port)); err != nil {
			t.Fatal(err)
		}
	}
	p, err := egress.Open(ctx, prefix, egress.Config{
		Uplink:       "netns:" + w.NetnsName(),
		DNSUpstreams: []string{w.DNSAddr().String()},
		AllowPrivate: []netip.Prefix{w.Net()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	var audit auditLog
	cases := []struct {
		id    string
		eg    *policies.Egress
		ports []uint16
	}{
		{"r8443", &policies.Egress{Allow: []string{"git.test:443", "git.test:8443"}, L7: policies.L7Check, L7Ports: []uint16{443, 8443}}, []uint16{443, 8443}},
		{"r80", &policies.Egress{Allow: []string{"git.test:80", "git.test:443"}, L7: policies.L7Check}, []uint16{443, 80}},
	}
	for _, c := range cases {
		c.eg.HTTP = []policies.HTTPHost{{Host: "git.test", Default: policies.HTTPDeny}}
		// The manifest passes the new check.
		pol := &policies.Policy{Label: "t", Image: "i", Command: []string{"true"}, Egress: c.eg}
		pol.ApplyDefaults()
		if err := pol.Validate(); err != nil {
			t.Fatalf("%s: validate: %v", c.id, err)
		}
		s := addSession(t, p, c.id, c.eg, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), c.id, nil) })
		if r := query(t, s, "git.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("git.test: %v", r)
		}
		for _, port := range c.ports {
			got := udpEcho(t, s, netip.AddrPortFrom(gitHost, port))
			t.Logf("%s: UDP %d to git.test echoed: %v", c.id, port, got)
			if got && port != 443 {
				t.Errorf("%s: UDP %d reached git.test (http rules, allowed only on the gateway's ports) past the gateway", c.id, port)
			}
			if got && port == 443 {
				t.Errorf("%s: UDP 443 passed", c.id)
			}
		}
	}
}
