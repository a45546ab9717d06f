package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// reconcileApproval applies a SessionApproval whose Session runs on this
// node, once: it decides the held request in the name of
// approvalBy(ap) (which the daemon's audit records with the decision)
// and reports the outcome in the object's status. A decision it cannot
// apply is reported, not applied: its Session does not exist or is on no
// node (any agent reports that; they write the same), its Session has no
// session on this node, or the request is not one its session holds
// (decided before, or another session's: the message is the same for an
// id held elsewhere and an unknown one, so that a namespace learns
// nothing of another's requests). A SessionApproval whose Session runs
// on another node is left to that node's agent.
//
// What the Session's node did is recorded in the Session's
// status.decisions, which no other node may write, and in the
// SessionApproval's status unless some node wrote that first. A status
// written by another node before the Session's node looked at it is not
// taken for an answer: the node restriction cannot tell which node runs
// a SessionApproval's Session, so any node may write one first, and a
// node that then skipped it would let any other node refuse every
// decision taken through Kubernetes.
func (a *nodeAgent) reconcileApproval(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = log.With(ctx, "sessionapproval", req.String())
	var ap v1alpha1.SessionApproval
	if err := a.fresh.Get(ctx, req.NamespacedName, &ap); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if ap.DeletionTimestamp != nil || ap.Status.Phase != "" && ap.Status.Node == a.node {
		return reconcile.Result{}, nil
	}
	// Another node wrote its status: only the Session's node looks on.
	foreign := ap.Status.Phase != ""
	sessionRef := ap.Namespace + "/" + ap.Spec.SessionName
	var s v1alpha1.Session
	err := a.fresh.Get(ctx, client.ObjectKey{Namespace: ap.Namespace, Name: ap.Spec.SessionName}, &s)
	switch {
	case foreign && (apierrors.IsNotFound(err) || err == nil && s.Spec.NodeName != a.node):
		return reconcile.Result{}, nil
	case apierrors.IsNotFound(err):
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, nil, fmt.Sprintf("no Session %s", sessionRef))
	case err != nil:
		return reconcile.Result{}, err
	case s.Spec.NodeName == "":
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, nil, fmt.Sprintf("Session %s is not placed on a node: it holds no request", sessionRef))
	case s.Spec.NodeName != a.node:
		return reconcile.Result{}, nil
	}
	for _, d := range s.Status.Decisions {
		if d.UID == ap.UID {
			return reconcile.Result{}, nil // done before
		}
	}
	if foreign {
		log.G(ctx).Warn("SessionApproval's status was written by a node that does not run its Session; applying it all the same",
			"written_by", ap.Status.Node, "phase", ap.Status.Phase, "session_node", a.node)
	}
	v := a.local(ctx, s.UID)
	if v == nil {
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, fmt.Sprintf("Session %s has no session on node %s", sessionRef, a.node))
	}
	notHeld := fmt.Sprintf("no request %s is held for Session %s", ap.Spec.ApprovalID, sessionRef)
	by := approvalBy(&ap)
	store := a.d.Approvals()
	if got, ok := store.Get(ap.Spec.ApprovalID); ok && got.Session == v.ID && got.State != api.ApprovalPending {
		if got.By == by {
			// Decided by this object before its status was
			// written (the agent restarted in between).
			return reconcile.Result{}, a.approvalApplied(ctx, &ap, &s, got.State)
		}
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, fmt.Sprintf("request %s of Session %s was already %s by %s", ap.Spec.ApprovalID, sessionRef, got.State, got.By))
	}
	held, err := store.Held(ap.Spec.ApprovalID)
	if err != nil || held.Session != v.ID {
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, notHeld)
	}
	var decided api.Approval
	if ap.Spec.Decision == v1alpha1.DecisionRevise {
		decided, err = a.d.ApproveRevise(ctx, ap.Spec.ApprovalID, ap.Spec.Reason, by)
		if errdefs.IsFailedPrecondition(err) {
			if still, herr := store.Held(ap.Spec.ApprovalID); herr == nil && still.State == api.ApprovalPending {
				// No revision can allow it (or the session can no
				// longer be revised): it stays held, for allow or deny.
				return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, err.Error())
			}
		}
	} else {
		decided, err = store.Decide(ctx, ap.Spec.ApprovalID, ap.Spec.Decision == v1alpha1.DecisionAllow, ap.Spec.Reason, by)
	}
	switch {
	case errdefs.IsInvalidArgument(err):
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, err.Error())
	case errdefs.IsNotFound(err), errdefs.IsFailedPrecondition(err):
		// Decided or timed out since Held.
		got, _ := store.Get(ap.Spec.ApprovalID)
		return reconcile.Result{}, a.approvalRefused(ctx, &ap, &s, fmt.Sprintf("request %s of Session %s was already %s by %s", ap.Spec.ApprovalID, sessionRef, got.State, got.By))
	case err != nil:
		return reconcile.Result{}, err
	}
	log.G(ctx).Info("held request decided through Kubernetes", "id", v.ID, "approval", decided.ID, "state", decided.State, "by", by, "revised_to", decided.RevisedTo)
	if decided.RevisedTo > 0 {
		return reconcile.Result{}, a.approvalOutcome(ctx, &ap, &s, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: a.node, State: decided.State,
			Message: fmt.Sprintf("the session's policy was revised to version %d: requests like this one are allowed from now on", decided.RevisedTo)})
	}
	return reconcile.Result{}, a.approvalApplied(ctx, &ap, &s, decided.State)
}

// approvalBy is who a SessionApproval's decision is recorded as taken by,
// in the approval and in the session's audit: its decidedBy (a user
// name, proven by the admission policy that checks it against the
// creator, claimed without it), and the object.
func approvalBy(ap *v1alpha1.SessionApproval) string {
	who := ap.Spec.DecidedBy
	if who == "" {
		who = "(not named)"
	}
	return fmt.Sprintf("kubernetes user %q through SessionApproval %s/%s (uid %s)", who, ap.Namespace, ap.Name, ap.UID)
}

func (a *nodeAgent) approvalApplied(ctx context.Context, ap *v1alpha1.SessionApproval, s *v1alpha1.Session, state string) error {
	return a.approvalOutcome(ctx, ap, s, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: a.node, State: state})
}

// approvalRefused reports a decision not applied; s is its Session on
// this node, nil when it has none here.
func (a *nodeAgent) approvalRefused(ctx context.Context, ap *v1alpha1.SessionApproval, s *v1alpha1.Session, why string) error {
	log.G(ctx).Info("SessionApproval not applied", "reason", why)
	return a.approvalOutcome(ctx, ap, s, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalRefused, Node: a.node, Message: why})
}

// approvalOutcome records st, what became of ap: in the status of s,
// its Session on this node (when it has one), then in ap's own status.
func (a *nodeAgent) approvalOutcome(ctx context.Context, ap *v1alpha1.SessionApproval, s *v1alpha1.Session, st v1alpha1.SessionApprovalStatus) error {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	st.DecidedAt = &now
	if s != nil {
		if err := a.recordDecision(ctx, s, ap, st); err != nil {
			return err
		}
	}
	return a.writeApprovalStatus(ctx, ap, st)
}

// maxDecisions is how many decisions a Session's status keeps.
const maxDecisions = 16

// recordDecision adds what became of ap to the status of s (a Session on
// this node), from a fresh read, again on a conflict; the oldest goes
// past maxDecisions.
func (a *nodeAgent) recordDecision(ctx context.Context, s *v1alpha1.Session, ap *v1alpha1.SessionApproval, st v1alpha1.SessionApprovalStatus) error {
	d := v1alpha1.AppliedDecision{Approval: ap.Name, UID: ap.UID, ApprovalID: ap.Spec.ApprovalID,
		Phase: st.Phase, State: st.State, Message: clip(st.Message, maxStatusMessage), At: *st.DecidedAt}
	_, err := writeStatus(ctx, a.c, a.fresh, client.ObjectKeyFromObject(s), s, func(f *v1alpha1.Session) bool {
		if f.UID != s.UID || f.Spec.NodeName != a.node {
			return false
		}
		var changed bool
		f.Status.Decisions, changed = withDecision(f.Status.Decisions, d)
		return changed
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("Session %s status: record SessionApproval %s: %w", client.ObjectKeyFromObject(s), ap.Name, err)
	}
	return err
}

// withDecision is list with d at its end, unless it holds d's
// SessionApproval already, and no more than maxDecisions long.
func withDecision(list []v1alpha1.AppliedDecision, d v1alpha1.AppliedDecision) ([]v1alpha1.AppliedDecision, bool) {
	for _, e := range list {
		if e.UID == d.UID {
			return list, false
		}
	}
	out := append(slices.Clone(list), d)
	if len(out) > maxDecisions {
		out = out[len(out)-maxDecisions:]
	}
	return out, true
}

// writeApprovalStatus writes st as ap's status unless it has one (another
// agent, or this one before, decided what became of it), from a fresh
// read, again on a conflict.
func (a *nodeAgent) writeApprovalStatus(ctx context.Context, ap *v1alpha1.SessionApproval, st v1alpha1.SessionApprovalStatus) error {
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var f v1alpha1.SessionApproval
		if err := a.fresh.Get(ctx, client.ObjectKeyFromObject(ap), &f); err != nil {
			return err
		}
		if f.UID != ap.UID || f.Status.Phase != "" {
			return nil
		}
		f.Status = st
		return a.c.Status().Update(ctx, &f)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("SessionApproval %s status: %w", client.ObjectKeyFromObject(ap), err)
	}
	return err
}
