package agent_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// shippedClusterRoles returns the ClusterRoles of deploy/kubernetes/file.
func shippedClusterRoles(t *testing.T, file string) map[string]*rbacv1.ClusterRole {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", file))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*rbacv1.ClusterRole{}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if meta.Kind != "ClusterRole" {
			continue
		}
		var cr rbacv1.ClusterRole
		if err := yaml.UnmarshalStrict([]byte(doc), &cr); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out[cr.Name] = &cr
	}
	return out
}

// TestNodeEndpointShippedRoles attacks the node endpoint with the
// deployment's own roles (deploy/kubernetes/user-roles.yaml and
// node-rbac.yaml) against a real agent: a viewer of namespace team-a
// reads its Sessions' logs and audit but not their diff, and cannot
// commit or discard them; an editor of team-a reaches nothing of
// team-b's Session on the same node; the node agents' own service
// account (a compromised node's credentials against another node) reads
// and commits no Session through the endpoint.
func TestNodeEndpointShippedRoles(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	c, adminKubeconfig := k.c, k.kubeconfig
	ctx := t.Context()
	startNode(t, env, adminKubeconfig, "node-r", 6, "--node-capacity", "4", "--kubernetes-advertise-address", "localhost")
	var node v1alpha1.AirlockNode
	kubetest.Eventually(t, 30*time.Second, "node-r publishes its endpoint", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: "node-r"}, &node)
		return err == nil && node.Status.Endpoint.Address != "", fmt.Sprintf("%v %+v", err, node.Status)
	})
	ep := node.Status.Endpoint

	roles := shippedClusterRoles(t, "user-roles.yaml")
	for name, cr := range shippedClusterRoles(t, "node-rbac.yaml") {
		roles[name] = cr
	}
	for _, name := range []string{"airlock-session-viewer", "airlock-session-editor", "airlock-node"} {
		if roles[name] == nil {
			t.Fatalf("no ClusterRole %s in deploy/kubernetes", name)
		}
		if err := c.Create(ctx, roles[name]); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// Who: a viewer and an editor of team-a (RoleBindings to the shipped
	// ClusterRoles), and the node agents' service account (bound
	// cluster-wide, as node-rbac.yaml binds it).
	tokens := map[string]string{}
	for who, b := range map[string]struct{ ns, role string }{
		"viewer": {"team-a", "airlock-session-viewer"}, "editor": {"team-a", "airlock-session-editor"}, "airlock-node": {agent.LeaseNamespace, "airlock-node"},
	} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: who}}
		subj := []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: b.ns, Name: who}}
		ref := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: b.role}
		var binding client.Object = &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: who}, Subjects: subj, RoleRef: ref}
		if who == "airlock-node" {
			binding = &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: who}, Subjects: subj, RoleRef: ref}
		}
		tokens[who] = serviceAccountToken(t, c, sa, binding)
	}

	// A Session in each namespace on node-r, ended.
	for _, ns := range []string{"team-a", "team-b"} {
		s := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
			Spec: v1alpha1.SessionSpec{NodeName: "node-r", Policy: policies.Policy{
				Label: "s", Image: daemontest.AgentImage, Command: []string{"echo", ns + "'s output"}}},
		}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		kubetest.Eventually(t, 60*time.Second, ns+"'s Session ends", func() (bool, string) {
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
				return false, err.Error()
			}
			return s.Status.State == v1alpha1.SessionExited, fmt.Sprintf("%+v", s.Status)
		})
	}

	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ep.Certificate)) {
		t.Fatal("the published certificate is not PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	call := func(who, ns, action string) (int, string) {
		t.Helper()
		method := http.MethodGet
		if action == "commit" || action == "discard" {
			method = http.MethodPost
		}
		req, err := http.NewRequestWithContext(ctx, method, "https://"+ep.Address+"/v1/namespaces/"+ns+"/sessions/s/"+action, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokens[who])
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		who, ns, action string
		allowed         bool
	}{
		{"viewer", "team-a", "logs", true},
		{"viewer", "team-a", "audit", true},
		{"viewer", "team-a", "diff", false},
		{"viewer", "team-a", "commit", false},
		{"viewer", "team-a", "discard", false},
		{"viewer", "team-b", "logs", false},
		{"editor", "team-a", "logs", true},
		{"editor", "team-b", "logs", false},
		{"editor", "team-b", "audit", false},
		{"editor", "team-b", "diff", false},
		{"editor", "team-b", "commit", false},
		{"editor", "team-b", "discard", false},
		{"airlock-node", "team-a", "logs", false},
		{"airlock-node", "team-a", "wait", false},
		{"airlock-node", "team-a", "audit", false},
		{"airlock-node", "team-a", "diff", false},
		{"airlock-node", "team-a", "commit", false},
	} {
		st, body := call(tc.who, tc.ns, tc.action)
		switch {
		case tc.allowed && (st != http.StatusOK || tc.action == "logs" && !strings.Contains(body, tc.ns+"'s output")):
			t.Errorf("%s: %s of %s/s: %d %.300s; want 200", tc.who, tc.action, tc.ns, st, body)
		case !tc.allowed && (st != http.StatusForbidden || strings.Contains(body, "'s output")):
			t.Errorf("%s: %s of %s/s: %d %.300s; want 403", tc.who, tc.action, tc.ns, st, body)
		}
	}
}
