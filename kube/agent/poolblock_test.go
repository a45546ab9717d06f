package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// reviewDaemon is a Daemon that records the creates it is asked for and
// lists the local sessions it is given.
type reviewDaemon struct {
	mu      sync.Mutex
	creates []api.CreateRequest
	updates []api.UpdateRequest
	local   []api.Session
	store   *approvals.Store
	// updateErr, if set, is what Update answers.
	updateErr error
}

func (d *reviewDaemon) Create(_ context.Context, req api.CreateRequest) (*api.Session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.creates = append(d.creates, req)
	now := time.Now()
	v := api.Session{ID: "made-by-agent", State: api.StateRunning, Started: &now, Labels: req.Labels, Policy: req.Policy, PolicyVersion: 1}
	d.local = append(d.local, v)
	return &v, nil
}
func (d *reviewDaemon) Start(context.Context, string) (*api.Session, error) { return nil, nil }
func (d *reviewDaemon) Update(_ context.Context, id string, req api.UpdateRequest) (*api.Session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.updates = append(d.updates, req)
	if d.updateErr != nil {
		return nil, d.updateErr
	}
	for i := range d.local {
		if d.local[i].ID == id {
			d.local[i].Policy, d.local[i].PolicyVersion = req.Policy, d.local[i].PolicyVersion+1
			v := d.local[i]
			return &v, nil
		}
	}
	return nil, errdefs.ErrNotFound
}
func (d *reviewDaemon) Stop(context.Context, string, time.Duration) (*api.Session, error) {
	return nil, nil
}
func (d *reviewDaemon) Wait(ctx context.Context, _ string) (*api.WaitResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (d *reviewDaemon) Remove(context.Context, string, bool) error { return nil }
func (d *reviewDaemon) List(context.Context) []api.Session {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.Session(nil), d.local...)
}

func (d *reviewDaemon) AuditSummary(context.Context, string) (*api.AuditSummary, error) {
	return &api.AuditSummary{}, nil
}
func (d *reviewDaemon) ChangeSummary(context.Context, string) (*api.ChangeSummary, error) {
	return nil, nil
}
func (d *reviewDaemon) Approvals() *approvals.Store { return d.store }
func (d *reviewDaemon) ApproveRevise(context.Context, string, string, string) (api.Approval, error) {
	return api.Approval{}, errors.New("not here")
}
func (d *reviewDaemon) SetPool(context.Context, policies.Policy, int) (string, []string, error) {
	return "", nil, nil
}
func (d *reviewDaemon) RemovePool(context.Context, string) error         { return nil }
func (d *reviewDaemon) Pools() []api.Pool                                { return nil }
func (d *reviewDaemon) WatchPools(ctx context.Context, _ func([]string)) { <-ctx.Done() }
func (d *reviewDaemon) Admission() *policies.Admission                   { return policies.DefaultAdmission() }

func reviewAgent(t *testing.T, d Daemon, s *v1alpha1.Session) (*nodeAgent, client.Client) {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(s).WithStatusSubresource(&v1alpha1.Session{}).Build()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &nodeAgent{d: d, node: "node-a", c: c, fresh: c, wake: make(chan event.GenericEvent, 8),
		stopCtx: ctx, waiting: map[string]bool{}, auditWritten: map[types.UID]time.Time{}, statusWritten: map[types.UID]time.Time{}}, c
}

func reviewSession(p policies.Policy) *v1alpha1.Session {
	return &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "job", UID: types.UID("4c1d6a0e-0000-4000-8000-000000000001")},
		Spec:       v1alpha1.SessionSpec{NodeName: "node-a", Policy: p},
	}
}

// TestSessionPoolBlockNotTaken: a Session's policy may carry a
// `pool { size = 64 }` block, and the agent hands it to the daemon's
// create as is. The daemon then declares a warm pool of that policy
// (daemon.create -> d.pools.ensure), which keeps up to 64 prepared
// sandboxes on the node for as long as the daemon runs: after the
// Session is deleted, counted under the admission policy's session
// limit (reserve counts pools.Waiting()), and not counted by the
// placement controller (it counts Sessions). Every Session placed on the
// node afterwards is refused by admission (session limit) and marked
// Failed, reason refused, for good. The SessionPool type says "the
// policy's own pool block is ignored"; the Session path does not.
func TestSessionPoolBlockNotTaken(t *testing.T) {
	d := &reviewDaemon{store: approvals.New()}
	s := reviewSession(policies.Policy{Label: "x", Image: "img", Command: []string{"true"}, Pool: &policies.Pool{Size: policies.MaxPoolSize}})
	a, _ := reviewAgent(t, d, s)
	if _, err := a.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
		t.Fatal(err)
	}
	if len(d.creates) != 1 {
		t.Fatalf("%d creates, want 1", len(d.creates))
	}
	if p := d.creates[0].Policy.Pool; p != nil {
		t.Errorf("the agent's create carries the Session's pool block (size %d): a cluster user declares a warm pool on the node that outlives the Session and takes the session limit's places", p.Size)
	}
}
