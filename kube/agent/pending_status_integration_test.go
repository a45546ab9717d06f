package agent

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// The real apiserver and etcd refused a Session status holding 64 held
// requests whose sandbox-chosen fields are full of '&' (valid in a ref
// name, a query, a path, a content type and a body): encoding/json writes
// each as \u0026, six bytes, and the stored object passed etcd's limit,
// so every status write of the Session failed while they were held. The
// list is bounded by its encoded size now.
func TestPendingStatusWritable(t *testing.T) {
	c := controlPlaneClient(t)
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "s"},
		Spec:       v1alpha1.SessionSpec{NodeName: "n1", Policy: policies.Policy{Label: "s", Image: "img", Command: []string{"true"}}},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	held := loudHeld(time.Now())
	s.Status.PendingApprovals, s.Status.PendingApprovalsOmitted = pendingApprovals(held)
	if err := c.Status().Update(ctx, s); err != nil {
		t.Fatalf("status with 64 held requests not written: %v", err)
	}
}
