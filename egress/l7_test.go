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
			d := checkL7(list, names, tt.dst, tt.hello, now)
			if d.Allow != tt.allow || !strings.Contains(d.Reason, tt.reason) || !tt.allow && d.Reason == "" {
				t.Errorf("checkL7(%v, %+v) = %+v; want allow %v, reason with %q", tt.dst, tt.hello, d, tt.allow, tt.reason)
			}
		})
	}
}
