package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// What airlock --context sends a node agent as its bearer token
// (--node-token).
const (
	// nodeTokenAuto sends a token made for that node alone when the
	// kubeconfig's user is a service account allowed to request tokens
	// for itself, and the kubeconfig's own token otherwise.
	nodeTokenAuto = "auto"
	// nodeTokenBound sends only a token made for that node, and fails
	// where none can be had.
	nodeTokenBound = "bound"
	// nodeTokenForward sends the kubeconfig's own token.
	nodeTokenForward = "forward"
)

// nodeTokenTTL is how long a token made for a node lasts: the shortest a
// TokenRequest grants (the API server raises anything shorter to it).
const nodeTokenTTL = 10 * time.Minute

// nodeTokens makes and keeps the tokens made for each node: TokenRequests
// of the kubeconfig user's own service account, with the node's audience
// (v1alpha1.NodeAudience).
type nodeTokens struct {
	k *kubeClient

	mu sync.Mutex
	// sa is the user's service account, "" until found; saErr why it has
	// none (the user is no service account, or the review failed).
	sa, saNamespace string
	saDone          bool
	saErr           error
	byNode          map[string]nodeToken
}

type nodeToken struct {
	token   string
	expires time.Time
}

// get returns a token for node, made or kept, that stays valid for at
// least a minute more.
func (t *nodeTokens) get(ctx context.Context, node string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tok, ok := t.byNode[node]; ok && time.Until(tok.expires) > time.Minute {
		return tok.token, nil
	}
	if !t.saDone {
		// The API server's answer is kept (who the user is, or that it
		// serves no review or refuses it: what auto decides by), not a
		// failure to get one (the request's context ended, the server
		// was not reached or failed): that would fail every later
		// request of the process.
		ns, sa, err := t.k.serviceAccount(ctx)
		if err != nil && !errors.Is(err, errNotServiceAccount) && !errdefs.IsPermissionDenied(err) && !errdefs.IsNotFound(err) {
			return "", err
		}
		t.saNamespace, t.sa, t.saErr, t.saDone = ns, sa, err, true
	}
	if t.saErr != nil {
		return "", t.saErr
	}
	secs := int64(nodeTokenTTL / time.Second)
	req := authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{v1alpha1.NodeAudience(node)}, ExpirationSeconds: &secs}}
	req.APIVersion, req.Kind = "authentication.k8s.io/v1", "TokenRequest"
	var out authnv1.TokenRequest
	path := "/api/v1/namespaces/" + url.PathEscape(t.saNamespace) + "/serviceaccounts/" + url.PathEscape(t.sa) + "/token"
	if err := t.k.do(ctx, http.MethodPost, path, &req, &out); err != nil {
		return "", fmt.Errorf("a token of service account %s/%s for node %s (TokenRequest; the account needs create on its own serviceaccounts/token): %w", t.saNamespace, t.sa, node, err)
	}
	if out.Status.Token == "" {
		return "", fmt.Errorf("the API server answered the TokenRequest of service account %s/%s with no token", t.saNamespace, t.sa)
	}
	if t.byNode == nil {
		t.byNode = map[string]nodeToken{}
	}
	t.byNode[node] = nodeToken{token: out.Status.Token, expires: out.Status.ExpirationTimestamp.Time}
	return out.Status.Token, nil
}

// errNotServiceAccount: the kubeconfig's user is not a service account,
// so no token can be requested for it.
var errNotServiceAccount = errors.New("not a service account")

// serviceAccount names the kubeconfig user's service account, by a
// SelfSubjectReview.
func (k *kubeClient) serviceAccount(ctx context.Context) (namespace, name string, err error) {
	var review authnv1.SelfSubjectReview
	review.APIVersion, review.Kind = "authentication.k8s.io/v1", "SelfSubjectReview"
	if err := k.do(ctx, http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", &review, &review); err != nil {
		return "", "", fmt.Errorf("who the kubeconfig's user is (SelfSubjectReview): %w", err)
	}
	user := review.Status.UserInfo.Username
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	ns, name, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || ns == "" || name == "" {
		return "", "", fmt.Errorf("the kubeconfig's user %q is %w: only a service account's token can be made for a node alone", user, errNotServiceAccount)
	}
	return ns, name, nil
}

// boundTransport sends each request with a token made for node alone,
// renewed before it expires.
type boundTransport struct {
	tokens *nodeTokens
	node   string
	next   http.RoundTripper
	agent  string
}

func (b boundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := b.tokens.get(req.Context(), b.node)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(req.Context())
	out.Header.Set("Authorization", "Bearer "+tok)
	if b.agent != "" {
		out.Header.Set("User-Agent", b.agent)
	}
	return b.next.RoundTrip(out)
}
