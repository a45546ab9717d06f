package agent_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestAttackOtherNodeAnswersFirst: any node may write a SessionApproval's
// status (the node restriction cannot see which node runs its Session),
// and the Session's node skipped every SessionApproval with a status, so
// a node that wrote "Refused" in its own name first kept the user's
// decision from ever being applied. Here another node's answer is written
// while the Session's node is frozen (SIGSTOP), before it saw the
// SessionApproval: once it goes on, it applies the decision all the
// same, records it in the Session's status.decisions (which no other
// node may write), and leaves the other node's status as it is.
func TestAttackOtherNodeAnswersFirst(t *testing.T) {
	k, n, ask := askNode(t)
	k.create("first", []string{"sh", "-c", "curl -s -o /dev/null --max-time 170 -X POST https://api.sx.test/x/deploy & sleep 300"}, ask)
	var held v1alpha1.PendingApproval
	kubetest.Eventually(t, 90*time.Second, "a held request in status", func() (bool, string) {
		s := k.get("first")
		if len(s.Status.PendingApprovals) == 1 {
			held = s.Status.PendingApprovals[0]
		}
		return held.ID != "", fmt.Sprintf("%+v", s.Status)
	})

	n.Signal(syscall.SIGSTOP)
	stopped := true
	defer func() {
		if stopped {
			n.Signal(syscall.SIGCONT)
		}
	}()
	ap := &v1alpha1.SessionApproval{ObjectMeta: metav1.ObjectMeta{Name: "allow-it", Namespace: "default"},
		Spec: v1alpha1.SessionApprovalSpec{SessionName: "first", ApprovalID: held.ID, Decision: v1alpha1.DecisionAllow, DecidedBy: "alice"}}
	if err := k.c.Create(t.Context(), ap); err != nil {
		t.Fatal(err)
	}
	forged := v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalRefused, Node: "node-evil",
		Message: "no request " + held.ID + " is held for Session default/first"}
	ap.Status = forged
	if err := k.c.Status().Update(t.Context(), ap); err != nil {
		t.Fatal(err)
	}
	n.Signal(syscall.SIGCONT)
	stopped = false

	var s *v1alpha1.Session
	kubetest.Eventually(t, 60*time.Second, "the decision in the Session's status.decisions", func() (bool, string) {
		s = k.get("first")
		return len(s.Status.Decisions) == 1, fmt.Sprintf("%+v", s.Status)
	})
	d := s.Status.Decisions[0]
	if d.Approval != "allow-it" || d.UID != ap.UID || d.ApprovalID != held.ID || d.Phase != v1alpha1.ApprovalApplied || d.State != api.ApprovalAllowed {
		t.Errorf("decision recorded as %+v, want allow-it (uid %s) Applied, allowed, for %s", d, ap.UID, held.ID)
	}
	kubetest.Eventually(t, 30*time.Second, "no held request in status", func() (bool, string) {
		s := k.get("first")
		return len(s.Status.PendingApprovals) == 0, fmt.Sprintf("%+v", s.Status.PendingApprovals)
	})
	if l, err := n.API.ListApprovals(t.Context(), ""); err != nil || len(l) != 0 {
		t.Errorf("held on the node after the decision: %+v (%v)", l, err)
	}
	// The other node's status stays: the Session's record is the one to
	// trust.
	var got v1alpha1.SessionApproval
	if err := k.c.Get(t.Context(), client.ObjectKeyFromObject(ap), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Node != forged.Node || got.Status.Phase != forged.Phase {
		t.Errorf("SessionApproval status %+v, want the other node's left as it was", got.Status)
	}
	// Looked at again (the agent's resync), it is not applied twice.
	time.Sleep(2 * time.Second)
	if s := k.get("first"); len(s.Status.Decisions) != 1 {
		t.Errorf("decisions after another look: %+v", s.Status.Decisions)
	}
}
