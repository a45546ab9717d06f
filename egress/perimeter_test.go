package egress

import (
	"context"
	"encoding/json"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestOpenRefusesPublicAllowPrivate: an allow-private range that is not
// private is the operator's mistake, refused before anything is made.
func TestOpenRefusesPublicAllowPrivate(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []string{"8.8.8.0/24", "10.0.0.0/7", "2001:db8::/32"} {
		p, err := Open(t.Context(), "tbad", Config{Uplink: "host", NetnsDir: dir, DNSUpstreams: []string{"192.0.2.1"},
			AllowPrivate: []netip.Prefix{netip.MustParsePrefix(r)}})
		if !errdefs.IsInvalidArgument(err) || p != nil {
			t.Errorf("Open with allow-private %s: %v, %v; want InvalidArgument", r, p, err)
		}
	}
	if _, err := Open(t.Context(), "tbad", Config{Uplink: "bridge", NetnsDir: dir}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Open with uplink bridge: %v; want InvalidArgument", err)
	}
	if left, _ := os.ReadDir(dir); len(left) > 0 {
		t.Errorf("a refused Open left %v", left)
	}
}

// TestNoUplink: without an uplink there is no perimeter; a session
// without egress needs none, one with egress is refused, and everything
// else is a no-op.
func TestNoUplink(t *testing.T) {
	ctx := t.Context()
	p, err := Open(ctx, "tnone", Config{NetnsDir: t.TempDir()})
	if err != nil || p != nil {
		t.Fatalf("Open without uplink: %v, %v; want nil, nil", p, err)
	}
	dir := t.TempDir()
	if s, err := p.AddSession(ctx, "s1", SessionConfig{Dir: dir}); err != nil || s != nil || s.SpecOpts() != nil {
		t.Errorf("session without egress: %v, %v", s, err)
	}
	_, err = p.AddSession(ctx, "s1", SessionConfig{Egress: &policies.Egress{Allow: []string{"example.com"}}, Dir: dir})
	const want = "the manifest declares egress but this daemon has no uplink (start airlockd with --uplink): failed precondition"
	if !errdefs.IsFailedPrecondition(err) || err.Error() != want {
		t.Errorf("session with egress: %v; want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "resolv.conf")); !os.IsNotExist(err) {
		t.Errorf("resolv.conf written without a perimeter: %v", err)
	}
	if err := p.Remove(ctx, "s1", func(context.Context, api.AuditEvent) { t.Error("audit without a perimeter") }); err != nil {
		t.Error(err)
	}
	if err := p.Discard(ctx, "s1"); err != nil {
		t.Error(err)
	}
	if evs := p.Drops(ctx, "s1"); evs != nil {
		t.Errorf("drops without a perimeter: %v", evs)
	}
	p.Reconcile(ctx, func(string) *SessionConfig { t.Error("reconcile without a perimeter"); return nil })
	if _, err := p.SessionOfFlow(ctx, netip.MustParseAddrPort("10.0.0.1:1234"), netip.AddrPort{}, "tcp"); !errdefs.IsNotFound(err) {
		t.Errorf("SessionOfFlow without a perimeter: %v; want NotFound", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
}

// TestAuditEventShapes pins the JSON of the perimeter's audit events:
// the audit log and its readers depend on these layers, actions,
// subjects and field names.
func TestAuditEventShapes(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name string
		ev   api.AuditEvent
		want string
	}{
		{"dns allowed", DNSAuditEvent("s1", dnsproxy.Event{
			Time: at, Name: "api.example.com.", Type: "A", Action: dnsproxy.ActionAllowed, Rcode: "NOERROR", Proto: "udp",
			Answers: []netip.Addr{netip.MustParseAddr("192.0.2.1")}, Dropped: []dnsproxy.Dropped{{Addr: netip.MustParseAddr("10.0.0.1"), Reason: "private"}}, CNAMEs: []string{"edge.example.net"},
			Rule: "api.example.com:443", Ports: []uint16{443}, PinTTL: 60, Cached: true,
		}), `{"time":"2026-01-02T03:04:05Z","session":"s1","layer":"dns","action":"allowed","subject":"api.example.com",` +
			`"fields":{"answers":["192.0.2.1"],"cached":true,"cnames":["edge.example.net"],"dropped":[{"addr":"10.0.0.1","reason":"private"}],"pin_ttl":60,"ports":[443],"proto":"udp","rcode":"NOERROR","rule":"api.example.com:443","type":"A"}}`},
		{"dns dropped", DNSAuditEvent("s1", dnsproxy.Event{
			Time: at, Name: "x.test.", Type: "A", Action: dnsproxy.ActionRefused, Rcode: "REFUSED", Proto: "udp",
			Dropped: []dnsproxy.Dropped{{Addr: netip.MustParseAddr("10.0.0.1"), Reason: "private <range> & \"x\"\u2028", Rule: "!10.0.0.0/8"}, {Reason: "zero"}},
		}), `{"time":"2026-01-02T03:04:05Z","session":"s1","layer":"dns","action":"refused","subject":"x.test",` +
			`"fields":{"dropped":[{"addr":"10.0.0.1","reason":"private \u003crange\u003e \u0026 \"x\"\u2028","rule":"!10.0.0.0/8"},{"addr":"","reason":"zero"}],"proto":"udp","rcode":"REFUSED","type":"A"}}`},
		{"dns refused", DNSAuditEvent("s1", dnsproxy.Event{
			Time: at, Name: "evil.test.", Type: "AAAA", Action: dnsproxy.ActionRefused, Rcode: "REFUSED", Proto: "tcp",
			Reason: "airlock: evil.test is not in the egress allowlist",
		}), `{"time":"2026-01-02T03:04:05Z","session":"s1","layer":"dns","action":"refused","subject":"evil.test",` +
			`"reason":"airlock: evil.test is not in the egress allowlist","fields":{"proto":"tcp","rcode":"REFUSED","type":"AAAA"}}`},
	} {
		b, err := json.Marshal(c.ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
		// The audit log's encoding, without reflection (droppedList
		// appends itself), is the same.
		if a, err := audit.AppendEvent(nil, &c.ev); err != nil || string(a) != c.want {
			t.Errorf("%s: audit.AppendEvent:\n got %s, %v\nwant %s", c.name, a, err, c.want)
		}
	}
	evs := dropEvents("s1", netns.DropStats{Dests: []netns.Drop{
		{Dst: netip.MustParseAddr("192.0.2.7"), Port: 443, Proto: "tcp", Packets: 3, Bytes: 180},
		{Dst: netip.MustParseAddr("2001:db8::1"), Port: 53, Proto: "udp", Packets: 1, Bytes: 70},
	}})
	var got []string
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(b))
	}
	want := []string{
		`{"time":"0001-01-01T00:00:00Z","session":"s1","layer":"net","action":"dropped","subject":"192.0.2.7:443","fields":{"bytes":180,"packets":3,"proto":"tcp"}}`,
		`{"time":"0001-01-01T00:00:00Z","session":"s1","layer":"net","action":"dropped","subject":"[2001:db8::1]:53","fields":{"bytes":70,"packets":1,"proto":"udp"}}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("drop events:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}

func TestHostResolvers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "resolv.conf")
	conf := "# comment\nsearch corp\nnameserver 127.0.0.53\nnameserver 192.0.2.53\nnameserver  2001:db8::53 \nnameserver bogus\noptions edns0\n"
	if err := os.WriteFile(p, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := hostResolvers(p)
	if err != nil || !slices.Equal(got, []string{"192.0.2.53", "2001:db8::53"}) {
		t.Errorf("hostResolvers = %v, %v; want the non-loopback nameservers", got, err)
	}
	if err := os.WriteFile(p, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := hostResolvers(p); err == nil {
		t.Errorf("only a loopback resolver: %v; want an error", got)
	}
	if _, err := hostResolvers(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestDNSPacketRate(t *testing.T) {
	for _, c := range []struct {
		rate float64
		want uint32
	}{
		{0, 4 * dnsproxy.DefaultRate},
		{1, nft.DefaultDNSPacketRate},
		{50, nft.DefaultDNSPacketRate},
		{1000, 4000},
		{1e12, math.MaxUint32},
	} {
		if got := dnsPacketRate(dnsproxy.Limits{Rate: c.rate}); got != c.want {
			t.Errorf("dnsPacketRate(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
}

// TestValidHostname: only a DNS name goes into a sandbox's /etc/hosts; a
// hostname with a newline or a space would add lines of its own.
func TestValidHostname(t *testing.T) {
	for _, h := range []string{"bench-scope-escalation-84e4360a", "a", "x1.sandbox.test"} {
		if !validHostname(h) {
			t.Errorf("%q refused", h)
		}
	}
	for _, h := range []string{"", "a\n10.0.0.1 api.corp.test", "a b", "-a", "a-", "a..b", "a_b", strings.Repeat("a", 64)} {
		if validHostname(h) {
			t.Errorf("%q accepted", h)
		}
	}
}
