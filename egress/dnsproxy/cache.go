package dnsproxy

import (
	"context"
	"hash/maphash"
	"math"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// cacheHandler answers from upstream responses stored by name and type.
// Entries are shared by all sessions: they hold what upstream said, and
// the answer handler above checks and pins them for each query, hit or
// miss.
type cacheHandler struct {
	s    *Server
	next handler
}

func (h *cacheHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	key := cacheKey{name: req.name, qtype: req.qtype}
	now := h.s.cfg.now()
	if m, ok := h.s.cache.get(key, now); ok {
		h.s.stats.cacheHits.Add(1)
		req.cached = true
		m.Id = r.Id
		return dns.RcodeSuccess, w.WriteMsg(m)
	}
	h.s.stats.cacheMisses.Add(1)
	cw := &req.cacheW
	*cw = captureWriter{ResponseWriter: w}
	rc, err := h.next.ServeDNS(ctx, cw, r)
	if !clientWrote(rc) || cw.msg == nil {
		return rc, err
	}
	if ttl, ok := cacheTTL(cw.msg, h.s.cfg.ttlCap); ok {
		h.s.cache.put(key, capTTLs(cw.msg.Copy(), ttl), now, ttl)
	}
	return rc, w.WriteMsg(cw.msg)
}

type cacheKey struct {
	name  allowlist.FQDN
	qtype uint16
}

type cacheEntry struct {
	key     cacheKey
	msg     *dns.Msg // never modified once stored
	stored  time.Time
	expires time.Time
}

// cacheWays is how many entries share one set of the cache.
const cacheWays = 4

// cache is a fixed table of upstream responses, set-associative: a key
// hashes (with the cache's random seed, so that names cannot be chosen to
// collide) to one set of cacheWays slots. get reads the set's slots with
// atomic loads, without a lock, and checks each entry's own key; put
// stores into the slot of the same key, an empty or expired one, or else
// the set's oldest. Two puts into one set at once may replace each
// other's entry: that costs a later miss, never a wrong answer.
type cache struct {
	seed  maphash.Seed
	sets  uint64
	ways  int
	slots []atomic.Pointer[cacheEntry] // sets*ways, at most the size asked for
}

func newCache(maxEntries int) *cache {
	ways := min(cacheWays, maxEntries)
	sets := maxEntries / ways
	return &cache{seed: maphash.MakeSeed(), sets: uint64(sets), ways: ways, slots: make([]atomic.Pointer[cacheEntry], sets*ways)}
}

// set returns the slots key may be stored in.
func (c *cache) set(key cacheKey) []atomic.Pointer[cacheEntry] {
	h := maphash.String(c.seed, string(key.name)) ^ uint64(key.qtype)*0x9e3779b97f4a7c15
	i := int(h%c.sets) * c.ways
	return c.slots[i : i+c.ways]
}

// get returns a private copy of the entry with TTLs aged to now. The age
// is rounded up to whole seconds: a TTL handed out never outlives the
// entry, so that the pin made when it was stored (which lasts from after
// the entry was stored for its TTL) already covers every answer made from
// it, and a hit does not move the pin's expiry (netns.Session.Pin leaves
// an entry alone that is allowed for as long already).
func (c *cache) get(key cacheKey, now time.Time) (*dns.Msg, bool) {
	var e *cacheEntry
	set := c.set(key)
	for i := range set {
		if x := set[i].Load(); x != nil && x.key == key && now.Before(x.expires) {
			e = x
			break
		}
	}
	if e == nil {
		return nil, false
	}
	m := e.msg.Copy()
	age := uint32((now.Sub(e.stored) + time.Second - 1) / time.Second)
	for _, sec := range [][]dns.RR{m.Answer, m.Ns} {
		for _, rr := range sec {
			h := rr.Header()
			h.Ttl -= min(h.Ttl, age)
			if soa, ok := rr.(*dns.SOA); ok {
				soa.Minttl -= min(soa.Minttl, age)
			}
		}
	}
	return m, true
}

func (c *cache) put(key cacheKey, m *dns.Msg, now time.Time, ttl time.Duration) {
	e := &cacheEntry{key: key, msg: m, stored: now, expires: now.Add(ttl)}
	set := c.set(key)
	victim := 0
	var oldest time.Time
	for i := range set {
		x := set[i].Load()
		if x == nil || x.key == key || !now.Before(x.expires) {
			victim = i
			break
		}
		if i == 0 || x.stored.Before(oldest) {
			victim, oldest = i, x.stored
		}
	}
	set[victim].Store(e)
}

// len counts the entries stored, expired ones too.
func (c *cache) len() int {
	n := 0
	for i := range c.slots {
		if c.slots[i].Load() != nil {
			n++
		}
	}
	return n
}

// capTTLs lowers the TTLs of m's answer records to the entry's lifetime
// (the cap, for records that outlive it), so that an answer made from the
// entry never outlives the pin made when it was stored.
func capTTLs(m *dns.Msg, ttl time.Duration) *dns.Msg {
	secs := uint32(ttl / time.Second)
	for _, rr := range m.Answer {
		h := rr.Header()
		h.Ttl = min(h.Ttl, secs)
	}
	return m
}

// cacheTTL says how long m may be cached: the smallest TTL of its answer
// records, or for a negative answer the SOA's negative TTL (RFC 2308), at
// most ceiling. Truncated answers and failures are not cached.
func cacheTTL(m *dns.Msg, ceiling time.Duration) (time.Duration, bool) {
	if m.Truncated || (m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError) {
		return 0, false
	}
	ttl := uint32(math.MaxUint32)
	for _, rr := range m.Answer {
		ttl = min(ttl, rr.Header().Ttl)
	}
	if len(m.Answer) == 0 {
		for _, rr := range m.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				ttl = min(ttl, soa.Hdr.Ttl, soa.Minttl)
			}
		}
	}
	if ttl == 0 || ttl == math.MaxUint32 {
		return 0, false
	}
	return min(time.Duration(ttl)*time.Second, ceiling), true
}
