package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
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
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
	airlockruntime "github.com/airlock-sandbox/airlock/runtime"
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

// eventually polls cond every 100 ms until it holds or timeout passes,
// then fails the test with what cond last said.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %s", what, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
	ms := loadManifests(t)
	ds, ctr := daemonSet(t, ms)

	cp := kubetest.Start(t)
	sch := scheme(t)
	admin, err := client.New(cp.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	strict := client.WithFieldValidation(admin, metav1.FieldValidationStrict)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
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
	if len(restriction) != 4 {
		t.Fatalf("node-restriction.yaml holds %d objects, want two policies and their bindings", len(restriction))
	}
	eventually(t, time.Minute, "the CRDs served", func() (bool, string) {
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

	// node-b's objects, rewritten, would mislead the agent run below
	// (relabelled to match its Session, room for 999): gone.
	for _, o := range []client.Object{
		&v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "on-node-b"}},
		&v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "unplaced-node-b"}},
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
		eventually(t, 30*time.Second, "the node restriction in force against: "+a.name, func() (bool, string) {
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
	agents := map[string]*agentProc{}
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
	eventually(t, 90*time.Second, "node-a and node-d registered", func() (bool, string) {
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
		eventually(t, 2*time.Minute, "Session job-"+node+" Exited on "+node, func() (bool, string) {
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
	eventually(t, time.Minute, "node-c's Session Lost, the unplaced one unschedulable", func() (bool, string) {
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
		eventually(t, time.Minute, "Session job-"+node+" gone (its local session removed, then its finalizer)", func() (bool, string) {
			_, err := session(ctx, admin, "job-"+node)
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if list := n.labelled(t); len(list) != 0 {
			t.Errorf("%s still holds %d local sessions for Sessions after the delete", node, len(list))
		}
		if err := n.stop(); err != nil {
			t.Error(err)
		}
		wantNothingLeft(t, n.root)
		// Every call the agent made was one RBAC grants.
		if m := regexp.MustCompile(`(?m)^.*cannot \w+ resource.*$`).FindString(n.log.String()); m != "" {
			t.Errorf("%s's agent was refused by RBAC: %s", node, m)
		}
		for _, l := range strings.Split(n.log.String(), "\n") {
			if strings.Contains(l, "ValidatingAdmissionPolicy") {
				t.Logf("%s refused by the node restriction (expected only while the API server's view of a new leader catches up): %s", node, l)
			}
		}
	}

	testLeaderForms(t, admin, nodeA)
	testUserRoles(t, cp, admin, cs)
}

// testLeaderForms: node-a, holding the placement leadership, makes
// placement's writes to node-c's Sessions (spec.nodeName on an unplaced
// one, its Placed status, the finalizer off a deleted one), and still
// nothing else: not another status, not a changed policy while placing.
// On its own node it may not write a Lost Session's status nor lift its
// own cordon.
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
	eventually(t, 30*time.Second, "node-a, leading, places a Session on node-c (dry run)", func() (bool, string) {
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
}

func slicesEqual(got []string, want ...string) bool {
	return strings.Join(got, "\x00") == strings.Join(want, "\x00")
}

// testUserRoles: airlock-session-editor, bound in a namespace, creates
// Sessions there and cannot write their status (a Session's status is its
// node's word); airlock-session-viewer reads them and writes nothing.
func testUserRoles(t *testing.T, cp *kubetest.ControlPlane, admin client.Client, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	for _, user := range []string{"alice", "bob"} {
		if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user}}); err != nil {
			t.Fatal(err)
		}
	}
	for user, role := range map[string]string{"alice": "airlock-session-editor", "bob": "airlock-session-viewer"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: user}},
		}
		if err := admin.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	sch := admin.Scheme()
	alice, err := client.New(asToken(cp, token(t, cs, "default", "alice", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := client.New(asToken(cp, token(t, cs, "default", "bob", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "alices", Namespace: "default"},
		Spec: v1alpha1.SessionSpec{NodeSelector: map[string]string{"airlock.test/node": "nowhere"}, Policy: policies.Policy{
			Label: "alices", Image: daemontest.AgentImage, Command: []string{"true"}}},
	}
	// RBAC's cache of the new bindings may lag a moment.
	eventually(t, 10*time.Second, "alice creates a Session", func() (bool, string) {
		err := alice.Create(ctx, s.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
	})
	got, err := session(ctx, alice, "alices")
	if err != nil {
		t.Fatal(err)
	}
	got.Status.State, got.Status.ExitCode = v1alpha1.SessionExited, ptr.To[int32](0)
	if err := alice.Status().Update(ctx, got); !apierrors.IsForbidden(err) {
		t.Errorf("the Session editor writing a Session's status: %v, want RBAC's refusal", err)
	}
	eventually(t, 10*time.Second, "bob lists Sessions", func() (bool, string) {
		err := bob.List(ctx, &v1alpha1.SessionList{}, client.InNamespace("default"))
		return err == nil, fmt.Sprint(err)
	})
	if err := bob.Delete(ctx, got); !apierrors.IsForbidden(err) {
		t.Errorf("the Session viewer deleting a Session: %v, want RBAC's refusal", err)
	}
	if err := alice.List(ctx, &v1alpha1.SessionList{}, client.InNamespace(agent.LeaseNamespace)); !apierrors.IsForbidden(err) {
		t.Errorf("the Session editor of default listing Sessions in airlock-system: %v, want RBAC's refusal", err)
	}
}

// agentProc is airlockd-kube run as a node agent.
type agentProc struct {
	t      *testing.T
	root   string
	cmd    *exec.Cmd
	exited chan struct{}
	api    *api.Client
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs airlockd-kube with the DaemonSet's args: the node name
// the downward API gives, and the test's own root, socket, admission file
// (the ConfigMap's policy) and session image archive for the container's
// paths; then the test's kubeconfig (in a pod: the in-cluster
// configuration), binaries, runtime and session pool. It first checks the
// same arguments with --check-config. Whatever the test leaves is cleaned
// up after it.
func startAgent(t *testing.T, env daemontest.Env, dsArgs []string, admission, kubeconfig, node, pool string) *agentProc {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "alk-")
	if err != nil {
		t.Fatal(err)
	}
	admFile := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(admFile, []byte(admission), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(dsArgs)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$(NODE_NAME)", node)
	}
	args = setArg(t, args, "--admission", admFile)
	args = setArg(t, args, "--root", root)
	args = setArg(t, args, "--socket", filepath.Join(root, "airlock.sock"))
	args = setArg(t, args, "--image", env.AgentImage)
	args = append(args, "--kubeconfig", kubeconfig, "--bin-dir", env.BinDir, "--runtime", env.Runtime,
		"--session-pool", pool, "--stop-containerd", "--log-level", "info",
		"--node-labels", "airlock.test/node="+node)
	bin := filepath.Join(env.BinDir, "airlockd-kube")

	check := exec.Command(bin, append(args, "--check-config")...)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("airlockd-kube %s --check-config: %v\n%s", strings.Join(args, " "), err, out)
	}

	n := &agentProc{t: t, root: root, log: &syncBuffer{}, api: api.NewClient(filepath.Join(root, "airlock.sock"))}
	ctrd := &airlockruntime.Embedded{Dir: filepath.Join(root, "containerd")}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(n.log.String()), "\n")
			t.Logf("node %s: airlockd's log, last lines:\n%s", node, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
		if n.running() {
			cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if list, err := n.api.ListSessions(cctx); err == nil {
				for _, s := range list {
					_ = n.api.RemoveSession(cctx, s.ID, true)
				}
			}
			cancel()
			_ = n.stop()
		}
		n.api.Close()
		daemontest.RemoveAnchor(context.Background(), ctrd.Address())
		_ = ctrd.Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stderr = n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	cmd, exited := n.cmd, n.exited
	go func() { cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := n.api.Version(cctx)
		cancel()
		if err == nil {
			return n
		}
		if !n.running() {
			t.Fatalf("node %s: airlockd exited (%v):\n%s", node, cmd.ProcessState, n.log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: airlockd did not come up:\n%s", node, n.log.String())
		}
	}
}

func (n *agentProc) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// stop SIGTERMs airlockd (which stops its containerd) and waits for it.
func (n *agentProc) stop() error {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
		return fmt.Errorf("airlockd did not exit within 60s of SIGTERM")
	}
	if !n.cmd.ProcessState.Success() {
		return fmt.Errorf("airlockd exited %v", n.cmd.ProcessState)
	}
	return nil
}

// labelled returns the node's local sessions run for Sessions.
func (n *agentProc) labelled(t *testing.T) []api.Session {
	t.Helper()
	list, err := n.api.ListSessions(t.Context())
	if err != nil {
		t.Fatalf("list local sessions: %v", err)
	}
	var out []api.Session
	for _, s := range list {
		if s.Labels[agent.LabelSessionUID] != "" {
			out = append(out, s)
		}
	}
	return out
}

// wantNothingLeft waits up to 10 s for the census of the stopped daemon on
// root to come out empty, and reports what is left.
func wantNothingLeft(t *testing.T, root string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		c := daemontest.TakeCensus(root, "")
		if c.Total() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind on %s after airlockd stopped: %s", root, c)
			return
		}
	}
}
