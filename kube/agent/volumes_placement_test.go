package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// countingReader counts the Gets of claims through it, each after a wait
// of limiter (client-go's default client-side limit of a RESTClient made
// from a rest.Config without QPS, as cmd/airlockd's is: 5 per second,
// bursts of 10, one limiter per resource's client).
type countingReader struct {
	client.Reader
	limiter flowcontrol.RateLimiter
	mu      sync.Mutex
	claims  int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.PersistentVolumeClaim); ok {
		r.mu.Lock()
		r.claims++
		r.mu.Unlock()
		if err := r.limiter.Wait(ctx); err != nil {
			return err
		}
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestPlacementVolumeReadsPerPass: every placement pass reads, uncached,
// the claim (and volume) of every pending Session with a volume source,
// one by one, before it places anything after it; nothing is shared
// between Sessions naming the same claim, nor remembered from one pass
// to the next (a pass runs on every Session, AirlockNode and Lease
// event). The node agent's client has client-go's default limit of 5
// requests a second for claims. One namespace's user who creates n
// Sessions naming a claim that does not exist (Pending, "waits for a
// binding", for good) makes each pass take about n/5 seconds, and every
// Session created after them, in any namespace, waits that long for its
// place, every pass.
func TestPlacementVolumeReadsPerPass(t *testing.T) {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lease := int32(40)
	objs := []client.Object{
		&v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: v1alpha1.AirlockNodeStatus{Capacity: 100}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: LeaseNamespace, Name: "node-a"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: new("node-a"), LeaseDurationSeconds: &lease, RenewTime: &metav1.MicroTime{Time: now}}},
	}
	const n = 20
	for i := range n {
		s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "noisy", Name: fmt.Sprintf("wait-%02d", i),
			UID: types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)), CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: v1alpha1.SessionSpec{Policy: policies.Policy{Label: "x", Image: "img", Command: []string{"true"}},
				WorkspaceSources: []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "never"}}}}}
		objs = append(objs, s)
	}
	quiet := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "quiet", Name: "job", UID: "00000000-0000-4000-8000-999999999999", CreationTimestamp: metav1.NewTime(now)},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{Label: "x", Image: "img", Command: []string{"true"}}}}
	objs = append(objs, quiet)
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&v1alpha1.Session{}).Build()
	fresh := &countingReader{Reader: c, limiter: flowcontrol.NewTokenBucketRateLimiter(rest.DefaultQPS, rest.DefaultBurst)}
	p := newPlacer(c, fresh, 40*time.Second)
	began := time.Now()
	if _, err := p.Reconcile(t.Context(), placementRequest); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	var got v1alpha1.Session
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(quiet), &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("one pass: %d reads of claims for %d pending Sessions naming one claim; quiet/job placed on %q after %s", fresh.claims, n, got.Spec.NodeName, took.Round(time.Millisecond))
	if fresh.claims > 1 {
		t.Errorf("one placement pass read the claim noisy/never %d times (%s at client-go's default 5/s), before placing another namespace's Session; want it read once a pass at most (or watched)", fresh.claims, took.Round(time.Millisecond))
	}
}
