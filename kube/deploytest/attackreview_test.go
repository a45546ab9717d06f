//go:build attackreview

package deploytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestAttackOtherNodeDecidesSessionApproval applies the whole deployment
// (node restriction and decider check included) and, with node-a's
// pod-bound token, writes the status of SessionApprovals for a Session
// that runs on node-b. The agent of node-b skips every SessionApproval
// whose status.phase is set (approval.go), so whoever writes it first
// decides what becomes of the decision: node-a can report a user's allow
// as Applied ("allowed") in node-b's name while the request is never
// decided (it times out, denied), or refuse it outright, for every
// Session of every other node. The node restriction does not match
// sessionapprovals/status at all.
//
// Run with -tags attackreview: it fails on the shipped deployment.
func TestAttackOtherNodeDecidesSessionApproval(t *testing.T) {
	testutil.RequiresRoot(t)
	ctrllog.SetLogger(logr.Discard())
	ms := loadManifests(t)
	ds, _ := daemonSet(t, ms)

	cp := kubetest.Start(t)
	sch := scheme(t)
	admin, err := client.New(cp.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	strict := client.WithFieldValidation(admin, metav1.FieldValidationStrict)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, m := range ms {
		if err := strict.Create(ctx, m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	eventually(t, time.Minute, "the CRDs served", func() (bool, string) {
		err := admin.List(ctx, &v1alpha1.SessionApprovalList{})
		return err == nil, fmt.Sprint(err)
	})
	self, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adminName := self.Status.UserInfo.Username

	podA := podOn(t, admin, &ds.Spec.Template, "node-a")
	nodeA, err := client.New(asToken(cp, token(t, cs, agent.LeaseNamespace, "airlock-node", podA)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	// The leader Lease first: without it airlock-placement-leader
	// refuses every Session update, the administrator's included.
	leadAs(t, admin, "node-b_victim")
	victim(t, admin, "node-b", 40)
	// The node restriction in force (a dry run of a known refused write).
	eventually(t, 30*time.Second, "the node restriction in force", func() (bool, string) {
		err := attacks[0].do(ctx, nodeA, "node-b", true)
		return refusedByPolicy(err), fmt.Sprint(err)
	})

	forge := map[string]v1alpha1.SessionApprovalStatus{
		// The user is told the request was allowed, in node-b's name;
		// node-b never applies it.
		"applied-in-victims-name": {Phase: v1alpha1.ApprovalApplied, Node: "node-b", State: "allowed"},
		// The user's decision is refused before node-b looks at it.
		"refused-first": {Phase: v1alpha1.ApprovalRefused, Node: "node-a", Message: "no request 0123456789abcdef is held for Session default/on-node-b"},
	}
	for name, st := range forge {
		t.Run(name, func(t *testing.T) {
			ap := &v1alpha1.SessionApproval{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: v1alpha1.SessionApprovalSpec{SessionName: "on-node-b", ApprovalID: "0123456789abcdef",
					Decision: v1alpha1.DecisionAllow, DecidedBy: adminName},
			}
			if err := admin.Create(ctx, ap); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.SessionApproval
			if err := nodeA.Get(ctx, client.ObjectKeyFromObject(ap), &got); err != nil {
				t.Fatal(err)
			}
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			got.Status = st
			got.Status.DecidedAt = &now
			err := nodeA.Status().Update(ctx, &got)
			if !refusedByPolicy(err) {
				t.Errorf("node-a's credentials wrote the status of a SessionApproval for a Session on node-b (%+v): %v, want a policy's refusal", st, err)
			}
		})
	}
}
