package dnsproxy

import (
	"context"
	"math"
	"sync"
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
	cw := &captureWriter{ResponseWriter: w}
	rc, err := h.next.ServeDNS(ctx, cw, r)
	if !clientWrote(rc) || cw.msg == nil {
		return rc, err
	}
	if ttl, ok := cacheTTL(cw.msg, h.s.cfg.ttlCap); ok {
		h.s.cache.put(key, cw.msg.Copy(), now, ttl)
	}
	return rc, w.WriteMsg(cw.msg)
}

type cacheKey struct {
	name  allowlist.FQDN
	qtype uint16
}

type cacheEntry struct {
	msg     *dns.Msg // never modified once stored
	stored  time.Time
	expires time.Time
}

// cache is a bounded map of upstream responses. When full, expired entries
// go first, then arbitrary ones.
type cache struct {
	max int

	mu sync.RWMutex
	// +checklocks:mu
	entries map[cacheKey]cacheEntry
}

func newCache(maxEntries int) *cache {
	return &cache{max: maxEntries, entries: make(map[cacheKey]cacheEntry, min(maxEntries, 1024))}
}

// get returns a private copy of the entry with TTLs aged to now.
func (c *cache) get(key cacheKey, now time.Time) (*dns.Msg, bool) {
	c.mu.RLock()
	e, ok := c.entries[key]
	c.mu.RUnlock()
	if !ok || !now.Before(e.expires) {
		return nil, false
	}
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, exists := c.entries[key]; !exists && len(c.entries) >= c.max {
		c.evictLocked(now)
	}
	c.entries[key] = cacheEntry{msg: m, stored: now, expires: now.Add(ttl)}
}

// evictLocked makes room for one entry: it visits a few entries from a
// random start (map order), dropping the expired ones, and arbitrary ones
// while the cache is still full.
//
// +checklocks:c.mu
func (c *cache) evictLocked(now time.Time) {
	visited := 0
	for k, e := range c.entries {
		if len(c.entries) >= c.max || !now.Before(e.expires) {
			delete(c.entries, k)
		}
		if visited++; visited >= 32 && len(c.entries) < c.max {
			return
		}
	}
}

func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
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
