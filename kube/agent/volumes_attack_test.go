package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// admittingDaemon is a reviewDaemon whose Create admits the request as
// the daemon does (daemon.admitter.admitIn: defaults, Validate, then
// Admit with the protected paths and the in-process caller's volumes),
// and refuses what admission refuses.
type admittingDaemon struct {
	reviewDaemon
	adm *policies.Admission
}

func (d *admittingDaemon) Admission() *policies.Admission { return d.adm }

func (d *admittingDaemon) Create(ctx context.Context, req api.CreateRequest) (*api.Session, error) {
	p := *req.Policy.Clone()
	d.adm.FillDefaults(&p)
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	pr := policies.NewProtected()
	if len(req.OwnedWorkspaces) > 0 {
		pr = pr.WithOwned(req.OwnedWorkspaces...)
	}
	if len(req.VolumeWorkspaces) > 0 {
		pr = pr.WithVolumes(req.VolumeWorkspaces...)
	}
	if _, err := d.adm.Admit(&p, pr); err != nil {
		return nil, err
	}
	req.Policy = p // as admitted: the host paths resolved
	return d.reviewDaemon.Create(ctx, req)
}

// boundPair returns a claim of namespace ns bound both ways to a hostPath
// volume at path, with the given access modes.
func boundPair(ns, claim, pv, path string, modes ...corev1.PersistentVolumeAccessMode) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	uid := types.UID("c1a1m000-0000-4000-8000-" + fmt.Sprintf("%012d", len(claim)+len(pv)))
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim, UID: uid},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: modes, VolumeName: pv, StorageClassName: new(string),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: modes},
	}
	vol := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:            modes,
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: claim, UID: uid},
		},
	}
	return pvc, vol
}

// TestVolumeReadOnlyManySecondWorkspace: a ReadOnlyMany claim is to give
// its Session the volume read-only (README: "a claim whose access modes
// are ReadOnlyMany alone takes ro"), and the agent refuses a workspace of
// the source's target in another mode. But the daemon admits the volume's
// directory by its path alone (Protected.WithVolumes), for any workspace
// that names it: a second workspace of the Session's own spec, at another
// target, naming the volume's directory as its host_path with mode "rw",
// is admitted, and the sandbox writes the read-only volume. The agent
// guards the same hole for git sources (a host_path under the fetched
// sources' directory is refused, "a second workspace naming it (mode
// "rw") would be the directory itself"), not for volumes.
func TestVolumeReadOnlyManySecondWorkspace(t *testing.T) {
	volRoot := t.TempDir()
	vol := filepath.Join(volRoot, "shared")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	adm := policies.DefaultAdmission()
	adm.HostPaths = []string{t.TempDir()}
	adm.VolumePaths = []string{volRoot}
	d := &admittingDaemon{reviewDaemon: reviewDaemon{store: approvals.New()}, adm: adm}

	pvc, pv := boundPair("tenant", "shared", "pv-shared", vol, corev1.ReadOnlyMany)
	for _, tt := range []struct {
		name string
		mode string
	}{{"rw", policies.ModeRW}, {"overlay committed into it", policies.ModeOverlay}} {
		t.Run(tt.name, func(t *testing.T) {
			d.creates, d.local = nil, nil
			s := reviewSession(policies.Policy{Label: "x", Image: "img", Command: []string{"true"},
				Workspaces: []policies.Workspace{
					{Target: "/work", Mode: policies.ModeRO, DefaultDenyRead: true},
					// The volume's directory is in the claim's
					// status.workspaceSources[].path after any run,
					// and in the PersistentVolume's spec.
					{Target: "/also", HostPath: vol, Mode: tt.mode, DefaultDenyRead: true},
				}})
			s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "shared"}}}
			scheme, err := Scheme()
			if err != nil {
				t.Fatal(err)
			}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(s, pvc, pv).WithStatusSubresource(&v1alpha1.Session{}).Build()
			a, _ := reviewAgent(t, d, s)
			a.c, a.fresh, a.root = c, c, t.TempDir()
			if _, err := a.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
				t.Fatal(err)
			}
			var got v1alpha1.Session
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(s), &got); err != nil {
				t.Fatal(err)
			}
			for _, req := range d.creates {
				for _, w := range req.Policy.Workspaces {
					if w.HostPath == vol && w.Mode != policies.ModeRO {
						t.Errorf("ReadOnlyMany claim %s/%s: the Session was created with workspace %s on the volume's directory %s in mode %q (status %s %q)",
							pvc.Namespace, pvc.Name, w.Target, w.HostPath, w.Mode, got.Status.State, got.Status.Message)
					}
				}
			}
			if len(d.creates) == 0 && got.Status.State != v1alpha1.SessionFailed {
				t.Errorf("not created, and status %s %q; want Failed, refused", got.Status.State, got.Status.Message)
			}
		})
	}
}

// TestVolumeReadOnlyManyVolume: a volume an administrator made
// ReadOnlyMany and pre-bound to a namespace's claim by name (its
// claimRef) is bound by the PV controller to that claim whatever access
// modes the claim asks ("volume already bound, finishing the binding":
// no comparison of the modes on that path). The claim's own modes
// (ReadWriteOnce) do not make the volume writable: the workspace is ro,
// and mode rw is refused.
func TestVolumeReadOnlyManyVolume(t *testing.T) {
	volRoot := t.TempDir()
	vol := filepath.Join(volRoot, "dataset")
	if err := os.Mkdir(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	pvc, pv := boundPair("tenant", "dataset", "pv-dataset", vol, corev1.ReadWriteOnce)
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(pvc, pv).Build()
	b, err := bindVolume(t.Context(), c, "tenant", &v1alpha1.VolumeSource{ClaimName: "dataset"})
	if err != nil {
		t.Fatal(err)
	}
	if !b.readOnly {
		t.Errorf("claim ReadWriteOnce bound to a ReadOnlyMany volume: readOnly false, want true (the volume's modes count)")
	}
}
