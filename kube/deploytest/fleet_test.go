package deploytest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
)

// placementLabel is the node label deploy/kubernetes-fleet runs the
// placement candidates on.
const placementLabel = "airlock.dev/placement"

// TestFleetDeployment proves deploy/kubernetes-fleet against
// deploy/kubernetes and a real control plane:
//   - it holds every object deploy/kubernetes holds, unchanged but for the
//     node agents' DaemonSet, and one more: the placement candidates'
//     DaemonSet, airlock-node-placement;
//   - airlock-node keeps its name and selector (a DaemonSet's selector
//     cannot change, so moving a cluster to the fleet's is an apply) and
//     gains --kubernetes-controller=false and a node affinity;
//     airlock-node-placement runs the same pod otherwise, standing for
//     placement (the flag's default), with its own selector;
//   - by the scheduler's own node-affinity code, every node, labelled
//     airlock.dev/placement=true, =false or not at all, runs exactly one
//     of the two; each DaemonSet's selector matches its own pods and not
//     the other's;
//   - the API server takes every object, strictly validated, and both
//     pods' airlockd-kube arguments pass --check-config.
func TestFleetDeployment(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	base := loadManifests(t, baseDeployment)
	fleet := loadManifests(t, fleetDeployment)
	nodes, nodeCtr := daemonSetNamed(t, fleet, "airlock-node")
	cands, candCtr := daemonSetNamed(t, fleet, "airlock-node-placement")
	baseDS, baseCtr := daemonSet(t, base)

	// Everything else as deploy/kubernetes has it, in its order.
	var rest []string
	for _, m := range fleet {
		if m.obj.GetKind() != "DaemonSet" {
			rest = append(rest, objectKey(m.obj))
		}
	}
	var want []string
	for _, m := range base {
		if m.obj.GetKind() == "DaemonSet" {
			continue
		}
		want = append(want, objectKey(m.obj))
		if f := find(t, fleet, m.obj.GetKind(), m.obj.GetName()); !equality.Semantic.DeepEqual(f.obj.Object, m.obj.Object) {
			t.Errorf("%s differs in deploy/%s from deploy/%s", m, fleetDeployment, baseDeployment)
		}
	}
	if !slices.Equal(rest, want) {
		t.Errorf("deploy/%s's objects but DaemonSets:\n%v\nwant deploy/%s's, in its order:\n%v", fleetDeployment, rest, baseDeployment, want)
	}
	if n := len(fleet) - len(rest); n != 2 {
		t.Errorf("deploy/%s has %d DaemonSets, want 2", fleetDeployment, n)
	}

	// The node agents: the same DaemonSet, the flag and the affinity.
	if !equality.Semantic.DeepEqual(nodes.Spec.Selector, baseDS.Spec.Selector) {
		t.Errorf("airlock-node's selector %v, want deploy/%s's %v: a DaemonSet's selector cannot change", nodes.Spec.Selector, baseDeployment, baseDS.Spec.Selector)
	}
	if want := append(slices.Clone(baseCtr.Args), "--kubernetes-controller=false"); !slices.Equal(nodeCtr.Args, want) {
		t.Errorf("airlock-node's args %q, want deploy/%s's and --kubernetes-controller=false", nodeCtr.Args, baseDeployment)
	}
	if slices.ContainsFunc(candCtr.Args, func(a string) bool { return strings.HasPrefix(a, "--kubernetes-controller") }) ||
		!slices.Equal(candCtr.Args, baseCtr.Args) {
		t.Errorf("airlock-node-placement's args %q, want deploy/%s's (standing for placement)", candCtr.Args, baseDeployment)
	}
	// Apart from what the fleet changes, the same pod.
	strip := func(s corev1.PodSpec) corev1.PodSpec {
		s = *s.DeepCopy()
		s.Affinity, s.NodeSelector = nil, nil
		s.Containers[0].Args = nil
		return s
	}
	for _, ds := range []struct {
		name string
		spec corev1.PodSpec
	}{{"airlock-node", nodes.Spec.Template.Spec}, {"airlock-node-placement", cands.Spec.Template.Spec}} {
		if !equality.Semantic.DeepEqual(strip(ds.spec), strip(baseDS.Spec.Template.Spec)) {
			t.Errorf("%s's pod differs from deploy/%s's in more than its node selection and args", ds.name, baseDeployment)
		}
	}

	// Each node runs exactly one of the two, as the scheduler decides.
	for _, label := range []string{"true", "false", ""} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"kubernetes.io/hostname": "n"}}}
		if label != "" {
			node.Labels[placementLabel] = label
		}
		var runs []string
		for _, ds := range []struct {
			name string
			spec *corev1.PodSpec
		}{{"airlock-node", &nodes.Spec.Template.Spec}, {"airlock-node-placement", &cands.Spec.Template.Spec}} {
			ok, err := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: *ds.spec}).Match(node)
			if err != nil {
				t.Fatalf("%s on a node labelled %q: %v", ds.name, label, err)
			}
			if ok {
				runs = append(runs, ds.name)
			}
		}
		want := []string{"airlock-node"}
		if label == "true" {
			want = []string{"airlock-node-placement"}
		}
		if !slices.Equal(runs, want) {
			t.Errorf("a node with %s=%q runs %v, want %v", placementLabel, label, runs, want)
		}
	}
	// Their selectors keep their pods apart.
	for _, pair := range [][2]struct {
		name string
		sel  *metav1.LabelSelector
		tmpl map[string]string
	}{
		{{"airlock-node", nodes.Spec.Selector, nodes.Spec.Template.Labels}, {"airlock-node-placement", cands.Spec.Selector, cands.Spec.Template.Labels}},
		{{"airlock-node-placement", cands.Spec.Selector, cands.Spec.Template.Labels}, {"airlock-node", nodes.Spec.Selector, nodes.Spec.Template.Labels}},
	} {
		sel, err := metav1.LabelSelectorAsSelector(pair[0].sel)
		if err != nil {
			t.Fatal(err)
		}
		if !sel.Matches(labels.Set(pair[0].tmpl)) {
			t.Errorf("%s's selector does not match its own pods' labels %v", pair[0].name, pair[0].tmpl)
		}
		if sel.Matches(labels.Set(pair[1].tmpl)) {
			t.Errorf("%s's selector matches %s's pods' labels %v", pair[0].name, pair[1].name, pair[1].tmpl)
		}
	}

	// The API server takes all of it, strictly.
	cp, _, _, strict, _ := startDeployCluster(t)
	for _, m := range fleet {
		if err := strict.Create(t.Context(), m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	// And airlockd-kube takes both pods' arguments.
	kc := writeKubeconfig(t, cp.Config)
	for i, args := range [][]string{nodeCtr.Args, candCtr.Args} {
		root := t.TempDir()
		checkAgentArgs(t, env, args, admissionPolicy(t, fleet), kc, fmt.Sprintf("node-%d", i), "10.241.90.0/24", root)
	}
}
