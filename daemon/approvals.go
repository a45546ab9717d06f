package daemon

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/policies"
)

// Approvals returns the store of requests held for a decision, which the
// API lists, follows and decides.
func (d *Daemon) Approvals() *approvals.Store { return d.approvals }

// askApproval holds one of the session's requests until it is decided
// (approvals.Store.Ask): the function the L7 gateway's ask rules call,
// given to the perimeter with the session. It fills in the session, the
// manifest's approval timeout and the session's audit log; the caller
// gives the request's method, host, path, rule and refs.
func (s *session) askApproval(ctx context.Context, r approvals.Request) approvals.Decision {
	s.mu.Lock()
	r.Session = s.rec.ID
	r.Timeout = approvalTimeout(s.rec.Policy.Approval)
	s.mu.Unlock()
	r.Audit = s.audit.Emit
	return s.d.approvals.Ask(ctx, r)
}

// approvalTimeout is how long a request waits for a decision under a.
func approvalTimeout(a *policies.Approval) time.Duration {
	if a == nil || a.Timeout <= 0 {
		return policies.DefaultApprovalTimeout.Std()
	}
	return a.Timeout.Std()
}
