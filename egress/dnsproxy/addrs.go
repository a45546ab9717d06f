package dnsproxy

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// Which answer addresses may be pinned, in order:
//
//  1. never: allowlist.NeverRanges (loopback, link-local, cloud metadata,
//     ...), the ranges given with WithNeverPin (the daemon's session pools
//     and uplink subnets) and the addresses WithLocalAddrs returns (the
//     host's own). Nothing allows these.
//  2. the session's deny entries (allowlist.List.AddrDenied).
//  3. private: allowlist.PrivateRanges (RFC 1918, CGNAT, ULA) unless a
//     range given with WithAllowPrivate or the session's
//     SessionPolicy.AllowPrivate covers the address.
//
// Everything else is pinned.

// DefaultLocalAddrsRefresh is how long the host's address list is reused
// before WithLocalAddrs' function is called again.
const DefaultLocalAddrsRefresh = 2 * time.Second

// addrPolicy is the server-wide part of the answer address rules.
type addrPolicy struct {
	never        []allowlist.Range
	allowPrivate []netip.Prefix
	local        *localAddrs // nil: none
}

// WithNeverPin adds ranges whose addresses are never pinned, whatever a
// session's policy allows; reason says why in the audit ("the daemon's
// session pool").
func WithNeverPin(reason string, prefixes ...netip.Prefix) Option {
	return func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("never-pin range %v: %w", p, errdefs.ErrInvalidArgument)
			}
			c.addrs.never = append(c.addrs.never, allowlist.Range{Prefix: p.Masked(), Reason: reason})
		}
		return nil
	}
}

// WithLocalAddrs gives the host's own addresses: an answer address among
// them is never pinned. f is called on the query path at most once per
// refresh (DefaultLocalAddrsRefresh if zero); when it fails, the last list
// it returned stays in use.
func WithLocalAddrs(f func() ([]netip.Addr, error), refresh time.Duration) Option {
	return func(c *config) error {
		if f == nil || refresh < 0 {
			return fmt.Errorf("local addresses: nil function or negative refresh: %w", errdefs.ErrInvalidArgument)
		}
		if refresh == 0 {
			refresh = DefaultLocalAddrsRefresh
		}
		c.addrs.local = &localAddrs{fetch: f, refresh: refresh}
		return nil
	}
}

// WithAllowPrivate lets every session pin answers in these private ranges
// (see allowlist.PrivateRanges); the daemon's --allow-private.
func WithAllowPrivate(prefixes ...netip.Prefix) Option {
	return func(c *config) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("allowed private range %v: %w", p, errdefs.ErrInvalidArgument)
			}
			c.addrs.allowPrivate = append(c.addrs.allowPrivate, p.Masked())
		}
		return nil
	}
}

// Dropped is an answer address that was not pinned, and why.
type Dropped struct {
	Addr   netip.Addr `json:"addr"`
	Reason string     `json:"reason"`
	// Rule is the session's deny entry that covers Addr, if that is why.
	Rule string `json:"rule,omitempty"`
}

// dropReason says why a may not be pinned for sess, or "" if it may.
func (s *Server) dropReason(sess *SessionPolicy, a netip.Addr, now time.Time) (reason, rule string) {
	ap := &s.cfg.addrs
	if r, ok := allowlist.Never(a); ok {
		return fmt.Sprintf("%v is %s (%v); no session may reach it", a, r.Reason, r.Prefix), ""
	}
	// The daemon's pools and uplink, and the host's addresses, also in
	// an IPv6 encoding (NAT64, 6to4) that a gateway on the way may
	// translate back.
	u := a.Unmap()
	if e, ok := allowlist.Embedded(a); ok {
		u = e
	}
	for _, r := range ap.never {
		if r.Prefix.Contains(a) || r.Prefix.Contains(u) {
			return fmt.Sprintf("%v is in %s (%v); no session may reach it", a, r.Reason, r.Prefix), ""
		}
	}
	if ap.local != nil && (ap.local.contains(now, a.Unmap()) || ap.local.contains(now, u)) {
		return fmt.Sprintf("%v is an address of the host; no session may reach it", a), ""
	}
	if rule, bad := sess.Allowlist.AddrDenied(a); bad {
		return fmt.Sprintf("%v is in denied range %s", a, rule), rule
	}
	if r, ok := allowlist.Private(a); ok && !covered(ap.allowPrivate, a) && !covered(sess.AllowPrivate, a) {
		return fmt.Sprintf("%v is in %s range %v; allow it with egress allow_private or airlockd --allow-private", a, r.Reason, r.Prefix), ""
	}
	return "", ""
}

// covered reports whether a prefix in ps contains all of a.
func covered(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// localAddrs caches the host's addresses.
type localAddrs struct {
	fetch   func() ([]netip.Addr, error)
	refresh time.Duration

	mu sync.Mutex
	// +checklocks:mu
	set map[netip.Addr]bool
	// +checklocks:mu
	at time.Time
	// +checklocks:mu
	fetched bool
}

func (l *localAddrs) contains(now time.Time, a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.fetched || now.Sub(l.at) >= l.refresh || now.Before(l.at) {
		addrs, err := l.fetch()
		if err == nil || !l.fetched {
			set := make(map[netip.Addr]bool, len(addrs))
			for _, x := range addrs {
				set[x.Unmap().WithZone("")] = true
			}
			l.set = set
		}
		l.at, l.fetched = now, true
	}
	return l.set[a.WithZone("")]
}
