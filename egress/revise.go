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
	"github.com/airlock-sandbox/airlock/egress/l7"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// Resolved is a name a session resolved and the addresses pinned for it,
// until Expires.
type Resolved struct {
	Name string
	// CNAMEs are the CNAME targets the answer went through, in order.
	CNAMEs  []string
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
	// terminate reports the names whose TLS the L7 gateway terminates,
	// for a session on the fast path (nil: not on it): their addresses
	// are pinned in its terminate sets too (netns.Session.Terminate).
	terminate func(name string) bool // +checklocks:mu
}

// setTerminate sets st.terminate, and refills the session's terminate
// sets with the addresses its names that terminate were pinned for.
func (st *sessionState) setTerminate(ctx context.Context, terminate func(string) bool) {
	st.mu.Lock()
	st.terminate = terminate
	st.mu.Unlock()
	st.refillTerminated(ctx)
}

// refillTerminated refills the session's terminate sets with the
// addresses its names whose TLS the gateway terminates were pinned for.
func (st *sessionState) refillTerminated(ctx context.Context) {
	st.mu.RLock()
	terminate := st.terminate
	st.mu.RUnlock()
	if terminate == nil {
		return // not on the fast path: the sets are not read
	}
	var addrs []netip.Addr
	for a, chains := range st.names.Chains() {
		if slices.ContainsFunc(chains, func(c []allowlist.FQDN) bool { return terminate(c[0].WithoutTrailingDot()) }) {
			addrs = append(addrs, a)
		}
	}
	if err := st.ns.Terminate(ctx, addrs, terminateHold, true); err != nil {
		log.G(ctx).Warn("egress: the addresses of names whose TLS the gateway terminates", "error", err)
	}
}

// terminateHold is how long an address stays in a session's terminate
// sets when a revision or a refusal of the fast path puts it there.
const terminateHold = 10 * time.Minute

// sessionPinner pins a session's answers, and those of names whose TLS
// the gateway terminates in its terminate sets too.
type sessionPinner struct {
	st  *sessionState
	gen uint64
}

// Pin implements dnsproxy.Pinner.
func (p sessionPinner) Pin(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
	return p.PinName(ctx, "", addrs, ports, ttl)
}

// PinName implements dnsproxy.NamedPinner.
func (p sessionPinner) PinName(ctx context.Context, name allowlist.FQDN, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
	st := p.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	if st.gen != p.gen {
		return fmt.Errorf("the session's egress policy was revised while the query was answered")
	}
	if err := st.ns.Pin(ctx, addrs, ports, ttl); err != nil {
		return err
	}
	if st.terminate != nil && name != "" && st.terminate(name.WithoutTrailingDot()) {
		// Before the answer goes out: the client's connection goes to
		// the listener, which terminates.
		return st.ns.Terminate(ctx, addrs, ttl, false)
	}
	return nil
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
		Pinner: sessionPinner{st: st, gen: gen},
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
	// Cut is how many of the session's connections were ended (by
	// conntrack, or closed by the L7 gateway).
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
// its port); the others are removed from the session's sets. A pin whose
// name the perimeter's bounded record of names dropped stays only if no
// name entry that could have pinned it was withdrawn or denied. Then
// every connection of the session to a destination the revised policy
// does not allow (no pin kept for it on its port, no name of it still
// allowed there, no allow entry) is ended (conntrack), so that its next
// packet is refused, whether or not its pin had expired. With the L7
// gateway, each open connection it admitted is checked again under the
// revised allowlist by the name it asked for (SNI, or the Host of its
// first request), and closed if refused: one address may serve a kept
// name and a withdrawn one.
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
	oldSC := st.cfg
	old := oldSC.Egress
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
	var reg *l7.Session
	if neg.L7Enabled() {
		reg = e.l7Registration(ctx, id, sc, list, st.names)
	}
	if reg != nil && e.fastPath(sc) {
		st.setTerminate(ctx, reg.Terminate)
	} else {
		st.setTerminate(ctx, nil)
	}
	// Registered only while the session is: a removal that began
	// meanwhile has unregistered it for good.
	e.mu.Lock()
	if e.state[id] != st {
		e.mu.Unlock()
		return Revision{}, fmt.Errorf("session %q: its network is being removed: %w", id, errdefs.ErrNotFound)
	}
	for _, a := range addrs {
		e.sessions.Set(a, pol)
		if reg != nil {
			e.l7ByAddr[a] = reg
		}
	}
	e.mu.Unlock()
	closed := 0 // the L7 gateway's connections of withdrawn names
	if reg != nil && e.l7 != nil {
		closed = e.l7.Recheck(reg)
	}
	var keep func(src, dst netip.AddrPort) bool
	if reg != nil && e.l7 != nil {
		// A connection the kernel forwards as passed that the fast path
		// does not know (passed before a restart, by an airlockd with or
		// without the fast path, or no longer followed) cannot be checked
		// again: it is ended.
		keep = func(src, dst netip.AddrPort) bool { return e.l7.FastKeep(reg, src, dst, true) }
	}
	rev, err := st.sweep(ctx, id, old, neg, list, e.fastPath(sc), keep)
	rev.Cut += closed
	if err != nil {
		return rev, err
	}
	log.G(ctx).Info("egress revised", "version", sc.PolicyVersion, "unpinned", len(rev.Unpinned), "cut", rev.Cut)
	return rev, nil
}

// sweep brings session st's network in line with the egress block neg
// (compiled: list), revised from old (nil: not known, as after a restart):
// it replaces the static CIDR rules, unpins every destination neg no
// longer allows, and ends every connection of the session to a
// destination neg does not allow (see allowedAfter). With fastKeep, a
// TCP connection the L7 gateway's fast path passed (its conntrack mark
// nft.MarkPass: the kernel forwards it unseen) is also ended unless
// fastKeep keeps it: one address may serve a kept name and a withdrawn
// one. Sweeping twice does what sweeping once did.
func (st *sessionState) sweep(ctx context.Context, id string, old, neg *policies.Egress, list *allowlist.List, fast bool, fastKeep func(src, dst netip.AddrPort) bool) (Revision, error) {
	byAddr := st.names.Chains()
	narrowed := narrowing(old, neg)
	pins, err := st.ns.Pinned(ctx)
	if err != nil {
		return Revision{}, fmt.Errorf("session %q: pins: %w", id, err)
	}
	var rev Revision
	var unpin []netns.Pinning
	kept := map[netip.AddrPort]bool{}
	for _, p := range pins {
		a := p.Addr.Unmap()
		if keepPin(list, byAddr[a], narrowed, a, p.Port) {
			kept[netip.AddrPortFrom(a, p.Port)] = true
			continue
		}
		unpin = append(unpin, p)
		rev.Unpinned = append(rev.Unpinned, pinString(p))
	}
	allowed := func(a netip.Addr, port uint16) bool {
		a = a.Unmap()
		if addrDenied(list, a, port) {
			return false
		}
		return kept[netip.AddrPortFrom(a, port)] || kept[netip.AddrPortFrom(a, 0)] || stillAllowed(list, byAddr[a], a, port)
	}
	rev.Cut, err = st.ns.Revise(ctx, netConfig(neg, list, fast), unpin, func(f netns.TrackedFlow) bool {
		if !allowed(f.Dst.Addr(), f.Dst.Port()) {
			return true
		}
		return fastKeep != nil && f.Proto == "tcp" && f.Mark == nft.MarkPass && !fastKeep(f.Src, f.Dst)
	})
	return rev, err
}

// keepPin reports whether the pinned destination a (on port; 0: every
// port) stays under list: an answer that pinned it (chains: the ones the
// bounded record still holds) is still allowed on port, or an allow entry
// covers it. The record may have dropped the names of a pin still in
// the kernel (a session that resolved many names): such a pin stays only
// while no name entry that could have pinned it was withdrawn or denied
// (narrowed), so that a kept name's pins are not lost to a full record,
// and a withdrawn name's pin is never kept for want of its name.
func keepPin(list *allowlist.List, chains [][]allowlist.FQDN, narrowed narrowed, a netip.Addr, port uint16) bool {
	if stillAllowed(list, chains, a, port) {
		return true
	}
	if len(chains) > 0 || addrDenied(list, a, port) {
		return false
	}
	return !narrowed.covers(port)
}

// narrowed is what a revision took away of the name entries: a pin on a
// port it covers may be a withdrawn name's.
type narrowed struct {
	all   bool            // every pin: names were denied, or the old entries are not known
	ports map[uint16]bool // withdrawn name entries of one port (0: of every port)
}

func (n narrowed) covers(port uint16) bool {
	return n.all || n.ports[0] || port != 0 && n.ports[port]
}

// narrowing compares the name entries of old and neg (old nil: unknown).
func narrowing(old, neg *policies.Egress) narrowed {
	if old == nil {
		return narrowed{all: true}
	}
	names := func(entries []string) map[string]allowlist.Rule {
		out := map[string]allowlist.Rule{}
		for _, e := range entries {
			r, err := allowlist.ParseRule(e)
			if err != nil || r.Kind == allowlist.Prefix {
				continue
			}
			out[r.String()] = r
		}
		return out
	}
	n := narrowed{ports: map[uint16]bool{}}
	newAllow, oldDeny := names(neg.Allow), names(old.Deny)
	for k, r := range names(old.Allow) {
		if _, ok := newAllow[k]; !ok {
			n.ports[r.Port] = true
		}
	}
	for k := range names(neg.Deny) {
		if _, ok := oldDeny[k]; !ok {
			n.all = true
		}
	}
	return n
}

// addrDenied reports whether a deny entry of list refuses a on port (0:
// any of its ports).
func addrDenied(list *allowlist.List, a netip.Addr, port uint16) bool {
	if _, denied := list.AddrDenied(a); denied {
		return true
	}
	for _, r := range list.CIDRs() {
		if r.Deny && r.Prefix.Contains(a) && (port == 0 || r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return false
}

// stillAllowed reports whether list lets the session reach a on port
// (0: every port): a is not denied, and an allow entry covers it or one
// of chains (the answers that pinned a: the queried name, then its CNAME
// targets) has every one of its names allowed on port, as the DNS proxy
// requires of a chain when it answers.
func stillAllowed(list *allowlist.List, chains [][]allowlist.FQDN, a netip.Addr, port uint16) bool {
	a = a.Unmap()
	if addrDenied(list, a, port) {
		return false
	}
	for _, r := range list.CIDRs() {
		if !r.Deny && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == port) {
			return true
		}
	}
	return slices.ContainsFunc(chains, func(chain []allowlist.FQDN) bool {
		return len(chain) > 0 && !slices.ContainsFunc(chain, func(n allowlist.FQDN) bool {
			d := list.MatchName(n)
			return !d.Allowed || !(port == 0 && d.AllPorts() || port != 0 && portAllowed(d.Ports, port))
		})
	})
}

func pinString(p netns.Pinning) string {
	if p.Port == 0 {
		return p.Addr.String()
	}
	return netip.AddrPortFrom(p.Addr, p.Port).String()
}
