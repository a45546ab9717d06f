package allowlist

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// Kind says what a Rule matches.
type Kind uint8

// Rule kinds.
const (
	// Exact matches one name.
	Exact Kind = iota + 1
	// Wildcard matches every name strictly below its suffix.
	Wildcard
	// Prefix matches addresses in a CIDR.
	Prefix
)

func (k Kind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Wildcard:
		return "wildcard"
	case Prefix:
		return "prefix"
	}
	return "invalid"
}

// Rule is one parsed allow or deny entry.
type Rule struct {
	Kind Kind
	// Name is the exact name (Exact) or the suffix below which names match
	// (Wildcard, without the leading "*.").
	Name FQDN
	// Prefix is the address range of a Prefix rule. A bare address is a
	// single-address prefix.
	Prefix netip.Prefix
	// Port restricts the rule to one destination port; 0 means every port.
	Port uint16
}

// ParseRule parses an allow or deny entry:
//
//	example.test             exact name
//	*.example.test           every name below example.test
//	example.test:443         either of the above, port 443 only
//	10.0.0.0/8  10.0.0.1     IPv4 prefix or address
//	10.0.0.0/8:443           ... port 443 only
//	2001:db8::/32  ::1       IPv6 prefix or address (no port)
//	[2001:db8::/32]:443      IPv6 with a port: brackets required
//	[::1]:443
//
// Errors are of class errdefs.ErrInvalidArgument.
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err != nil {
		return Rule{}, fmt.Errorf("egress entry %q: %w: %w", s, err, errdefs.ErrInvalidArgument)
	}
	return r, nil
}

func parseRule(s string) (Rule, error) {
	if s == "" {
		return Rule{}, ErrEmptyName
	}
	if s != strings.TrimSpace(s) {
		return Rule{}, fmt.Errorf("%w: surrounding white space", ErrInvalidChar)
	}
	// Bracketed IPv6 with optional port.
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return Rule{}, fmt.Errorf("missing ']'")
		}
		p, err := parsePrefix(s[1:end])
		if err != nil {
			return Rule{}, err
		}
		if !p.Addr().Is6() {
			return Rule{}, fmt.Errorf("brackets are for IPv6 addresses only")
		}
		rest := s[end+1:]
		var port uint16
		if rest != "" {
			if rest[0] != ':' {
				return Rule{}, fmt.Errorf("unexpected %q after ']'", rest)
			}
			if port, err = parsePort(rest[1:]); err != nil {
				return Rule{}, err
			}
		}
		return Rule{Kind: Prefix, Prefix: p, Port: port}, nil
	}
	// Unbracketed address or prefix without a port (IPv6 lands here).
	if looksLikeAddr(s) {
		p, err := parsePrefix(s)
		if err == nil {
			return Rule{Kind: Prefix, Prefix: p}, nil
		}
		if strings.Count(s, ":") > 1 {
			return Rule{}, err
		}
	}
	host, port := s, uint16(0)
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		var err error
		if port, err = parsePort(s[i+1:]); err != nil {
			return Rule{}, err
		}
		host = s[:i]
		if host == "" {
			return Rule{}, ErrEmptyName
		}
	}
	if looksLikeAddr(host) {
		p, err := parsePrefix(host)
		if err != nil {
			return Rule{}, err
		}
		if p.Addr().Is6() {
			return Rule{}, fmt.Errorf("IPv6 with a port needs brackets, as in [%s]:%d", host, port)
		}
		return Rule{Kind: Prefix, Prefix: p, Port: port}, nil
	}
	kind := Exact
	if strings.HasPrefix(host, "*.") {
		kind = Wildcard
		host = host[2:]
	}
	if strings.ContainsRune(host, '*') {
		return Rule{}, fmt.Errorf("%w '*': a wildcard must be a whole leading label, as in *.example.test", ErrInvalidChar)
	}
	if host == "." || host == "" {
		return Rule{}, fmt.Errorf("the root name cannot be allowed or denied")
	}
	name, err := ToFQDN(host)
	if err != nil {
		return Rule{}, err
	}
	return Rule{Kind: kind, Name: name, Port: port}, nil
}

// looksLikeAddr reports whether s can only be meant as an address or prefix:
// it contains ':' twice or more (IPv6) or '/', or it is made of digits and
// dots.
func looksLikeAddr(s string) bool {
	if strings.Count(s, ":") > 1 || strings.IndexByte(s, '/') >= 0 {
		return true
	}
	digit := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			digit = true
		case c != '.':
			return false
		}
	}
	return digit
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.IndexByte(s, '/') < 0 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("invalid address: %w", err)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("address %q has a zone", s)
		}
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid prefix: %w", err)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("prefix %s has host bits set; did you mean %s", p, m)
	}
	return p, nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("invalid port %q", s)
		}
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("invalid port %q: want 1-65535", s)
	}
	return uint16(n), nil
}

// String returns the entry in canonical form; ParseRule(r.String()) == r.
func (r Rule) String() string {
	var host string
	switch r.Kind {
	case Exact:
		host = r.Name.WithoutTrailingDot()
	case Wildcard:
		host = "*." + r.Name.WithoutTrailingDot()
	case Prefix:
		host = r.Prefix.String()
		if r.Prefix.IsSingleIP() {
			host = r.Prefix.Addr().String()
		}
		if r.Port != 0 && r.Prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	default:
		return "<invalid rule>"
	}
	if r.Port == 0 {
		return host
	}
	return host + ":" + strconv.Itoa(int(r.Port))
}

// MatchName reports whether the rule matches name, ignoring the port.
// Prefix rules match no name.
func (r Rule) MatchName(name FQDN) bool {
	switch r.Kind {
	case Exact:
		return name == r.Name
	case Wildcard:
		return name.IsStrictSubdomainOf(r.Name)
	}
	return false
}
