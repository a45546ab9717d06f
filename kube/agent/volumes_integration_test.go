package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestVolumeWorkspaces: Sessions whose workspaces come from
// PersistentVolumeClaims, run by two node agents with the deployment's own
// RBAC (deploy/kubernetes/node-rbac.yaml) against a real control plane:
//   - placement follows the volume's nodeAffinity (to the smaller node),
//     and waits, Pending, for a claim that is not bound yet;
//   - mode "rw" writes the volume; the default overlay leaves it as it
//     was until a commit, the changes counted in status.diff; a
//     ReadOnlyMany claim is read-only in the sandbox;
//   - the attacks fail: a claim naming a volume bound to another claim
//     (placed by the creator, or left to placement), the volume's
//     directory named as a host_path, a Session placed by its creator on
//     a node the volume is not on, a volume outside the admission
//     policy's volume_paths, and a kind of volume that is no directory;
//   - a subPath is the workspace (also from airlock run --volume-claim
//     TARGET=CLAIM:SUBPATH); one that is a symlink (to /, to another
//     volume's directory) fails on the node, refused, with no local
//     session; "..", an absolute path are refused by the API server;
//   - no call is refused by RBAC, nothing is left on the nodes, and the
//     volume keeps what was written to it after its Sessions are gone.
func TestVolumeWorkspaces(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	ctx := t.Context()
	kubeconfig := nodeKubeconfig(t, k)

	// Kubernetes Nodes of the agents' names: a volume's nodeAffinity is
	// matched against their labels.
	for _, name := range []string{"node-v1", "node-v2"} {
		if err := k.c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}}}); err != nil {
			t.Fatal(err)
		}
	}
	hostRoot, volRoot, outside := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{"a", "later", "shared"} {
		if err := os.Mkdir(filepath.Join(volRoot, d), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(volRoot, d), 0o777); err != nil { // past the umask: the sandbox's user writes
			t.Fatal(err)
		}
	}
	// nest: a volume whose workspaces are its subPaths, one a directory,
	// others symlinks out of it (what a Session writing it can leave).
	if err := os.MkdirAll(filepath.Join(volRoot, "nest", "repos", "app"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(volRoot, "nest", "repos", "app"), 0o777); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"to-root": "/", "to-a": "../a"} {
		if err := os.Symlink(target, filepath.Join(volRoot, "nest", name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"a/SEED": "seed\n", "shared/F": "shared\n"} {
		if err := os.WriteFile(filepath.Join(volRoot, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	adm := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(adm, fmt.Appendf(nil, "admission {\n  host_paths = [%q]\n  volume_paths = [%q]\n}\n", hostRoot, volRoot), 0o644); err != nil {
		t.Fatal(err)
	}
	// node-v1 has the more room: placement would choose it but for a
	// volume's nodeAffinity.
	n1 := startNode(t, env, kubeconfig, "node-v1", 17, "--node-capacity", "8", "--admission", adm)
	n2 := startNode(t, env, kubeconfig, "node-v2", 18, "--node-capacity", "4", "--admission", adm)

	onHost := func(host string) *corev1.VolumeNodeAffinity {
		return &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
		}}}}
	}
	local := func(path string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}}
	}
	hostPath := func(path string) corev1.PersistentVolumeSource {
		return corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}
	}
	// claim makes a claim; bind makes a volume bound to it both ways, as
	// the PV controller leaves a pre-bound pair (this control plane runs
	// no controllers).
	claim := func(name string, modes ...corev1.PersistentVolumeAccessMode) *corev1.PersistentVolumeClaim {
		t.Helper()
		if len(modes) == 0 {
			modes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      modes,
				StorageClassName: new(string),
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if err := k.c.Create(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		return pvc
	}
	bindStatus := func(pvc *corev1.PersistentVolumeClaim, volume string) {
		t.Helper()
		pvc.Spec.VolumeName = volume
		if err := k.c.Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		if err := k.c.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}
	bind := func(pvc *corev1.PersistentVolumeClaim, name string, src corev1.PersistentVolumeSource, aff *corev1.VolumeNodeAffinity) {
		t.Helper()
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   pvc.Spec.AccessModes,
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource:        src,
				NodeAffinity:                  aff,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			},
		}
		if err := k.c.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		bindStatus(pvc, name)
	}
	volume := func(target, claimName string, mode string) func(*v1alpha1.Session) {
		return func(s *v1alpha1.Session) {
			s.Spec.WorkspaceSources = append(s.Spec.WorkspaceSources, v1alpha1.WorkspaceSource{Target: target, Volume: &v1alpha1.VolumeSource{ClaimName: claimName}})
			if mode != "" {
				s.Spec.Policy.Workspaces = append(s.Spec.Policy.Workspaces, policies.Workspace{Target: target, Mode: mode, DefaultDenyRead: true})
			}
		}
	}
	subPath := func(sub string) func(*v1alpha1.Session) {
		return func(s *v1alpha1.Session) {
			s.Spec.WorkspaceSources[len(s.Spec.WorkspaceSources)-1].Volume.SubPath = sub
		}
	}
	placed := func(node string) func(*v1alpha1.Session) {
		return func(s *v1alpha1.Session) { s.Spec.NodeName = node }
	}

	data := claim("data")
	bind(data, "pv-a", local(filepath.Join(volRoot, "a")), onHost("node-v2"))
	shared := claim("shared", corev1.ReadOnlyMany)
	bind(shared, "pv-shared", hostPath(filepath.Join(volRoot, "shared")), nil)
	out := claim("out")
	bind(out, "pv-out", hostPath(outside), nil)
	nfs := claim("nfs")
	bind(nfs, "pv-nfs", corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.test", Path: "/x"}}, nil)
	nest := claim("nest")
	bind(nest, "pv-nest", hostPath(filepath.Join(volRoot, "nest")), nil)
	later := claim("later")
	// A claim that names pv-a, bound to data: what a namespace's user can
	// write in its spec (the status is the PV controller's, forged here).
	thief := claim("thief")
	bindStatus(thief, "pv-a")

	k.create("rw", []string{"sh", "-c", "grep -qx seed /work/SEED || exit 3; echo written > /work/OUT"}, volume("/work", "data", policies.ModeRW))
	k.create("ro", []string{"sh", "-c", "grep -qx shared /work/F || exit 3; touch /work/x 2>/dev/null && exit 4; exit 0"}, volume("/work", "shared", ""))
	k.create("waits", []string{"sh", "-c", "echo late > /work/LATE"}, volume("/work", "later", policies.ModeRW))
	k.create("hijack", []string{"true"}, volume("/work", "thief", policies.ModeRW))
	k.create("hijack-direct", []string{"true"}, volume("/work", "thief", policies.ModeRW), placed("node-v2"))
	k.create("direct-path", []string{"true"}, placed("node-v2"), func(s *v1alpha1.Session) {
		s.Spec.Policy.Workspaces = []policies.Workspace{{Target: "/work", HostPath: filepath.Join(volRoot, "a"), Mode: policies.ModeRW, DefaultDenyRead: true}}
	})
	k.create("wrong-node", []string{"true"}, volume("/work", "data", policies.ModeRW), placed("node-v1"))
	k.create("outside", []string{"true"}, volume("/work", "out", ""))
	k.create("nfs", []string{"true"}, volume("/work", "nfs", ""))
	// subPaths: a directory of the volume; symlinks to / and to another
	// volume's directory, refused on the node; "..", an absolute path,
	// refused by the API server (the CRD's pattern).
	k.create("subpath", []string{"sh", "-c", "echo sub > /work/OUT"}, volume("/work", "nest", policies.ModeRW), subPath("repos/app"))
	k.create("sub-root", []string{"true"}, volume("/work", "nest", policies.ModeRW), subPath("to-root"))
	k.create("sub-other", []string{"true"}, volume("/work", "nest", policies.ModeRW), subPath("to-a"))
	for _, sub := range []string{"..", "repos/../../a", "/etc", "/"} {
		s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "sub-bad"},
			Spec: v1alpha1.SessionSpec{Policy: policies.Policy{Label: "x", Image: daemontest.AgentImage, Command: []string{"true"}},
				WorkspaceSources: []v1alpha1.WorkspaceSource{{Target: "/work", Volume: &v1alpha1.VolumeSource{ClaimName: "nest", SubPath: sub}}}}}
		if err := k.c.Create(ctx, s); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.workspaceSources[0].volume.subPath") {
			t.Errorf("a Session with subPath %q: %v, want refused by the API server (422) naming the field", sub, err)
		}
	}

	rw := k.waitState("rw", v1alpha1.SessionExited, 90*time.Second)
	if rw.Spec.NodeName != "node-v2" || rw.Status.ExitCode == nil || *rw.Status.ExitCode != 0 {
		t.Errorf("Session rw: on %q, status %+v; want run on node-v2 (its volume's node) with exit 0", rw.Spec.NodeName, rw.Status)
	}
	if ws := rw.Status.WorkspaceSources; len(ws) != 1 || ws[0].Volume != "pv-a" || ws[0].Path != filepath.Join(volRoot, "a") {
		t.Errorf("Session rw: status.workspaceSources %+v, want pv-a at %s", ws, filepath.Join(volRoot, "a"))
	}
	if b, err := os.ReadFile(filepath.Join(volRoot, "a", "OUT")); err != nil || string(b) != "written\n" {
		t.Errorf("the volume after a mode rw Session wrote it: OUT %q, %v", b, err)
	}
	// The default overlay, once rw is done with the volume.
	k.create("review", []string{"sh", "-c", "grep -qx written /work/OUT || exit 3; echo reviewed > /work/NEW"}, volume("/work", "data", ""))
	review := k.waitState("review", v1alpha1.SessionReview, 90*time.Second)
	if review.Spec.NodeName != "node-v2" || review.Status.Diff == nil || review.Status.Diff.Added != 1 {
		t.Errorf("Session review: on %q, status %+v; want Review on node-v2 with one file added", review.Spec.NodeName, review.Status)
	}
	if _, err := os.Stat(filepath.Join(volRoot, "a", "NEW")); !os.IsNotExist(err) {
		t.Errorf("an overlay workspace's change reached the volume before a commit (%v)", err)
	}
	// From the command line: airlock --context run --volume-claim.
	manifest := filepath.Join(t.TempDir(), "cli.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, "session \"cli\" {\n  image = %q\n  command = [\"grep\", \"-qx\", \"written\", \"/work/OUT\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(ctx, filepath.Join(env.BinDir, "airlock"), "--kubeconfig", k.kubeconfig, "-n", "default",
		"run", "-d", "-f", manifest, "--volume-claim", "/work=data")
	cli.Env = []string{"HOME=/nonexistent"}
	cliOut, err := cli.Output()
	if err != nil {
		t.Fatalf("airlock run --volume-claim: %v (%s)", err, cliOut)
	}
	name := strings.TrimSpace(string(cliOut))
	if s := k.waitState(name, v1alpha1.SessionExited, 90*time.Second); s.Spec.NodeName != "node-v2" || s.Status.ExitCode == nil || *s.Status.ExitCode != 0 ||
		len(s.Spec.WorkspaceSources) != 1 || s.Spec.WorkspaceSources[0].Volume == nil || s.Spec.WorkspaceSources[0].Volume.ClaimName != "data" {
		t.Errorf("Session %s from airlock run --volume-claim: spec %+v, status %+v; want the claim data, run on node-v2 with exit 0", name, s.Spec, s.Status)
	}
	if ro := k.waitState("ro", v1alpha1.SessionExited, 90*time.Second); ro.Status.ExitCode == nil || *ro.Status.ExitCode != 0 {
		t.Errorf("Session ro: status %+v; want exit 0 (the ReadOnlyMany claim read, not written)", ro.Status)
	}
	if _, err := os.Stat(filepath.Join(volRoot, "shared", "x")); !os.IsNotExist(err) {
		t.Errorf("a ReadOnlyMany claim's volume was written (%v)", err)
	}

	sub := k.waitState("subpath", v1alpha1.SessionExited, 90*time.Second)
	if sub.Status.ExitCode == nil || *sub.Status.ExitCode != 0 {
		t.Errorf("Session subpath: status %+v; want exit 0 (the subPath's directory as /work)", sub.Status)
	}
	if ws := sub.Status.WorkspaceSources; len(ws) != 1 || ws[0].Volume != "pv-nest" || ws[0].Path != filepath.Join(volRoot, "nest", "repos", "app") {
		t.Errorf("Session subpath: status.workspaceSources %+v, want pv-nest at %s", ws, filepath.Join(volRoot, "nest", "repos", "app"))
	}
	if b, err := os.ReadFile(filepath.Join(volRoot, "nest", "repos", "app", "OUT")); err != nil || string(b) != "sub\n" {
		t.Errorf("the subPath's directory after a mode rw Session wrote it: OUT %q, %v", b, err)
	}
	// From the command line: --volume-claim TARGET=CLAIM:SUBPATH.
	cliSub := exec.CommandContext(ctx, filepath.Join(env.BinDir, "airlock"), "--kubeconfig", k.kubeconfig, "-n", "default",
		"run", "-d", "-f", manifestSub(t, "grep -qx sub /work/OUT"), "--volume-claim", "/work=nest:repos/app")
	cliSub.Env = []string{"HOME=/nonexistent"}
	if out, err := cliSub.Output(); err != nil {
		t.Errorf("airlock run --volume-claim /work=nest:repos/app: %v (%s)", err, out)
	} else if s := k.waitState(strings.TrimSpace(string(out)), v1alpha1.SessionExited, 90*time.Second); s.Status.ExitCode == nil || *s.Status.ExitCode != 0 ||
		len(s.Spec.WorkspaceSources) != 1 || s.Spec.WorkspaceSources[0].Volume == nil || s.Spec.WorkspaceSources[0].Volume.SubPath != "repos/app" {
		t.Errorf("Session %s from airlock run --volume-claim /work=nest:repos/app: spec %+v, status %+v; want subPath repos/app, exit 0", s.Name, s.Spec, s.Status)
	}

	// Refused by the node running them, before anything runs.
	for name, want := range map[string]string{
		"hijack-direct": "PersistentVolume pv-a, which is not bound to it",
		"direct-path":   "is not under an admitted host path",
		"wrong-node":    "nodeAffinity does not select Node node-v1",
		"outside":       "is not under the admission policy's volume_paths",
		"sub-root":      `subPath "to-root" in the volume's directory ` + filepath.Join(volRoot, "nest") + " goes through a symbolic link",
		"sub-other":     `subPath "to-a" in the volume's directory ` + filepath.Join(volRoot, "nest") + " goes through a symbolic link",
	} {
		s := k.waitState(name, v1alpha1.SessionFailed, 60*time.Second)
		if s.Status.Reason != agent.ReasonRefused || !strings.Contains(s.Status.Message, want) || s.Status.ID != "" {
			t.Errorf("Session %s: reason %q, message %q, id %q; want refused saying %q, no local session", name, s.Status.Reason, s.Status.Message, s.Status.ID, want)
		}
	}
	// Left unplaced by placement, saying why.
	for name, want := range map[string]string{
		"hijack": "PersistentVolume pv-a, which is not bound to it",
		"nfs":    "is not a directory on a node",
		"waits":  "PersistentVolumeClaim default/later is not bound",
	} {
		kubetest.Eventually(t, 30*time.Second, "Session "+name+" unschedulable", func() (bool, string) {
			s := k.get(name)
			return s.Spec.NodeName == "" && s.Status.Reason == agent.ReasonUnschedulable && strings.Contains(s.Status.Message, want),
				fmt.Sprintf("spec.nodeName %q, status %+v; want it saying %q", s.Spec.NodeName, s.Status, want)
		})
	}
	// Bound now, to a volume on node-v1: placed and run.
	bind(later, "pv-later", local(filepath.Join(volRoot, "later")), onHost("node-v1"))
	if s := k.waitState("waits", v1alpha1.SessionExited, 90*time.Second); s.Spec.NodeName != "node-v1" || s.Status.ExitCode == nil || *s.Status.ExitCode != 0 {
		t.Errorf("Session waits: on %q, status %+v; want run on node-v1 once its claim was bound", s.Spec.NodeName, s.Status)
	}
	if b, err := os.ReadFile(filepath.Join(volRoot, "later", "LATE")); err != nil || string(b) != "late\n" {
		t.Errorf("the volume bound late: LATE %q, %v", b, err)
	}

	k.deleteAll(90 * time.Second)
	for _, n := range []*agentproc.Proc{n1, n2} {
		if list := n.Labelled(t); len(list) != 0 {
			t.Errorf("%s still holds %d local sessions after the delete", n.Node, len(list))
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		agentproc.WantNothingLeft(t, n.Root)
		if m := regexp.MustCompile(`(?m)^.*cannot \w+ resource.*$`).FindString(n.Log.String()); m != "" {
			t.Errorf("%s's agent was refused by RBAC: %s", n.Node, m)
		}
	}
	// The volume keeps what was written to it.
	if b, err := os.ReadFile(filepath.Join(volRoot, "a", "OUT")); err != nil || string(b) != "written\n" {
		t.Errorf("the volume after its Sessions were deleted: OUT %q, %v", b, err)
	}
}

// manifestSub writes a manifest of a session running sh -c script, for
// airlock run -f.
func manifestSub(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sub.hcl")
	if err := os.WriteFile(p, fmt.Appendf(nil, "session \"cli-sub\" {\n  image = %q\n  command = [\"sh\", \"-c\", %q]\n}\n", daemontest.AgentImage, script), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeKubeconfig applies deploy/kubernetes/node-rbac.yaml (the node
// agents' service account, roles and bindings) and returns a kubeconfig
// of an hour's token of that service account.
func nodeKubeconfig(t *testing.T, k *cluster) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "node-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sa *corev1.ServiceAccount
	for _, doc := range strings.Split(string(b), "\n---\n") {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("node-rbac.yaml: %v", err)
		}
		if u.GetKind() == "ServiceAccount" {
			sa = &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: u.GetNamespace(), Name: u.GetName()}}
			continue
		}
		if err := k.c.Create(t.Context(), u); err != nil {
			t.Fatalf("node-rbac.yaml: create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	if sa == nil {
		t.Fatal("node-rbac.yaml has no ServiceAccount")
	}
	token := serviceAccountToken(t, k.c, sa)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: k.cp.Config.Host, CertificateAuthorityData: k.cp.Config.CAData}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["node"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "node"}
	kc.CurrentContext = "node"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}
