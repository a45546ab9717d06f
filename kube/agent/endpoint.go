package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// DefaultListen is the node endpoint's address unless airlockd
// --kubernetes-listen says otherwise: every address of the node, on a port
// of its own (a kubelet's is 10250).
const DefaultListen = ":10265"

// Cache lifetimes of the endpoint's authentication and authorization
// decisions. A kubelet keeps an allow 5 min and a deny 30 s, for the API
// server's many proxied requests a second; airlock's callers are people
// and their CLI, a few requests a command, so the cache need only spare
// the API server a command's repeats: a token revoked or a RoleBinding
// removed takes effect within allowTTL, a right just granted within
// denyTTL.
const (
	allowTTL = 10 * time.Second
	denyTTL  = 2 * time.Second
	// maxCached bounds each cache: a flood of made-up tokens costs the
	// agent no more memory than this many entries.
	maxCached = 4096
)

// certValidity is how long the serving certificate the agent makes is
// valid; it is made again when less than certRenewBefore is left.
const (
	certValidity    = 365 * 24 * time.Hour
	certRenewBefore = 30 * 24 * time.Hour
)

// route is what a request on a Session may do: its method, the /v1 API
// action it is served by, and the subresource of airlock.dev sessions
// and verb the caller needs RBAC for.
type route struct {
	method, action, verb, subresource string
}

// routes are the only requests the endpoint serves. wait is a log's end:
// the same right as the log.
var routes = []route{
	{http.MethodGet, "logs", "get", "log"},
	{http.MethodGet, "wait", "get", "log"},
	{http.MethodGet, "diff", "get", "diff"},
	{http.MethodGet, "audit", "get", "audit"},
	{http.MethodPost, "commit", "update", "commit"},
	{http.MethodPost, "discard", "update", "commit"},
	// exec runs a command in the sandbox, as pods/exec does in a pod
	// (and needs the same verb there); stop ends the main process.
	{http.MethodPost, "exec", "create", "exec"},
	{http.MethodPost, "stop", "update", "stop"},
	// attach joins the main process's terminal: keystrokes go to it, as
	// pods/attach.
	{http.MethodPost, "attach", "create", "attach"},
}

// endpoint serves GET and POST /v1/namespaces/{ns}/sessions/{name}/{action}
// over HTTPS for the Sessions on this node: it authenticates the caller's
// bearer token (TokenReview), authorizes the action (SubjectAccessReview on
// the Session's subresource), finds the local session by the Session's uid
// and hands the request, as /v1/sessions/{id}/{action}, to the daemon's
// own API handler.
type endpoint struct {
	node  string
	d     Daemon
	api   http.Handler
	c     client.Client // TokenReviews and SubjectAccessReviews
	fresh client.Reader // Sessions, read past any cache
	now   func() time.Time

	authn, authz decisionCache
	streams      streamLimit
}

// maxStreamsPerUser bounds the requests one user has open at once on a
// node's endpoint (a followed log, a wait): each holds a connection and a
// reader of the session's log, and an authenticated user must not hold
// the node's all.
const maxStreamsPerUser = 16

// streamLimit counts each user's requests open at once.
type streamLimit struct {
	mu   sync.Mutex
	open map[string]int // +checklocks:mu
}

// acquire takes one of user's places, false when all max are taken.
func (l *streamLimit) acquire(user string, max int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[string]int{}
	}
	if l.open[user] >= max {
		return false
	}
	l.open[user]++
	return true
}

// release gives back one of user's places.
func (l *streamLimit) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[user]--; l.open[user] <= 0 {
		delete(l.open, user)
	}
}

// decision is a cached answer: who a token is, or whether a user may.
type decision struct {
	user    authnv1.UserInfo
	ok      bool
	reason  string
	expires time.Time
}

// decisionCache is a small TTL cache keyed by a hash.
type decisionCache struct {
	mu sync.Mutex
	m  map[[32]byte]decision // +checklocks:mu
}

func (c *decisionCache) get(k [32]byte, now time.Time) (decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[k]
	if !ok || now.After(d.expires) {
		return decision{}, false
	}
	return d, true
}

func (c *decisionCache) put(k [32]byte, d decision, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte]decision{}
	}
	if len(c.m) >= maxCached {
		for k, v := range c.m {
			if now.After(v.expires) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCached {
			clear(c.m)
		}
	}
	c.m[k] = d
}

func ttl(ok bool) time.Duration {
	if ok {
		return allowTTL
	}
	return denyTTL
}

// endpointError is an answer the endpoint gives itself, in the /v1 API's
// error envelope.
type endpointError struct {
	status int
	msg    string
}

func (e *endpointError) Error() string { return e.msg }

func fail(status int, format string, args ...any) error {
	return &endpointError{status: status, msg: fmt.Sprintf(format, args...)}
}

func writeEndpointError(w http.ResponseWriter, err error) {
	var ee *endpointError
	if !errors.As(err, &ee) {
		ee = &endpointError{status: http.StatusServiceUnavailable, msg: err.Error()}
	}
	if ee.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock node"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ee.status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Class: api.ClassForStatus(ee.status), Message: ee.msg}})
}

func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	user, err := e.authenticate(ctx, r)
	if err != nil {
		writeEndpointError(w, err)
		return
	}
	ns, name, rt, err := parsePath(r)
	if err != nil {
		writeEndpointError(w, err)
		return
	}
	ctx = log.With(ctx, "user", user.Username, "session", ns+"/"+name, "action", rt.action)
	if err := e.authorize(ctx, user, ns, name, rt); err != nil {
		log.G(ctx).Info("node endpoint: refused", "error", err)
		writeEndpointError(w, err)
		return
	}
	id, err := e.localID(ctx, ns, name)
	if err != nil {
		writeEndpointError(w, err)
		return
	}
	if !e.streams.acquire(user.Username, maxStreamsPerUser) {
		writeEndpointError(w, fail(http.StatusTooManyRequests, "%s has %d requests open on node %s: close one first", user.Username, maxStreamsPerUser, e.node))
		return
	}
	defer e.streams.release(user.Username)
	log.G(ctx).Info("node endpoint", "method", r.Method, "id", id)
	// Who commits, discards, execs or stops is recorded in the
	// session's audit.
	ctx = caller.With(ctx, "kubernetes user "+user.Username)
	r2 := r.Clone(ctx)
	r2.URL.Path, r2.URL.RawPath = "/v1/sessions/"+url.PathEscape(id)+"/"+rt.action, ""
	r2.RequestURI = r2.URL.RequestURI()
	e.api.ServeHTTP(w, r2)
}

// parsePath returns the Session and route of /v1/namespaces/{ns}/sessions/{name}/{action}.
func parsePath(r *http.Request) (ns, name string, _ route, _ error) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 6 || parts[0] != "v1" || parts[1] != "namespaces" || parts[3] != "sessions" {
		return "", "", route{}, fail(http.StatusNotFound, "no route for %s %s: this endpoint serves /v1/namespaces/NAMESPACE/sessions/NAME/{logs,wait,diff,audit,commit,discard,exec,stop,attach}", r.Method, r.URL.Path)
	}
	ns, name = parts[2], parts[4]
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", "", route{}, fail(http.StatusBadRequest, "namespace %q: %s", ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", "", route{}, fail(http.StatusBadRequest, "Session name %q: %s", name, strings.Join(errs, "; "))
	}
	i := slices.IndexFunc(routes, func(rt route) bool { return rt.action == parts[5] })
	if i < 0 {
		return "", "", route{}, fail(http.StatusNotFound, "no route for %s %s: this endpoint serves logs, wait, diff, audit, commit, discard, exec, stop and attach", r.Method, r.URL.Path)
	}
	if routes[i].method != r.Method {
		return "", "", route{}, fail(http.StatusMethodNotAllowed, "%s takes %s, not %s", parts[5], routes[i].method, r.Method)
	}
	return ns, name, routes[i], nil
}

// authenticate returns who the request's bearer token is, by a
// TokenReview: 401 without a token or for one the API server does not
// take.
func (e *endpoint) authenticate(ctx context.Context, r *http.Request) (authnv1.UserInfo, error) {
	h := r.Header.Get("Authorization")
	token, ok := strings.CutPrefix(h, "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return authnv1.UserInfo{}, fail(http.StatusUnauthorized, "unauthenticated: this endpoint needs a bearer token the cluster's API server takes (Authorization: Bearer TOKEN)")
	}
	key := sha256.Sum256([]byte(token))
	now := e.now()
	if d, ok := e.authn.get(key, now); ok {
		if !d.ok {
			return authnv1.UserInfo{}, fail(http.StatusUnauthorized, "unauthenticated: %s", d.reason)
		}
		return d.user, nil
	}
	// A token made for this node alone (v1alpha1.NodeAudience: the CLI's
	// --node-token, a TokenRequest of the caller's service account) is
	// reviewed for that audience: the API server, which takes only its
	// own audiences, would refuse it. Any other token is reviewed for the
	// API server's audiences. The claim read here only picks the review;
	// the API server verifies the token either way.
	spec := authnv1.TokenReviewSpec{Token: token}
	aud := v1alpha1.NodeAudience(e.node)
	if slices.Contains(unverifiedAudiences(token), aud) {
		spec.Audiences = []string{aud}
	}
	tr := &authnv1.TokenReview{Spec: spec}
	if err := e.c.Create(ctx, tr); err != nil {
		return authnv1.UserInfo{}, fail(http.StatusServiceUnavailable, "the API server could not review the token: %v", err)
	}
	if tr.Status.Authenticated && len(spec.Audiences) > 0 && !slices.Contains(tr.Status.Audiences, aud) {
		tr.Status.Authenticated, tr.Status.Error = false, "the token is not valid for this node's audience "+aud
	}
	d := decision{user: tr.Status.User, ok: tr.Status.Authenticated, reason: tr.Status.Error}
	if d.reason == "" {
		d.reason = "the API server does not take this token"
	}
	d.expires = now.Add(ttl(d.ok))
	e.authn.put(key, d, now)
	if !d.ok {
		return authnv1.UserInfo{}, fail(http.StatusUnauthorized, "unauthenticated: %s", d.reason)
	}
	return d.user, nil
}

// authorize asks the API server whether user may rt.verb the Session's
// rt.subresource, by a SubjectAccessReview: 403 when not.
func (e *endpoint) authorize(ctx context.Context, user authnv1.UserInfo, ns, name string, rt route) error {
	attrs := &authzv1.ResourceAttributes{Namespace: ns, Verb: rt.verb, Group: v1alpha1.GroupVersion.Group,
		Version: v1alpha1.GroupVersion.Version, Resource: "sessions", Subresource: rt.subresource, Name: name}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		ResourceAttributes: attrs, User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
	}}
	b, err := json.Marshal(sar.Spec)
	if err != nil {
		return err
	}
	key := sha256.Sum256(b)
	now := e.now()
	what := fmt.Sprintf("%s may not %s sessions/%s of Session %s/%s (resource sessions/%s in API group %s)",
		user.Username, rt.verb, rt.subresource, ns, name, rt.subresource, v1alpha1.GroupVersion.Group)
	if d, ok := e.authz.get(key, now); ok {
		if !d.ok {
			return fail(http.StatusForbidden, "forbidden: %s%s", what, d.reason)
		}
		return nil
	}
	if err := e.c.Create(ctx, sar); err != nil {
		return fail(http.StatusServiceUnavailable, "the API server could not review the access: %v", err)
	}
	d := decision{ok: sar.Status.Allowed && !sar.Status.Denied, expires: now.Add(ttl(sar.Status.Allowed && !sar.Status.Denied))}
	if sar.Status.Reason != "" {
		d.reason = ": " + sar.Status.Reason
	}
	e.authz.put(key, d, now)
	if !d.ok {
		return fail(http.StatusForbidden, "forbidden: %s%s", what, d.reason)
	}
	return nil
}

// localID returns the id of the local session run for Session ns/name:
// 404 when there is no such Session, or it is not on this node, or it has
// no local session here (not yet, or no more).
func (e *endpoint) localID(ctx context.Context, ns, name string) (string, error) {
	var s v1alpha1.Session
	if err := e.fresh.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fail(http.StatusNotFound, "Session %s/%s not found", ns, name)
		}
		return "", fail(http.StatusServiceUnavailable, "Session %s/%s: %v", ns, name, err)
	}
	if s.Spec.NodeName != e.node {
		return "", fail(http.StatusNotFound, "Session %s/%s is not on node %s (its node: %q); ask its own node", ns, name, e.node, s.Spec.NodeName)
	}
	for _, v := range e.d.List(ctx) {
		if v.Labels[LabelSessionUID] == string(s.UID) {
			return v.ID, nil
		}
	}
	return "", fail(http.StatusNotFound, "Session %s/%s has no local session on node %s (state %q)", ns, name, e.node, s.Status.State)
}

// servingCert returns the endpoint's certificate and its PEM, kept with
// its key in dir:
// made there when missing or close to expiry, for the node's name and
// host.
func servingCert(dir, node, host string, now time.Time) (tls.Certificate, []byte, error) {
	certFile, keyFile := filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if c, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && c.Leaf != nil &&
		now.Add(certRenewBefore).Before(c.Leaf.NotAfter) && certCovers(c.Leaf, node, host) {
		pemBytes, err := os.ReadFile(certFile)
		if err == nil {
			return c, pemBytes, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "airlock-node:" + node},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{node},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else if host != "" && host != node {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := atomicfile.Write(dir, "serving.key", keyPEM, 0o600, -1, -1); err != nil {
		return tls.Certificate{}, nil, err
	}
	if err := atomicfile.Write(dir, "serving.crt", certPEM, 0o644, -1, -1); err != nil {
		return tls.Certificate{}, nil, err
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	return c, certPEM, err
}

func certCovers(c *x509.Certificate, node, host string) bool {
	if !slices.Contains(c.DNSNames, node) {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return slices.ContainsFunc(c.IPAddresses, ip.Equal)
	}
	return host == "" || host == node || slices.Contains(c.DNSNames, host)
}

// advertised returns the address to publish for a listener on addr: addr
// itself unless its host is unspecified, then the address this host
// reaches the API server from (the route's source; nothing is sent).
func advertised(addr *net.TCPAddr, apiServer string) (string, error) {
	if !addr.IP.IsUnspecified() {
		return addr.String(), nil
	}
	u, err := url.Parse(apiServer)
	if err != nil {
		return "", fmt.Errorf("API server URL %q: %w", apiServer, err)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return "", fmt.Errorf("finding the node's address (the route to the API server %s): %w", u.Host, err)
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	return net.JoinHostPort(ip.String(), fmt.Sprint(addr.Port)), nil
}

// listenEndpoint listens on cfg.Listen and returns the listener, what to
// publish in the AirlockNode (the address and the serving certificate) and
// the TLS configuration to serve with.
func listenEndpoint(cfg Config) (net.Listener, v1alpha1.NodeEndpoint, *tls.Config, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, v1alpha1.NodeEndpoint{}, nil, fmt.Errorf("node endpoint: %w", err)
	}
	var addr string
	if cfg.Advertise != "" {
		addr = net.JoinHostPort(cfg.Advertise, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	} else {
		addr, err = advertised(ln.Addr().(*net.TCPAddr), cfg.Kube.Host)
	}
	if err != nil {
		ln.Close()
		return nil, v1alpha1.NodeEndpoint{}, nil, fmt.Errorf("node endpoint: %w", err)
	}
	host, _, _ := net.SplitHostPort(addr)
	cert, certPEM, err := servingCert(filepath.Join(cfg.Root, "kube"), cfg.Node, host, time.Now())
	if err != nil {
		ln.Close()
		return nil, v1alpha1.NodeEndpoint{}, nil, fmt.Errorf("node endpoint: serving certificate: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	return ln, v1alpha1.NodeEndpoint{Address: addr, Certificate: string(certPEM)}, tc, nil
}

// serveEndpoint serves e on ln with tc until ctx ends.
func serveEndpoint(ctx context.Context, ln net.Listener, tc *tls.Config, e *endpoint) {
	srv := &http.Server{
		Handler:           e,
		TLSConfig:         tc,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close()
		}
	}()
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.G(ctx).Error("node endpoint stopped", "error", err)
	}
}

// unverifiedAudiences reads the aud claim of a JWT without verifying it
// (nil for anything else): only to choose how the API server reviews it.
func unverifiedAudiences(token string) []string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || len(parts[1]) > 8<<10 {
		return nil
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil
	}
	var claims struct {
		Aud json.RawMessage `json:"aud"`
	}
	if json.Unmarshal(b, &claims) != nil || len(claims.Aud) == 0 {
		return nil
	}
	var one string
	if json.Unmarshal(claims.Aud, &one) == nil {
		return []string{one}
	}
	var many []string
	if json.Unmarshal(claims.Aud, &many) == nil {
		return many
	}
	return nil
}
