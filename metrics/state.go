package metrics

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// State is what a scrape reads from the daemon.
type State struct {
	Sessions []Session
	Pools    []Pool
	// ApprovalsPending counts the requests held for a decision.
	ApprovalsPending int
	// QueuedCreates and QueuedRefills count the sandboxes waiting for
	// their turn to be prepared.
	QueuedCreates, QueuedRefills int
	// DNS is the DNS proxy's counters; nil without a perimeter.
	DNS *DNS
	// Drops are the gateway's drop counters of the sessions whose network
	// lives.
	Drops []Drops
}

// Session is one session in the daemon's list.
type Session struct {
	ID    string
	State string // created, running, stopped or unknown
	// Review is set while the session's changes wait for a commit or a
	// discard.
	Review bool
	// AuditBytes is the size of its audit log.
	AuditBytes int64
}

// Pool is one warm pool.
type Pool struct {
	Key, Label              string
	Size, Ready             int
	Hits, Misses, Discarded uint64
	Preparing               bool
}

// DNS is the DNS proxy's counters (see egress/dnsproxy.Stats).
type DNS struct {
	Allowed, Refused, Failed uint64
	// Reasons of refusals.
	Blocked, CNAMEBlocked, TypeRefused, Empty, Malformed, UnknownSource, RateLimited uint64
	// Queries never answered: UDP with every worker busy, TCP
	// connections over the bounds.
	Overloaded, ConnsRefused uint64
	UpstreamErrors           uint64
}

// Drops are a session's blocked packets and bytes so far.
type Drops struct {
	Session        string
	Packets, Bytes uint64
}

// Session states, each reported even when no session is in it.
var sessionStates = []string{"created", "running", "stopped", "unknown"}

var (
	descSessions = prometheus.NewDesc("airlock_sessions",
		"Sessions in the daemon's list, by state.", []string{"state"}, nil)
	descReview = prometheus.NewDesc("airlock_sessions_awaiting_review",
		"Ended sessions whose workspace changes wait for a commit or a discard.", nil, nil)
	descAuditBytes = prometheus.NewDesc("airlock_audit_bytes",
		"Size of a session's audit log in bytes; the series goes with the session.", []string{"session"}, nil)
	descPoolSize = prometheus.NewDesc("airlock_pool_size",
		"Sandboxes a warm pool keeps prepared.", []string{"pool", "label"}, nil)
	descPoolReady = prometheus.NewDesc("airlock_pool_ready",
		"Sandboxes ready in a warm pool (its depth).", []string{"pool", "label"}, nil)
	descPoolPreparing = prometheus.NewDesc("airlock_pool_preparing",
		"1 while a warm pool's filler prepares a sandbox.", []string{"pool", "label"}, nil)
	descPoolTakes = prometheus.NewDesc("airlock_pool_takes_total",
		"Creates that asked a warm pool for a sandbox: result=\"hit\" took one, \"miss\" found it empty and prepared one cold.", []string{"pool", "label", "result"}, nil)
	descPoolDiscarded = prometheus.NewDesc("airlock_pool_discarded_total",
		"Sandboxes of a warm pool dropped unused (stale, or their init exited).", []string{"pool", "label"}, nil)
	descStartQueue = prometheus.NewDesc("airlock_session_start_queue_length",
		"Sandboxes waiting now for their turn to be prepared (airlockd --max-preparing), by kind: create or refill.", []string{"kind"}, nil)
	descApprovalsPending = prometheus.NewDesc("airlock_approvals_pending",
		"Requests held for an approval now.", nil, nil)
	descDNSQueries = prometheus.NewDesc("airlock_dns_queries_total",
		"Queries airlock's resolver answered, by action: allowed (upstream data), refused (by policy), failed (allowed, not answered).", []string{"action"}, nil)
	descDNSRefusals = prometheus.NewDesc("airlock_dns_refusals_total",
		"Refused queries by reason: blocked (not in the allowlist), cname_blocked, type_refused, empty (answered empty by policy), malformed, unknown_source, rate_limited (over a session's DNS limits).", []string{"reason"}, nil)
	descDNSDropped = prometheus.NewDesc("airlock_dns_dropped_total",
		"Queries the resolver never answered: overloaded (UDP, every worker busy), tcp_connections (TCP connections over the bounds).", []string{"reason"}, nil)
	descDNSUpstreamErrors = prometheus.NewDesc("airlock_dns_upstream_errors_total",
		"Failed exchanges with the upstream resolvers.", nil, nil)
	descDropPackets = prometheus.NewDesc("airlock_flows_dropped_packets_total",
		"Packets the gateway blocked (connections to addresses no DNS answer pinned, or to closed ports), live sessions' counters included.", nil, nil)
	descDropBytes = prometheus.NewDesc("airlock_flows_dropped_bytes_total",
		"Bytes of the packets the gateway blocked.", nil, nil)
)

// stateCollector reports the daemon's state at scrape time.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descReview, descAuditBytes, descPoolSize, descPoolReady,
		descPoolPreparing, descPoolTakes, descPoolDiscarded, descStartQueue, descApprovalsPending, descDNSQueries, descDNSRefusals,
		descDNSDropped, descDNSUpstreamErrors, descDropPackets, descDropBytes} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	m.srcMu.Lock()
	src := m.source
	m.srcMu.Unlock()
	// A session removed while the state is read must not have its
	// drops counted again after they were retired: removals wait for
	// the scrapes under way.
	m.drops.scrapeMu.RLock()
	defer m.drops.scrapeMu.RUnlock()
	var st State
	if src != nil {
		ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
		st = src(ctx)
		cancel()
	}
	byState := map[string]int{}
	review := 0
	for _, s := range st.Sessions {
		byState[s.State]++
		if s.Review {
			review++
		}
		ch <- prometheus.MustNewConstMetric(descAuditBytes, prometheus.GaugeValue, float64(s.AuditBytes), s.ID)
	}
	for _, s := range sessionStates {
		ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(byState[s]), s)
	}
	ch <- prometheus.MustNewConstMetric(descReview, prometheus.GaugeValue, float64(review))
	for _, p := range st.Pools {
		ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(p.Size), p.Key, p.Label)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), p.Key, p.Label)
		preparing := 0.0
		if p.Preparing {
			preparing = 1
		}
		ch <- prometheus.MustNewConstMetric(descPoolPreparing, prometheus.GaugeValue, preparing, p.Key, p.Label)
		ch <- prometheus.MustNewConstMetric(descPoolTakes, prometheus.CounterValue, float64(p.Hits), p.Key, p.Label, "hit")
		ch <- prometheus.MustNewConstMetric(descPoolTakes, prometheus.CounterValue, float64(p.Misses), p.Key, p.Label, "miss")
		ch <- prometheus.MustNewConstMetric(descPoolDiscarded, prometheus.CounterValue, float64(p.Discarded), p.Key, p.Label)
	}
	ch <- prometheus.MustNewConstMetric(descStartQueue, prometheus.GaugeValue, float64(st.QueuedCreates), QueueCreate)
	ch <- prometheus.MustNewConstMetric(descStartQueue, prometheus.GaugeValue, float64(st.QueuedRefills), QueueRefill)
	ch <- prometheus.MustNewConstMetric(descApprovalsPending, prometheus.GaugeValue, float64(st.ApprovalsPending))
	if d := st.DNS; d != nil {
		for action, n := range map[string]uint64{"allowed": d.Allowed, "refused": d.Refused, "failed": d.Failed} {
			ch <- prometheus.MustNewConstMetric(descDNSQueries, prometheus.CounterValue, float64(n), action)
		}
		for reason, n := range map[string]uint64{"blocked": d.Blocked, "cname_blocked": d.CNAMEBlocked,
			"type_refused": d.TypeRefused, "empty": d.Empty, "malformed": d.Malformed,
			"unknown_source": d.UnknownSource, "rate_limited": d.RateLimited} {
			ch <- prometheus.MustNewConstMetric(descDNSRefusals, prometheus.CounterValue, float64(n), reason)
		}
		ch <- prometheus.MustNewConstMetric(descDNSDropped, prometheus.CounterValue, float64(d.Overloaded), "overloaded")
		ch <- prometheus.MustNewConstMetric(descDNSDropped, prometheus.CounterValue, float64(d.ConnsRefused), "tcp_connections")
		ch <- prometheus.MustNewConstMetric(descDNSUpstreamErrors, prometheus.CounterValue, float64(d.UpstreamErrors))
	}
	for _, d := range st.Drops {
		m.drops.live(d.Session, d.Packets, d.Bytes)
	}
	packets, bytes := m.drops.total()
	ch <- prometheus.MustNewConstMetric(descDropPackets, prometheus.CounterValue, float64(packets))
	ch <- prometheus.MustNewConstMetric(descDropBytes, prometheus.CounterValue, float64(bytes))
}

// dropTracker sums the gateway's drops over sessions into a counter that
// never goes down. A session's drops are seen two ways: its network's
// counters while the network lives (read at each scrape; they only grow),
// and the audit events written when the network is removed (one per
// destination, summed). Each is a lower bound of what the session's
// network blocked; the larger one counts. A removed session's count moves
// into the retired total.
type dropTracker struct {
	// scrapeMu is held for reading while a scrape reads the daemon's
	// state and records it, and for writing by retire.
	scrapeMu sync.RWMutex

	mu       sync.Mutex
	sessions map[string]*sessionDrops // +checklocks:mu
	retired  dropCount                // +checklocks:mu
}

type dropCount struct{ packets, bytes uint64 }

type sessionDrops struct{ live, audited dropCount }

func (s *sessionDrops) count() dropCount {
	return dropCount{max(s.live.packets, s.audited.packets), max(s.live.bytes, s.audited.bytes)}
}

func (t *dropTracker) entryLocked(id string) *sessionDrops {
	if t.sessions == nil {
		t.sessions = map[string]*sessionDrops{}
	}
	s := t.sessions[id]
	if s == nil {
		s = &sessionDrops{}
		t.sessions[id] = s
	}
	return s
}

// live records a session's counters as its network reports them now.
func (t *dropTracker) live(id string, packets, bytes uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.entryLocked(id)
	s.live.packets = max(s.live.packets, packets)
	s.live.bytes = max(s.live.bytes, bytes)
}

// audited adds one destination's drops from the audit written when the
// session's network was removed.
func (t *dropTracker) audited(id string, packets, bytes uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.entryLocked(id)
	s.audited.packets += packets
	s.audited.bytes += bytes
}

// retire moves a removed session's count into the retired total.
func (t *dropTracker) retire(id string) {
	t.scrapeMu.Lock()
	defer t.scrapeMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.sessions[id]; s != nil {
		c := s.count()
		t.retired.packets += c.packets
		t.retired.bytes += c.bytes
		delete(t.sessions, id)
	}
}

func (t *dropTracker) total() (packets, bytes uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	packets, bytes = t.retired.packets, t.retired.bytes
	for _, s := range t.sessions {
		c := s.count()
		packets += c.packets
		bytes += c.bytes
	}
	return packets, bytes
}

// capped is a counter vector that takes at most maxSeries label
// combinations; later new ones count under "other" in every label.
type capped struct {
	*prometheus.CounterVec
	others []string

	mu   sync.Mutex
	seen map[string]struct{} // +checklocks:mu
}

func newCapped(name, help string, labels ...string) *capped {
	others := make([]string, len(labels))
	for i := range others {
		others[i] = "other"
	}
	return &capped{
		CounterVec: prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels),
		others:     others, seen: map[string]struct{}{},
	}
}

func (c *capped) inc(values ...string) {
	key := ""
	for _, v := range values {
		key += v + "\x00"
	}
	c.mu.Lock()
	if _, ok := c.seen[key]; !ok {
		if len(c.seen) >= maxSeries {
			values = c.others
		} else {
			c.seen[key] = struct{}{}
		}
	}
	c.mu.Unlock()
	c.WithLabelValues(values...).Inc()
}
