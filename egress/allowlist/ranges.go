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
// counterparts, IPv4-mapped IPv6 addresses, Teredo (which embeds an IPv4
// address), and the IPv6 encodings of the IPv4 ranges: NAT64 (64:ff9b::/96
// and the /96 form of the local-use 64:ff9b:1::/48) and 6to4 (2002::/16).
// More specific entries come first, so that the first match gives the most
// precise reason. The packet filter
// refuses every one of them (package nft) and the DNS proxy never pins an
// address in them.
var NeverRanges = append(withEncodings([]Range{
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
}), Range{netip.MustParsePrefix("2001::/32"), "Teredo (it embeds an IPv4 address)"})

// An encoding is a way IPv6 addresses carry an IPv4 address: a gateway or
// relay on the path delivers to the embedded IPv4 address.
type encoding struct {
	prefix netip.Prefix // the IPv4 address follows its bits
	name   string
}

// encodings: NAT64 with the well-known prefix (RFC 6052), the /96 form of
// the local-use NAT64 prefix (RFC 8215; the rest of 64:ff9b:1::/48 is in
// PrivateRanges), and 6to4 (RFC 3056).
var encodings = []encoding{
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64"},
	{netip.MustParsePrefix("64:ff9b:1::/96"), "NAT64"},
	{netip.MustParsePrefix("2002::/16"), "6to4"},
}

// Embedded returns the IPv4 address an IPv6 address carries in one of the
// encodings above (NAT64, local-use NAT64, 6to4) or as an IPv4-mapped
// address, and whether it carries one.
func Embedded(a netip.Addr) (netip.Addr, bool) {
	if a.Is4In6() {
		return a.Unmap(), true
	}
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	for _, e := range encodings {
		if e.prefix.Contains(a) {
			off := e.prefix.Bits() / 8
			return netip.AddrFrom4([4]byte(b[off : off+4])), true
		}
	}
	return netip.Addr{}, false
}

// withEncodings appends the IPv6 encodings of every IPv4 range.
func withEncodings(rs []Range) []Range {
	out := slices.Clip(rs)
	for _, e := range encodings {
		for _, r := range rs {
			if !r.Prefix.Addr().Is4() {
				continue
			}
			a := e.prefix.Addr().As16()
			v4 := r.Prefix.Addr().As4()
			off := e.prefix.Bits() / 8
			copy(a[off:off+4], v4[:])
			out = append(out, Range{netip.PrefixFrom(netip.AddrFrom16(a), e.prefix.Bits()+r.Prefix.Bits()), r.Reason + " through " + e.name})
		}
	}
	return out
}

// PrivateRanges are the ranges of private networks: RFC 1918, shared
// address space (CGNAT, RFC 6598), unique local IPv6 (RFC 4193) and the
// local-use NAT64 prefix (RFC 8215), whose IPv4 translation depends on the
// operator's gateway. A DNS answer in one of them (or in an IPv6 encoding
// of one) is not pinned unless
// the manifest (egress allow_private) or the daemon (--allow-private)
// allows the range: a public name that resolves to an internal address is
// a way into the operator's network.
var PrivateRanges = []Range{
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared address space (CGNAT)"},
	{netip.MustParsePrefix("fc00::/7"), "unique local"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
}

// privateEncoded are the IPv6 encodings of PrivateRanges.
var privateEncoded = withEncodings(PrivateRanges)[len(PrivateRanges):]

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

// Private reports whether a is in PrivateRanges or their IPv6 encodings,
// and which.
func Private(a netip.Addr) (Range, bool) {
	// The encodings first: they are more specific than 64:ff9b:1::/48.
	if r, ok := find(privateEncoded, a); ok {
		return r, true
	}
	return find(PrivateRanges, a)
}

func find(rs []Range, a netip.Addr) (Range, bool) {
	for _, r := range rs {
		if r.Prefix.Contains(a) {
			return r, true
		}
	}
	return Range{}, false
}
