package dnsproxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// Stats is a snapshot of the Server's counters since it was created.
type Stats struct {
	Queries uint64 // queries handled (excluding unparseable messages)

	// Outcomes; each query counts in exactly one.
	Allowed uint64 // answered with upstream data
	Refused uint64 // refused, or answered empty by policy
	Failed  uint64 // allowed but not answered (SERVFAIL and such)

	// Reasons for refusals and failures.
	UnknownSource uint64 // no session for the source address
	Malformed     uint64 // unparseable, bad header or bad name
	Blocked       uint64 // name not in the session's allowlist
	TypeRefused   uint64 // record type not served
	Empty         uint64 // empty answer by policy (AAAA without IPv6, HTTPS, SVCB)
	CNAMEBlocked  uint64 // a CNAME target not in the allowlist
	AddrDenied    uint64 // answer addresses dropped: deny CIDRs, never-pinned and private ranges, host addresses
	PinErrors     uint64 // Pinner failures
	ServFail      uint64 // SERVFAIL responses

	// Upstream side.
	CacheHits      uint64
	CacheMisses    uint64
	Forwarded      uint64 // upstream exchanges attempted
	UpstreamErrors uint64
	Truncated      uint64 // truncated upstream answers returned to UDP clients
	TCPRetries     uint64 // upstream retries over TCP

	// Limits.
	RateLimited  uint64 // queries over a session's Limiter (counted in Refused too)
	Overloaded   uint64 // UDP queries dropped with every worker busy and the pool full
	ConnsRefused uint64 // TCP connections closed over the connection bounds
}

type counters struct {
	queries, allowed, refused, failed                            atomic.Uint64
	unknownSource, malformed, blocked, typeRefused, empty        atomic.Uint64
	cnameBlocked, addrDenied, pinErrors, servfail                atomic.Uint64
	cacheHits, cacheMisses, forwarded, upstreamErrors, truncated atomic.Uint64
	tcpRetries, rateLimited, overloaded, connsRefused            atomic.Uint64

	udpWorkersStarted atomic.Uint64 // tests: goroutines started to serve UDP queries
}

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	return Stats{
		Queries: c.queries.Load(), Allowed: c.allowed.Load(), Refused: c.refused.Load(), Failed: c.failed.Load(),
		UnknownSource: c.unknownSource.Load(), Malformed: c.malformed.Load(), Blocked: c.blocked.Load(),
		TypeRefused: c.typeRefused.Load(), Empty: c.empty.Load(), CNAMEBlocked: c.cnameBlocked.Load(),
		AddrDenied: c.addrDenied.Load(), PinErrors: c.pinErrors.Load(), ServFail: c.servfail.Load(),
		CacheHits: c.cacheHits.Load(), CacheMisses: c.cacheMisses.Load(), Forwarded: c.forwarded.Load(),
		UpstreamErrors: c.upstreamErrors.Load(), Truncated: c.truncated.Load(), TCPRetries: c.tcpRetries.Load(),
		RateLimited: c.rateLimited.Load(), Overloaded: c.overloaded.Load(), ConnsRefused: c.connsRefused.Load(),
	}
}

// record counts the outcome, sends the audit event and logs refusals and
// failures once per (session, name) window.
func (s *Server) record(ctx context.Context, req *request, r *dns.Msg, ev Event) {
	ev.Time = s.cfg.now()
	ev.Client = req.client
	ev.Proto = req.proto
	if ev.Name == "" {
		if req.name != "" {
			ev.Name = string(req.name)
		} else if len(r.Question) > 0 {
			ev.Name = auditName(r.Question[0].Name)
		}
	}
	if ev.Type == "" && len(r.Question) > 0 {
		ev.Type = dns.Type(r.Question[0].Qtype).String()
	}
	ev.Cached = req.cached
	audit := s.cfg.audit
	if req.sess != nil {
		ev.Session = req.sess.ID
		audit = req.sess.Audit
	}
	switch ev.Action {
	case ActionAllowed:
		s.stats.allowed.Add(1)
	case ActionRefused:
		s.stats.refused.Add(1)
	case ActionFailed:
		s.stats.failed.Add(1)
	}
	if audit != nil {
		audit(ev)
	}
	if ev.Action == ActionAllowed {
		return
	}
	key := logKey{session: ev.Session, name: ev.Name}
	if ev.Session == "" {
		key.name = req.client.String()
	}
	suppressed, ok := s.logs.allow(key, ev.Time)
	if !ok {
		return
	}
	budgetKey := ev.Session
	if budgetKey == "" {
		budgetKey = key.name
	}
	sessionSuppressed, ok := s.sessionLogs.allow(budgetKey, ev.Time)
	if !ok {
		return
	}
	args := []any{"session", ev.Session, "client", ev.Client, "proto", ev.Proto, "name", ev.Name,
		"type", ev.Type, "rcode", ev.Rcode, "reason", ev.Reason}
	if ev.Rule != "" {
		args = append(args, "rule", ev.Rule)
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	if sessionSuppressed > 0 {
		args = append(args, "session_suppressed", sessionSuppressed)
	}
	if ev.Action == ActionFailed {
		log.G(ctx).Warn("dns query failed", args...)
	} else {
		log.G(ctx).Info("dns query refused", args...)
	}
}

// auditName bounds a name taken from the wire for logs; miekg/dns already
// escapes non-printable bytes as \DDD.
func auditName(s string) string {
	if len(s) > maxAuditNameB {
		return s[:maxAuditNameB] + "..."
	}
	return s
}

type logKey struct{ session, name string }

// limiter lets one log line per key through per window and counts the rest.
type limiter struct {
	window time.Duration

	mu sync.Mutex
	// +checklocks:mu
	seen map[logKey]*logSlot
	// +checklocks:mu
	sweepAt int // see makeRoom
}

type logSlot struct {
	until      time.Time
	suppressed uint64
}

const maxLimiterKeys = 8192

func newLimiter(window time.Duration) *limiter {
	return &limiter{window: window, seen: map[logKey]*logSlot{}}
}

// allow reports whether key may be logged now, and how many lines were
// suppressed for it since it was last logged.
func (l *limiter) allow(key logKey, now time.Time) (suppressed uint64, ok bool) {
	if l.window <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if slot := l.seen[key]; slot != nil && now.Before(slot.until) {
		slot.suppressed++
		return 0, false
	} else if slot != nil {
		suppressed = slot.suppressed
		slot.until, slot.suppressed = now.Add(l.window), 0
		return suppressed, true
	}
	makeRoom(l.seen, &l.sweepAt, now, func(s *logSlot) time.Time { return s.until })
	l.seen[key] = &logSlot{until: now.Add(l.window)}
	return 0, true
}
