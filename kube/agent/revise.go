package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/containerd/errdefs"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// Labels of a local session that say which spec it was made from.
const (
	// LabelSessionGeneration is the Session's metadata.generation whose
	// spec the local session was created from.
	LabelSessionGeneration = "airlock.dev/session-generation"
	// LabelSessionSources is a digest of the Session's
	// spec.workspaceSources when it was created: they cannot change
	// while it runs.
	LabelSessionSources = "airlock.dev/session-sources"
)

// ConditionPolicy says which generation of a running Session's spec its
// policy is: True (reason Admitted at the start, Revised after a live
// revision) with that generation as its observedGeneration; False, reason
// RevisionRefused, when a change of the spec could not be applied to the
// running session, which runs on under the policy it had (the message
// says why, and which version that is). A change of spec.policy is applied
// as `airlock update` applies one on the node: validated and admitted by
// the node's admission policy, and only the parts a running session can
// change (egress, http rules, secrets, credentials, commit rules).
const (
	ConditionPolicy        = "PolicyApplied"
	ReasonAdmitted         = "Admitted"
	ReasonRevised          = "Revised"
	ReasonRevisionRefused  = "RevisionRefused"
	maxConditionMessageLen = 32 << 10
)

// sourcesDigest is the digest LabelSessionSources holds.
func sourcesDigest(srcs []v1alpha1.WorkspaceSource) string {
	b, _ := json.Marshal(srcs)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// judgedGeneration is the generation of s's spec that the node last acted
// on for its running local session v: the policy condition's, else the
// generation v was made from, else (a local session made by an agent
// without these labels) s's own: its spec is taken as what runs.
func judgedGeneration(s *v1alpha1.Session, v *api.Session) int64 {
	if c := meta.FindStatusCondition(s.Status.Conditions, ConditionPolicy); c != nil {
		return c.ObservedGeneration
	}
	if g, err := strconv.ParseInt(v.Labels[LabelSessionGeneration], 10, 64); err == nil {
		return g
	}
	return s.Generation
}

// revise applies a changed spec of Session s to its running local session
// v, live. It returns the local session as it now is and the policy
// condition to write (nil: none to change). An error is transient: the
// reconcile is tried again.
func (a *nodeAgent) revise(ctx context.Context, s *v1alpha1.Session, v *api.Session) (*api.Session, *metav1.Condition, error) {
	judged := judgedGeneration(s, v)
	if s.Generation <= judged {
		if meta.FindStatusCondition(s.Status.Conditions, ConditionPolicy) != nil {
			return v, nil, nil
		}
		return v, &metav1.Condition{Type: ConditionPolicy, Status: metav1.ConditionTrue, Reason: ReasonAdmitted, ObservedGeneration: judged,
			Message: fmt.Sprintf("the session runs generation %d's policy (version %d)", judged, v.PolicyVersion)}, nil
	}
	nv, err := a.reviseTo(ctx, s, v)
	switch {
	case err == nil:
		log.G(ctx).Info("Session's policy revised live", "id", v.ID, "generation", s.Generation, "version", nv.PolicyVersion)
		return nv, &metav1.Condition{Type: ConditionPolicy, Status: metav1.ConditionTrue, Reason: ReasonRevised, ObservedGeneration: s.Generation,
			Message: fmt.Sprintf("generation %d's policy applied to the running session: policy version %d", s.Generation, nv.PolicyVersion)}, nil
	case errdefs.IsUnavailable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return v, nil, err
	}
	log.G(ctx).Warn("Session's policy revision refused", "id", v.ID, "generation", s.Generation, "error", err)
	msg := fmt.Sprintf("generation %d not applied, nothing changed: %v; the session runs on under policy version %d", s.Generation, err, v.PolicyVersion)
	if len(msg) > maxConditionMessageLen {
		msg = msg[:maxConditionMessageLen]
	}
	return v, &metav1.Condition{Type: ConditionPolicy, Status: metav1.ConditionFalse, Reason: ReasonRevisionRefused, ObservedGeneration: s.Generation, Message: msg}, nil
}

// reviseTo revises v to s's spec: the policy the node would run s with,
// its workspace sources' workspaces as they run (they are fetched or
// bound once, and cannot change while the session runs).
func (a *nodeAgent) reviseTo(ctx context.Context, s *v1alpha1.Session, v *api.Session) (*api.Session, error) {
	digest, ok := v.Labels[LabelSessionSources]
	switch {
	case !ok && len(s.Spec.WorkspaceSources) > 0:
		return nil, fmt.Errorf("the local session %s was made by an older node agent, which did not record its workspace sources: its policy cannot be revised through the Session: %w", v.ID, errdefs.ErrFailedPrecondition)
	case ok && digest != sourcesDigest(s.Spec.WorkspaceSources):
		return nil, fmt.Errorf("spec.workspaceSources cannot change while the Session runs (they were fetched or bound when it started): %w", errdefs.ErrFailedPrecondition)
	}
	pol, err := sessionPolicy(s)
	if err != nil {
		return nil, err
	}
	// As at the start (fetchSources, volumeSources): a spec workspace
	// with a source's target is that source's, its directory filled in;
	// a source with none is appended.
	running := map[string]policies.Workspace{}
	for _, src := range s.Spec.WorkspaceSources {
		for _, w := range v.Policy.Workspaces {
			if filepath.Clean(w.Target) == filepath.Clean(src.Target) {
				running[filepath.Clean(src.Target)] = w
			}
		}
	}
	pol.Workspaces = slices.Clone(pol.Workspaces)
	filled := map[string]bool{}
	for i := range pol.Workspaces {
		t := filepath.Clean(pol.Workspaces[i].Target)
		if rw, ok := running[t]; ok && pol.Workspaces[i].HostPath == "" {
			pol.Workspaces[i].HostPath, filled[t] = rw.HostPath, true
		}
	}
	for _, w := range v.Policy.Workspaces {
		t := filepath.Clean(w.Target)
		if _, ok := running[t]; ok && !filled[t] {
			pol.Workspaces = append(pol.Workspaces, w)
		}
	}
	return a.d.Update(ctx, v.ID, api.UpdateRequest{Policy: pol})
}
