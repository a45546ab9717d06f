package agent

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// placementUserAgent is the user agent of the placement controller the
// tests below run: the audit log's events from it start with it.
const placementUserAgent = "airlock-placement-test"

// placementLeaseDuration is the placement controller's lease in the tests
// below: it renews its leader Lease every sixth of it (10 s), an event
// that asks for a pass, and passes again at most a lease after the last
// one (recheck): the slowest a change nothing watched is seen.
const placementLeaseDuration = 60 * time.Second

// startPlacement starts a control plane with the CRDs, one live node
// (node-a: an AirlockNode of capacity 50 and a Lease of an hour, renewed
// by no one: no Lease event asks for a pass) and the placement controller
// of an agent (runPlacement) in this process, whose requests carry
// placementUserAgent. It returns an admin client and the control plane.
func startPlacement(t *testing.T) (client.Client, *kubetest.ControlPlane) {
	t.Helper()
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
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	an := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := c.Create(ctx, an); err != nil {
		t.Fatal(err)
	}
	an.Status.Capacity = 50
	if err := c.Status().Update(ctx, an); err != nil {
		t.Fatal(err)
	}
	hour := int32(3600)
	if err := c.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: LeaseNamespace, Name: "node-a"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: new("node-a"), LeaseDurationSeconds: &hour, RenewTime: &metav1.MicroTime{Time: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	kube := rest.CopyConfig(cp.Config)
	kube.UserAgent = placementUserAgent
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		runPlacement(pctx, Config{Kube: kube, Node: "node-a", LeaseDuration: placementLeaseDuration}, scheme)
	}()
	// Before the control plane stops (cleanups run last first).
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return c, cp
}

// waitingSession is a Session of namespace default whose workspace is
// claim's volume.
func waitingSession(name, claim string) *v1alpha1.Session {
	return &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{Label: "x", Image: "img", Command: []string{"true"}},
			WorkspaceSources: []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: claim}}}}}
}

// placementReads counts the placement controller's requests in the audit
// log from the nth event on, by "verb resource".
func placementReads(t *testing.T, cp *kubetest.ControlPlane, n int) (map[string]int, int) {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range events[n:] {
		if strings.HasPrefix(e.UserAgent, placementUserAgent) && e.Resource() != "" {
			out[e.Verb+" "+e.Resource()]++
		}
	}
	return out, len(events)
}

// TestPlacementVolumeReadsPerPass: placement reads claims, their volumes
// and Nodes from its cache, not from the API server. With 20 Sessions
// waiting on 20 claims that do not exist, every pass looks at each of
// them; counted from the API server's audit log, the passes that place 5
// other Sessions one by one (a pass each, at least) GET no claim, volume
// or Node, and placement listed claims, volumes and Nodes (metadata) once
// at most, and watched them. (The agent that read each claim uncached
// once a pass made 200 GETs of claims here: 20 in each of 10 passes, a
// create and a status write of each Session asking for one.)
func TestPlacementVolumeReadsPerPass(t *testing.T) {
	c, cp := startPlacement(t)
	ctx := t.Context()
	const n = 20
	for i := range n {
		if err := c.Create(ctx, waitingSession(fmt.Sprintf("wait-%02d", i), fmt.Sprintf("never-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, time.Minute, "every waiting Session Pending, its claim missing", func() (bool, string) {
		var list v1alpha1.SessionList
		if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
			return false, err.Error()
		}
		waiting := 0
		for _, s := range list.Items {
			if s.Status.Reason == ReasonUnschedulable && strings.Contains(s.Status.Message, "does not exist") {
				waiting++
			}
		}
		return waiting == n, fmt.Sprintf("%d of %d", waiting, n)
	})
	_, cursor := placementReads(t, cp, 0)
	const quiet = 5
	began := time.Now()
	for i := range quiet {
		s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("quiet-%d", i)},
			Spec: v1alpha1.SessionSpec{Policy: policies.Policy{Label: "x", Image: "img", Command: []string{"true"}}}}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "Session "+s.Name+" placed", func() (bool, string) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return false, err.Error()
			}
			return s.Spec.NodeName == "node-a", fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
		})
	}
	took := time.Since(began)
	phase, _ := placementReads(t, cp, cursor)
	all, _ := placementReads(t, cp, 0)
	t.Logf("%d Sessions waiting on %d missing claims; %d others placed one by one in %s; placement's requests meanwhile: %v; since its start: list/watch of claims %d/%d, volumes %d/%d, nodes %d/%d",
		n, n, quiet, took.Round(time.Millisecond), phase,
		all["list persistentvolumeclaims"], all["watch persistentvolumeclaims"], all["list persistentvolumes"], all["watch persistentvolumes"], all["list nodes"], all["watch nodes"])
	for _, res := range []string{"persistentvolumeclaims", "persistentvolumes", "nodes"} {
		if got := phase["get "+res]; got != 0 {
			t.Errorf("placement read %s %d times (GET) in %d passes or more, with %d Sessions waiting; want 0: read from its cache", res, got, quiet, n)
		}
		// A watch list (client-go's WatchListClient) lists by the
		// watch alone.
		if all["list "+res] > 1 || all["list "+res]+all["watch "+res] < 1 {
			t.Errorf("placement listed %s %d times and watched them %d times; want at most one list, and a watch (its cache)", res, all["list "+res], all["watch "+res])
		}
	}
	for _, s := range []string{"wait-00", "wait-19"} {
		var got v1alpha1.Session
		if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: s}, &got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "" || !strings.Contains(got.Status.Message, "does not exist") {
			t.Errorf("Session %s: spec.nodeName %q, status %+v; want it Pending, its claim missing", s, got.Spec.NodeName, got.Status)
		}
	}
}

// TestPlacementWakesOnVolumeChange: a Session waiting on its claim is
// placed as soon as the claim is bound (its PersistentVolume made, the
// claim's volumeName and status written, as the PV controller does), and
// one waiting on its volume's nodeAffinity as soon as the Node is
// labelled: the change of a claim, volume or Node an unplaced Session
// waits on asks for a pass. Nothing else asks for one meanwhile but the
// leader's renewals, every 10 s (placementLeaseDuration/6), and the
// recheck, every 60 s: each wake is measured from the last write to
// spec.nodeName seen, and must take under 2 s, three times over (an
// agent that waits for the next renewal takes 0-10 s, 5 on average: all
// three under 2 s by chance is a chance of 1 in 125; the agent that did
// not watch them took 8.8 s each here, and 11-25 ms now).
func TestPlacementWakesOnVolumeChange(t *testing.T) {
	c, _ := startPlacement(t)
	ctx := t.Context()
	const bound = 2 * time.Second
	claim := func(name string) *corev1.PersistentVolumeClaim {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
		if err := c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	volume := func(pvc *corev1.PersistentVolumeClaim, aff *corev1.VolumeNodeAffinity) {
		t.Helper()
		pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-" + pvc.Name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   pvc.Spec.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/srv/volumes/" + pvc.Name}},
				NodeAffinity:                  aff,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			}}
		if err := c.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		pvc.Spec.VolumeName = pv.Name
		if err := c.Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		if err := c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}
	waiting := func(name, claimName, want string) {
		t.Helper()
		if err := c.Create(ctx, waitingSession(name, claimName)); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 30*time.Second, "Session "+name+" Pending: "+want, func() (bool, string) {
			var s v1alpha1.Session
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
				return false, err.Error()
			}
			return s.Spec.NodeName == "" && s.Status.Reason == ReasonUnschedulable && strings.Contains(s.Status.Message, want),
				fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
		})
	}
	// placedWithin waits for Session name's placement and returns how long
	// after since it came.
	placedWithin := func(name string, since time.Time) time.Duration {
		t.Helper()
		for deadline := since.Add(3 * placementLeaseDuration / 2); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			var s v1alpha1.Session
			if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
				t.Fatal(err)
			}
			if s.Spec.NodeName == "node-a" {
				return time.Since(since)
			}
		}
		t.Fatalf("Session %s not placed in %s", name, 3*placementLeaseDuration/2)
		return 0
	}

	var took []time.Duration
	for i := range 2 {
		name := fmt.Sprintf("bound-%d", i)
		pvc := claim(name)
		waiting(name, name, "is not bound")
		// Away from the pass the waiting Session's status write asked
		// for.
		time.Sleep(time.Second)
		volume(pvc, nil)
		took = append(took, placedWithin(name, time.Now()))
	}
	// A volume on the Node whose hostname label is node-a, and a Node
	// node-a without the label yet.
	if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}); err != nil {
		t.Fatal(err)
	}
	pvc := claim("local")
	volume(pvc, &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}},
	}}}})
	waiting("local", "local", "nodeAffinity does not select Node node-a")
	time.Sleep(time.Second)
	var n corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "node-a"}, &n); err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"kubernetes.io/hostname": "node-a"}
	if err := c.Update(ctx, &n); err != nil {
		t.Fatal(err)
	}
	took = append(took, placedWithin("local", time.Now()))
	t.Logf("placed after its claim was bound: %s, %s; after its volume's Node was labelled: %s (the leader renews every %s, the recheck every %s)",
		took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), took[2].Round(time.Millisecond), placementLeaseDuration/6, placementLeaseDuration)
	for i, d := range took {
		if d > bound {
			t.Errorf("wake %d: placed %s after the change it waited on, want under %s: placement not woken by the change", i, d.Round(time.Millisecond), bound)
		}
	}
}
