package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeTokenAPI serves the two requests nodeTokens makes of an API server:
// a SelfSubjectReview answering user, and TokenRequests of that service
// account, each a new token valid 10 minutes. It returns a kubeClient of
// it and how many reviews it answered. The first review is answered
// firstStatus instead, unless that is 0.
func fakeTokenAPI(t *testing.T, user string, firstStatus int) (*kubeClient, *atomic.Int32) {
	t.Helper()
	var reviews, tokens atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
			if reviews.Add(1) == 1 && firstStatus != 0 {
				w.WriteHeader(firstStatus)
				fmt.Fprintf(w, `{"kind":"Status","message":"answered %d"}`, firstStatus)
				return
			}
			var review authnv1.SelfSubjectReview
			review.Status.UserInfo.Username = user
			_ = json.NewEncoder(w).Encode(&review)
		case "/api/v1/namespaces/team-a/serviceaccounts/ci/token":
			var tr authnv1.TokenRequest
			tr.Status.Token = fmt.Sprintf("token-%d", tokens.Add(1))
			tr.Status.ExpirationTimestamp = metav1.NewTime(time.Now().Add(10 * time.Minute))
			_ = json.NewEncoder(w).Encode(&tr)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	kubeconfig := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(kubeconfig, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: %q, certificate-authority-data: %s}}
users:
- {name: u, user: {token: the-kubeconfig-token}}
contexts:
- {name: ctx, context: {cluster: c, user: u, namespace: team-a}}
current-context: ctx
`, srv.URL, base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := newKubeClient(&kubeOptions{kubeconfig: kubeconfig, context: "ctx"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return k, &reviews
}

// TestNodeTokensAfterACanceledRequest: a request whose context ends while
// the CLI asks the API server who its user is (SelfSubjectReview) must not
// leave every later request of the process failing with that context's
// error: the answer is kept, a failure to get one is not.
func TestNodeTokensAfterACanceledRequest(t *testing.T) {
	k, reviews := fakeTokenAPI(t, "system:serviceaccount:team-a:ci", 0)
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := k.tokens.get(canceled, "node-a"); err == nil {
		t.Fatal("get with a canceled context: no error")
	}
	tok, err := k.tokens.get(t.Context(), "node-a")
	if err != nil || tok == "" {
		t.Fatalf("get after a canceled one: %q, %v; want a token", tok, err)
	}
	if _, err := k.tokens.get(t.Context(), "node-b"); err != nil {
		t.Fatalf("get for another node: %v", err)
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d SelfSubjectReviews answered, want 1 (the answer kept)", n)
	}
}

// TestNodeTokensNotServiceAccountKept: a user who is no service account
// is found so once, and auto mode sends the kubeconfig's token to its
// nodes.
func TestNodeTokensNotServiceAccountKept(t *testing.T) {
	k, reviews := fakeTokenAPI(t, "alice@example.com", 0)
	for range 2 {
		if _, err := k.tokens.get(t.Context(), "node-a"); err == nil {
			t.Fatal("a token for a person: no error")
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d SelfSubjectReviews answered, want 1", n)
	}
	rt, err := k.nodeAuth(t.Context(), "node-a", http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.(boundTransport); ok {
		t.Error("auto mode for a person: a boundTransport, want the kubeconfig's token")
	}
}

// TestNodeTokensAfterAServerError: a SelfSubjectReview the API server
// failed (503) is asked again; one it refused (403) is kept, and auto
// sends the kubeconfig's token.
func TestNodeTokensAfterAServerError(t *testing.T) {
	k, reviews := fakeTokenAPI(t, "system:serviceaccount:team-a:ci", http.StatusServiceUnavailable)
	if _, err := k.tokens.get(t.Context(), "node-a"); err == nil {
		t.Fatal("get with the review failed: no error")
	}
	if tok, err := k.tokens.get(t.Context(), "node-a"); err != nil || tok == "" {
		t.Fatalf("get after a failed review: %q, %v; want a token", tok, err)
	}
	k, reviews = fakeTokenAPI(t, "system:serviceaccount:team-a:ci", http.StatusForbidden)
	for range 2 {
		if _, err := k.tokens.get(t.Context(), "node-a"); err == nil {
			t.Fatal("get with the review refused: no error")
		}
	}
	if n := reviews.Load(); n != 1 {
		t.Errorf("%d SelfSubjectReviews answered after a 403, want 1", n)
	}
	rt, err := k.nodeAuth(t.Context(), "node-a", http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.(boundTransport); ok {
		t.Error("auto mode with the review refused: a boundTransport, want the kubeconfig's token")
	}
}
