package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// The set-up the integration tests share: a cluster (startCluster) and
// node agents on it (startNode), and Sessions made and waited for
// through the cluster's admin client.

// startNode starts a node agent named name (agentproc.Start) with a
// session pool of its own, 10.241.pool.0/24, the admission policy of
// admissionFile, and extra arguments.
func startNode(t *testing.T, env daemontest.Env, kubeconfig, name string, pool int, extra ...string) *agentproc.Proc {
	t.Helper()
	admission := admissionFile(t)
	return agentproc.Start(t, agentproc.Options{Node: name, BinDir: env.BinDir, Args: func(root, socket string) []string {
		return append([]string{
			"--admission", admission,
			"--root", root, "--socket", socket, "--bin-dir", env.BinDir, "--runtime", env.Runtime,
			"--log-level", "warn", "--stop-containerd", "--image", env.AgentImage,
			"--session-pool", fmt.Sprintf("10.241.%d.0/24", pool),
			"--kubernetes", "--kubeconfig", kubeconfig, "--node-name", name,
			"--kubernetes-listen", "127.0.0.1:0",
		}, extra...)
	}})
}

// createLocal makes a local session on n's root through a plain airlockd
// (no --kubernetes, killed after), while n's agent is down; it returns the
// session's id.
func createLocal(t *testing.T, n *agentproc.Proc, req api.CreateRequest) string {
	t.Helper()
	if n.Running() {
		t.Fatalf("node %s: createLocal needs its agent down", n.Node)
	}
	args := []string{"--root", n.Root, "--socket", filepath.Join(n.Root, "airlock.sock"), "--bin-dir", filepath.Dir(n.Bin()),
		"--log-level", "warn", "--session-pool", n.Arg("--session-pool")}
	args = append(args, "--runtime", n.Arg("--runtime"))
	cmd := exec.Command(n.Bin(), args...)
	cmd.Stderr = n.Log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Killed: the session runs on, as under a killed agent.
		cmd.Process.Kill()
		cmd.Wait()
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := n.API.Version(t.Context()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: a plain airlockd on its root did not come up:\n%s", n.Node, n.Log.String())
		}
	}
	v, err := n.API.CreateSession(t.Context(), req)
	if err != nil {
		t.Fatalf("node %s: create a local session: %v", n.Node, err)
	}
	return v.ID
}

// cluster is a control plane as the deployment leaves it for the node
// agents (airlock's CRDs, the airlock-system namespace), an admin client
// of it and an admin kubeconfig for the agents.
type cluster struct {
	t          *testing.T
	cp         *kubetest.ControlPlane
	c          client.WithWatch
	kubeconfig string
}

// startCluster starts a control plane with airlock's CRDs for the test
// and makes its cluster (newCluster).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	cp, _ := kubetest.StartWithCRDs(t)
	return newCluster(t, cp)
}

// newCluster makes cp's cluster: an admin client (the agent's scheme, and
// RBAC's for the tests that grant rights), the airlock-system namespace,
// which deploy/kubernetes/namespace.yaml makes (the agent does not), and
// an admin kubeconfig.
func newCluster(t *testing.T, cp *kubetest.ControlPlane) *cluster {
	t.Helper()
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := rbacv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agent.LeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, cp: cp, c: c, kubeconfig: cp.Kubeconfig(t)}
}

func (k *cluster) create(name string, cmd []string, mutate ...func(*v1alpha1.Session)) *v1alpha1.Session {
	k.t.Helper()
	s := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
			Label: name, Image: daemontest.AgentImage, Command: cmd,
		}},
	}
	for _, m := range mutate {
		m(s)
	}
	if err := k.c.Create(k.t.Context(), s); err != nil {
		k.t.Fatalf("create Session %s: %v", name, err)
	}
	return s
}

func (k *cluster) get(name string) *v1alpha1.Session {
	k.t.Helper()
	var s v1alpha1.Session
	if err := k.c.Get(k.t.Context(), client.ObjectKey{Namespace: "default", Name: name}, &s); err != nil {
		k.t.Fatalf("get Session %s: %v", name, err)
	}
	return &s
}

// waitState waits for Session name to reach state, and returns it.
func (k *cluster) waitState(name string, state v1alpha1.SessionState, timeout time.Duration) *v1alpha1.Session {
	k.t.Helper()
	var s *v1alpha1.Session
	kubetest.Eventually(k.t, timeout, "Session "+name+" "+string(state), func() (bool, string) {
		s = k.get(name)
		return s.Status.State == state, fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
	})
	return s
}

// deleteAll deletes every Session and waits until they are gone: each
// agent removed its local session, then its finalizer.
func (k *cluster) deleteAll(timeout time.Duration) {
	k.t.Helper()
	ctx := k.t.Context()
	if err := k.c.DeleteAllOf(ctx, &v1alpha1.Session{}, client.InNamespace("default")); err != nil {
		k.t.Fatal(err)
	}
	kubetest.Eventually(k.t, timeout, "every Session gone", func() (bool, string) {
		var list v1alpha1.SessionList
		if err := k.c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, s := range list.Items {
			left = append(left, fmt.Sprintf("%s (%s on %s, finalizers %v)", s.Name, s.Status.State, s.Spec.NodeName, s.Finalizers))
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

func sleep(d string) []string { return []string{"sleep", d} }

func onNode(node string) func(*v1alpha1.Session) {
	return func(s *v1alpha1.Session) { s.Spec.NodeSelector = map[string]string{"airlock.test/node": node} }
}

// admissionFile writes the node agents' admission policy: --kubernetes
// needs one. Workspaces under /tmp (the tests' own directories), the
// built-in users, groups and capabilities.
func admissionFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(p, []byte("admission {\n  host_paths = [\"/tmp\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startWorld starts a test world (its own network namespaces, named with
// prefix) serving host over HTTPS with h, and returns the airlockd
// arguments of a node agent whose sessions' uplink it is: its namespace,
// its DNS, its private network allowed, its CA trusted.
func startWorld(t *testing.T, prefix, host string, h http.Handler) []string {
	t.Helper()
	tmp, err := os.MkdirTemp("/tmp", "alkw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	w, err := world.Start(t.Context(), world.Config{Prefix: prefix + runtime.Prefix(tmp)[2:]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("world: %v", err)
		}
	})
	if err := w.AddHost(host, w.Net().Addr().Next().Next().Next().Next(), world.WithHandler(h), world.WithTLS()); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(tmp, "world-ca.pem")
	if err := os.WriteFile(caFile, w.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"--uplink", "netns:" + w.NetnsName(), "--dns-upstream", w.DNSAddr().String(),
		"--allow-private", w.Net().String(), "--upstream-ca", caFile}
}

// userContexts makes, for each user of roles, a ServiceAccount in ns with
// a Role of its rules there and the right to get AirlockNodes (the CLI
// reads a Session's node), and writes a kubeconfig with a context of each
// user's name on the cluster; it returns the kubeconfig and the tokens.
func userContexts(t *testing.T, k *cluster, ns string, roles map[string][]rbacv1.PolicyRule) (string, map[string]string) {
	t.Helper()
	nodeReader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "airlock-node-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"airlock.dev"}, Resources: []string{"airlocknodes"}, Verbs: []string{"get"}}}}
	if err := k.c.Create(t.Context(), nodeReader); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: k.cp.Config.Host, CertificateAuthorityData: k.cp.Config.CAData}
	for user, rules := range roles {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}}
		subj := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: user}}
		tokens[user] = serviceAccountToken(t, k.c, sa,
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Rules: rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: user}, Subjects: subj,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "airlock-node-reader-" + user}, Subjects: subj,
				RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: nodeReader.Name}})
		kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tokens[user]}
		kc.Contexts[user] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user, Namespace: ns}
	}
	kubeconfig := filepath.Join(t.TempDir(), "users.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, tokens
}

// airlockAs returns a runner of the airlock CLI of env with --kubeconfig
// kubeconfig and --context user: the command's stdout, stderr and exit
// code, stdin given.
func airlockAs(t *testing.T, env daemontest.Env, kubeconfig string) func(user, stdin string, args ...string) (stdout, stderr string, code int) {
	return func(user, stdin string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), filepath.Join(env.BinDir, "airlock"), append([]string{"--kubeconfig", kubeconfig, "--context", user}, args...)...)
		cmd.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin"}
		cmd.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		code := 0
		switch {
		case err == nil:
		case errors.As(err, &ee):
			code = ee.ExitCode()
		default:
			t.Fatalf("airlock %v: %v", args, err)
		}
		return o.String(), e.String(), code
	}
}
