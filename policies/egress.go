package policies

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// EgressRule is one parsed egress allow or deny entry.
type EgressRule struct {
	// Name is a lower-case DNS name without a trailing dot; empty for
	// address entries.
	Name string
	// Wildcard marks an entry written "*.Name": it matches names strictly
	// under Name, on a label boundary, and not Name itself.
	Wildcard bool
	// Prefix is the address range of an address or CIDR entry; the zero
	// Prefix for name entries.
	Prefix netip.Prefix
	// Port restricts the entry to one port; 0 means every port.
	Port uint16
}

// IsName reports whether r is a DNS name entry (exact or wildcard).
func (r EgressRule) IsName() bool { return r.Name != "" }

// String returns r in the manifest syntax, normalised.
func (r EgressRule) String() string {
	var host string
	switch {
	case r.Wildcard:
		host = "*." + r.Name
	case r.Name != "":
		host = r.Name
	default:
		host = r.Prefix.String()
		if r.Port != 0 && r.Prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	}
	if r.Port != 0 {
		return host + ":" + strconv.Itoa(int(r.Port))
	}
	return host
}

// egressHint lists the accepted egress entry forms.
const egressHint = `Use a name ("api.example.com"), names under a domain ("*.example.com", which does not match example.com itself), or an address or CIDR ("10.0.0.0/8", "2001:db8::/32"), each optionally with a port ("api.example.com:443", "[2001:db8::/32]:443")`

// ParseEgressRule parses an egress entry: "name", "*.suffix", an IPv4 or
// IPv6 address or CIDR, each with an optional ":port" (IPv6 with a port is
// written in brackets: "[2001:db8::/32]:443").
func ParseEgressRule(s string) (EgressRule, error) {
	r, reason := parseEgressRule(s)
	if reason != "" {
		return EgressRule{}, fmt.Errorf("invalid egress entry %q: %s", s, reason)
	}
	return r, nil
}

// parseEgressRule returns the rule, or a reason why s is not one.
func parseEgressRule(s string) (EgressRule, string) {
	if s == "" {
		return EgressRule{}, "the entry is empty"
	}
	if strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return EgressRule{}, "it contains whitespace or control characters"
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return EgressRule{}, "missing ']' after the IPv6 address"
		}
		host, port = s[1:end], s[end+1:]
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return EgressRule{}, "want \":port\" after ']'"
			}
			port = port[1:]
			if port == "" {
				return EgressRule{}, "the port after ':' is empty"
			}
		}
		if !strings.Contains(host, ":") {
			return EgressRule{}, "brackets are only for IPv6 addresses"
		}
	case strings.Count(s, ":") > 1:
		// An IPv6 address or prefix without a port.
	case strings.Contains(s, ":"):
		i := strings.IndexByte(s, ':')
		host, port = s[:i], s[i+1:]
		if port == "" {
			return EgressRule{}, "the port after ':' is empty"
		}
	}
	var r EgressRule
	if port != "" {
		p, reason := parsePort(port)
		if reason != "" {
			return EgressRule{}, reason
		}
		r.Port = p
	}
	if host == "" {
		return EgressRule{}, "the host is empty"
	}
	if strings.Contains(host, "/") {
		pfx, err := netip.ParsePrefix(host)
		if err != nil {
			return EgressRule{}, fmt.Sprintf("%q is not a CIDR prefix", host)
		}
		if pfx.Masked() != pfx {
			return EgressRule{}, fmt.Sprintf("host bits are set; write %q", pfx.Masked().String())
		}
		r.Prefix = pfx
		return r, ""
	}
	if strings.Contains(host, ":") {
		addr, err := netip.ParseAddr(host)
		if err != nil || addr.Zone() != "" {
			return EgressRule{}, fmt.Sprintf("%q is not an IPv6 address", host)
		}
		r.Prefix = netip.PrefixFrom(addr, addr.BitLen())
		return r, ""
	}
	if isDigitsAndDots(host) {
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return EgressRule{}, fmt.Sprintf("%q is not an IPv4 address", host)
		}
		r.Prefix = netip.PrefixFrom(addr, addr.BitLen())
		return r, ""
	}
	name := host
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		r.Wildcard = true
		name = rest
	}
	name, reason := checkDNSName(name)
	if reason != "" {
		return EgressRule{}, reason
	}
	r.Name = name
	return r, ""
}

func parsePort(s string) (uint16, string) {
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Sprintf("port %q is not a number", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Sprintf("port %s is out of range 1-65535", s)
	}
	return uint16(n), ""
}

func isDigitsAndDots(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// checkDNSName returns name lower-cased without its trailing dot, or a
// reason why it is not a DNS name.
func checkDNSName(name string) (string, string) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return "", "the name is empty"
	}
	if len(name) > 253 {
		return "", "the name is longer than 253 characters"
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "", "it has an empty label"
		case len(l) > 63:
			return "", fmt.Sprintf("label %q is longer than 63 characters", l)
		case strings.Contains(l, "*"):
			return "", "a wildcard may only be the whole first label, as in \"*.example.com\""
		case l[0] == '-' || l[len(l)-1] == '-':
			return "", fmt.Sprintf("label %q starts or ends with '-'", l)
		}
		for _, c := range l {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return "", fmt.Sprintf("it contains %q; names use letters, digits, '-' and '_'", c)
			}
		}
	}
	if isDigitsAndDots(labels[len(labels)-1]) {
		return "", "it is neither a name (its last label is numeric) nor an IP address"
	}
	return name, ""
}

// allowPrivateHint says what an allow_private entry may be.
const allowPrivateHint = `Use a CIDR inside a private range: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 or fc00::/7, as in allow_private = ["10.20.0.0/16"]`

// ParsePrivateRange parses an allow_private entry: a CIDR (or a single
// address) inside one of allowlist.PrivateRanges. It returns the prefix,
// or a reason why s is not one.
func ParsePrivateRange(s string) (netip.Prefix, string) {
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		a, err2 := netip.ParseAddr(s)
		if err2 != nil || a.Zone() != "" {
			return netip.Prefix{}, "it is not a CIDR prefix"
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if pfx.Addr().Is4In6() {
		return netip.Prefix{}, "IPv4-mapped IPv6 prefixes are not accepted; write the IPv4 prefix"
	}
	if pfx != pfx.Masked() {
		return netip.Prefix{}, fmt.Sprintf("host bits are set; write %q", pfx.Masked().String())
	}
	for _, r := range allowlist.PrivateRanges {
		if r.Prefix.Bits() <= pfx.Bits() && r.Prefix.Contains(pfx.Addr()) {
			return pfx, ""
		}
	}
	return netip.Prefix{}, "it is not inside a private range; public addresses need no allow_private, and loopback, link-local and metadata addresses are never reachable"
}
