package dnsproxy

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// DefaultMaxNames bounds the (name, address) pairs a Names keeps.
const DefaultMaxNames = 4096

// Names remembers, for one session, which addresses the proxy pinned for
// which queried name and until when: the L7 gateway binds a connection's
// SNI or Host to them. Its size is bounded; when full, expired pairs go
// first, then the pairs closest to expiry. Safe for concurrent use.
type Names struct {
	max int

	mu sync.Mutex
	// +checklocks:mu
	m map[allowlist.FQDN]map[netip.Addr]pair
	// +checklocks:mu
	n int
	// keep, if set, names the names whose pairs are evicted last.
	// +checklocks:mu
	keep func(allowlist.FQDN) bool
}

// pair is what Names keeps of one (name, address) pair: until when the
// address was pinned, and the CNAME targets the name's answer went
// through to reach it, in chain order.
type pair struct {
	expires time.Time
	chain   []allowlist.FQDN
}

// NewNames returns an empty Names holding at most max pairs
// (DefaultMaxNames if max <= 0).
func NewNames(max int) *Names {
	if max <= 0 {
		max = DefaultMaxNames
	}
	return &Names{max: max, m: map[allowlist.FQDN]map[netip.Addr]pair{}}
}

// Keep makes the pairs of names keep reports evicted only when no other
// pair is left to evict: the L7 gateway guards the addresses of the names
// it checks, and a session must not push them out by resolving many
// others. Call it before the Names is used.
func (n *Names) Keep(keep func(allowlist.FQDN) bool) {
	if n != nil {
		n.mu.Lock()
		n.keep = keep
		n.mu.Unlock()
	}
}

// Record notes that addrs were pinned for name until expires. A pair
// recorded earlier keeps the later of its two expiries, as the kernel's
// pins do.
func (n *Names) Record(name allowlist.FQDN, addrs []netip.Addr, expires, now time.Time) {
	n.RecordChain(name, nil, addrs, expires, now)
}

// RecordChain is Record for an answer that reached addrs through the
// CNAME targets chain (in order): the pairs keep the chain, so that a
// revision judges them by every name of it. A pair recorded earlier
// keeps the chains of both (the targets of each).
func (n *Names) RecordChain(name allowlist.FQDN, chain []allowlist.FQDN, addrs []netip.Addr, expires, now time.Time) {
	if n == nil || len(addrs) == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range addrs {
		a = a.Unmap()
		as := n.m[name]
		if old, ok := as[a]; ok {
			if expires.After(old.expires) {
				old.expires = expires
			}
			for _, c := range chain {
				if !slices.Contains(old.chain, c) {
					old.chain = append(slices.Clip(old.chain), c)
				}
			}
			as[a] = old
			continue
		}
		if n.n >= n.max {
			n.evictLocked(now)
		}
		if as == nil {
			as = map[netip.Addr]pair{}
			n.m[name] = as
		}
		as[a] = pair{expires: expires, chain: slices.Clone(chain)}
		n.n++
	}
}

// evictLocked drops the expired pairs, and if none was, the pair closest
// to expiry; pairs of the names n.keep reports go only when there are no
// others.
//
// Preconditions: n.mu is held.
func (n *Names) evictLocked(now time.Time) {
	if !n.evictOneOfLocked(now, false) {
		n.evictOneOfLocked(now, true)
	}
}

// evictOneOfLocked is evictLocked over the pairs of the kept names (kept)
// or of the others; it reports whether it dropped one.
//
// Preconditions: n.mu is held.
func (n *Names) evictOneOfLocked(now time.Time, kept bool) bool {
	var (
		oldName allowlist.FQDN
		oldAddr netip.Addr
		oldExp  time.Time
	)
	freed := false
	for name, as := range n.m {
		if (n.keep != nil && n.keep(name)) != kept {
			continue
		}
		for a, p := range as {
			if exp := p.expires; exp.Before(now) {
				delete(as, a)
				n.n--
				freed = true
			} else if oldExp.IsZero() || exp.Before(oldExp) {
				oldName, oldAddr, oldExp = name, a, exp
			}
		}
		if len(as) == 0 {
			delete(n.m, name)
		}
	}
	if !freed && !oldExp.IsZero() {
		delete(n.m[oldName], oldAddr)
		if len(n.m[oldName]) == 0 {
			delete(n.m, oldName)
		}
		n.n--
		freed = true
	}
	return freed
}

// Has reports whether a was pinned for name and its pin had not expired at
// time at.
func (n *Names) Has(name allowlist.FQDN, a netip.Addr, at time.Time) bool {
	if n == nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.m[name][a.Unmap()]
	return ok && !p.expires.Before(at)
}

// NamesOf returns, sorted, the names a was pinned for whose pins had not
// expired at time since; with a zero since, every name a pair still held
// pins a for, expired or not (expired pairs are dropped only when Names
// is full).
func (n *Names) NamesOf(a netip.Addr, since time.Time) []allowlist.FQDN {
	if n == nil {
		return nil
	}
	a = a.Unmap()
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []allowlist.FQDN
	for name, as := range n.m {
		if p, ok := as[a]; ok && !p.expires.Before(since) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Len is the number of pairs held.
func (n *Names) Len() int {
	if n == nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.n
}

// Pairs returns every (name, address) pair held, expired or not: the
// addresses pinned for each name since the pairs were last evicted.
func (n *Names) Pairs() map[allowlist.FQDN][]netip.Addr {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[allowlist.FQDN][]netip.Addr, len(n.m))
	for name, as := range n.m {
		for a := range as {
			out[name] = append(out[name], a)
		}
		slices.SortFunc(out[name], func(x, y netip.Addr) int { return x.Compare(y) })
	}
	return out
}

// Chains returns, for every address a pair held pins (expired or not),
// the names each answer went through to reach it: the queried name
// first, then its CNAME targets in order.
func (n *Names) Chains() map[netip.Addr][][]allowlist.FQDN {
	if n == nil {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[netip.Addr][][]allowlist.FQDN{}
	for name, as := range n.m {
		for a, p := range as {
			out[a] = append(out[a], append([]allowlist.FQDN{name}, p.chain...))
		}
	}
	return out
}
