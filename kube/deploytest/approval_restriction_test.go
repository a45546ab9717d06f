package deploytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// approvalCluster is the whole deployment applied to a real control
// plane, a Session running on node-b, and the pod-bound credentials of
// node-a and node-b.
type approvalCluster struct {
	admin, nodeA, nodeB client.Client
	// adminName is the administrator's user name, the decidedBy the
	// decider check wants of the SessionApprovals it creates.
	adminName string
}

func startApprovalCluster(t *testing.T) *approvalCluster {
	t.Helper()
	testutil.RequiresRoot(t)
	ctrllog.SetLogger(logr.Discard())
	ms := loadManifests(t, baseDeployment)
	ds, _ := daemonSet(t, ms)

	cp, sch, admin, strict, cs := startDeployCluster(t)
	ctx := t.Context()
	for _, m := range ms {
		if err := strict.Create(ctx, m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	kubetest.Eventually(t, time.Minute, "the CRDs served", func() (bool, string) {
		err := admin.List(ctx, &v1alpha1.SessionApprovalList{})
		return err == nil, fmt.Sprint(err)
	})
	self, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k := &approvalCluster{admin: admin, adminName: self.Status.UserInfo.Username}
	for node, c := range map[string]*client.Client{"node-a": &k.nodeA, "node-b": &k.nodeB} {
		pod := podOn(t, admin, &ds.Spec.Template, node)
		if *c, err = client.New(asToken(cp, token(t, cs, agent.LeaseNamespace, "airlock-node", pod)), client.Options{Scheme: sch}); err != nil {
			t.Fatal(err)
		}
	}
	// The leader Lease first: without it airlock-placement-leader
	// refuses every Session update, the administrator's included.
	leadAs(t, admin, "node-b_victim")
	victim(t, admin, "node-b", 40)
	kubetest.Eventually(t, 30*time.Second, "the node restriction in force", func() (bool, string) {
		err := attacks[0].do(ctx, k.nodeA, "node-b", true)
		return refusedByPolicy(err), fmt.Sprint(err)
	})
	return k
}

// decision creates, as the administrator, SessionApproval name allowing
// a request of Session on-node-b.
func (k *approvalCluster) decision(t *testing.T, name string) *v1alpha1.SessionApproval {
	t.Helper()
	ap := &v1alpha1.SessionApproval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.SessionApprovalSpec{SessionName: "on-node-b", ApprovalID: "0123456789abcdef",
			Decision: v1alpha1.DecisionAllow, DecidedBy: k.adminName},
	}
	if err := k.admin.Create(t.Context(), ap); err != nil {
		t.Fatal(err)
	}
	return ap
}

// writeStatus writes st as ap's status with c's credentials.
func writeApprovalStatus(t *testing.T, c client.Client, ap *v1alpha1.SessionApproval, st v1alpha1.SessionApprovalStatus) error {
	t.Helper()
	var got v1alpha1.SessionApproval
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(ap), &got); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	got.Status = st
	got.Status.DecidedAt = &now
	return c.Status().Update(t.Context(), &got)
}

// TestNodeRestrictionSessionApprovals applies the whole deployment and
// proves the node restriction on SessionApprovals' status by the attack,
// with node-a's pod-bound token against a SessionApproval of a Session
// on node-b: node-a cannot report it Applied in node-b's name (the user
// would be told it was allowed while node-b, which skips a SessionApproval
// with a status, never applies it), nor rewrite what node-b wrote of one;
// node-b writes its own outcome once. That node-a can still refuse it in
// its own name first is TestAttackOtherNodeDecidesSessionApproval's
// (-tags attackreview).
func TestNodeRestrictionSessionApprovals(t *testing.T) {
	k := startApprovalCluster(t)

	forged := k.decision(t, "forged")
	err := writeApprovalStatus(t, k.nodeA, forged, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: "node-b", State: "allowed"})
	if !refusedByPolicy(err) {
		t.Errorf("node-a's credentials reported a SessionApproval of node-b's Session Applied in node-b's name: %v, want a policy's refusal", err)
	}

	applied := k.decision(t, "applied")
	if err := writeApprovalStatus(t, k.nodeB, applied, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: "node-b", State: "denied"}); err != nil {
		t.Fatalf("node-b's credentials could not write what became of its own Session's SessionApproval: %v", err)
	}
	err = writeApprovalStatus(t, k.nodeA, applied, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: "node-a", State: "allowed"})
	if !refusedByPolicy(err) {
		t.Errorf("node-a's credentials rewrote the outcome node-b wrote: %v, want a policy's refusal", err)
	}
	err = writeApprovalStatus(t, k.nodeB, applied, v1alpha1.SessionApprovalStatus{Phase: v1alpha1.ApprovalApplied, Node: "node-b", State: "allowed"})
	if !refusedByPolicy(err) {
		t.Errorf("node-b's credentials wrote a SessionApproval's outcome twice: %v, want a policy's refusal", err)
	}
	var got v1alpha1.SessionApproval
	if err := k.admin.Get(t.Context(), client.ObjectKeyFromObject(applied), &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Node != "node-b" || got.Status.State != "denied" {
		t.Errorf("SessionApproval applied: status %+v, want node-b's denied", got.Status)
	}
}
