package daemon

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"unicode"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/policies/repair"
)

// maxCachedRepairs bounds the repairs a session remembers.
const maxCachedRepairs = 256

// repairCache remembers the repairs of a session's refusals under one
// policy version, so that a flood of identical refusals (a lookup retried)
// computes its repair once.
type repairCache struct {
	mu      sync.Mutex
	version int                        // +checklocks:mu
	m       map[string]policies.Repair // +checklocks:mu
}

// repairFor returns the smallest revision of the session's policy, as it
// is now, that allows a (repair.For), the policy revised by it (nil if
// there is nothing to apply) and the policy's version.
func (s *session) repairFor(a repair.Action) (policies.Repair, *policies.Policy, int) {
	s.mu.Lock()
	p, version := s.rec.Policy.Clone(), s.rec.version()
	s.mu.Unlock()
	r, revised := repair.For(p, a)
	return r, revised, version
}

// cachedRepair is repairFor's repair, remembered for the policy's version.
func (s *session) cachedRepair(a repair.Action) policies.Repair {
	s.mu.Lock()
	version := s.rec.version()
	s.mu.Unlock()
	key := fmt.Sprintf("%#v", a)
	c := &s.repairs
	c.mu.Lock()
	if c.version == version {
		if r, ok := c.m[key]; ok {
			c.mu.Unlock()
			return r
		}
	}
	c.mu.Unlock()
	r, _, v := s.repairFor(a)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version != v || len(c.m) >= maxCachedRepairs {
		c.version, c.m = v, map[string]policies.Repair{}
	}
	c.m[key] = r
	return r
}

// withRepair is ev with the repair of the action it refused (field
// "repair"), when it is a refusal a policy decides (repair.FromEvent).
func (s *session) withRepair(ev api.AuditEvent) api.AuditEvent {
	a, ok := repair.FromEvent(ev)
	if !ok {
		return ev
	}
	f := maps.Clone(ev.Fields)
	if f == nil {
		f = map[string]any{}
	}
	f["repair"] = s.cachedRepair(a)
	ev.Fields = f
	return ev
}

// heldAction is the action of a request held for approval.
func heldAction(host, method, path string, refs []string) repair.Action {
	return repair.Action{Kind: repair.KindHTTP, Name: host, Method: method, Path: path, Refs: refs}
}

// repairing is emit with the repair added to each refusal.
func (s *session) repairing(emit func(context.Context, api.AuditEvent)) func(context.Context, api.AuditEvent) {
	return func(ctx context.Context, ev api.AuditEvent) { emit(ctx, s.withRepair(ev)) }
}

// ApproveRevise approves the held request id by a revision of its
// session's policy: the request's repair, computed again against the
// policy as it is now, is applied as by Update (the revision's audit event
// names the approval and who approved), then the request is allowed, in
// the name of by, under the new version, as every later request like it
// is. A repair that no policy change or no revision of a running session
// can make is refused (errdefs.ErrFailedPrecondition), and nothing
// changes: the request stays held. A request the policy allows already (a
// revision since it was held) is allowed without a revision.
func (d *Daemon) ApproveRevise(ctx context.Context, id, reason, by string) (api.Approval, error) {
	held, err := d.approvals.Held(id)
	if err != nil {
		return api.Approval{}, err
	}
	var r policies.Repair
	v, err := d.update(ctx, held.Session, func(running *policies.Policy) (*policies.Policy, error) {
		var revised *policies.Policy
		r, revised = repair.For(running, heldAction(held.Host, held.Method, held.Path, held.Refs))
		switch {
		case r.Allowed:
			return running, nil
		case revised == nil || !r.Revisable:
			return nil, fmt.Errorf("approval %s cannot be made a revision, nothing changed and the request is still held (approve or deny it): %s: %w",
				id, r.Reason, errdefs.ErrFailedPrecondition)
		}
		return revised, nil
	}, map[string]any{"approval": id, "approved_by": by})
	if err != nil {
		return api.Approval{}, err
	}
	why := fmt.Sprintf("allowed under policy version %d", v.PolicyVersion)
	if !r.Allowed {
		why = fmt.Sprintf("approved by revising the policy to version %d: %s", v.PolicyVersion, r.Summary())
	}
	if reason != "" {
		why = reason + "; " + why
	}
	a, err := d.approvals.Decide(ctx, id, true, fitReason(why), by)
	if errdefs.IsFailedPrecondition(err) {
		// The revision itself may have decided it first: the L7 gateway
		// decides a held request again under revised rules that no
		// longer ask about it.
		if got, ok := d.approvals.Get(id); ok && got.State == api.ApprovalAllowed {
			a, err = got, nil
		}
	}
	if err != nil {
		return api.Approval{}, fmt.Errorf("the policy of session %s is revised to version %d, but approval %s: %w", held.Session, v.PolicyVersion, id, err)
	}
	if !r.Allowed {
		a.RevisedTo, a.Repair = v.PolicyVersion, &r
	}
	return a, nil
}

// fitReason is r without control characters, at most
// approvals.MaxReason bytes.
func fitReason(r string) string {
	r = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return '?'
		}
		return c
	}, strings.ToValidUTF8(r, "?"))
	if len(r) > approvals.MaxReason {
		r = strings.ToValidUTF8(r[:approvals.MaxReason-len("…")], "") + "…"
	}
	return r
}
