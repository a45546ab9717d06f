package netns

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress/nft"
)

// Default address ranges and port.
var (
	DefaultPool    = netip.MustParsePrefix("10.213.0.0/16")
	DefaultPool6   = netip.MustParsePrefix("fd0a:213::/64")
	DefaultUplink  = netip.MustParsePrefix("10.215.0.0/30")
	DefaultUplink6 = netip.MustParsePrefix("fd0a:215::/126")
	DefaultDNSPort = uint16(53)
)

// Longest prefixes accepted: a pool must hold one session besides the
// unused index 0, an uplink subnet two hosts.
const (
	maxPoolBits4   = 30
	maxPoolBits6   = 126
	maxUplinkBits4 = 30
	maxUplinkBits6 = 126
)

// Config configures a Gateway.
type Config struct {
	// Prefix starts the name of every kernel object outside the gateway
	// namespace (see ValidatePrefix and PrefixFor). Required.
	Prefix string
	// NetnsDir is where namespaces are mounted; DefaultDir if empty.
	NetnsDir string
	// Pool and Pool6 are the session address ranges; each session takes a
	// /31 and, with IPv6, a /127 at the same index.
	Pool, Pool6 netip.Prefix
	// Uplink says where the gateway's traffic leaves. Required.
	Uplink Uplink
	// DNSPort is the port of the DNS proxy on the gateway (53 if zero).
	DNSPort uint16
	// Never lists extra destinations no session may reach (the host's own
	// networks, for instance), in addition to nft.DefaultNever, the pools
	// and the uplink subnets.
	Never []netip.Prefix
	// DNSPacketRate bounds each session's UDP packets a second to the DNS
	// proxy; 0: nft.DefaultDNSPacketRate.
	DNSPacketRate uint32
	// L7Port is the port of the L7 gateway's listener in the gateway
	// namespace, where sessions' L7 connections are redirected;
	// 0: nft.DefaultL7Port.
	L7Port uint16
}

// Uplink is the gateway's way out.
type Uplink struct {
	// Netns, if set, names the namespace (a name in NetnsDir, or an
	// absolute path) that receives the uplink's peer; nothing is NATed or
	// routed outside it.
	Netns string
	// Host puts the peer in the daemon's namespace and masquerades the
	// uplink subnet out of the host's routes. Never used by tests.
	Host bool
	// Net and Net6 are the uplink subnets: the gateway takes the first
	// address, the peer the second.
	Net, Net6 netip.Prefix
}

func (u Uplink) String() string {
	switch {
	case u.Host:
		return "host"
	case u.Netns != "":
		return "netns:" + u.Netns
	}
	return ""
}

// ParseUplink parses airlockd's --uplink flag: "netns:NAME" for a
// namespace holding the uplink's peer, or "host" for the host's default
// route with NAT.
func ParseUplink(s string) (Uplink, error) {
	if s == "host" {
		return Uplink{Host: true}, nil
	}
	name, ok := strings.CutPrefix(s, "netns:")
	if !ok || name == "" || strings.ContainsRune(name, 0) {
		return Uplink{}, fmt.Errorf("uplink %q: want netns:NAME or host: %w", s, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(name) && (name != filepath.Base(name) || name == "." || name == "..") {
		return Uplink{}, fmt.Errorf("uplink %q: namespace name must be a plain name or an absolute path: %w", s, errdefs.ErrInvalidArgument)
	}
	return Uplink{Netns: name}, nil
}

// withDefaults returns c with empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.NetnsDir == "" {
		c.NetnsDir = DefaultDir
	}
	if !c.Pool.IsValid() {
		c.Pool = DefaultPool
	}
	if !c.Pool6.IsValid() {
		c.Pool6 = DefaultPool6
	}
	if !c.Uplink.Net.IsValid() {
		c.Uplink.Net = DefaultUplink
	}
	if !c.Uplink.Net6.IsValid() {
		c.Uplink.Net6 = DefaultUplink6
	}
	if c.DNSPort == 0 {
		c.DNSPort = DefaultDNSPort
	}
	if c.L7Port == 0 {
		c.L7Port = nft.DefaultL7Port
	}
	c.Pool, c.Pool6 = c.Pool.Masked(), c.Pool6.Masked()
	c.Uplink.Net, c.Uplink.Net6 = c.Uplink.Net.Masked(), c.Uplink.Net6.Masked()
	return c
}

// validate checks a Config after withDefaults.
func (c Config) validate() error {
	var errs []error
	if err := ValidatePrefix(c.Prefix); err != nil {
		errs = append(errs, err)
	}
	switch {
	case c.Uplink.Host && c.Uplink.Netns != "":
		errs = append(errs, errors.New("uplink: both host and netns set"))
	case !c.Uplink.Host && c.Uplink.Netns == "":
		errs = append(errs, errors.New("uplink: not configured (want netns:NAME or host)"))
	}
	if !c.Pool.Addr().Is4() || c.Pool.Bits() > maxPoolBits4 {
		errs = append(errs, fmt.Errorf("pool %v: want an IPv4 prefix of /%d or larger", c.Pool, maxPoolBits4))
	}
	if !c.Pool6.Addr().Is6() || c.Pool6.Addr().Is4In6() || c.Pool6.Bits() > maxPoolBits6 {
		errs = append(errs, fmt.Errorf("pool6 %v: want an IPv6 prefix of /%d or larger", c.Pool6, maxPoolBits6))
	}
	if !c.Uplink.Net.Addr().Is4() || c.Uplink.Net.Bits() > maxUplinkBits4 {
		errs = append(errs, fmt.Errorf("uplink net %v: want an IPv4 prefix of /%d or larger", c.Uplink.Net, maxUplinkBits4))
	}
	if !c.Uplink.Net6.Addr().Is6() || c.Uplink.Net6.Addr().Is4In6() || c.Uplink.Net6.Bits() > maxUplinkBits6 {
		errs = append(errs, fmt.Errorf("uplink net6 %v: want an IPv6 prefix of /%d or larger", c.Uplink.Net6, maxUplinkBits6))
	}
	if c.Pool.Overlaps(c.Uplink.Net) {
		errs = append(errs, fmt.Errorf("pool %v overlaps uplink net %v", c.Pool, c.Uplink.Net))
	}
	if c.Pool6.Overlaps(c.Uplink.Net6) {
		errs = append(errs, fmt.Errorf("pool6 %v overlaps uplink net6 %v", c.Pool6, c.Uplink.Net6))
	}
	for _, p := range c.Never {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("never: invalid prefix %v", p))
		}
	}
	if c.DNSPort == 0 {
		errs = append(errs, errors.New("dns port 0"))
	}
	if c.L7Port == c.DNSPort {
		errs = append(errs, fmt.Errorf("l7 port %d is the dns port", c.L7Port))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gateway config: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// uplinkNetnsPath resolves Uplink.Netns against the namespace directory.
func (c Config) uplinkNetnsPath() string {
	if filepath.IsAbs(c.Uplink.Netns) {
		return c.Uplink.Netns
	}
	return filepath.Join(c.NetnsDir, c.Uplink.Netns)
}

// base is the nftables layout of the gateway.
func (c Config) base() nft.Base {
	never := append([]netip.Prefix{c.Pool, c.Pool6, c.Uplink.Net, c.Uplink.Net6}, c.Never...)
	return nft.Base{
		Table:              c.Prefix,
		SessionIfacePrefix: sessionIfacePrefix,
		Uplink:             uplinkIface,
		DNSPort:            c.DNSPort,
		DNSPacketRate:      cmp.Or(c.DNSPacketRate, nft.DefaultDNSPacketRate),
		Never:              never,
		L7Port:             c.L7Port,
	}
}

// uplinkAddrs returns the gateway and peer addresses of the uplink.
func (c Config) uplinkAddrs() (gw4, peer4, gw6, peer6 netip.Addr) {
	gw4 = c.Uplink.Net.Addr().Next()
	gw6 = c.Uplink.Net6.Addr().Next()
	return gw4, gw4.Next(), gw6, gw6.Next()
}
