package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// layerPolicy is the layer of a revision's audit event.
const layerPolicy = "policy"

// Update revises a created or running session's policy, live. The revised
// policy goes through validation and admission as at create; its
// difference with the running policy (policies.Diff) is applied if every
// part of it can be: today, egress allow and deny entries (see
// egress.Perimeter.Revise). Anything else that differs refuses the
// revision as a whole, naming each field and why, and nothing changes. An
// applied revision gets the next policy version, is recorded in the
// session's record before its network is changed, and is one audit event
// (layer "policy", action "revised"); every event after it names the new
// version. A revision that changes nothing keeps the version.
func (d *Daemon) Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	ctx = log.With(ctx, "session", id)
	s.revising.Lock()
	defer s.revising.Unlock()
	s.mu.Lock()
	state, running, version := s.rec.State, s.rec.Policy.Clone(), s.rec.version()
	s.mu.Unlock()
	if state != api.StateRunning && state != api.StateCreated {
		return nil, fmt.Errorf("session %q is %s: only a created or running session's policy can be revised: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	p := *req.Policy.Clone()
	if len(p.Command) == 0 {
		// The running command stands; admission checks a complete policy.
		p.Command = running.Command
	}
	p.Pool, p.Terminal = running.Pool, running.Terminal
	warnings, err := d.admission.admit(&p)
	if err != nil {
		return nil, err
	}
	rev := policies.Diff(running, &p)
	if len(rev.Refused) > 0 {
		var parts []string
		for _, r := range rev.Refused {
			parts = append(parts, r.Field+": "+r.Reason)
		}
		return nil, fmt.Errorf("session %q: revision refused, nothing changed: %s: %w", id, strings.Join(parts, "; "), errdefs.ErrFailedPrecondition)
	}
	if !rev.Changed() {
		v := s.view()
		v.Warnings = warnings
		return v, nil
	}
	revised := policies.Revised(running, &p)
	next := version + 1

	// The record first: a daemon that dies before the network is revised
	// re-adopts the session under the revised policy (its DNS decisions
	// and its CIDR rules; see egress.Perimeter.Reconcile).
	s.mu.Lock()
	s.rec.Policy, s.rec.PolicyVersion = *revised, next
	err = s.saveLocked()
	if err != nil {
		s.rec.Policy, s.rec.PolicyVersion = *running, version
	}
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("session %q: record the revision: %w", id, err)
	}
	s.audit.SetPolicyVersion(next)
	sc := d.egressConfig(s, *revised, "")
	nr, err := d.egress.Revise(ctx, id, sc)
	if err != nil {
		// The record holds the revision: the session's DNS decisions
		// follow it; what failed is in the log and the audit.
		log.G(ctx).Error("revise egress", "error", err)
	}
	out := &api.Revision{Version: next, Previous: version, Allow: rev.Allow, Deny: rev.Deny,
		Unpinned: nr.Unpinned, ConnectionsCut: nr.Cut}
	fields := map[string]any{
		"previous_version": version,
		"allow":            rev.Allow,
		"deny":             rev.Deny,
		"connections_cut":  nr.Cut,
	}
	if len(nr.Unpinned) > 0 {
		fields["unpinned"] = nr.Unpinned
	}
	ev := api.AuditEvent{Session: id, Layer: layerPolicy, Action: "revised", Subject: "egress", PolicyVersion: next, Fields: fields}
	if err != nil {
		ev.Reason = "the network was not fully revised: " + err.Error()
	}
	s.audit.EmitControl(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("session %q: revision %d recorded, but its network was not fully revised: %w", id, next, err)
	}
	log.G(ctx).Info("policy revised", "version", next, "allow_added", rev.Allow.Added, "allow_removed", rev.Allow.Removed)
	v := s.view()
	v.Warnings, v.Revision = warnings, out
	return v, nil
}
