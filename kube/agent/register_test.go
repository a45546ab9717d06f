package agent

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestRegisterNeedsNamespace: the agent does not make airlock-system (the
// deployment's); registering without it fails saying so, and nothing
// makes the namespace; once it exists the node registers.
func TestRegisterNeedsNamespace(t *testing.T) {
	c := controlPlaneClient(t)
	r := &registrar{c: c, identity: "n1/test", cfg: Config{Node: "n1", Capacity: 1, LeaseDuration: 10 * time.Second}}
	err := r.register(t.Context())
	if !errors.Is(err, errNoNamespace) || !strings.Contains(err.Error(), "namespace airlock-system does not exist") {
		t.Fatalf("register without airlock-system: %v, want it said that the namespace is missing", err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Name: LeaseNamespace}, &corev1.Namespace{}); err == nil {
		t.Fatal("register made airlock-system")
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	if err := r.register(t.Context()); err != nil {
		t.Fatalf("register once airlock-system exists: %v", err)
	}
	var l coordinationv1.Lease
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: LeaseNamespace, Name: "n1"}, &l); err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "n1/test" {
		t.Fatalf("node Lease after register: %v %+v", err, l.Spec)
	}
}

// controlPlaneClient starts a control plane with the CRDs and returns a
// client of it with the agent's scheme.
func controlPlaneClient(t *testing.T) client.Client {
	t.Helper()
	c, _ := controlPlane(t)
	return c
}

// controlPlane is controlPlaneClient with the control plane's client
// configuration.
func controlPlane(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	cp, _ := kubetest.StartWithCRDs(t)
	c, err := agentClient(Config{Kube: cp.Config})
	if err != nil {
		t.Fatal(err)
	}
	return c, cp.Config
}

// TestDrainingNodeHasNoRoom: while its airlockd stops (Config.Draining),
// the agent's report gives its AirlockNode no capacity, so placement sends
// it nothing more; the next agent, not draining, gives it back.
func TestDrainingNodeHasNoRoom(t *testing.T) {
	c, kube := controlPlane(t)
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	var draining atomic.Bool
	r := &registrar{c: c, identity: "n1/test", cfg: Config{Node: "n1", Capacity: 3, LeaseDuration: 10 * time.Second, Draining: &draining}}
	if err := r.register(t.Context()); err != nil {
		t.Fatal(err)
	}
	capacity := func() int32 {
		t.Helper()
		var n v1alpha1.AirlockNode
		if err := c.Get(t.Context(), client.ObjectKey{Name: "n1"}, &n); err != nil {
			t.Fatal(err)
		}
		return n.Status.Capacity
	}
	if got := capacity(); got != 3 {
		t.Fatalf("capacity %d after register, want 3", got)
	}
	// airlockd's write at the drain's start, at once.
	if err := ReportDraining(t.Context(), Config{Kube: kube, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got := capacity(); got != 0 {
		t.Fatalf("capacity %d after ReportDraining, want 0", got)
	}
	// The agent's own reports while draining keep it so.
	draining.Store(true)
	if err := r.report(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if got := capacity(); got != 0 {
		t.Fatalf("capacity %d while draining, want 0", got)
	}
	next := &registrar{c: c, identity: "n1/next", cfg: Config{Node: "n1", Capacity: 3, LeaseDuration: 10 * time.Second}}
	if err := next.report(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if got := capacity(); got != 3 {
		t.Fatalf("capacity %d from the next agent, want 3", got)
	}
}
