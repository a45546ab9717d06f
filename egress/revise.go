package egress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// Resolved is a name a session resolved and the addresses pinned for it,
// until Expires.
type Resolved struct {
	Name    string
	Addrs   []netip.Addr
	Expires time.Time
}

// sessionState is what the perimeter keeps of a session with a network
// for a revision of its egress: its network, the names its DNS answers
// pinned addresses for, and the gate its pins go through.
type sessionState struct {
	ns      *netns.Session
	names   *dnsproxy.Names
	limit   *dnsproxy.Limiter
	private []netip.Prefix

	// mu gates the pins: a query pins under the policy it was decided
	// by only while that policy is the session's (gen), so that no pin
	// of a withdrawn name lands after a revision has looked at the pins.
	mu   sync.RWMutex
	gen  uint64          // +checklocks:mu
	cfg  SessionConfig   // +checklocks:mu
	list *allowlist.List // +checklocks:mu
}

// policy is the DNS proxy's policy of the session under list, its pins
// gated by generation gen.
func (st *sessionState) policy(ctx context.Context, id string, list *allowlist.List, gen uint64) *dnsproxy.SessionPolicy {
	st.mu.Lock()
	sc := st.cfg
	st.list = list
	st.mu.Unlock()
	audit, version := sc.Audit, sc.PolicyVersion
	return &dnsproxy.SessionPolicy{
		ID: id, Allowlist: list, IPv6: sc.Egress.IPv6, AllowPrivate: st.private, Limit: st.limit, Names: st.names,
		Pinner: dnsproxy.PinnerFunc(func(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
			st.mu.RLock()
			defer st.mu.RUnlock()
			if st.gen != gen {
				return fmt.Errorf("the session's egress policy was revised while the query was answered")
			}
			return st.ns.Pin(ctx, addrs, ports, ttl)
		}),
		Audit: func(ev dnsproxy.Event) {
			a := DNSAuditEvent(id, ev)
			a.PolicyVersion = version
			audit(ctx, a)
		},
	}
}

// Revision is what a revision of a session's egress did to its network.
type Revision struct {
	// Unpinned are the pinned destinations (ADDR or ADDR:PORT) removed
	// from the session's sets: no name or entry of the revised policy
	// allows them.
	Unpinned []string
	// Cut is how many of the session's connections were ended.
	Cut int
}

// Revise applies a revised egress block to session id's network, live:
// sc must be the session's configuration as AddSession had it, with
// sc.Egress's allow and deny entries revised (nothing else of the egress
// block may change: IPv6, on_block, allow_private and the L7 settings are
// refused) and sc.PolicyVersion the revised policy's version.
//
// New queries are decided by the revised allowlist at once; a query
// answered under the old one and not yet pinned fails (SERVFAIL, the
// client asks again). The static CIDR rules are replaced in one nftables
// batch. A pinned destination stays only while a name of the revised
// allowlist that resolved to it, or an allow entry, still allows it (on
// its port); the others are removed from the session's sets, and the
// session's connections to the destinations it no longer may reach are
// ended (conntrack), so that their next packet is refused. Addresses the
// perimeter does not know a name of (its record of names is bounded) are
// treated as withdrawn.
func (e *Perimeter) Revise(ctx context.Context, id string, sc SessionConfig) (Revision, error) {
	if e == nil {
		return Revision{}, fmt.Errorf("session %q has no network: %w", id, errdefs.ErrFailedPrecondition)
	}
	e.mu.Lock()
	st, addrs := e.state[id], e.byID[id]
	e.mu.Unlock()
	if st == nil {
		return Revision{}, fmt.Errorf("session %q has no network: %w", id, errdefs.ErrFailedPrecondition)
	}
	neg := sc.Egress
	st.mu.RLock()
	old, oldList := st.cfg.Egress, st.list
	st.mu.RUnlock()
	if neg == nil {
		return Revision{}, fmt.Errorf("egress: a session's network cannot be removed while it runs: %w", errdefs.ErrInvalidArgument)
	}
	if f := policies.EgressUnrevisable(old, neg); len(f) > 0 {
		return Revision{}, fmt.Errorf("egress %v cannot be revised yet: %w", f, errdefs.ErrInvalidArgument)
	}
	list, err := allowlist.Compile(neg.Allow, neg.Deny)
	if err != nil {
		return Revision{}, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}

	// From here on, every query is decided by the revised allowlist and
	// no pin of the old one lands.
	st.mu.Lock()
	st.gen++
	gen := st.gen
	st.cfg = sc
	st.mu.Unlock()
	pol := st.policy(ctx, id, list, gen)
	for _, a := range addrs {
		e.sessions.Set(a, pol)
	}
	if neg.L7Enabled() {
		e.registerL7(ctx, id, addrs, sc, list, st.names)
	}

	byAddr := map[netip.Addr][]allowlist.FQDN{}
	for name, as := range st.names.Pairs() {
		for _, a := range as {
			byAddr[a] = append(byAddr[a], name)
		}
	}
	allowed := func(a netip.Addr, port uint16) bool { return stillAllowed(list, byAddr[a], a, port) }
	pins, err := st.ns.Pinned(ctx)
	if err != nil {
		return Revision{}, fmt.Errorf("session %q: pins: %w", id, err)
	}
	var rev Revision
	var unpin []netns.Pinning
	withdrawn := map[netip.Addr]bool{}
	for _, p := range pins {
		if allowed(p.Addr, p.Port) {
			continue
		}
		unpin = append(unpin, p)
		withdrawn[p.Addr.Unmap()] = true
		rev.Unpinned = append(rev.Unpinned, pinString(p))
	}
	// The connections to cut go to destinations the session could reach
	// before: pinned (now, or earlier: a pin that expired leaves its
	// connections open) or in an old allow entry.
	var oldCIDRs []allowlist.AddrRule
	for _, r := range oldList.CIDRs() {
		if !r.Deny {
			oldCIDRs = append(oldCIDRs, r)
		}
	}
	reachable := func(a netip.Addr) bool {
		if withdrawn[a] || len(byAddr[a]) > 0 {
			return true
		}
		return slices.ContainsFunc(oldCIDRs, func(r allowlist.AddrRule) bool { return r.Prefix.Contains(a) })
	}
	rev.Cut, err = st.ns.Revise(ctx, netConfig(neg, list), unpin, func(dst netip.Addr, _ string, port uint16) bool {
		return reachable(dst) && !allowed(dst, port)
	})
	if err != nil {
		return rev, err
	}
	log.G(ctx).Info("egress revised", "version", sc.PolicyVersion, "unpinned", len(unpin), "cut", rev.Cut)
	return rev, nil
}

// stillAllowed reports whether list lets the session reach a on port
// (0: every port): a is not denied, and an allow entry covers it or one
// of names (the names whose answers pinned a) is allowed on port.
func stillAllowed(list *allowlist.List, names []allowlist.FQDN, a netip.Addr, port uint16) bool {
	a = a.Unmap()
	if _, denied := list.AddrDenied(a); denied {
		return false
	}
	for _, r := range list.CIDRs() {
		if r.Deny && r.Prefix.Contains(a) && (port == 0 || r.Port == port) {
			return false
		}
	}
	for _, r := range list.CIDRs() {
		if !r.Deny && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	for _, n := range names {
		d := list.MatchName(n)
		if !d.Allowed {
			continue
		}
		if port == 0 && d.AllPorts() || port != 0 && portAllowed(d.Ports, port) {
			return true
		}
	}
	return false
}

func pinString(p netns.Pinning) string {
	if p.Port == 0 {
		return p.Addr.String()
	}
	return netip.AddrPortFrom(p.Addr, p.Port).String()
}
