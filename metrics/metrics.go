// Package metrics is airlockd's Prometheus instrumentation: the metrics
// it serves on --metrics-listen (path /metrics), each named airlock_*.
//
// Two kinds of value reach it:
//   - events, counted as they happen: every audit event a session's log
//     is given (AuditEvent, an internal/audit observer), credential events
//     (Credential), and the latency of session starts and teardowns;
//   - state, read at scrape time from the daemon (SetSource): sessions by
//     state, warm pools, pending approvals, the DNS proxy's counters and
//     the gateway's drop counters of the sessions whose network lives.
//
// A nil *Metrics is a daemon without metrics: every method does nothing.
// Label values come from the daemon's own vocabulary (layers, actions,
// rules, reasons); each vector still accepts at most maxSeries label
// combinations and counts the rest under "other", so that no value a
// session chooses can grow the series without bound. The one label that
// names sessions, on airlock_audit_bytes, is read from the daemon's list
// at scrape time: a removed session's series is gone with it.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-sandbox/airlock/api"
)

// maxSeries bounds the label combinations of each event counter.
const maxSeries = 256

// scrapeTimeout bounds how long a scrape waits for the daemon's state.
const scrapeTimeout = 10 * time.Second

// Metrics holds airlockd's metrics.
type Metrics struct {
	reg *prometheus.Registry

	start    *prometheus.HistogramVec
	queue    *prometheus.HistogramVec
	teardown *prometheus.HistogramVec

	auditEvents   *capped
	sessionsEnded *capped
	l7Requests    *capped
	l7Conns       *capped
	apprHeld      prometheus.Counter
	apprDecided   *capped
	commitRejects *capped
	credEvents    *capped
	credRejects   *capped

	drops dropTracker

	srcMu  sync.Mutex
	source func(ctx context.Context) State // +checklocks:srcMu
}

// New returns the metrics, registered in a registry of their own with Go's
// runtime and the process's metrics.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.start = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "airlock_session_start_duration_seconds",
		Help: "Time a successful create request took, from admission until the session was created (started=\"false\") or its command running (started=\"true\"); warm=\"true\" when it took a pooled sandbox.",
		// From a warm take (milliseconds) to a cold start of a large
		// image (tens of seconds).
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"warm", "started"})
	m.queue = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "airlock_session_start_queue_seconds",
		Help:    "Time a sandbox waited for its turn to be prepared (airlockd --max-preparing), by kind: create (a cold create request) or refill (a warm pool's filler; it lets creates go first). Zero when a place was free.",
		Buckets: []float64{0, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
	}, []string{"kind"})
	m.teardown = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "airlock_session_teardown_duration_seconds",
		Help:    "Time a session's teardown took: phase=\"exit\" when its sandbox ended (credentials, approvals, network, task, workspace on_exit), phase=\"remove\" when it was removed (everything it owned, its directory last).",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"phase"})
	m.auditEvents = newCapped("airlock_audit_events_total", "Audit events the sessions' logs were given, by layer and action, each repeated decision counted (also those merged in the log, or over its cap).", "layer", "action")
	m.sessionsEnded = newCapped("airlock_sessions_ended_total", "Sessions that ended, by reason (exited, stopped, timeout, oom, lost, shim-lost).", "reason")
	m.l7Requests = newCapped("airlock_l7_requests_total", "HTTP requests the L7 gateway decided, by decision (allowed, denied, approved, refused, failed, exfiltration).", "decision")
	m.l7Conns = newCapped("airlock_l7_connections_total", "Connections the L7 gateway passed through unseen or refused, by decision.", "decision")
	m.apprHeld = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "airlock_approvals_held_total",
		Help: "Requests held for an approval.",
	})
	m.apprDecided = newCapped("airlock_approvals_decided_total", "Approvals decided, by decision (allowed, denied) and who decided: person, approver, timeout (no decision in time), cancelled, session_ended, limit (refused without a hold), daemon_stopping.", "decision", "by")
	m.commitRejects = newCapped("airlock_commit_rejections_total", "Workspace changes a commit rejected, by rule (protect, protect_refs, deny_read, special_file, ...).", "rule")
	m.credEvents = newCapped("airlock_credential_events_total", "Credential events, by event (minted, refreshed, revoked, rejected) and issuer.", "event", "issuer")
	m.credRejects = newCapped("airlock_credential_rejections_total", "Tokens a service refused and reported (verification failures), by reason (malformed, bad_signature, expired, not_yet_valid, wrong_audience, wrong_issuer, revoked, scope_denied, unavailable; other for a reason the verifier does not know).", "reason")
	m.reg.MustRegister(m.start, m.queue, m.teardown, m.apprHeld,
		m.auditEvents, m.sessionsEnded, m.l7Requests, m.l7Conns, m.apprDecided,
		m.commitRejects, m.credEvents, m.credRejects,
		stateCollector{m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Handler serves the metrics in Prometheus's text format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Gatherer returns the registry, for tests.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// SetSource sets the function a scrape reads the daemon's state from.
func (m *Metrics) SetSource(fn func(ctx context.Context) State) {
	if m == nil {
		return
	}
	m.srcMu.Lock()
	m.source = fn
	m.srcMu.Unlock()
}

// ObserveStart records a successful create that took d.
func (m *Metrics) ObserveStart(d time.Duration, warm, started bool) {
	if m == nil {
		return
	}
	m.start.WithLabelValues(strconv.FormatBool(warm), strconv.FormatBool(started)).Observe(d.Seconds())
}

// Kinds of the sandboxes waiting to be prepared.
const (
	QueueCreate = "create"
	QueueRefill = "refill"
)

// ObserveStartQueue records how long a sandbox of kind waited for its
// turn to be prepared.
func (m *Metrics) ObserveStartQueue(kind string, d time.Duration) {
	if m == nil {
		return
	}
	m.queue.WithLabelValues(kind).Observe(d.Seconds())
}

// Teardown phases.
const (
	PhaseExit   = "exit"
	PhaseRemove = "remove"
)

// ObserveTeardown records a teardown of phase PhaseExit or PhaseRemove
// that took d.
func (m *Metrics) ObserveTeardown(phase string, d time.Duration) {
	if m == nil {
		return
	}
	m.teardown.WithLabelValues(phase).Observe(d.Seconds())
}

// Credential counts a credential event of kind (minted, refreshed,
// revoked, rejected) from issuer; reason is a rejection's, already one
// of the reasons the verifier knows or "other".
func (m *Metrics) Credential(kind, issuer, reason string) {
	if m == nil {
		return
	}
	m.credEvents.inc(kind, issuer)
	if kind == "rejected" {
		m.credRejects.inc(reason)
	}
}

// SessionRemoved forgets session id: what its network's drops counted
// stays in the total.
func (m *Metrics) SessionRemoved(id string) {
	if m == nil {
		return
	}
	m.drops.retire(id)
}

// AuditEvent counts an audit event a session's log was given. It is an
// internal/audit observer: quick, and it keeps nothing of ev.
func (m *Metrics) AuditEvent(ev *api.AuditEvent) {
	if m == nil {
		return
	}
	m.auditEvents.inc(ev.Layer, ev.Action)
	switch ev.Layer {
	case "session":
		if ev.Action == "ended" {
			m.sessionsEnded.inc(ev.Reason)
		}
	case "l7":
		if field(ev, "kind") == "request" {
			m.l7Requests.inc(ev.Action)
		} else {
			m.l7Conns.inc(ev.Action)
		}
	case "approval":
		switch ev.Action {
		case "held":
			m.apprHeld.Inc()
		case "allowed", "denied":
			m.apprDecided.inc(ev.Action, decidedBy(field(ev, "by")))
		}
	case "fs":
		if ev.Action == "rejected" {
			m.commitRejects.inc(field(ev, "rule"))
		}
	case "net":
		if ev.Action == "dropped" {
			p, _ := number(ev.Fields["packets"])
			b, _ := number(ev.Fields["bytes"])
			m.drops.audited(ev.Session, p, b)
		}
	}
}

// field returns ev's field k if it is a string.
func field(ev *api.AuditEvent, k string) string {
	s, _ := ev.Fields[k].(string)
	return s
}

// number reads a count from an event's field, as the daemon sets it or
// as JSON decodes it.
func number(v any) (uint64, bool) {
	switch n := v.(type) {
	case uint64:
		return n, true
	case uint32:
		return uint64(n), true
	case int:
		return uint64(max(n, 0)), true
	case int64:
		return uint64(max(n, 0)), true
	case float64:
		if n >= 0 {
			return uint64(n), true
		}
	}
	return 0, false
}

// decidedBy maps an approval's "by" (a person's name, or one of the
// store's own deciders) to a bounded label.
func decidedBy(by string) string {
	switch by {
	case "timeout", "cancelled", "limit", "approver":
		return by
	case "session ended":
		return "session_ended"
	case "daemon stopping":
		return "daemon_stopping"
	}
	return "person"
}
