package deploytest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// victim plants, as the administrator, what a node named name has in the
// cluster: its AirlockNode (labelled airlock.test/node=name, no room), its
// Lease (renewed now, for leaseSecs), a Session running on it (its
// finalizer on, status Running), an unplaced Session no node matches and
// a SessionPool whose status says one sandbox is ready on it, and a
// claim its Session holds.
func victim(t *testing.T, admin client.Client, name string, leaseSecs int32) {
	t.Helper()
	ctx := t.Context()
	n := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"airlock.test/node": name}}}
	if err := admin.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status = v1alpha1.AirlockNodeStatus{Capacity: 0, Version: "victim", HolderIdentity: name + "/victim"}
	if err := admin.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agent.LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name + "/victim"), LeaseDurationSeconds: &leaseSecs,
			AcquireTime: &now, RenewTime: &now},
	}
	if err := admin.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "on-" + name, Namespace: "default", Finalizers: []string{agent.Finalizer}},
		Spec: v1alpha1.SessionSpec{NodeName: name, Policy: policies.Policy{
			Label: "on-" + name, Image: daemontest.AgentImage, Command: []string{"sleep", "600"}}},
	}
	if err := admin.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	started := metav1.NewTime(time.Now().Truncate(time.Second))
	s.Status = v1alpha1.SessionStatus{State: v1alpha1.SessionRunning, Node: name, ID: "victim-1", StartedAt: &started}
	if err := admin.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	sp := &v1alpha1.SessionPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool-" + name, Namespace: "default"},
		Spec:       v1alpha1.SessionPoolSpec{Size: 1, Policy: policies.Policy{Label: "pool-" + name, Image: daemontest.AgentImage}},
	}
	if err := admin.Create(ctx, sp); err != nil {
		t.Fatal(err)
	}
	sp.Status = v1alpha1.SessionPoolStatus{Ready: 1, Nodes: []v1alpha1.PoolNodeStatus{{Node: name, Ready: 1}}}
	if err := admin.Status().Update(ctx, sp); err != nil {
		t.Fatal(err)
	}
	// A claim the victim's Session holds (the victim node's finalizer).
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-" + name, Namespace: "default", Finalizers: []string{agent.ClaimFinalizerPrefix + name}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if err := admin.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	u := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "unplaced-" + name, Namespace: "default"},
		Spec: v1alpha1.SessionSpec{NodeSelector: map[string]string{"airlock.test/node": "nowhere"}, Policy: policies.Policy{
			Label: "unplaced-" + name, Image: daemontest.AgentImage, Command: []string{"true"}}},
	}
	if err := admin.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
}

// leadAs makes, as the administrator, the placement leader Lease held by
// holder, expired long ago.
func leadAs(t *testing.T, admin client.Client, holder string) {
	t.Helper()
	long := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: agent.PlacementLease, Namespace: agent.LeaseNamespace}}
	err := admin.Get(t.Context(), client.ObjectKeyFromObject(l), l)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr.To[int32](1), AcquireTime: &long, RenewTime: &long}
	if exists {
		err = admin.Update(t.Context(), l)
	} else {
		err = admin.Create(t.Context(), l)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// attack is one write a compromised node agent could make against another
// node; dryRun asks the API server to admit it without storing it.
type attack struct {
	name string
	do   func(ctx context.Context, c client.Client, victim string, dryRun bool) error
}

func dry(dryRun bool) []client.UpdateOption {
	if dryRun {
		return []client.UpdateOption{client.DryRunAll}
	}
	return nil
}

func dryStatus(dryRun bool) []client.SubResourceUpdateOption {
	if dryRun {
		return []client.SubResourceUpdateOption{client.DryRunAll}
	}
	return nil
}

// session gets Session name of namespace default.
func session(ctx context.Context, c client.Client, name string) (*v1alpha1.Session, error) {
	var s v1alpha1.Session
	err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s)
	return &s, err
}

// attacks are node A's writes against node B (victim) that RBAC lets
// through and the node restriction refuses.
var attacks = []attack{
	{"rewrite the victim's AirlockNode status (its capacity and holder)", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var n v1alpha1.AirlockNode
		if err := c.Get(ctx, client.ObjectKey{Name: v}, &n); err != nil {
			return err
		}
		n.Status.Capacity, n.Status.HolderIdentity = 999, "node-a/evil"
		return c.Status().Update(ctx, &n, dryStatus(dryRun)...)
	}},
	{"relabel the victim's AirlockNode", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var n v1alpha1.AirlockNode
		if err := c.Get(ctx, client.ObjectKey{Name: v}, &n); err != nil {
			return err
		}
		n.Labels["airlock.test/node"] = "a"
		return c.Update(ctx, &n, dry(dryRun)...)
	}},
	{"take the victim's Lease (its airlockd then exits, its node lost)", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: agent.LeaseNamespace, Name: v}, &l); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = ptr.To("node-a/evil"), &now
		return c.Update(ctx, &l, dry(dryRun)...)
	}},
	{"forge the status of a Session running on the victim (Exited 0)", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		s, err := session(ctx, c, "on-"+v)
		if err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		s.Status.State, s.Status.ExitCode, s.Status.FinishedAt = v1alpha1.SessionExited, ptr.To[int32](0), &now
		return c.Status().Update(ctx, s, dryStatus(dryRun)...)
	}},
	{"take the finalizer off a Session running on the victim", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		s, err := session(ctx, c, "on-"+v)
		if err != nil {
			return err
		}
		controllerutil.RemoveFinalizer(s, agent.Finalizer)
		return c.Update(ctx, s, dry(dryRun)...)
	}},
	{"mark a Session running on the victim Lost, not leading", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		s, err := session(ctx, c, "on-"+v)
		if err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		s.Status.State, s.Status.Reason, s.Status.FinishedAt = v1alpha1.SessionLost, agent.ReasonLost, &now
		return c.Status().Update(ctx, s, dryStatus(dryRun)...)
	}},
	{"place an unplaced Session on itself, not leading", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		s, err := session(ctx, c, "unplaced-"+v)
		if err != nil {
			return err
		}
		s.Spec.NodeName = "node-a"
		return c.Update(ctx, s, dry(dryRun)...)
	}},
	{"rewrite the victim's entry of a SessionPool's status (refused, none ready)", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		return applyPoolEntry(ctx, c, "pool-"+v, "node-a", map[string]any{"node": v, "ready": int64(0), "reason": agent.ReasonRefused, "message": "forged"}, dryRun)
	}},
	{"take every finalizer off a claim the victim's Session holds", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var pvc corev1.PersistentVolumeClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "claim-" + v}, &pvc); err != nil {
			return err
		}
		pvc.Finalizers = nil
		return c.Update(ctx, &pvc, dry(dryRun)...)
	}},
	{"relabel a claim, holding it with its own finalizer", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var pvc corev1.PersistentVolumeClaim
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "claim-" + v}, &pvc); err != nil {
			return err
		}
		controllerutil.AddFinalizer(&pvc, agent.ClaimFinalizerPrefix+"node-a")
		pvc.Labels = map[string]string{"team": "node-a"}
		return c.Update(ctx, &pvc, dry(dryRun)...)
	}},
	{"hold the placement leadership in the victim's name", func(ctx context.Context, c client.Client, v string, dryRun bool) error {
		var l coordinationv1.Lease
		if err := c.Get(ctx, client.ObjectKey{Namespace: agent.LeaseNamespace, Name: agent.PlacementLease}, &l); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = ptr.To(v+"_evil"), &now, ptr.To[int32](3600)
		return c.Update(ctx, &l, dry(dryRun)...)
	}},
}

// applyPoolEntry applies, as node's field manager (the agent's), a
// status.nodes entry of SessionPool name in default.
func applyPoolEntry(ctx context.Context, c client.Client, name, node string, entry map[string]any, dryRun bool) error {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"nodes": []any{entry}}}}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("SessionPool")
	u.SetNamespace("default")
	u.SetName(name)
	opts := []client.SubResourceApplyOption{client.FieldOwner("airlockd-node/" + node), client.ForceOwnership}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// refusedByPolicy reports whether err is a ValidatingAdmissionPolicy's
// refusal by one of its rules: not an expression that failed to evaluate
// (which failurePolicy Fail also turns into a refusal, of everything).
func refusedByPolicy(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") &&
		!strings.Contains(err.Error(), "resulted in error") && !strings.Contains(err.Error(), "compilation failed")
}

// snapshot returns the resourceVersions of the victim's objects, to show
// that refused attacks changed nothing.
func snapshot(t *testing.T, admin client.Client, v string) string {
	t.Helper()
	ctx := t.Context()
	var n v1alpha1.AirlockNode
	var l, pl coordinationv1.Lease
	var out []string
	for _, o := range []struct {
		key client.ObjectKey
		obj client.Object
	}{
		{client.ObjectKey{Name: v}, &n},
		{client.ObjectKey{Namespace: agent.LeaseNamespace, Name: v}, &l},
		{client.ObjectKey{Namespace: agent.LeaseNamespace, Name: agent.PlacementLease}, &pl},
		{client.ObjectKey{Namespace: "default", Name: "on-" + v}, &v1alpha1.Session{}},
		{client.ObjectKey{Namespace: "default", Name: "unplaced-" + v}, &v1alpha1.Session{}},
		{client.ObjectKey{Namespace: "default", Name: "pool-" + v}, &v1alpha1.SessionPool{}},
		{client.ObjectKey{Namespace: "default", Name: "claim-" + v}, &corev1.PersistentVolumeClaim{}},
	} {
		if err := admin.Get(ctx, o.key, o.obj); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s@%s", o.key, o.obj.GetResourceVersion()))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// testLeaderForms: node-a, holding the placement leadership, makes
// placement's writes to node-c's Sessions (spec.nodeName on an unplaced
// one, its Placed status, the finalizer off a deleted one), and still
// nothing else: not another status, not a changed policy while placing.
// On its own node it may not write a Lost Session's status, lift its own
// cordon, nor set or remove the administrator's airlock.dev/ labels.
func testLeaderForms(t *testing.T, admin, nodeA client.Client) {
	t.Helper()
	ctx := t.Context()
	leadAs(t, admin, "node-a_test")
	mk := func(name, node string, finalizers ...string) *v1alpha1.Session {
		s := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Finalizers: finalizers},
			Spec: v1alpha1.SessionSpec{NodeName: node, Policy: policies.Policy{
				Label: name, Image: daemontest.AgentImage, Command: []string{"true"}}},
		}
		if err := admin.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	mk("to-place", "")
	// The API server's view of the leader Lease follows the write.
	kubetest.Eventually(t, 30*time.Second, "node-a, leading, places a Session on node-c (dry run)", func() (bool, string) {
		s, err := session(ctx, nodeA, "to-place")
		if err != nil {
			return false, err.Error()
		}
		s.Spec.NodeName = "node-c"
		err = nodeA.Update(ctx, s, client.DryRunAll)
		return err == nil, fmt.Sprint(err)
	})
	s, err := session(ctx, nodeA, "to-place")
	if err != nil {
		t.Fatal(err)
	}
	bad := s.DeepCopy()
	bad.Spec.NodeName, bad.Spec.Policy.Command = "node-c", []string{"sh", "-c", "evil"}
	if err := nodeA.Update(ctx, bad); !refusedByPolicy(err) {
		t.Errorf("node-a, leading, placing a Session and changing its command: %v, want a policy's refusal", err)
	}
	s.Spec.NodeName = "node-c"
	if err := nodeA.Update(ctx, s); err != nil {
		t.Fatalf("node-a, leading, places a Session on node-c: %v", err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	forged := s.DeepCopy()
	forged.Status = v1alpha1.SessionStatus{State: v1alpha1.SessionExited, Node: "node-c", ExitCode: ptr.To[int32](0)}
	if err := nodeA.Status().Update(ctx, forged); !refusedByPolicy(err) {
		t.Errorf("node-a, leading, writing Exited on node-c's Session: %v, want a policy's refusal", err)
	}
	s.Status = v1alpha1.SessionStatus{State: v1alpha1.SessionPlaced, Node: "node-c", PlacedAt: &now}
	if err := nodeA.Status().Update(ctx, s); err != nil {
		t.Errorf("node-a, leading, writes node-c's Session Placed: %v", err)
	}

	gone := mk("gone", "node-c", agent.Finalizer)
	if err := admin.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if gone, err = session(ctx, nodeA, "gone"); err != nil {
		t.Fatal(err)
	}
	gone.Finalizers = nil
	if err := nodeA.Update(ctx, gone); err != nil {
		t.Errorf("node-a, leading, takes the finalizer off a deleted Session of node-c: %v", err)
	}

	// Its own node: a Lost Session's status, and its cordon.
	mine := mk("mine", "node-a")
	mine.Status = v1alpha1.SessionStatus{State: v1alpha1.SessionLost, Reason: agent.ReasonLost, Node: "node-a"}
	if err := admin.Status().Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	mine.Status.State, mine.Status.Reason = v1alpha1.SessionRunning, ""
	if err := nodeA.Status().Update(ctx, mine); !refusedByPolicy(err) {
		t.Errorf("node-a writing Running on its own Session marked Lost: %v, want a policy's refusal", err)
	}
	var an v1alpha1.AirlockNode
	if err := admin.Get(ctx, client.ObjectKey{Name: "node-a"}, &an); err != nil {
		t.Fatal(err)
	}
	an.Spec.Unschedulable = true
	if err := admin.Update(ctx, &an); err != nil {
		t.Fatal(err)
	}
	an.Spec.Unschedulable = false
	if err := nodeA.Update(ctx, &an); !refusedByPolicy(err) {
		t.Errorf("node-a lifting its own cordon: %v, want a policy's refusal", err)
	}
	// Its labels: its own, but not the administrator's (airlock.dev/).
	if err := admin.Get(ctx, client.ObjectKey{Name: "node-a"}, &an); err != nil {
		t.Fatal(err)
	}
	claim := an.DeepCopy()
	claim.Labels["airlock.dev/tenant"] = "payroll"
	if err := nodeA.Update(ctx, claim); !refusedByPolicy(err) {
		t.Errorf("node-a labelling itself airlock.dev/tenant: %v, want a policy's refusal", err)
	}
	an.Labels["airlock.test/zone"] = "z1"
	if err := nodeA.Update(ctx, &an); err != nil {
		t.Errorf("node-a setting a label of its own: %v", err)
	}
	an.Labels["airlock.dev/tenant"] = "research"
	if err := admin.Update(ctx, &an); err != nil {
		t.Fatal(err)
	}
	drop := an.DeepCopy()
	delete(drop.Labels, "airlock.dev/tenant")
	if err := nodeA.Update(ctx, drop); !refusedByPolicy(err) {
		t.Errorf("node-a removing the administrator's airlock.dev/tenant label: %v, want a policy's refusal", err)
	}
	an.Labels["airlock.test/zone"] = "z2"
	if err := nodeA.Update(ctx, &an); err != nil {
		t.Errorf("node-a changing a label of its own beside the administrator's: %v", err)
	}
}
