package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// The real apiserver and etcd refused a Session status holding 64 held
// requests whose sandbox-chosen fields are full of '&' (valid in a ref
// name, a query, a path, a content type and a body): encoding/json writes
// each as \u0026, six bytes, and the stored object passed etcd's limit,
// so every status write of the Session failed while they were held. The
// list is bounded by its encoded size now.
func TestPendingStatusWritable(t *testing.T) {
	cp, _ := kubetest.StartWithCRDs(t)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
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
	amp := func(prefix string, n int) string { return prefix + strings.Repeat("&", n) }
	var refs []string
	for range 16 {
		refs = append(refs, amp("refs/heads/", 600))
	}
	now := time.Now()
	var held []api.Approval
	for i := range 64 {
		held = append(held, api.Approval{
			ID: fmt.Sprintf("%016x", i), Method: "POST", Host: "git.test",
			Path: amp("/", 600), Query: amp("", 2000), ContentType: amp("a/", 200),
			Refs: refs, Body: []byte(amp("", 300)), Rule: "ask POST git.test/*",
			Created: now, Deadline: now.Add(time.Hour),
		})
	}
	s.Status.PendingApprovals, s.Status.PendingApprovalsOmitted = pendingApprovals(held)
	if err := c.Status().Update(ctx, s); err != nil {
		t.Fatalf("status with 64 held requests not written: %v", err)
	}
}
