package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestVolumeClaimDeletedWhileRunning: a Session's volume stays its
// claim's while the Session lives. Kubernetes holds a claim for the pods
// that use it (kubernetes.io/pvc-protection); Sessions are no pods, so the
// node's agent holds it with its own finalizer from before the Session
// runs until it is deleted. The attack: a namespace's user deletes its own
// claim while its Session runs (mode rw); were the claim to go, its volume
// would be released and, as a static provisioner or an administrator does
// with a released volume, offered again and bound to another namespace's
// claim, and the first Session would read and write that namespace's data.
// The claim stays (Terminating) until the Session is deleted, a new
// Session naming it is refused, and once the Session is gone the claim
// goes too.
func TestVolumeClaimDeletedWhileRunning(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	ctx := t.Context()
	kubeconfig := nodeKubeconfig(t, k)
	volRoot := t.TempDir()
	dir := filepath.Join(volRoot, "disk-1")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	adm := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(adm, fmt.Appendf(nil, "admission {\n  host_paths = [%q]\n  volume_paths = [%q]\n}\n", t.TempDir(), volRoot), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, env, kubeconfig, "node-l1", 19, "--admission", adm)
	defer n.Stop()

	// bound makes claim ns/name and a volume at dir bound to it both
	// ways, as the PV controller leaves them.
	bound := func(ns, name, pv string) *corev1.PersistentVolumeClaim {
		t.Helper()
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: new(string), VolumeName: pv,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := k.c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		if err := k.c.Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pv},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   pvc.Spec.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID},
			},
		}); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		if err := k.c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	mine := bound("default", "mine", "pv-1")
	// Reads what the next owner of the volume writes, and writes to it.
	k.create("holder", []string{"sh", "-c", "until [ -f /work/VICTIM ]; do sleep 0.2; done; cat /work/VICTIM > /work/READ-BY-DEFAULT; echo from-default > /work/PLANTED"},
		func(s *v1alpha1.Session) {
			s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "mine"}}}
			s.Spec.Policy.Workspaces = []policies.Workspace{{Target: "/work", Mode: policies.ModeRW, DefaultDenyRead: true}}
		})
	k.waitState("holder", v1alpha1.SessionRunning, 90*time.Second)

	// Its user deletes the claim: nothing holds it. The API server's
	// StorageObjectInUseProtection puts kubernetes.io/pvc-protection on
	// it; the pvc-protection controller takes it off once no pod uses
	// the claim (this control plane runs no controllers: done here as
	// it does, there being no pod).
	if err := k.c.Delete(ctx, mine); err != nil {
		t.Fatal(err)
	}
	var got corev1.PersistentVolumeClaim
	if err := k.c.Get(ctx, client.ObjectKeyFromObject(mine), &got); err == nil {
		got.Finalizers = slices.DeleteFunc(got.Finalizers, func(f string) bool { return f == "kubernetes.io/pvc-protection" })
		if err := k.c.Update(ctx, &got); err != nil {
			t.Fatal(err)
		}
	}
	gone := false
	for deadline := time.Now().Add(10 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		gone = apierrors.IsNotFound(k.c.Get(ctx, client.ObjectKeyFromObject(mine), &got))
	}
	if !gone {
		// Held while its Session uses it.
		if !slices.Contains(got.Finalizers, agent.ClaimFinalizerPrefix+"node-l1") || got.DeletionTimestamp == nil {
			t.Errorf("claim default/mine after its delete: finalizers %v, deletion %v; want Terminating, held by node-l1", got.Finalizers, got.DeletionTimestamp)
		}
		// A claim being deleted is no new Session's.
		k.create("late", []string{"true"}, func(s *v1alpha1.Session) {
			s.Spec.NodeName = "node-l1"
			s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "mine"}}}
		})
		if s := k.waitState("late", v1alpha1.SessionFailed, 60*time.Second); s.Status.Reason != agent.ReasonRefused || !strings.Contains(s.Status.Message, "is being deleted") {
			t.Errorf("Session late on a claim being deleted: reason %q, message %q; want refused", s.Status.Reason, s.Status.Message)
		}
		if st := k.get("holder").Status.State; st != v1alpha1.SessionRunning {
			t.Errorf("Session holder %s while its claim is held, want Running", st)
		}
		// Released with the Session: the claim goes.
		k.deleteAll(90 * time.Second)
		kubetest.Eventually(t, 30*time.Second, "claim default/mine gone once its Session is", func() (bool, string) {
			err := k.c.Get(ctx, client.ObjectKeyFromObject(mine), &got)
			return apierrors.IsNotFound(err), fmt.Sprintf("%v, finalizers %v", err, got.Finalizers)
		})
		if ents, _ := os.ReadDir(filepath.Join(n.Root, "kube-claims")); len(ents) != 0 {
			t.Errorf("%d claim records left on the node", len(ents))
		}
		return
	}
	t.Errorf("claim default/mine deleted while Session holder runs on its volume")
	// The released volume is made again (a static provisioner's
	// cleanup and re-offer) and bound to another namespace's claim.
	if err := k.c.Delete(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := k.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}); err != nil {
		t.Fatal(err)
	}
	bound("victim", "theirs", "pv-1b")
	victim := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "job"},
		Spec: v1alpha1.SessionSpec{
			Policy: policies.Policy{Label: "victim", Image: daemontest.AgentImage, Command: []string{"sh", "-c", "echo victim-secret > /work/VICTIM"},
				Workspaces: []policies.Workspace{{Target: "/work", Mode: policies.ModeRW, DefaultDenyRead: true}}},
			WorkspaceSources: []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "theirs"}}},
		}}
	if err := k.c.Create(ctx, victim); err != nil {
		t.Fatal(err)
	}

	var holder *v1alpha1.Session
	kubetest.Eventually(t, 60*time.Second, "holder ended", func() (bool, string) {
		holder = k.get("holder")
		st := holder.Status.State
		return st == v1alpha1.SessionExited || st == v1alpha1.SessionFailed || st == v1alpha1.SessionLost, fmt.Sprintf("status %+v", holder.Status)
	})
	read, _ := os.ReadFile(filepath.Join(dir, "READ-BY-DEFAULT"))
	planted, _ := os.ReadFile(filepath.Join(dir, "PLANTED"))
	if string(read) == "victim-secret\n" || len(planted) > 0 {
		t.Errorf("Session default/holder ran on after its claim was deleted (%s, exit %v), on a volume since bound to victim/theirs: it read %q from victim's Session and planted %q",
			holder.Status.State, exitCode(holder.Status.ExitCode), read, planted)
	}
	if err := k.c.Delete(ctx, victim); err != nil {
		t.Fatal(err)
	}
	k.deleteAll(90 * time.Second)
	kubetest.Eventually(t, 90*time.Second, "victim/job gone", func() (bool, string) {
		err := k.c.Get(ctx, client.ObjectKeyFromObject(victim), &v1alpha1.Session{})
		return err != nil, "still there"
	})
}

func exitCode(c *int32) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprint(*c)
}
