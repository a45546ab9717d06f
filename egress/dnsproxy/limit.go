package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// Per-session limits, and the proxy's bounds on goroutines and
// connections.
const (
	// DefaultRate is a session's sustained query rate, per second.
	DefaultRate = 100
	// DefaultInFlight bounds a session's queries being answered at once
	// (those waiting on a slow upstream, mostly).
	DefaultInFlight = 64

	// maxTCPConns and maxTCPConnsPerClient bound the open TCP
	// connections, in all and from one address; a connection beyond
	// either is closed at once.
	maxTCPConns          = 512
	maxTCPConnsPerClient = 8
)

// Limits are one session's query limits.
type Limits struct {
	// Rate is the sustained rate in queries a second; 0 is DefaultRate.
	Rate float64
	// Burst is how many queries may come at once above the rate; 0 is
	// twice the rate (at least 10).
	Burst int
	// InFlight bounds the session's queries being answered at once; 0 is
	// DefaultInFlight.
	InFlight int
}

// Limiter enforces one session's Limits. A query over a limit is not
// answered over UDP (the client's retry timer paces it) and gets REFUSED
// over TCP; it is never forwarded, and it is audited as a refusal with no
// name, so that the audit log merges a flood into one event and a count.
// Share one Limiter between a session's addresses. It is safe for
// concurrent use.
type Limiter struct {
	rate, burst float64
	inFlight    int32
	desc        string

	mu sync.Mutex
	// +checklocks:mu
	tokens float64
	// +checklocks:mu
	last time.Time

	busy    atomic.Int32
	limited atomic.Uint64
}

// NewLimiter returns a Limiter for l, whose bucket starts full.
func NewLimiter(l Limits) (*Limiter, error) {
	if l.Rate < 0 || l.Burst < 0 || l.InFlight < 0 {
		return nil, fmt.Errorf("dns limits %+v: negative", l)
	}
	if l.Rate == 0 {
		l.Rate = DefaultRate
	}
	if l.Burst == 0 {
		l.Burst = max(int(2*l.Rate), 10)
	}
	if l.InFlight == 0 {
		l.InFlight = DefaultInFlight
	}
	return &Limiter{
		rate: l.Rate, burst: float64(l.Burst), inFlight: int32(min(l.InFlight, 1<<20)), tokens: float64(l.Burst),
		desc: fmt.Sprintf("%g queries/s, burst %d, %d at once", l.Rate, l.Burst, l.InFlight),
	}, nil
}

// allow takes a token for a query arriving at now.
func (l *Limiter) allow(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() {
		if d := now.Sub(l.last); d > 0 {
			l.tokens = min(l.burst, l.tokens+d.Seconds()*l.rate)
		}
	}
	if now.After(l.last) {
		l.last = now
	}
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// acquire counts a query in flight unless the session has too many.
func (l *Limiter) acquire() bool {
	if l.busy.Add(1) > l.inFlight {
		l.busy.Add(-1)
		return false
	}
	return true
}

func (l *Limiter) release() { l.busy.Add(-1) }

// Limited returns how many queries the limiter has turned away.
func (l *Limiter) Limited() uint64 { return l.limited.Load() }

// admit applies the session's Limiter to a query. When it returns false
// the query has been handled (dropped or refused, and audited), and the
// caller returns rc, err; otherwise the caller must call release when the
// query is done.
func (s *Server) admit(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, req *request) (ok bool, rc int, err error) {
	lim := req.sess.Limit
	if lim == nil {
		return true, 0, nil
	}
	what := "rate"
	if lim.allow(s.cfg.now()) {
		if lim.acquire() {
			return true, 0, nil
		}
		what = "concurrency"
	}
	lim.limited.Add(1)
	s.stats.rateLimited.Add(1)
	rcode := "DROPPED"
	if req.proto == "tcp" {
		rcode = dns.RcodeToString[dns.RcodeRefused]
	}
	ev := Event{
		Time: s.cfg.now(), Session: req.sess.ID, Client: req.client, Proto: req.proto,
		Action: ActionRefused, Rcode: rcode,
		Reason: "airlock: DNS " + what + " limit of the session exceeded (" + lim.desc + "); query not answered",
	}
	s.stats.refused.Add(1)
	if req.sess.Audit != nil {
		req.sess.Audit(ev)
	}
	if suppressed, logIt := s.logs.allow(logKey{session: ev.Session, name: "\x00limit"}, ev.Time); logIt {
		log.G(ctx).Warn("dns queries limited", "session", ev.Session, "client", ev.Client, "limit", lim.desc,
			"limited", lim.Limited(), "suppressed", suppressed)
	}
	if req.proto != "tcp" {
		return false, dns.RcodeSuccess, nil // nothing is sent
	}
	m := newReply(r, dns.RcodeRefused)
	addEDE(m, dns.ExtendedErrorCodeOther, ev.Reason)
	return false, dns.RcodeSuccess, writeReply(w, req, m)
}

// connLimitListener closes connections beyond maxTCPConns in all or
// maxTCPConnsPerClient from one address, as soon as they are accepted.
type connLimitListener struct {
	net.Listener
	s *Server

	mu sync.Mutex
	// +checklocks:mu
	total int
	// +checklocks:mu
	byClient map[netip.Addr]int
}

func newConnLimitListener(l net.Listener, s *Server) *connLimitListener {
	return &connLimitListener{Listener: l, s: s, byClient: map[netip.Addr]int{}}
}

func (l *connLimitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var addr netip.Addr
		if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			addr = ta.AddrPort().Addr().Unmap()
		}
		l.mu.Lock()
		if l.total >= maxTCPConns || l.byClient[addr] >= maxTCPConnsPerClient {
			l.mu.Unlock()
			l.s.stats.connsRefused.Add(1)
			_ = c.Close()
			continue
		}
		l.total++
		l.byClient[addr]++
		l.mu.Unlock()
		return &limitedConn{Conn: c, l: l, addr: addr}, nil
	}
}

func (l *connLimitListener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byClient[addr]--; l.byClient[addr] <= 0 {
		delete(l.byClient, addr)
	}
}

type limitedConn struct {
	net.Conn
	l    *connLimitListener
	addr netip.Addr
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.addr) })
	return err
}

// maxSessionLogLines bounds the refusals and failures of one session (or
// unknown client) logged per log window: a loop over random names would
// otherwise put a line per name in the daemon's log.
const maxSessionLogLines = 20

// lineBudget lets n log lines per key through per window and counts the
// rest.
type lineBudget struct {
	window time.Duration
	n      uint64

	mu sync.Mutex
	// +checklocks:mu
	keys map[string]*lineSlot
	// +checklocks:mu
	sweepAt int // see makeRoom
}

type lineSlot struct {
	until            time.Time
	used, suppressed uint64
}

func newLineBudget(window time.Duration, n uint64) *lineBudget {
	return &lineBudget{window: window, n: n, keys: map[string]*lineSlot{}}
}

// allow reports whether key may log a line now and, on the first line of a
// window, how many lines the previous window suppressed.
func (b *lineBudget) allow(key string, now time.Time) (suppressed uint64, ok bool) {
	if b.window <= 0 {
		return 0, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	slot := b.keys[key]
	if slot == nil {
		makeRoom(b.keys, &b.sweepAt, now, func(s *lineSlot) time.Time { return s.until })
		slot = &lineSlot{until: now.Add(b.window)}
		b.keys[key] = slot
	} else if !now.Before(slot.until) {
		suppressed = slot.suppressed
		slot.until, slot.used, slot.suppressed = now.Add(b.window), 0, 0
	}
	if slot.used >= b.n {
		slot.suppressed++
		return 0, false
	}
	slot.used++
	return suppressed, true
}

// makeRoom keeps m to the keys whose window (until) has not ended. Once m
// holds *sweepAt entries, it deletes those whose window ended at now, and
// sets *sweepAt to twice what is left (at least minSweep), so that the map
// stays near the number of keys seen within a window instead of growing
// with every key ever seen (a daemon runs for thousands of sessions, and a
// Go map never gives back the room it grew to); at maxLimiterKeys of
// unexpired keys it drops every entry.
func makeRoom[K comparable, V any](m map[K]V, sweepAt *int, now time.Time, until func(V) time.Time) {
	if *sweepAt < minSweep {
		*sweepAt = minSweep
	}
	if len(m) < *sweepAt && len(m) < maxLimiterKeys {
		return
	}
	for k, v := range m {
		if !now.Before(until(v)) {
			delete(m, k)
		}
	}
	if len(m) >= maxLimiterKeys {
		clear(m)
	}
	*sweepAt = max(2*len(m), minSweep)
}

// minSweep is the fewest entries a limiter's map holds before it sweeps.
const minSweep = 64
