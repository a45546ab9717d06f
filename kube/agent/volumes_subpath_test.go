package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestVolumeSubPath: a volume source's subPath is the workspace: the
// directory beneath the volume's, given to the daemon (admitted as a
// volume's directory, under volume_paths) and named in
// status.workspaceSources. Every subPath that is not an existing
// directory beneath the volume's directory, reached through no symlink,
// is refused on the node (the CRD's pattern refuses the lexical ones
// first; the node does not count on it): the Session fails, reason
// refused, saying why; the daemon is asked for nothing (nothing is
// mounted) and the claim is not held.
func TestVolumeSubPath(t *testing.T) {
	volRoot := t.TempDir()
	vol, other := filepath.Join(volRoot, "a"), filepath.Join(volRoot, "b")
	for _, d := range []string{filepath.Join(vol, "src", "app"), filepath.Join(other, "inner")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, "SECRET"), []byte("b's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// What a Session writing volume a can leave in it.
	for name, target := range map[string]string{"to-root": "/", "to-b": "../b", "to-b-abs": other, "src/up": "..", "to-app": "src/app"} {
		if err := os.Symlink(target, filepath.Join(vol, name)); err != nil {
			t.Fatal(err)
		}
	}
	adm := policies.DefaultAdmission()
	adm.HostPaths = []string{t.TempDir()}
	adm.VolumePaths = []string{volRoot}
	d := &admittingDaemon{reviewDaemon: reviewDaemon{store: approvals.New()}, adm: adm}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	// run runs a Session whose /work is claim data (the volume a) at
	// sub, and returns it as it is after one reconcile, the creates the
	// daemon was asked for, and the claim.
	run := func(t *testing.T, sub string, pvPath string) (v1alpha1.Session, []string, *corev1.PersistentVolumeClaim) {
		t.Helper()
		d.creates, d.local = nil, nil
		pvc, pv := boundPair("tenant", "data", "pv-a", pvPath)
		s := reviewSession(policies.Policy{Label: "x", Image: "img", Command: []string{"true"}})
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "data", SubPath: sub}}}
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
		var hosts []string
		for _, req := range d.creates {
			for _, w := range req.Policy.Workspaces {
				hosts = append(hosts, w.HostPath)
			}
		}
		var claim corev1.PersistentVolumeClaim
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pvc), &claim); err != nil {
			t.Fatal(err)
		}
		return got, hosts, &claim
	}

	t.Run("a directory", func(t *testing.T) {
		got, hosts, _ := run(t, "src/app", vol)
		want := filepath.Join(vol, "src", "app")
		if len(hosts) != 1 || hosts[0] != want || got.Status.State == v1alpha1.SessionFailed {
			t.Fatalf("subPath src/app: workspaces %v, status %s %q; want the one workspace %s", hosts, got.Status.State, got.Status.Message, want)
		}
		if req := d.creates[0]; len(req.VolumeWorkspaces) != 1 || req.VolumeWorkspaces[0] != want {
			t.Errorf("VolumeWorkspaces %v, want [%s]", req.VolumeWorkspaces, want)
		}
		if ws := got.Status.WorkspaceSources; len(ws) != 1 || ws[0].Path != want || ws[0].Volume != "pv-a" {
			t.Errorf("status.workspaceSources %+v, want pv-a at %s", ws, want)
		}
	})
	for _, tt := range []struct {
		name, sub, pvPath, want string
	}{
		{"a symlink to /", "to-root", vol, "goes through a symbolic link"},
		{"a symlink to another volume", "to-b", vol, "goes through a symbolic link"},
		{"an absolute symlink to another volume", "to-b-abs", vol, "goes through a symbolic link"},
		{"through a symlink to another volume", "to-b/inner", vol, "goes through a symbolic link"},
		{"a symlink beneath the volume", "to-app", vol, "goes through a symbolic link"},
		{"a symlink up, then down", "src/up/src", vol, "goes through a symbolic link"},
		{"..", "..", vol, `a ".." name`},
		{"../b", "../b", vol, `a ".." name`},
		{"down and up", "src/../../b", vol, `a ".." name`},
		{".", ".", vol, `a "." name`},
		{"absolute", "/etc", vol, "an absolute path"},
		{"absolute, another volume", other, vol, "an absolute path"},
		{"a trailing slash", "src/", vol, "an empty name"},
		{"missing", "nope", vol, "does not exist in the volume's directory"},
		{"a file", "file", vol, "is not a directory"},
		{"beneath a file", "file/x", vol, "is not a directory"},
		// A volume whose directory is the volume_paths root: its
		// subPaths are the other volumes.
		{"of the root", "b", volRoot, "is not beneath the admission policy's volume_paths"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, hosts, claim := run(t, tt.sub, tt.pvPath)
			if len(hosts) != 0 {
				t.Errorf("subPath %q: the daemon was asked for workspaces %v", tt.sub, hosts)
			}
			if got.Status.State != v1alpha1.SessionFailed || got.Status.Reason != ReasonRefused || !strings.Contains(got.Status.Message, tt.want) || got.Status.ID != "" {
				t.Errorf("subPath %q: status %s, reason %q, message %q, id %q; want Failed, refused, saying %q", tt.sub, got.Status.State, got.Status.Reason, got.Status.Message, got.Status.ID, tt.want)
			}
			if len(claim.Finalizers) != 0 {
				t.Errorf("subPath %q: the claim is held: %v", tt.sub, claim.Finalizers)
			}
		})
	}
}
