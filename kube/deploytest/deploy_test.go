package deploytest

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// nodeExtra is the user extra a pod-bound service-account token carries
// its node's name in.
const nodeExtra = "authentication.kubernetes.io/node-name"

func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// podOn creates, as the administrator, a Node named node and the
// DaemonSet's pod bound to it (no kubelet runs it: the objects are what a
// pod-bound token needs), and returns the pod.
func podOn(t *testing.T, admin client.Client, tmpl *corev1.PodTemplateSpec, node string) *corev1.Pod {
	t.Helper()
	if err := admin.Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "airlock-node-" + node, Namespace: agent.LeaseNamespace, Labels: tmpl.Labels},
		Spec:       *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	if err := admin.Create(t.Context(), pod); err != nil {
		t.Fatalf("the DaemonSet's pod on %s: %v", node, err)
	}
	return pod
}

// token returns a token of service account sa in namespace ns, bound to
// pod when pod is not nil, as the kubelet's projected token is.
func token(t *testing.T, cs kubernetes.Interface, ns, sa string, pod *corev1.Pod) string {
	t.Helper()
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), sa, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

// asToken is the control plane's configuration with token as the
// credentials.
func asToken(cp *kubetest.ControlPlane, token string) *rest.Config {
	return &rest.Config{Host: cp.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cp.Config.CAData}, QPS: 100, Burst: 200}
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["node"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "node"}
	kc.CurrentContext = "node"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// startDeployCluster starts a control plane and returns it with the
// deployment's scheme, an admin client, the same client with strict field
// validation (an unknown field is an error, as kubectl apply
// --validate=strict) and an admin clientset.
func startDeployCluster(t *testing.T) (*kubetest.ControlPlane, *runtime.Scheme, client.Client, client.Client, kubernetes.Interface) {
	t.Helper()
	cp := kubetest.Start(t)
	sch := scheme(t)
	admin, err := client.New(cp.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cp, sch, admin, client.WithFieldValidation(admin, metav1.FieldValidationStrict), cs
}

// TestDeployment applies deploy/kubernetes to a real control plane and
// proves it:
//   - every manifest the kustomization lists is accepted (unknown fields
//     refused), in its order, and the DaemonSet decodes strictly to a
//     DaemonSet whose pod the API server takes (privileged, as shipped);
//   - a token of airlock-node bound to that pod on node-a names node-a;
//   - the attack: with only the shipped RBAC, node-a's credentials rewrite
//     node-b's AirlockNode and Lease, forge a Session of node-b, and make
//     placement's writes without leading; with the node restriction
//     (node-restriction.yaml) every one of them is refused and node-c's
//     objects are left as they were; a token bound to no pod writes
//     nothing; RBAC gives the node no Secrets, no namespaces and no
//     deletes;
//   - airlockd-kube with the DaemonSet's arguments (paths made the test's)
//     passes --check-config; then two agents, node-a and node-d, each with
//     its pod's token, register, one takes the placement leadership and
//     places a Session on each node (one of them not its own), each runs
//     its Session to completion (Exited with its exit code); the leader
//     marks Lost the Session of node-c, whose Lease expired, and leaves
//     unschedulable the one no node fits; deleted Sessions are removed:
//     all of it through the shipped RBAC and under the node restriction,
//     with no request refused by RBAC, and nothing left on the nodes;
//   - the users' editor role creates Sessions and cannot write their
//     status.
func TestDeployment(t *testing.T) {
	testutil.RequiresRoot(t)
	// The test's clients log nothing worth reading.
	ctrllog.SetLogger(logr.Discard())
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	ms := loadManifests(t, baseDeployment)
	ds, ctr := daemonSet(t, ms)

	cp, sch, admin, strict, cs := startDeployCluster(t)
	ctx := t.Context()

	// The manifests, in the kustomization's order; the node restriction
	// is held back for the attack, and applied after it.
	var restriction []manifest
	for _, m := range ms {
		if m.file == "node-restriction.yaml" {
			restriction = append(restriction, m)
			continue
		}
		if err := strict.Create(ctx, m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	if len(restriction) != 6 {
		t.Fatalf("node-restriction.yaml holds %d objects, want three policies and their bindings", len(restriction))
	}
	kubetest.Eventually(t, time.Minute, "the CRDs served", func() (bool, string) {
		err := admin.List(ctx, &v1alpha1.SessionList{})
		return err == nil, fmt.Sprint(err)
	})

	podA := podOn(t, admin, &ds.Spec.Template, "node-a")
	tokA := token(t, cs, agent.LeaseNamespace, "airlock-node", podA)
	cfgA := asToken(cp, tokA)
	csA, err := kubernetes.NewForConfig(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := csA.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := rev.Status.UserInfo; u.Username != "system:serviceaccount:airlock-system:airlock-node" || !slicesEqual(u.Extra[nodeExtra], "node-a") {
		t.Fatalf("the pod-bound token is %q with %s %v, want airlock-node on node-a", u.Username, nodeExtra, u.Extra[nodeExtra])
	}
	nodeA, err := client.New(cfgA, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}

	// The attack, with the shipped RBAC alone: node-a's credentials
	// against node-b.
	victim(t, admin, "node-b", 40)
	leadAs(t, admin, "node-b_victim")
	for _, a := range attacks {
		if err := a.do(ctx, nodeA, "node-b", false); err != nil {
			t.Fatalf("without the node restriction, node-a's credentials could not %s: %v (the attack needs RBAC to let it through)", a.name, err)
		}
		t.Logf("without the node restriction, node-a's credentials %s: done", a.name)
	}

	// A user of namespace default with the edit role's rights on claims takes a
	// node's hold off its claim: RBAC lets it (and the claim would go
	// while its Session has the volume).
	claimUser := userOf(t, cp, admin, cs, "claim-user")
	if err := dropHolds(ctx, claimUser, "claim-node-b", false); err != nil {
		t.Fatalf("without the node restriction, an editor of default could not take a node's hold off a claim: %v (the attack needs RBAC to let it through)", err)
	}

	// node-b's objects, rewritten, would mislead the agent run below
	// (relabelled to match its Session, room for 999): gone.
	for _, o := range []client.Object{
		&v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-node-b"}},
		&v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unplaced-node-b"}},
		&v1alpha1.SessionPool{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pool-node-b"}},
		&v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: agent.LeaseNamespace, Name: "node-b"}},
	} {
		if err := admin.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// The node restriction applied: the same attacks against node-c.
	for _, m := range restriction {
		if err := strict.Create(ctx, m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	victim(t, admin, "node-c", 5)
	leadAs(t, admin, "node-c_victim")
	before := snapshot(t, admin, "node-c")
	for _, a := range attacks {
		// The API server loads the policies, and their parameter,
		// asynchronously: a dry run shows when they are in force.
		kubetest.Eventually(t, 30*time.Second, "the node restriction in force against: "+a.name, func() (bool, string) {
			err := a.do(ctx, nodeA, "node-c", true)
			return refusedByPolicy(err), fmt.Sprint(err)
		})
		err := a.do(ctx, nodeA, "node-c", false)
		if !refusedByPolicy(err) {
			t.Fatalf("with the node restriction, node-a's credentials %s: %v, want a policy's refusal", a.name, err)
		}
		t.Logf("with the node restriction, node-a's credentials %s: refused: %v", a.name, err)
	}
	if after := snapshot(t, admin, "node-c"); after != before {
		t.Fatalf("refused attacks changed node-c's objects:\nbefore %s\nafter  %s", before, after)
	}
	// Its own entry of the same SessionPool's status it may write, as its
	// agent does; the victim's stays.
	if err := applyPoolEntry(ctx, nodeA, "pool-node-c", "node-a", map[string]any{"node": "node-a", "ready": int64(0)}, false); err != nil {
		t.Fatalf("with the node restriction, node-a writing its own entry of a SessionPool's status: %v", err)
	}
	var spc v1alpha1.SessionPool
	if err := admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: "pool-node-c"}, &spc); err != nil {
		t.Fatal(err)
	}
	if len(spc.Status.Nodes) != 2 || spc.Status.Nodes[0] != (v1alpha1.PoolNodeStatus{Node: "node-c", Ready: 1}) || spc.Status.Nodes[1].Node != "node-a" {
		t.Errorf("SessionPool status after node-a wrote its entry: %+v, want node-c's entry unchanged and node-a's", spc.Status)
	}
	if err := admin.Delete(ctx, &spc); err != nil {
		t.Fatal(err)
	}

	// The editor, refused: the holds are the node agents'.
	kubetest.Eventually(t, 30*time.Second, "the claim holds in force", func() (bool, string) {
		err := dropHolds(ctx, claimUser, "claim-node-c", true)
		return refusedByPolicy(err), fmt.Sprint(err)
	})
	if err := dropHolds(ctx, claimUser, "claim-node-c", false); !refusedByPolicy(err) || !strings.Contains(err.Error(), "node agents") {
		t.Fatalf("with the node restriction, an editor of default taking a node's hold off a claim: %v, want the policy's refusal", err)
	}

	// Its own finalizer on a claim it may put on and take off, as its
	// agent does for its Sessions' volumes; the victim's stays.
	for _, hold := range []bool{true, false} {
		var pvc corev1.PersistentVolumeClaim
		if err := nodeA.Get(ctx, client.ObjectKey{Namespace: "default", Name: "claim-node-c"}, &pvc); err != nil {
			t.Fatal(err)
		}
		if hold {
			controllerutil.AddFinalizer(&pvc, agent.ClaimFinalizerPrefix+"node-a")
		} else {
			controllerutil.RemoveFinalizer(&pvc, agent.ClaimFinalizerPrefix+"node-a")
		}
		if err := nodeA.Update(ctx, &pvc); err != nil {
			t.Fatalf("with the node restriction, node-a holding (%v) a claim with its own finalizer: %v", hold, err)
		}
		if !controllerutil.ContainsFinalizer(&pvc, agent.ClaimFinalizerPrefix+"node-c") {
			t.Errorf("claim-node-c's finalizers %v: node-c's is gone", pvc.Finalizers)
		}
	}

	// A token of airlock-node bound to no pod names no node: it writes
	// nothing, not even an AirlockNode of its own choosing.
	unbound, err := client.New(asToken(cp, token(t, cs, agent.LeaseNamespace, "airlock-node", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	if err := unbound.Create(ctx, &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-z"}}); !refusedByPolicy(err) || !strings.Contains(err.Error(), "bound to a pod") {
		t.Fatalf("an airlock-node token bound to no pod creating an AirlockNode: %v, want the policy's refusal", err)
	}
	// What RBAC does not grant the node at all.
	for what, err := range map[string]error{
		"list Secrets in airlock-system": nodeA.List(ctx, &corev1.SecretList{}, client.InNamespace(agent.LeaseNamespace)),
		"create a Namespace":             nodeA.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "squat"}}),
		"delete a Session":               nodeA.Delete(ctx, &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unplaced-node-c"}}),
		"list Pods":                      nodeA.List(ctx, &corev1.PodList{}),
		// A token of its own service account bound to another node's
		// pod would name that node.
		"request a token of airlock-node": func() error {
			_, err := csA.CoreV1().ServiceAccounts(agent.LeaseNamespace).CreateToken(ctx, "airlock-node", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}(),
	} {
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot") {
			t.Errorf("node-a's credentials %s: %v, want RBAC's refusal", what, err)
		}
	}

	// Two node agents, with the DaemonSet's arguments and their pods'
	// tokens: node-a and node-d. One leads, and places the other's
	// Session on it.
	podD := podOn(t, admin, &ds.Spec.Template, "node-d")
	cfgD := asToken(cp, token(t, cs, agent.LeaseNamespace, "airlock-node", podD))
	agents := map[string]*agentproc.Proc{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for node, kc := range map[string]string{"node-a": writeKubeconfig(t, cfgA), "node-d": writeKubeconfig(t, cfgD)} {
		pool := map[string]string{"node-a": "10.241.77.0/24", "node-d": "10.241.78.0/24"}[node]
		wg.Go(func() {
			n := startAgent(t, env, ctr.Args, admissionPolicy(t, ms), kc, node, pool)
			mu.Lock()
			agents[node] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	kubetest.Eventually(t, 90*time.Second, "node-a and node-d registered", func() (bool, string) {
		var state []string
		for _, node := range []string{"node-a", "node-d"} {
			var an v1alpha1.AirlockNode
			var l coordinationv1.Lease
			errN := admin.Get(ctx, client.ObjectKey{Name: node}, &an)
			errL := admin.Get(ctx, client.ObjectKey{Namespace: agent.LeaseNamespace, Name: node}, &l)
			if errN != nil || errL != nil || an.Status.Capacity == 0 {
				state = append(state, fmt.Sprintf("%s: AirlockNode %v %+v, Lease %v", node, errN, an.Status, errL))
			}
		}
		return len(state) == 0, strings.Join(state, "; ")
	})
	// A SessionPool of every node: each agent keeps its sandbox and
	// writes its own entry of the status, under RBAC and the node
	// restriction.
	warm := &v1alpha1.SessionPool{
		ObjectMeta: metav1.ObjectMeta{Name: "warm", Namespace: "default"},
		Spec:       v1alpha1.SessionPoolSpec{Size: 1, Policy: policies.Policy{Label: "warm", Image: daemontest.AgentImage}},
	}
	if err := admin.Create(ctx, warm); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 90*time.Second, "SessionPool warm ready on node-a and node-d", func() (bool, string) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(warm), warm); err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, e := range warm.Status.Nodes {
			if (e.Node == "node-a" || e.Node == "node-d") && e.Ready == 1 {
				ready++
			}
		}
		return ready == 2 && warm.Status.Ready == 2, fmt.Sprintf("%+v", warm.Status)
	})
	if err := admin.Delete(ctx, warm); err != nil {
		t.Fatal(err)
	}
	for node, code := range map[string]int{"node-a": 3, "node-d": 4} {
		job := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "job-" + node, Namespace: "default"},
			Spec: v1alpha1.SessionSpec{NodeSelector: map[string]string{"airlock.test/node": node}, Policy: policies.Policy{
				Label: "job-" + node, Image: daemontest.AgentImage, Command: []string{"sh", "-c", fmt.Sprintf("exit %d", code)}}},
		}
		if err := admin.Create(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	for node, code := range map[string]int32{"node-a": 3, "node-d": 4} {
		var s *v1alpha1.Session
		kubetest.Eventually(t, 2*time.Minute, "Session job-"+node+" Exited on "+node, func() (bool, string) {
			s, err = session(ctx, admin, "job-"+node)
			if err != nil {
				return false, err.Error()
			}
			return s.Status.State == v1alpha1.SessionExited, fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
		})
		if s.Spec.NodeName != node || s.Status.ExitCode == nil || *s.Status.ExitCode != code || s.Status.ID == "" || s.Status.PlacedAt == nil {
			t.Fatalf("Session job-%s: spec.nodeName %q, status %+v; want placed on and run by %s, exit %d", node, s.Spec.NodeName, s.Status, node, code)
		}
	}
	var leader coordinationv1.Lease
	if err := admin.Get(ctx, client.ObjectKey{Namespace: agent.LeaseNamespace, Name: agent.PlacementLease}, &leader); err != nil ||
		!strings.HasPrefix(ptr.Deref(leader.Spec.HolderIdentity, ""), "node-a_") && !strings.HasPrefix(ptr.Deref(leader.Spec.HolderIdentity, ""), "node-d_") {
		t.Fatalf("placement leader Lease: %v, holder %q; want node-a's or node-d's", err, ptr.Deref(leader.Spec.HolderIdentity, ""))
	}
	t.Logf("placement leader: %s", ptr.Deref(leader.Spec.HolderIdentity, ""))
	// Placement's other writes, as the leader, pass the restriction:
	// node-c's Lease expired, its Session is Lost; the Session no node
	// fits is Pending, unschedulable.
	kubetest.Eventually(t, time.Minute, "node-c's Session Lost, the unplaced one unschedulable", func() (bool, string) {
		on, err1 := session(ctx, admin, "on-node-c")
		un, err2 := session(ctx, admin, "unplaced-node-c")
		if err1 != nil || err2 != nil {
			return false, fmt.Sprint(err1, err2)
		}
		return on.Status.State == v1alpha1.SessionLost && un.Status.Reason == agent.ReasonUnschedulable,
			fmt.Sprintf("on-node-c %+v; unplaced-node-c %+v", on.Status, un.Status)
	})
	for _, node := range []string{"node-a", "node-d"} {
		if err := admin.Delete(ctx, &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "job-" + node}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []string{"node-a", "node-d"} {
		n := agents[node]
		kubetest.Eventually(t, time.Minute, "Session job-"+node+" gone (its local session removed, then its finalizer)", func() (bool, string) {
			_, err := session(ctx, admin, "job-"+node)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if list := n.Labelled(t); len(list) != 0 {
			t.Errorf("%s still holds %d local sessions for Sessions after the delete", node, len(list))
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		agentproc.WantNothingLeft(t, n.Root)
		// Every call the agent made was one RBAC grants.
		if m := regexp.MustCompile(`(?m)^.*cannot \w+ resource.*$`).FindString(n.Log.String()); m != "" {
			t.Errorf("%s's agent was refused by RBAC: %s", node, m)
		}
		for _, l := range strings.Split(n.Log.String(), "\n") {
			if strings.Contains(l, "ValidatingAdmissionPolicy") {
				t.Logf("%s refused by the node restriction (expected only while the API server's view of a new leader catches up): %s", node, l)
			}
		}
	}

	testLeaderForms(t, admin, nodeA)
	testUserRoles(t, cp, admin, cs)
}

func slicesEqual(got []string, want ...string) bool {
	return strings.Join(got, "\x00") == strings.Join(want, "\x00")
}

// userOf returns a client of a service account of namespace default with
// what the built-in edit role grants on claims there (get, list, watch,
// create, update, patch, delete; the role itself is filled in by a
// controller this control plane does not run): a namespace's user.
func userOf(t *testing.T, cp *kubetest.ControlPlane, admin client.Client, cs kubernetes.Interface, name string) client.Client {
	t.Helper()
	ctx := t.Context()
	if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: name}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}}); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(asToken(cp, token(t, cs, "default", name, nil)), client.Options{Scheme: admin.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dropHolds takes every finalizer off claim name of namespace default.
func dropHolds(ctx context.Context, c client.Client, name string, dryRun bool) error {
	var pvc corev1.PersistentVolumeClaim
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &pvc); err != nil {
		return err
	}
	pvc.Finalizers = nil
	return c.Update(ctx, &pvc, dry(dryRun)...)
}
