package daemon

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/policies"
)

// runningEgress tells the perimeter's Reconcile the network configuration
// of a session whose sandbox lives (running, or created and waiting for
// its command); nil for any other, whose network is removed.
func (d *Daemon) runningEgress(id string) *egress.SessionConfig {
	s, err := d.get(id)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	state := s.rec.State
	p := s.rec.Policy
	s.mu.Unlock()
	if state != api.StateRunning && state != api.StateCreated {
		return nil
	}
	sc := d.egressConfig(s, p, "")
	sc.Resolved = resolvedFromAudit(filepath.Join(s.dir, audit.File))
	return &sc
}

// resolvedFromAudit reads the names a session resolved, and the addresses
// pinned for them, back from its audit log (the DNS proxy's "allowed"
// events), for a restarted daemon: a revision then knows which name each
// pinned address is for. A log that cannot be read gives what it had.
func resolvedFromAudit(path string) []egress.Resolved {
	var out []egress.Resolved
	_ = audit.Each(context.Background(), path, func(raw json.RawMessage) error {
		var ev struct {
			Time    time.Time `json:"time"`
			Layer   string    `json:"layer"`
			Action  string    `json:"action"`
			Subject string    `json:"subject"`
			Fields  struct {
				Answers []netip.Addr `json:"answers"`
				CNAMEs  []string     `json:"cnames"`
				PinTTL  uint32       `json:"pin_ttl"`
			} `json:"fields"`
		}
		if json.Unmarshal(raw, &ev) != nil || ev.Layer != "dns" || ev.Action != "allowed" || len(ev.Fields.Answers) == 0 {
			return nil
		}
		out = append(out, egress.Resolved{Name: ev.Subject, CNAMEs: ev.Fields.CNAMEs, Addrs: ev.Fields.Answers,
			Expires: ev.Time.Add(time.Duration(ev.Fields.PinTTL) * time.Second)})
		return nil
	})
	return out
}

// egressConfig is session s's configuration for the perimeter, its
// resolv.conf in dir: with the session's CA and secrets (see prepareL7
// and reopenL7) for the L7 gateway.
func (d *Daemon) egressConfig(s *session, p policies.Policy, dir string) egress.SessionConfig {
	sc := egress.SessionConfig{Egress: p.Egress, Dir: dir, Audit: egressAudit(s), Ask: s.askL7,
		AskTimeout: approvalTimeout(p.Approval), RawPackets: rawPackets(p.Capabilities)}
	s.mu.Lock()
	defer s.mu.Unlock()
	sc.PolicyVersion = s.rec.version()
	if s.ca != nil {
		// Never a nil *CA in the interface: the gateway tells "no CA"
		// by a nil Issuer.
		sc.CA = s.ca
	}
	if s.secrets != nil {
		sc.Secrets = func() []egress.Secret {
			s.mu.Lock()
			defer s.mu.Unlock()
			return gatewaySecrets(s.secrets)
		}
	}
	return sc
}

// layerL7 is the layer of the L7 gateway's audit events
// (egress.L7AuditEvent).
const layerL7 = "l7"

// egressAudit records the perimeter's events in session s's log: DNS
// answers and refusals and blocked connections are decisions, merged with
// identical ones within the log's window; the L7 gateway's events (layer
// "l7") are its action log, one event per connection or request it
// decided, never merged, so that each request's decision is in the log
// when the request is answered. A refusal carries its repair.
func egressAudit(s *session) egress.Audit {
	a := s.audit
	return func(ctx context.Context, ev api.AuditEvent) {
		ev = s.withRepair(ev)
		if ev.Layer == layerL7 {
			a.Emit(ctx, ev)
			return
		}
		a.EmitDecision(ctx, ev)
	}
}

// askL7 holds a request the L7 gateway's rules ask about, as an approval
// of the session's.
func (s *session) askL7(ctx context.Context, a egress.Ask) egress.AskDecision {
	var revised chan approvals.Revision
	if a.Revised != nil {
		// A revision's decision, passed on while the request is held.
		revised = make(chan approvals.Revision, 1)
		held, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case d := <-a.Revised:
				revised <- approvals.Revision{Allow: d.Allow, By: d.By, Reason: d.Reason}
			case <-held.Done():
			}
		}()
	}
	r := s.cachedRepair(heldAction(a.Host, a.Method, a.Path, a.Refs))
	d := s.askApproval(ctx, approvals.Request{Method: a.Method, Host: a.Host, Path: a.Path, Rule: a.Rule, Refs: a.Refs, Repair: &r,
		Body: a.Body, BodyTruncated: a.BodyTruncated, ContentType: a.ContentType, ContentEncoding: a.ContentEncoding,
		Query: a.Query, QueryTruncated: a.QueryTruncated, Headers: a.Headers, HeadersTruncated: a.HeadersTruncated,
		Revised: revised})
	return egress.AskDecision{Allow: d.Allow, Reason: d.Reason, By: d.By, ID: d.ID}
}

// rawPackets reports whether caps let the sandbox write packets of its
// own (egress.SessionConfig.RawPackets).
func rawPackets(caps []string) bool {
	for _, c := range caps {
		switch policies.NormalizeCapability(c) {
		case "CAP_NET_RAW", "CAP_NET_ADMIN":
			return true
		}
	}
	return false
}
