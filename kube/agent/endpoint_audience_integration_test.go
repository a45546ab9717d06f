package agent

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestAttackNodeAudiences tries, against a real API server, to get a
// node endpoint to take a token made for another node: node-a's token at
// node-b; that token with its aud claim rewritten to node-b's (the claim
// the endpoint reads unverified to pick its review); audiences that differ
// from node-b's by case or a space; the same token at node-b after node-a
// took it (the decision caches are keyed by the token alone); and node
// names that would make one node's audience another's prefix or a case
// variant, which the API server refuses to create. Each is refused; the
// tokens the CLI sends (node-a's own at node-a, the kubeconfig's at
// either) are taken.
func TestAttackNodeAudiences(t *testing.T) {
	testutil.RequiresRoot(t)
	cp, _ := kubetest.StartWithCRDs(t)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ci"}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	token := func(audiences ...string) string {
		t.Helper()
		tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To[int64](600)}}
		if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
			t.Fatalf("token for %q: %v", audiences, err)
		}
		return tr.Status.Token
	}
	newEndpoint := func(node string) *endpoint { return &endpoint{node: node, c: c, fresh: c, now: time.Now} }
	// who is whom e takes token as, "" if no one.
	who := func(e *endpoint, token string) string {
		t.Helper()
		r, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://node/v1/namespaces/default/sessions/x/logs", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		u, err := e.authenticate(ctx, r)
		if err != nil {
			return ""
		}
		return u.Username
	}
	const ci = "system:serviceaccount:default:ci"
	audA, audB := v1alpha1.NodeAudience("node-a"), v1alpha1.NodeAudience("node-b")
	a, b := newEndpoint("node-a"), newEndpoint("node-b")

	forA := token(audA)
	if got := who(a, forA); got != ci {
		t.Errorf("node-a takes its own token as %q, want %s", got, ci)
	}
	if got := who(b, forA); got != "" {
		t.Errorf("node-b takes node-a's token as %q (after node-a took it)", got)
	}
	if got := who(newEndpoint("node-b"), forA); got != "" {
		t.Errorf("node-b takes node-a's token as %q", got)
	}
	if got := who(newEndpoint("node-b"), token(audB)); got != ci {
		t.Errorf("node-b takes its own token as %q, want %s", got, ci)
	}
	// The kubeconfig's own token (--node-token forward): both take it.
	api := token()
	if got, got2 := who(a, api), who(b, api); got != ci || got2 != ci {
		t.Errorf("the API server's token: node-a takes it as %q, node-b as %q; want %s", got, got2, ci)
	}

	// node-a's token with its claims rewritten: the aud claim node-b
	// looks for, in each form the claim is read in, the signature kept.
	parts := strings.Split(forA, ".")
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	quoted := `"` + audA + `"`
	if !strings.Contains(string(claims), quoted) {
		t.Fatalf("node-a's token's claims %s do not name %s", claims, audA)
	}
	for _, aud := range []string{`"` + audB + `"`, `["` + audB + `"]`, `["` + audA + `","` + audB + `"]`} {
		forged := strings.Replace(string(claims), `[`+quoted+`]`, aud, 1)
		tok := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(forged)) + "." + parts[2]
		if got := who(newEndpoint("node-b"), tok); got != "" {
			t.Errorf("node-b takes node-a's token with aud %s as %q", aud, got)
		}
	}
	// A second aud key after the first: the endpoint's reading and the
	// API server's could pick different ones; it is refused either way.
	dup := strings.Replace(string(claims), `"aud":[`+quoted+`]`, `"aud":[`+quoted+`],"aud":["`+audB+`"]`, 1)
	if dup == string(claims) {
		t.Fatalf("node-a's token's claims %s have no aud [%s]", claims, quoted)
	}
	if got := who(newEndpoint("node-b"), parts[0]+"."+base64.RawURLEncoding.EncodeToString([]byte(dup))+"."+parts[2]); got != "" {
		t.Errorf("node-b takes node-a's token with a second aud key as %q", got)
	}

	// Audiences a node's differ from by case, a space or a suffix.
	for _, aud := range []string{strings.ToUpper(audB), audB + " ", " " + audB, audB + "/x", "airlock.dev/nodes/node-", "airlock.dev/nodes/Node-b"} {
		if got := who(newEndpoint("node-b"), token(aud)); got != "" {
			t.Errorf("node-b takes a token for audience %q as %q", aud, got)
		}
	}

	// Node names that would make node audiences prefixes or case
	// variants of one another: the API server has none of them.
	for _, name := range []string{"node-b/x", "Node-b", "node-b ", "node-b/", "node-b%2Fx"} {
		n := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, n); err == nil {
			t.Errorf("the API server made an AirlockNode named %q (audience %q)", name, v1alpha1.NodeAudience(name))
		}
	}
}
