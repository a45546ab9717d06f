package egress

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/l7"
)

func TestCheckL7(t *testing.T) {
	now := time.Unix(1000, 0)
	list := allowlist.MustCompile(
		[]string{"allowed.test", "web.test:80", "*.cdn.test", "10.9.0.0/16:443", "denied.cdn.test"},
		[]string{"denied.cdn.test", "10.9.9.0/24"})
	names := dnsproxy.NewNames(0)
	pinned := netip.MustParseAddr("10.214.0.10")
	names.Record("allowed.test.", []netip.Addr{pinned}, now.Add(time.Minute), now)
	names.Record("web.test.", []netip.Addr{pinned}, now.Add(time.Minute), now)
	names.Record("a.cdn.test.", []netip.Addr{pinned}, now.Add(-time.Minute), now.Add(-2*time.Minute))
	dst := func(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
	tlsHello := func(sni string) l7.Hello { return l7.Hello{Proto: l7.ProtoTLS, SNI: sni} }
	httpHello := func(host string) l7.Hello { return l7.Hello{Proto: l7.ProtoHTTP, Host: host, Method: "GET"} }
	for _, tt := range []struct {
		name   string
		dst    netip.AddrPort
		hello  l7.Hello
		allow  bool
		reason string // substring
	}{
		{"pinned name over TLS", dst("10.214.0.10:443"), tlsHello("Allowed.Test"), true, ""},
		{"pinned name over HTTP", dst("10.214.0.10:80"), httpHello("allowed.test"), true, ""},
		{"fronting by Host", dst("10.214.0.10:80"), httpHello("other.test"), false, "Host other.test is not in the egress allowlist"},
		{"fronting by SNI", dst("10.214.0.10:443"), tlsHello("other.test"), false, "SNI other.test is not in the egress allowlist"},
		{"allowed name not pinned to the address", dst("10.214.0.11:443"), tlsHello("allowed.test"), false, "did not resolve to 10.214.0.11"},
		{"allowed name, port not allowed", dst("10.214.0.10:443"), tlsHello("web.test"), false, "not allowed on port 443"},
		{"expired pin", dst("10.214.0.10:443"), tlsHello("a.cdn.test"), false, "did not resolve"},
		{"denied name on an allowed range", dst("10.9.0.1:443"), tlsHello("denied.cdn.test"), false, "denied by egress rule"},
		{"no SNI", dst("10.214.0.10:443"), tlsHello(""), false, "no SNI"},
		{"no Host", dst("10.214.0.10:80"), httpHello(""), false, "no Host"},
		{"address as Host", dst("10.214.0.10:80"), httpHello("10.214.0.10"), false, "not a name"},
		{"invalid name", dst("10.214.0.10:80"), httpHello("bad_name!"), false, "not a valid hostname"},
		{"no SNI on an allowed range", dst("10.9.0.1:443"), tlsHello(""), true, ""},
		{"any name on an allowed range", dst("10.9.0.1:443"), tlsHello("other.test"), true, ""},
		{"allowed range on another port", dst("10.9.0.1:80"), httpHello(""), false, "no Host"},
		{"denied part of an allowed range", dst("10.9.9.1:443"), tlsHello(""), false, "no SNI"},
		{"Host differs from SNI", dst("10.214.0.10:443"), l7.Hello{Proto: l7.ProtoTLS, SNI: "allowed.test", Host: "other.test"}, false, "differs from SNI"},
		{"Host equals SNI", dst("10.214.0.10:443"), l7.Hello{Proto: l7.ProtoTLS, SNI: "allowed.test", Host: "Allowed.Test."}, true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := checkL7(list, names, l7Guard{}, tt.dst, tt.hello, now)
			if d.Allow != tt.allow || !strings.Contains(d.Reason, tt.reason) || !tt.allow && d.Reason == "" {
				t.Errorf("checkL7(%v, %+v) = %+v; want allow %v, reason with %q", tt.dst, tt.hello, d, tt.allow, tt.reason)
			}
		})
	}
}

// TestCheckL7RuledAddress: a destination an egress CIDR entry allows is
// reached without a name (or by another name) only where no name the
// gateway checks was pinned to its address, and never by TLS without a
// name under inspect = "all".
func TestCheckL7RuledAddress(t *testing.T) {
	now := time.Unix(1000, 0)
	list := allowlist.MustCompile([]string{"ruled.test:443", "plain.test", "10.9.0.0/16"}, nil)
	names := dnsproxy.NewNames(0)
	ruled, plain, stale, shared := netip.MustParseAddr("10.9.0.5"), netip.MustParseAddr("10.9.0.6"),
		netip.MustParseAddr("10.9.0.7"), netip.MustParseAddr("10.9.0.8")
	names.Record("ruled.test.", []netip.Addr{ruled, shared}, now.Add(time.Minute), now)
	names.Record("plain.test.", []netip.Addr{plain, shared}, now.Add(time.Minute), now)
	names.Record("ruled.test.", []netip.Addr{stale}, now.Add(-time.Hour), now.Add(-2*time.Hour))
	rules := l7Guard{terminated: func(name string) bool { return name == "ruled.test" }}
	all := l7Guard{terminated: func(string) bool { return true }, inspectAll: true}
	dst := func(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
	tlsHello := func(sni string) l7.Hello { return l7.Hello{Proto: l7.ProtoTLS, SNI: sni} }
	httpHello := func(host string) l7.Hello { return l7.Hello{Proto: l7.ProtoHTTP, Host: host, Method: "GET"} }
	for _, tt := range []struct {
		name   string
		g      l7Guard
		dst    netip.AddrPort
		hello  l7.Hello
		allow  bool
		reason []string // substrings
	}{
		{"no SNI to a ruled address", rules, dst(ruled, 443), tlsHello(""), false, []string{"no SNI to 10.9.0.5", "ruled.test", "10.9.0.0/16"}},
		{"address as SNI to a ruled address", rules, dst(ruled, 443), tlsHello("10.9.0.5"), false, []string{"SNI is the address 10.9.0.5", "ruled.test"}},
		{"no Host to a ruled address", rules, dst(ruled, 80), httpHello(""), false, []string{"no Host", "ruled.test"}},
		{"address as Host to a ruled address", rules, dst(ruled, 80), httpHello("10.9.0.5"), false, []string{"Host is the address 10.9.0.5", "ruled.test"}},
		{"another name to a ruled address", rules, dst(ruled, 443), tlsHello("other.test"), false, []string{"SNI other.test", "ruled.test"}},
		{"an allowed name not pinned there", rules, dst(ruled, 443), tlsHello("plain.test"), false, []string{"SNI plain.test", "ruled.test"}},
		{"the ruled name itself", rules, dst(ruled, 443), tlsHello("ruled.test"), true, nil},
		{"the ruled name on a port only the range allows", rules, dst(ruled, 80), httpHello("ruled.test"), true, nil},
		{"a pinned name sharing a ruled address", rules, dst(shared, 443), tlsHello("plain.test"), true, nil},
		{"no SNI to a shared address", rules, dst(shared, 443), tlsHello(""), false, []string{"ruled.test"}},
		{"no SNI to an expired ruled pin", rules, dst(stale, 443), tlsHello(""), false, []string{"ruled.test"}},
		{"no SNI where no ruled name was pinned", rules, dst(plain, 443), tlsHello(""), true, nil},
		{"no Host where no ruled name was pinned", rules, dst(plain, 80), httpHello(""), true, nil},
		{"no SNI to an unpinned address", rules, dst(netip.MustParseAddr("10.9.1.1"), 443), tlsHello(""), true, nil},
		{"inspect all: no SNI to a pinned address", all, dst(plain, 443), tlsHello(""), false, []string{"plain.test"}},
		{"inspect all: no SNI to an unpinned address", all, dst(netip.MustParseAddr("10.9.1.1"), 443), tlsHello(""), false, []string{"no SNI", `inspect = "all"`}},
		{"inspect all: address as SNI", all, dst(netip.MustParseAddr("10.9.1.1"), 443), tlsHello("10.9.1.1"), false, []string{"SNI is the address", `inspect = "all"`}},
		{"inspect all: a name to an unpinned address", all, dst(netip.MustParseAddr("10.9.1.1"), 443), tlsHello("other.test"), true, nil},
		{"inspect all: no Host to an unpinned address", all, dst(netip.MustParseAddr("10.9.1.1"), 80), httpHello(""), true, nil},
		{"no guard: as before", l7Guard{}, dst(ruled, 443), tlsHello(""), true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := checkL7(list, names, tt.g, tt.dst, tt.hello, now)
			ok := d.Allow == tt.allow && (tt.allow || d.Reason != "")
			for _, r := range tt.reason {
				ok = ok && strings.Contains(d.Reason, r)
			}
			if !ok {
				t.Errorf("checkL7(%v, %+v) = %+v; want allow %v, reason with %q", tt.dst, tt.hello, d, tt.allow, tt.reason)
			}
		})
	}
}
