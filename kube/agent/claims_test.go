package agent

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

func claimAgent(t *testing.T, node, root string, objs ...client.Object) (*nodeAgent, client.Client) {
	t.Helper()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &nodeAgent{node: node, c: c, fresh: c, root: root}, c
}

// TestClaimHoldOnStaleSnapshot: holdClaims puts the node's finalizer on
// the claim "as read when its binding was checked", and skips the update
// when that copy already carries the finalizer (another Session of the
// node held it). If that other Session is deleted between Session B's
// read of the claim (bindVolume, in volumeSources, before its git
// sources are fetched) and B's holdClaims, its release sees no record of
// B's yet and takes the finalizer off; B's holdClaims then finds the
// finalizer in its stale copy, sends nothing, and B runs with its claim
// unheld: the claim can be deleted at once (no pod holds it) and its
// volume released, the hole the finalizer closes.
func TestClaimHoldOnStaleSnapshot(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundPair("tenant", "data", "pv-data", "/srv/volumes/data", corev1.ReadWriteOnce)
	a, c := claimAgent(t, "node-a", t.TempDir(), pvc, pv)
	src := &v1alpha1.VolumeSource{ClaimName: "data"}

	// Session A: read, held.
	bA, err := bindVolume(ctx, a.fresh, "tenant", src)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.holdClaims(ctx, "uid-a", []*corev1.PersistentVolumeClaim{bA.claim}); err != nil {
		t.Fatal(err)
	}
	// Session B: read (the finalizer is on), then fetches its git
	// sources...
	bB, err := bindVolume(ctx, a.fresh, "tenant", src)
	if err != nil {
		t.Fatal(err)
	}
	// ... while Session A is deleted: its release sees no other record.
	if err := a.releaseClaims(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	holdErr := a.holdClaims(ctx, "uid-b", []*corev1.PersistentVolumeClaim{bB.claim})

	var got corev1.PersistentVolumeClaim
	if err := c.Get(ctx, types.NamespacedName{Namespace: "tenant", Name: "data"}, &got); err != nil {
		t.Fatal(err)
	}
	held := controllerutil.ContainsFinalizer(&got, ClaimFinalizerPrefix+"node-a")
	if holdErr == nil && !held {
		// Show the consequence: the claim goes at once.
		if err := c.Delete(ctx, &got); err != nil {
			t.Fatal(err)
		}
		err := c.Get(ctx, types.NamespacedName{Namespace: "tenant", Name: "data"}, &got)
		t.Errorf("holdClaims for Session B returned nil, but claim tenant/data carries no finalizer of node-a (finalizers %v): "+
			"B would run with its claim unheld; deleted now, the claim is gone: %v", got.Finalizers, apierrors.IsNotFound(err))
	}
}

// TestClaimReleaseAfterNodeRename: the record under the root names the
// claims, not the finalizer that holds them. An agent started on the same
// root under another node name (--node changed, the host renamed)
// releases with its new name's finalizer: nothing is taken off, the
// record is removed all the same, and the old name's finalizer stays on
// the claim for good (the node restriction refuses any other node taking
// it off): the claim, once deleted, stays Terminating.
func TestClaimReleaseAfterNodeRename(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	pvc, pv := boundPair("tenant", "data", "pv-data", "/srv/volumes/data", corev1.ReadWriteOnce)
	a, c := claimAgent(t, "node-a", root, pvc, pv)
	b, err := bindVolume(ctx, a.fresh, "tenant", &v1alpha1.VolumeSource{ClaimName: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.holdClaims(ctx, "uid-a", []*corev1.PersistentVolumeClaim{b.claim}); err != nil {
		t.Fatal(err)
	}
	renamed := &nodeAgent{node: "node-a-renamed", c: c, fresh: c, root: root}
	relErr := renamed.releaseClaims(ctx, "uid-a")
	var got corev1.PersistentVolumeClaim
	if err := c.Get(ctx, types.NamespacedName{Namespace: "tenant", Name: "data"}, &got); err != nil {
		t.Fatal(err)
	}
	if _, err := readClaims(a.claimsFile("uid-a")); relErr == nil && err != nil && controllerutil.ContainsFinalizer(&got, ClaimFinalizerPrefix+"node-a") {
		t.Errorf("release under the new node name returned nil and forgot the record, but %s%s stays on the claim with nothing left to take it off (finalizers %v)",
			ClaimFinalizerPrefix, "node-a", got.Finalizers)
	}
}

// TestClaimHoldTwoSourcesOneClaim: a Session may name one claim in two
// volume sources (two targets: the daemon admits a volume given n times
// as n workspaces). volumeSources reads the claim once per source, and
// holdClaims updates each copy: the first puts the finalizer on, the
// second, read before that, conflicts. The run fails as Unavailable, its
// release takes the finalizer off again, and every later try does the
// same: the Session stays Placed for good, each try an update and a
// release of the claim.
func TestClaimHoldTwoSourcesOneClaim(t *testing.T) {
	ctx := context.Background()
	pvc, pv := boundPair("tenant", "data", "pv-data", "/srv/volumes/data", corev1.ReadWriteOnce)
	a, _ := claimAgent(t, "node-a", t.TempDir(), pvc, pv)
	src := &v1alpha1.VolumeSource{ClaimName: "data"}
	for try := range 3 {
		var claims []*corev1.PersistentVolumeClaim
		for range 2 {
			b, err := bindVolume(ctx, a.fresh, "tenant", src)
			if err != nil {
				t.Fatal(err)
			}
			claims = append(claims, b.claim)
		}
		if err := a.holdClaims(ctx, "uid-b", claims); err != nil {
			a.releaseAfterFailure(ctx, "uid-b")
			t.Errorf("try %d: a Session naming claim tenant/data in two volume sources is not held: %v", try, err)
			continue
		}
		return
	}
}
