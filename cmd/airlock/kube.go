package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// kubeOptions are the global flags that switch airlock to a cluster's
// Sessions: --context, --kubeconfig, --namespace.
type kubeOptions struct {
	context, kubeconfig, namespace string
	// nodeToken is what node agents are sent as the bearer token
	// (--node-token): nodeTokenAuto, nodeTokenBound or nodeTokenForward.
	nodeToken string
}

// kubeCommands are the commands that work with --context: they create,
// list, read or delete Sessions through the API server, and reach a
// Session's node agent for its logs, end, diff, commit and audit log.
var kubeCommands = map[string]bool{
	"run": true, "logs": true, "wait": true, "diff": true, "commit": true, "discard": true,
	"audit": true, "ps": true, "inspect": true, "rm": true, "exec": true, "stop": true, "attach": true,
}

func (o *kubeOptions) addFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.StringVar(&o.context, "context", "", "work with the Sessions of this kubeconfig `CONTEXT`'s cluster (Kubernetes, preview) instead of airlockd's socket: run, logs, wait, diff, commit, discard, audit, exec, stop, attach, ps, inspect, rm")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "with --context: the kubeconfig `FILE` (default: KUBECONFIG, else ~/.kube/config); alone it selects its current context")
	f.StringVarP(&o.namespace, "namespace", "n", "", "with --context: the Sessions' `NAMESPACE` (default: the context's, else default)")
	f.StringVar(&o.nodeToken, "node-token", "", "with --context: the bearer token a Session's node agent is sent (`MODE`): bound, a token made for that node alone (a TokenRequest of the kubeconfig user's service account, audience "+v1alpha1.NodeAudience("NODE")+", 10 minutes; the account needs create on its own serviceaccounts/token), which the API server and other nodes refuse; forward, the kubeconfig's own token, which the node could use at the API server; auto, bound where the user is a service account allowed to request it, else forward (default: AIRLOCK_NODE_TOKEN, else auto)")
}

// on reports whether the Kubernetes path was asked for.
func (o *kubeOptions) on() bool { return o.context != "" || o.kubeconfig != "" }

// kubeClient reaches a cluster's API server and its node agents.
type kubeClient struct {
	rc        *rest.Config
	hc        *http.Client // to the API server, with the kubeconfig's credentials
	namespace string
	// context names the kubeconfig context, for messages.
	context string

	// nodeToken is kubeOptions.nodeToken, resolved; tokens are the
	// tokens made for each node.
	nodeToken string
	tokens    *nodeTokens

	mu    sync.Mutex
	nodes map[string]http.RoundTripper // by Session name: its node's pinned transport
	addrs map[string]string            // by Session name: its node's endpoint address
}

// kube returns the client of the --context cluster, made on first use.
func (c *cli) kube() (*kubeClient, error) {
	c.kubeOnce.Do(func() { c.kc, c.kubeErr = newKubeClient(&c.kubeOpts, c.getenv) })
	return c.kc, c.kubeErr
}

// newKubeClient reads the kubeconfig as kubectl does (clientcmd: every
// auth form kubectl takes reaches the API server), for context o.context.
func newKubeClient(o *kubeOptions, getenv func(string) string) (*kubeClient, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig}
	if o.kubeconfig == "" {
		if env := getenv("KUBECONFIG"); env != "" {
			rules.Precedence = filepath.SplitList(env)
		} else if home := getenv("HOME"); home != "" {
			rules.Precedence = []string{filepath.Join(home, ".kube", "config")}
		}
	}
	overrides := &clientcmd.ConfigOverrides{CurrentContext: o.context}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("kubeconfig: %w", err))
	}
	name := o.context
	if name == "" {
		if raw, err := cc.RawConfig(); err == nil {
			name = raw.CurrentContext
		}
	}
	ns := o.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, withCode(exitUsage, fmt.Errorf("kubeconfig: %w", err))
		}
	}
	// The node agents take bearer tokens only: a client certificate
	// proves nothing to them (they do not hold the cluster's client CA).
	if rc.BearerToken == "" && rc.BearerTokenFile == "" && rc.ExecProvider == nil && rc.AuthProvider == nil {
		return nil, withCode(exitUsage, fmt.Errorf("kubeconfig context %q: its user has no bearer token (a token, a token file, an exec or auth provider); the node agents serving Sessions' logs take bearer tokens only, not client certificates", name))
	}
	mode := o.nodeToken
	if mode == "" {
		mode = getenv("AIRLOCK_NODE_TOKEN")
	}
	switch mode {
	case "":
		mode = nodeTokenAuto
	case nodeTokenAuto, nodeTokenBound, nodeTokenForward:
	default:
		return nil, withCode(exitUsage, fmt.Errorf("--node-token (or AIRLOCK_NODE_TOKEN) %q: want auto, bound or forward", mode))
	}
	rc.UserAgent = "airlock/" + clientVersion()
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	k := &kubeClient{rc: rc, hc: hc, namespace: ns, context: name, nodeToken: mode,
		nodes: map[string]http.RoundTripper{}, addrs: map[string]string{}}
	k.tokens = &nodeTokens{k: k}
	return k, nil
}

func (k *kubeClient) sessionsPath(name string) string {
	p := "/apis/" + v1alpha1.GroupVersion.String() + "/namespaces/" + url.PathEscape(k.namespace) + "/sessions"
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	return p
}

// do sends a request to the API server and decodes its JSON answer into
// out; a Status answer becomes an error of its errdefs class.
func (k *kubeClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	u := strings.TrimSuffix(k.rc.Host, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("API server %s: %w", k.rc.Host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("API server %s: %s %s: %w", k.rc.Host, method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var st struct {
			Message string `json:"message"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return &api.Error{Status: resp.StatusCode, Class: api.ClassForStatus(resp.StatusCode), Message: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("API server %s: %s %s: decoding the answer: %w", k.rc.Host, method, path, err)
	}
	return nil
}

func (k *kubeClient) getSession(ctx context.Context, name string) (*v1alpha1.Session, error) {
	var s v1alpha1.Session
	if err := k.do(ctx, http.MethodGet, k.sessionsPath(name), nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// nodeTransport returns the transport to the node agent of Session name:
// TLS that takes the certificate the node's AirlockNode publishes and no
// other, under the kubeconfig's bearer token.
func (k *kubeClient) nodeTransport(ctx context.Context, name string) (http.RoundTripper, string, error) {
	k.mu.Lock()
	rt, addr := k.nodes[name], k.addrs[name]
	k.mu.Unlock()
	if rt != nil {
		return rt, addr, nil
	}
	s, err := k.getSession(ctx, name)
	if err != nil {
		return nil, "", err
	}
	if s.Spec.NodeName == "" {
		return nil, "", fmt.Errorf("Session %s/%s is not on a node yet (state %q%s): %w", k.namespace, name, s.Status.State, reasonSuffix(s), errdefs.ErrFailedPrecondition)
	}
	var n v1alpha1.AirlockNode
	if err := k.do(ctx, http.MethodGet, "/apis/"+v1alpha1.GroupVersion.String()+"/airlocknodes/"+url.PathEscape(s.Spec.NodeName), nil, &n); err != nil {
		return nil, "", fmt.Errorf("the node of Session %s/%s: AirlockNode %s: %w", k.namespace, name, s.Spec.NodeName, err)
	}
	ep := n.Status.Endpoint
	if ep.Address == "" || ep.Certificate == "" {
		return nil, "", fmt.Errorf("node %s publishes no endpoint (its airlockd predates airlock --context, or has not registered): %w", n.Name, errdefs.ErrUnavailable)
	}
	tr, err := pinnedTransport([]byte(ep.Certificate))
	if err != nil {
		return nil, "", fmt.Errorf("node %s: %w", n.Name, err)
	}
	if rt, err = k.nodeAuth(ctx, n.Name, tr); err != nil {
		return nil, "", err
	}
	k.mu.Lock()
	k.nodes[name], k.addrs[name] = rt, ep.Address
	k.mu.Unlock()
	return rt, ep.Address, nil
}

// nodeAuth wraps tr, the pinned transport to node, with the bearer token
// --node-token says: one made for that node alone, or the kubeconfig's.
// In auto mode the kubeconfig's is sent only when the user is no service
// account or may not request tokens for itself (403), or the API server
// serves no SelfSubjectReview (404); any other failure is an error.
func (k *kubeClient) nodeAuth(ctx context.Context, node string, tr http.RoundTripper) (http.RoundTripper, error) {
	if k.nodeToken != nodeTokenForward {
		_, err := k.tokens.get(ctx, node)
		switch {
		case err == nil:
			return boundTransport{tokens: k.tokens, node: node, next: tr, agent: k.rc.UserAgent}, nil
		case k.nodeToken == nodeTokenBound:
			return nil, fmt.Errorf("--node-token bound: %w", err)
		case !errors.Is(err, errNotServiceAccount) && !errdefs.IsPermissionDenied(err) && !errdefs.IsNotFound(err):
			return nil, err
		}
	}
	return rest.HTTPWrappersForConfig(k.rc, tr)
}

func reasonSuffix(s *v1alpha1.Session) string {
	switch {
	case s.Status.Reason != "" && s.Status.Message != "":
		return ", " + s.Status.Reason + ": " + s.Status.Message
	case s.Status.Reason != "":
		return ", " + s.Status.Reason
	}
	return ""
}

// pinnedTransport is HTTPS to a server whose certificate is exactly
// certPEM. The address is not checked against the certificate's names:
// the pin is the certificate itself, which only the API server handed
// out.
func pinnedTransport(certPEM []byte) (*http.Transport, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("its endpoint certificate is not a PEM certificate")
	}
	want, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("its endpoint certificate: %w", err)
	}
	tc := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Verification is VerifyConnection's: the one pinned
		// certificate, within its validity.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want.Raw) {
				return errors.New("the node endpoint's certificate is not the one its AirlockNode publishes (refused: another server answers at its address)")
			}
			if now := time.Now(); now.Before(want.NotBefore) || now.After(want.NotAfter) {
				return fmt.Errorf("the node endpoint's certificate is not valid now (valid %s to %s)", want.NotBefore, want.NotAfter)
			}
			return nil
		},
	}
	return &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: false, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 30 * time.Second, DisableCompression: true, TLSHandshakeTimeout: 10 * time.Second}, nil
}

// kubeRouter carries the API client's /v1/sessions/{name}/{action}
// requests to the endpoint of the node running Session name, as
// /v1/namespaces/{ns}/sessions/{name}/{action}: airlock's logs, wait,
// diff, commit, discard and audit work unchanged with a Session's name
// for an id.
type kubeRouter struct{ k *kubeClient }

var sessionRoute = regexp.MustCompile(`^/v1/sessions/([^/]+)/(logs|wait|diff|audit|commit|discard|exec|stop|attach)$`)

func (r kubeRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	m := sessionRoute.FindStringSubmatch(req.URL.Path)
	if m == nil {
		closeBody(req)
		return nil, fmt.Errorf("%s %s is not served through --context: %w", req.Method, req.URL.Path, errdefs.ErrNotImplemented)
	}
	name, action := m[1], m[2]
	rt, addr, err := r.k.nodeTransport(req.Context(), name)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	out := req.Clone(req.Context())
	out.URL = &url.URL{Scheme: "https", Host: addr, RawQuery: req.URL.RawQuery,
		Path: "/v1/namespaces/" + r.k.namespace + "/sessions/" + name + "/" + action}
	out.Host = ""
	resp, err := rt.RoundTrip(out)
	if err != nil {
		return nil, fmt.Errorf("the node endpoint %s of Session %s/%s: %w", addr, r.k.namespace, name, err)
	}
	// A node endpoint never redirects. The API client would follow one
	// here, to whatever Session it names, on whichever node: a
	// compromised node would turn a request on its own Session into one
	// on another (a commit into another's discard), under the user's
	// rights there.
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		resp.Body.Close()
		return nil, fmt.Errorf("the node endpoint %s of Session %s/%s answered %s, a redirect (to %q): refused, a node endpoint is never followed elsewhere",
			addr, r.k.namespace, name, resp.Status, resp.Header.Get("Location"))
	}
	return resp, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// dnsLabel makes a Session name's prefix from a manifest's label.
func dnsLabel(label string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(label) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	if s == "" {
		s = "session"
	}
	return s
}

// errTransport fails every request with err: the client of a --context
// whose kubeconfig could not be read.
type errTransport struct{ err error }

func (t errTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	closeBody(req)
	return nil, t.err
}

// kubeAPIClient is the API client of --context: its requests go to the
// Sessions' node agents.
func (c *cli) kubeAPIClient() *api.Client {
	k, err := c.kube()
	if err != nil {
		return api.NewClientTransport("cluster", errTransport{err})
	}
	return api.NewClientTransport(fmt.Sprintf("context %q", k.context), kubeRouter{k})
}

// checkKubeCommand refuses, with --context, the commands that do not work
// through a cluster.
func (c *cli) checkKubeCommand(cmd *cobra.Command) error {
	if !c.kubeOpts.on() {
		if c.kubeOpts.namespace != "" {
			return usageErrorf("--namespace needs --context or --kubeconfig")
		}
		if c.kubeOpts.nodeToken != "" {
			return usageErrorf("--node-token needs --context or --kubeconfig")
		}
		return nil
	}
	top := cmd
	for top.HasParent() && top.Parent().HasParent() {
		top = top.Parent()
	}
	if top.HasParent() && !kubeCommands[top.Name()] && top.Name() != "help" && top.Name() != "validate" && top.Name() != "fmt" && top.Name() != "completion" {
		return usageErrorf("airlock %s does not work with --context (Kubernetes): run, logs, wait, diff, commit, discard, audit, exec, stop, attach, ps, inspect and rm do", top.Name())
	}
	return nil
}

// kubeRun creates a Session of p, waits for its node to run it, streams
// its output and returns its exit code as an exitError, as run does
// locally. SIGINT or SIGTERM stops waiting (the Session runs on, unless
// rm deletes it).
func (c *cli) kubeRun(ctx context.Context, p *policies.Policy, sources []v1alpha1.WorkspaceSource, rm, detach bool, term *kubeTerminal) error {
	k, err := c.kube()
	if err != nil {
		return withCode(exitDaemon, err)
	}
	var lt *localTerminal
	if term != nil && !detach {
		// Checked before anything is made: -t needs a terminal here.
		if lt, err = c.openTerminal("-t"); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 4)
	c.notify(sigs)
	defer c.stopNotify(sigs)
	interrupted := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			close(interrupted)
			cancel()
		case <-ctx.Done():
		}
	}()

	var s v1alpha1.Session
	if err := k.do(ctx, http.MethodPost, k.sessionsPath(""), kubeSession(k, p, sources), &s); err != nil {
		return withCode(exitDaemon, fmt.Errorf("creating a Session in namespace %s: %w", k.namespace, err))
	}
	name := s.Name
	if detach {
		fmt.Fprintln(c.stdout, name)
		return nil
	}
	var code int
	if lt != nil {
		code, err = c.kubeTerminal(ctx, k, name, lt, term)
		if code == detached && err == nil {
			if rm {
				c.warn("--rm: Session %s/%s runs on, so it stays (airlock --context %s rm %s removes it)", k.namespace, name, k.context, name)
			}
			return nil
		}
	} else {
		code, err = c.kubeFollow(ctx, k, name)
	}
	select {
	case <-interrupted:
		err, code = fmt.Errorf("interrupted: Session %s/%s runs on (airlock --context %s rm %s)", k.namespace, name, k.context, name), exitInterrupted
		if rm {
			err = fmt.Errorf("interrupted")
		}
	default:
	}
	if rm {
		if derr := k.do(context.WithoutCancel(ctx), http.MethodDelete, k.sessionsPath(name), nil, nil); derr != nil && !api.IsNotFound(derr) {
			c.report(fmt.Errorf("deleting Session %s/%s: %w", k.namespace, name, derr))
		}
	}
	if err != nil {
		return &exitError{code: code, err: err}
	}
	return exitCodeOnly(code)
}

// unplacedAfter is how long kubeFollow waits for a Session's first status
// before it says that no placement controller has looked at it.
const unplacedAfter = 10 * time.Second

// detached is kubeTerminal's code when the terminal was detached from a
// Session that runs on.
const detached = -1

// kubeTerminal is what run -t asks of a Session's terminal.
type kubeTerminal struct {
	keys    []byte
	noStdin bool
}

// kubeTerminal waits for Session name to run on a node, then connects
// this terminal to its terminal through the node's endpoint (the Session
// started when its node claimed it: what it showed before is in airlock
// logs), and returns its exit code; after a detach, detached and a nil
// error.
func (c *cli) kubeTerminal(ctx context.Context, k *kubeClient, name string, lt *localTerminal, term *kubeTerminal) (int, error) {
	if code, err := c.kubeWaitRunning(ctx, k, name); err != nil {
		return code, err
	}
	if err := lt.raw(); err != nil {
		return exitDaemon, err
	}
	defer lt.restore()
	err := c.attachTerminal(ctx, name, term.keys, term.noStdin, lt, nil)
	var ee *exitError
	switch {
	case err == nil:
		return detached, nil // attachTerminal said so
	case errors.As(err, &ee) && ee.err == nil:
		return ee.code, nil
	}
	return exitDaemon, err
}

// kubeFollow waits for Session name to be run on a node, streams its
// output from the node's endpoint and returns its exit code.
func (c *cli) kubeFollow(ctx context.Context, k *kubeClient, name string) (int, error) {
	if code, err := c.kubeWaitRunning(ctx, k, name); err != nil {
		return code, err
	}
	cl := c.client()
	if err := cl.Logs(ctx, name, api.LogsOptions{Follow: true}, c.stdout, c.stderr); err != nil {
		return exitDaemon, fmt.Errorf("streaming the output of Session %s/%s: %w", k.namespace, name, err)
	}
	w, err := cl.WaitSession(ctx, name)
	if err != nil {
		return exitDaemon, fmt.Errorf("waiting for Session %s/%s: %w", k.namespace, name, err)
	}
	return w.ExitCode, nil
}

// kubeWaitRunning waits until Session name runs on a node (or ran), and
// says why while it waits.
func (c *cli) kubeWaitRunning(ctx context.Context, k *kubeClient, name string) (int, error) {
	said := ""
	began := time.Now()
	for {
		s, err := k.getSession(ctx, name)
		if err != nil {
			return exitDaemon, fmt.Errorf("Session %s/%s: %w", k.namespace, name, err)
		}
		switch s.Status.State {
		case v1alpha1.SessionFailed, v1alpha1.SessionLost:
			return exitDaemon, fmt.Errorf("Session %s/%s %s on node %q%s", k.namespace, name, s.Status.State, s.Spec.NodeName, reasonSuffix(s))
		case v1alpha1.SessionRunning, v1alpha1.SessionReview, v1alpha1.SessionExited:
			return 0, nil
		}
		if msg := reasonSuffix(s); msg != said && msg != "" {
			c.warn("Session %s/%s is %s%s", k.namespace, name, s.Status.State, msg)
			said = msg
		}
		if s.Status.State == "" && s.Spec.NodeName == "" && said == "" && time.Since(began) >= unplacedAfter {
			// A placement controller marks what it cannot place
			// Pending with a reason: none has looked at this one.
			said = "unplaced"
			c.warn("Session %s/%s has not been looked at by a placement controller in %s: is a node agent that stands for placement running? (deploy/kubernetes-fleet runs them only on nodes labelled airlock.dev/placement=true; kubectl get lease -n airlock-system airlock-placement names the leader); still waiting", k.namespace, name, unplacedAfter)
		}
		select {
		case <-ctx.Done():
			return exitDaemon, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// kubeSession is the Session run -f makes of a manifest: named after its
// label, in the namespace, its workspaces filled from sources.
func kubeSession(k *kubeClient, p *policies.Policy, sources []v1alpha1.WorkspaceSource) *v1alpha1.Session {
	return &v1alpha1.Session{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Session"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: dnsLabel(p.Label) + "-", Namespace: k.namespace},
		Spec:       v1alpha1.SessionSpec{Policy: *p, WorkspaceSources: sources},
	}
}

// kubePs lists the namespace's Sessions.
func (c *cli) kubePs(ctx context.Context, quiet, asJSON bool) error {
	k, err := c.kube()
	if err != nil {
		return err
	}
	var list v1alpha1.SessionList
	if err := k.do(ctx, http.MethodGet, k.sessionsPath(""), nil, &list); err != nil {
		return err
	}
	slices.SortStableFunc(list.Items, func(a, b v1alpha1.Session) int {
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	switch {
	case asJSON:
		if list.Items == nil {
			list.Items = []v1alpha1.Session{}
		}
		return c.printJSON(list.Items)
	case quiet:
		for _, s := range list.Items {
			fmt.Fprintln(c.stdout, s.Name)
		}
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tNODE\tEXIT\tIMAGE\tCREATED")
	for _, s := range list.Items {
		exit := ""
		if s.Status.ExitCode != nil {
			exit = fmt.Sprint(*s.Status.ExitCode)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Status.State, s.Spec.NodeName, exit,
			s.Spec.Policy.Image, ago(c.now(), s.CreationTimestamp.Time))
	}
	return tw.Flush()
}

// kubeInspect prints a Session as JSON.
func (c *cli) kubeInspect(ctx context.Context, name string) error {
	k, err := c.kube()
	if err != nil {
		return err
	}
	s, err := k.getSession(ctx, name)
	if err != nil {
		return err
	}
	return c.printJSON(s)
}

// kubeRm deletes a Session: its node removes its local session.
func (c *cli) kubeRm(ctx context.Context, name string) error {
	k, err := c.kube()
	if err != nil {
		return err
	}
	return k.do(ctx, http.MethodDelete, k.sessionsPath(name), nil, nil)
}
