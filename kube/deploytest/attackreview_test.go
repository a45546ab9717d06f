//go:build attackreview

package deploytest

import (
	"testing"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// TestAttackOtherNodeDecidesSessionApproval: with node-a's pod-bound
// token, refuse, in node-a's own name, a SessionApproval for a Session
// that runs on node-b, before node-b's agent looks at it. The node
// restriction cannot see which node runs the Session (CEL reads one
// object), so it lets this through. node-b's agent applies the decision
// all the same and records it in the Session's status.decisions, which
// node-a may not write (TestAttackOtherNodeAnswersFirst, kube/agent):
// what is left is the false answer that kubectl shows on the
// SessionApproval.
//
// Run with -tags attackreview: it fails on the shipped deployment.
func TestAttackOtherNodeDecidesSessionApproval(t *testing.T) {
	k := startApprovalCluster(t)
	ap := k.decision(t, "refused-first")
	err := writeApprovalStatus(t, k.nodeA, ap, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalRefused, Node: "node-a",
		Message: "no request 0123456789abcdef is held for Session default/on-node-b"})
	if !refusedByPolicy(err) {
		t.Errorf("node-a's credentials refused a SessionApproval for a Session on node-b before node-b applied it: %v, want a policy's refusal", err)
	}
}
