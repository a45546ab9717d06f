package allowlist

import (
	"net/netip"
	"strings"
	"testing"
)

func TestNeverAndPrivate(t *testing.T) {
	for _, c := range []struct {
		addr           string
		never, private string // substring of the reason; "" = not in the list
	}{
		{"127.0.0.1", "loopback", ""},
		{"127.255.0.9", "loopback", ""},
		{"0.1.2.3", "this network", ""},
		{"169.254.169.254", "cloud metadata", ""},
		{"169.254.1.1", "link-local", ""},
		{"168.63.129.16", "Azure", ""},
		{"100.100.100.200", "Alibaba", "CGNAT"},
		{"224.0.0.251", "multicast", ""},
		{"255.255.255.255", "reserved", ""},
		{"::1", "loopback", ""},
		{"::", "unspecified", ""},
		{"::ffff:10.0.0.1", "IPv4-mapped", ""},
		{"::a9fe:a9fe", "IPv4-compatible", ""},
		{"fe80::1", "link-local", ""},
		{"ff02::1", "multicast", ""},
		{"fd00:ec2::254", "AWS", "unique local"},
		{"fd20:ce::254", "Google", "unique local"},
		{"64:ff9b::a9fe:a9fe", "cloud metadata service through NAT64", ""},
		{"64:ff9b::7f00:1", "loopback through NAT64", ""},
		{"64:ff9b::a00:1", "", "private"},
		{"10.1.2.3", "", "private"},
		{"172.16.0.1", "", "private"},
		{"172.31.255.255", "", "private"},
		{"172.32.0.1", "", ""},
		{"192.168.0.1", "", "private"},
		{"100.64.0.1", "", "CGNAT"},
		{"100.127.255.255", "", "CGNAT"},
		{"100.128.0.1", "", ""},
		{"fc00::1", "", "unique local"},
		{"fd12:3456::1", "", "unique local"},
		{"192.0.2.10", "", ""},
		{"8.8.8.8", "", ""},
		{"2001:db8::1", "", ""},
		{"64:ff9b::808:808", "", ""},
		// Other IPv6 encodings of IPv4 addresses: 6to4 (RFC 3056), the
		// local-use NAT64 prefix (RFC 8215) and Teredo (RFC 4380).
		{"2002:7f00:1::1", "loopback through 6to4", ""},
		{"2002:a9fe:a9fe::", "cloud metadata service through 6to4", ""},
		{"2002:a9fe:1::1", "link-local through 6to4", ""},
		{"2002:a00:1::1", "", "private"},
		{"2002:c0a8:101::1", "", "private"},
		{"2002:808:808::1", "", ""},
		{"64:ff9b:1::7f00:1", "loopback through NAT64", "local-use NAT64"},
		{"64:ff9b:1::a9fe:a9fe", "cloud metadata service through NAT64", "local-use NAT64"},
		{"64:ff9b:1:7f00:1::", "", "local-use NAT64"},
		{"64:ff9b:1::a00:1", "", "private through NAT64"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo", ""},
	} {
		a := netip.MustParseAddr(c.addr)
		r, never := Never(a)
		if never != (c.never != "") || !strings.Contains(r.Reason, c.never) || never && !r.Prefix.Contains(a) {
			t.Errorf("Never(%s) = %v %v, want %q", a, r, never, c.never)
		}
		r, private := Private(a)
		if private != (c.private != "") || !strings.Contains(r.Reason, c.private) || private && !r.Prefix.Contains(a) {
			t.Errorf("Private(%s) = %v %v, want %q", a, r, private, c.private)
		}
	}
	// The packet filter refuses everything the DNS proxy never pins.
	ps := NeverPrefixes()
	if len(ps) != len(NeverRanges) {
		t.Fatalf("NeverPrefixes: %d prefixes for %d ranges", len(ps), len(NeverRanges))
	}
	for i, r := range NeverRanges {
		if ps[i] != r.Prefix || r.Prefix != r.Prefix.Masked() {
			t.Errorf("range %d: %v (prefix %v)", i, r, ps[i])
		}
	}
}

func TestEmbedded(t *testing.T) {
	for in, want := range map[string]string{
		"64:ff9b::a9fe:a9fe":   "169.254.169.254",
		"64:ff9b:1::7f00:1":    "127.0.0.1",
		"2002:a00:1::1":        "10.0.0.1",
		"::ffff:192.0.2.1":     "192.0.2.1",
		"2001:db8::1":          "",
		"192.0.2.1":            "",
		"64:ff9b:1:2:3::a00:1": "",
	} {
		got, ok := Embedded(netip.MustParseAddr(in))
		if want == "" {
			if ok {
				t.Errorf("Embedded(%s) = %v, want none", in, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(want) {
			t.Errorf("Embedded(%s) = %v, %v; want %s", in, got, ok, want)
		}
	}
}
