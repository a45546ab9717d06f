package agent_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestNodeTokenBound attacks what a compromised node agent learns from
// airlock --context: a node that records the bearer token of a user who
// follows a Session on it. With the kubeconfig's own token forwarded (the
// old behaviour, --node-token forward), the node acts as that user at the
// API server. With a token made for that node alone (--node-token bound,
// and auto for a service account allowed to request its own tokens), the
// recorded token is refused by the API server and by every other node,
// while the real node takes it: a run streams its output, as before.
func TestNodeTokenBound(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	c := k.c
	ctx := t.Context()
	startNode(t, env, k.kubeconfig, "node-t", 7, "--node-capacity", "4", "--kubernetes-advertise-address", "localhost")
	var node v1alpha1.AirlockNode
	kubetest.Eventually(t, 30*time.Second, "node-t publishes its endpoint", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: "node-t"}, &node)
		return err == nil && node.Status.Endpoint.Address != "", fmt.Sprintf("%v %+v", err, node.Status)
	})
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatal(err)
	}
	sessions := []rbacv1.PolicyRule{
		{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"create", "get", "list", "delete"}},
		{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/log"}, Verbs: []string{"get"}},
	}
	kubeconfig, tokens := userContexts(t, k, "team-a", map[string][]rbacv1.PolicyRule{
		// ci may request tokens for itself alone; plain may not.
		"ci": append(slices.Clone(sessions), rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"ci"}}),
		"plain": sessions,
	})
	airlockIn := airlockAs(t, env, kubeconfig)
	airlock := func(user string, args ...string) (string, string, int) {
		t.Helper()
		return airlockIn(user, "", args...)
	}

	// The real node takes a token made for it: ci's run streams.
	manifest := filepath.Join(t.TempDir(), "hello.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, "session \"hello\" {\n  image = %q\n  command = [\"echo\", \"hello through a bound token\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := airlock("ci", "--node-token", "bound", "run", "--rm", "-f", manifest); code != 0 || out != "hello through a bound token\n" {
		t.Fatalf("ci's run with --node-token bound: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// plain may not request its own tokens: bound fails and says why,
	// auto sends the kubeconfig's token as before.
	if out, errOut, code := airlock("plain", "--node-token", "bound", "run", "--rm", "-f", manifest); code == 0 ||
		!strings.Contains(errOut, "--node-token bound") || !strings.Contains(errOut, "serviceaccounts/token") {
		t.Errorf("plain's run with --node-token bound: exit %d, stdout %q, stderr %q; want a failure naming the right it lacks", code, out, errOut)
	}
	if out, errOut, code := airlock("plain", "run", "--rm", "-f", manifest); code != 0 || out != "hello through a bound token\n" {
		t.Errorf("plain's run with --node-token auto: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A compromised node: its AirlockNode publishes an endpoint that
	// records the tokens it is sent. A Session of team-a is put on it.
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		http.Error(w, "recorded", http.StatusServiceUnavailable)
	}))
	evil.StartTLS()
	t.Cleanup(evil.Close)
	evilNode := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-evil"}}
	if err := c.Create(ctx, evilNode); err != nil {
		t.Fatal(err)
	}
	evilNode.Status.Endpoint = v1alpha1.NodeEndpoint{Address: evil.Listener.Addr().String(),
		Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: evil.Certificate().Raw}))}
	if err := c.Status().Update(ctx, evilNode); err != nil {
		t.Fatal(err)
	}
	onEvil := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "on-evil"},
		Spec: v1alpha1.SessionSpec{NodeName: "node-evil", Policy: policies.Policy{Label: "x", Image: daemontest.AgentImage, Command: []string{"true"}}}}
	if err := c.Create(ctx, onEvil); err != nil {
		t.Fatal(err)
	}
	record := func(user string, args ...string) string {
		t.Helper()
		mu.Lock()
		seen = nil
		mu.Unlock()
		_, errOut, code := airlock(user, append(args, "logs", "on-evil")...)
		mu.Lock()
		defer mu.Unlock()
		if code == 0 || len(seen) == 0 {
			t.Fatalf("%s's logs of a Session on the recording node: exit %d, stderr %q, %d requests recorded", user, code, errOut, len(seen))
		}
		return seen[0]
	}
	// atAPIServer reports whether the API server takes token: whom it
	// authenticates as, "" if no one.
	atAPIServer := func(token string, audiences ...string) string {
		t.Helper()
		tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences}}
		if err := c.Create(ctx, tr); err != nil {
			t.Fatal(err)
		}
		if !tr.Status.Authenticated {
			return ""
		}
		return tr.Status.User.Username
	}
	const ciUser = "system:serviceaccount:team-a:ci"

	// Forwarded: the node now holds ci's own token, which the API server
	// takes (the exposure this test guards against).
	if got := record("ci", "--node-token", "forward"); got != tokens["ci"] || atAPIServer(got) != ciUser {
		t.Errorf("forward: the node got a token the API server takes as %q; want ci's kubeconfig token", atAPIServer(got))
	}
	// Bound (auto picks it for ci): the node holds a token of its own
	// audience, which the API server and node-t refuse.
	for _, mode := range []string{"auto", "bound"} {
		got := record("ci", "--node-token", mode)
		if got == tokens["ci"] {
			t.Fatalf("%s: the node was sent ci's kubeconfig token", mode)
		}
		if aud := jwtAudiences(t, got); !slices.Equal(aud, []string{v1alpha1.NodeAudience("node-evil")}) {
			t.Errorf("%s: token audiences %v, want node-evil's alone", mode, aud)
		}
		if who := atAPIServer(got); who != "" {
			t.Errorf("%s: the API server takes the token node-evil recorded, as %q", mode, who)
		}
		if who := atAPIServer(got, v1alpha1.NodeAudience("node-t")); who != "" {
			t.Errorf("%s: the token node-evil recorded is valid for node-t's audience, as %q", mode, who)
		}
		// Replayed at node-t's endpoint: 401.
		code, body := endpointGet(t, node.Status.Endpoint, got, "/v1/namespaces/team-a/sessions/on-evil/logs")
		if code != http.StatusUnauthorized {
			t.Errorf("%s: node-evil's token replayed at node-t: %d %s; want 401", mode, code, body)
		}
	}
}

// jwtAudiences reads a JWT's aud claim (not verified).
func jwtAudiences(t *testing.T, token string) []string {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %.20q", token)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Aud []string `json:"aud"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	return claims.Aud
}

// endpointGet sends GET path to a node endpoint (its published
// certificate trusted) with a bearer token: the status and body.
func endpointGet(t *testing.T, ep v1alpha1.NodeEndpoint, token, path string) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ep.Certificate)) {
		t.Fatal("the published certificate is not PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+ep.Address+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}
