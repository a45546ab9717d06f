package agent

import (
	"context"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestDrainingStartsNothing: while its airlockd stops its sessions on the
// way out (Config.Draining), the agent starts no Session placed on the
// node; once it is no longer draining (the next agent), it does.
func TestDrainingStartsNothing(t *testing.T) {
	d := &reviewDaemon{store: approvals.New()}
	s := reviewSession(policies.Policy{Label: "x", Image: "img", Command: []string{"true"}})
	a, c := reviewAgent(t, d, s)
	var draining atomic.Bool
	draining.Store(true)
	a.draining = &draining
	ctx := context.Background()
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)}
	if _, err := a.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(d.creates) != 0 {
		t.Fatalf("%d creates while draining, want none", len(d.creates))
	}
	var got v1alpha1.Session
	if err := c.Get(ctx, req.NamespacedName, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.State == v1alpha1.SessionRunning || got.Status.ID != "" {
		t.Fatalf("Session while draining: %+v, want it not started", got.Status)
	}
	draining.Store(false)
	if _, err := a.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if len(d.creates) != 1 {
		t.Fatalf("%d creates once no longer draining, want 1", len(d.creates))
	}
}
