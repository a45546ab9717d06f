package agent_test

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackNodeRedirect: a compromised node agent answers a request on a
// Session on it with a redirect to another Session's action. The CLI
// must not follow it: followed, the request (a 307 keeps a POST and its
// body) goes, under the user's own rights, to the other Session's node,
// which does what the user never asked (here: discards the victim
// Session's changes when the user commits the Session on the compromised
// node). The node could otherwise act with the user's rights beyond its
// own Sessions without ever holding a token usable elsewhere. It also
// checks what no answer of the node changes: the CLI never sends it the
// kubeconfig's own token in auto or bound mode, and sends it nothing but
// requests on the endpoint's paths (SelfSubjectReview and TokenRequest go
// to the API server).
func TestAttackNodeRedirect(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	c := k.c
	ctx := t.Context()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, tokens := userContexts(t, k, "team-a", map[string][]rbacv1.PolicyRule{
		"ci": {
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"get"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/commit"}, Verbs: []string{"update"}},
			{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"ci"}},
		},
	})
	airlockIn := airlockAs(t, env, kubeconfig)

	type hit struct{ node, method, path, token string }
	var mu sync.Mutex
	var hits []hit
	// fakeNode publishes an endpoint for AirlockNode name served by h,
	// recording every request.
	fakeNode := func(name string, h http.HandlerFunc) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			hits = append(hits, hit{name, r.Method, r.URL.Path, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")})
			mu.Unlock()
			h(w, r)
		}))
		srv.StartTLS()
		t.Cleanup(srv.Close)
		n := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
		n.Status.Endpoint = v1alpha1.NodeEndpoint{Address: srv.Listener.Addr().String(),
			Certificate: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))}
		if err := c.Status().Update(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	session := func(name, node string) {
		s := &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name},
			Spec: v1alpha1.SessionSpec{NodeName: node, Policy: policies.Policy{Label: "x", Image: daemontest.AgentImage, Command: []string{"true"}}}}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// node-evil redirects every request to the victim's discard; node-ok,
	// the victim's node, does what it is asked.
	var answer func(w http.ResponseWriter, r *http.Request)
	fakeNode("node-evil", func(w http.ResponseWriter, r *http.Request) { answer(w, r) })
	fakeNode("node-ok", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, "{}")
	})
	session("on-evil", "node-evil")
	session("victim", "node-ok")

	answers := map[string]func(w http.ResponseWriter, r *http.Request){
		"307 to the victim's discard": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/v1/sessions/victim/discard", http.StatusTemporaryRedirect)
		},
		"308 to the victim's discard, absolute": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.invalid/v1/sessions/victim/discard", http.StatusPermanentRedirect)
		},
		"302 to the victim's diff": func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/v1/sessions/victim/diff", http.StatusFound)
		},
		"401": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock node"`)
			http.Error(w, `{"error":{"class":"unauthenticated","message":"try another token"}}`, http.StatusUnauthorized)
		},
		"403": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, `{"error":{"class":"permission_denied","message":"no"}}`, http.StatusForbidden)
		},
		"404": func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
		"connection dropped": func(w http.ResponseWriter, r *http.Request) {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
		},
	}
	for what, a := range answers {
		answer = a
		for _, mode := range []string{"auto", "bound", "forward"} {
			for _, cmd := range [][]string{{"commit", "on-evil"}, {"diff", "on-evil"}, {"logs", "on-evil"}} {
				mu.Lock()
				hits = nil
				mu.Unlock()
				out, errOut, code := airlockIn("ci", "", append([]string{"--node-token", mode}, cmd...)...)
				mu.Lock()
				got := slices.Clone(hits)
				mu.Unlock()
				for _, h := range got {
					if h.node != "node-evil" {
						t.Errorf("node-evil answering %s to %s (--node-token %s): the CLI sent %s %s to %s (exit %d, stdout %q, stderr %q)",
							what, cmd, mode, h.method, h.path, h.node, code, out, errOut)
						if who := tokenFor(t, k, h.token, v1alpha1.NodeAudience(h.node)); who != "" {
							t.Errorf("  with a token %s takes as %s", h.node, who)
						}
						continue
					}
					if want := "/v1/namespaces/team-a/sessions/on-evil/" + cmd[0]; h.path != want {
						t.Errorf("node-evil answering %s (--node-token %s): it was sent %s %s, want only %s", what, mode, h.method, h.path, want)
					}
					if mode != "forward" && h.token == tokens["ci"] {
						t.Errorf("node-evil answering %s to %s (--node-token %s): it was sent ci's kubeconfig token", what, cmd, mode)
					}
				}
				if code == 0 {
					t.Errorf("node-evil answering %s to %s (--node-token %s): exit 0, stdout %q", what, cmd, mode, out)
				}
				if strings.HasPrefix(what, "30") && !strings.Contains(errOut, "a redirect") {
					t.Errorf("node-evil answering %s to %s (--node-token %s): stderr %q, want it to say the redirect was refused", what, cmd, mode, errOut)
				}
			}
		}
	}
}

// tokenFor reports whom the API server takes token as for audience, ""
// if no one.
func tokenFor(t *testing.T, k *cluster, token, audience string) string {
	t.Helper()
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{audience}}}
	if err := k.c.Create(t.Context(), tr); err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated {
		return ""
	}
	return tr.Status.User.Username
}
