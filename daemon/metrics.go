package daemon

import (
	"context"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/metrics"
)

// newAudit returns the audit log of session directory dir, capped at
// limit, whose events the metrics count (when the daemon has metrics) and
// tally counts (when not nil).
func (d *Daemon) newAudit(dir string, limit int64, tally *auditTally) *audit.Log {
	m := d.cfg.Metrics
	var a *audit.Log
	switch {
	case m == nil && tally == nil:
		a = audit.New(dir, limit)
	case tally == nil:
		a = audit.New(dir, limit, audit.WithObserver(m.AuditEvent))
	case m == nil:
		a = audit.New(dir, limit, audit.WithObserver(tally.observe))
	default:
		a = audit.New(dir, limit, audit.WithObserver(func(ev *api.AuditEvent) {
			m.AuditEvent(ev)
			tally.observe(ev)
		}))
	}
	// A session's policy is version 1 until a revision; a log of one
	// revised before is given its version by the caller.
	a.SetPolicyVersion(1)
	return a
}

// countCredential counts a credential event. A rejection's reason is the
// reporting service's word: one the verifier does not know counts as
// "other".
func (d *Daemon) countCredential(e credentials.Event) {
	if d.cfg.Metrics == nil {
		return
	}
	reason := ""
	if e.Kind == credentials.EventRejected {
		reason = "other"
		if verify.ErrorForReason(e.Reason) != nil {
			reason = e.Reason
		}
	}
	d.cfg.Metrics.Credential(string(e.Kind), e.Issuer, reason)
}

// metricsState is what a scrape of the metrics reads: the sessions and
// their audit logs' sizes, the pools, the pending approvals, the DNS
// proxy's counters and the drops of the sessions whose network lives.
func (d *Daemon) metricsState(ctx context.Context) metrics.State {
	d.mu.Lock()
	all := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		all = append(all, s)
	}
	d.mu.Unlock()
	var st metrics.State
	for _, s := range all {
		s.mu.Lock()
		ms := metrics.Session{ID: s.rec.ID, State: s.rec.State, Review: s.rec.Review}
		s.mu.Unlock()
		ms.AuditBytes = s.audit.Size()
		st.Sessions = append(st.Sessions, ms)
		if ms.State != api.StateRunning && ms.State != api.StateCreated {
			continue
		}
		if packets, bytes, ok := d.egress.DropTotals(ctx, ms.ID); ok {
			st.Drops = append(st.Drops, metrics.Drops{Session: ms.ID, Packets: packets, Bytes: bytes})
		}
	}
	st.QueuedCreates, st.QueuedRefills = d.starts.waiting()
	for _, p := range d.pools.list() {
		st.Pools = append(st.Pools, metrics.Pool{Key: p.Key, Label: p.Label, Size: p.Size, Ready: p.Ready,
			Hits: p.Hits, Misses: p.Misses, Discarded: p.Discarded, Preparing: p.Preparing})
	}
	st.ApprovalsPending = d.approvals.Pending()
	if ds, ok := d.egress.DNSStats(); ok {
		st.DNS = &metrics.DNS{
			Allowed: ds.Allowed, Refused: ds.Refused, Failed: ds.Failed,
			Blocked: ds.Blocked, CNAMEBlocked: ds.CNAMEBlocked, TypeRefused: ds.TypeRefused, Empty: ds.Empty,
			Malformed: ds.Malformed, UnknownSource: ds.UnknownSource, RateLimited: ds.RateLimited,
			Overloaded: ds.Overloaded, ConnsRefused: ds.ConnsRefused, UpstreamErrors: ds.UpstreamErrors,
		}
	}
	return st
}
