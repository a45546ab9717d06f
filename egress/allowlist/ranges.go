package allowlist

import (
	"net/netip"
	"slices"
)

// Range is an address range with the reason it is special.
type Range struct {
	Prefix netip.Prefix
	Reason string
}

// NeverRanges are the destinations no session may reach, whatever its
// manifest or the daemon's flags allow: "this network", loopback,
// link-local, the cloud metadata and host services the usual providers
// publish at fixed addresses, multicast and reserved space, their IPv6
// counterparts, IPv4-mapped IPv6 addresses, and the NAT64 translations
// (64:ff9b::/96) of the IPv4 ranges. More specific entries come first, so
// that the first match gives the most precise reason. The packet filter
// refuses every one of them (package nft) and the DNS proxy never pins an
// address in them.
var NeverRanges = withNAT64([]Range{
	{netip.MustParsePrefix("169.254.169.254/32"), "cloud metadata service"},
	{netip.MustParsePrefix("169.254.169.253/32"), "cloud DNS service"},
	{netip.MustParsePrefix("169.254.169.123/32"), "cloud time service"},
	{netip.MustParsePrefix("169.254.170.2/32"), "cloud container credentials service"},
	{netip.MustParsePrefix("168.63.129.16/32"), "cloud metadata service (Azure wire server)"},
	{netip.MustParsePrefix("100.100.100.200/32"), "cloud metadata service (Alibaba)"},
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network"`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "cloud metadata service (AWS)"},
	{netip.MustParsePrefix("fd00:ec2::253/128"), "cloud DNS service (AWS)"},
	{netip.MustParsePrefix("fd00:ec2::123/128"), "cloud time service (AWS)"},
	{netip.MustParsePrefix("fd00:ec2::23/128"), "cloud container credentials service (AWS)"},
	{netip.MustParsePrefix("fd20:ce::254/128"), "cloud metadata service (Google)"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
})

// nat64 is the well-known NAT64 prefix (RFC 6052): a NAT64 gateway on the
// path turns 64:ff9b::a.b.c.d into a.b.c.d.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// withNAT64 appends the NAT64 translation of every IPv4 range.
func withNAT64(rs []Range) []Range {
	out := slices.Clip(rs)
	for _, r := range rs {
		if !r.Prefix.Addr().Is4() {
			continue
		}
		a := nat64.Addr().As16()
		v4 := r.Prefix.Addr().As4()
		copy(a[12:], v4[:])
		out = append(out, Range{netip.PrefixFrom(netip.AddrFrom16(a), 96+r.Prefix.Bits()), r.Reason + " through NAT64"})
	}
	return out
}

// PrivateRanges are the ranges of private networks: RFC 1918, shared
// address space (CGNAT, RFC 6598) and unique local IPv6 (RFC 4193). A DNS
// answer in one of them (or in its NAT64 translation) is not pinned unless
// the manifest (egress allow_private) or the daemon (--allow-private)
// allows the range: a public name that resolves to an internal address is
// a way into the operator's network.
var PrivateRanges = []Range{
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
}

// privateNAT64 are the NAT64 translations of PrivateRanges.
var privateNAT64 = withNAT64(PrivateRanges)[len(PrivateRanges):]

// NeverPrefixes returns the prefixes of NeverRanges.
func NeverPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(NeverRanges))
	for i, r := range NeverRanges {
		out[i] = r.Prefix
	}
	return out
}

// Never reports whether a is in NeverRanges, and why.
func Never(a netip.Addr) (Range, bool) {
	return find(NeverRanges, a)
}

// Private reports whether a is in PrivateRanges or their NAT64
// translations, and which.
func Private(a netip.Addr) (Range, bool) {
	if r, ok := find(PrivateRanges, a); ok {
		return r, true
	}
	return find(privateNAT64, a)
}

func find(rs []Range, a netip.Addr) (Range, bool) {
	for _, r := range rs {
		if r.Prefix.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}
