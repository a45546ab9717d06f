package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestNodeEndpoint runs the airlock CLI with --context against a real
// control plane and a real node agent (airlockd-kube), as two
// ServiceAccounts of namespace team-a: alice, whose Role grants sessions
// and their log, diff, audit and commit subresources, and bob, who may
// create and read Sessions but not their subresources. It checks that:
//   - alice's `airlock --context alice run -f` creates a Session, streams
//     its stdout and stderr from the node and exits with its exit code;
//     her diff shows the file it made, audit works, commit applies it;
//     a manifest the node's admission refuses exits 125 saying so; SIGINT
//     exits 130, and with --rm deletes the Session;
//   - bob's logs and commit of that Session are refused, 403, with what
//     he lacks;
//   - a request without a token, or with a token the API server does not
//     take, is refused 401;
//   - alice's token cannot read the log of a Session in namespace team-b
//     (403), nor ask this node for a Session on another node (404);
//   - a server at a node's address that does not hold the certificate its
//     AirlockNode publishes is refused by the CLI before it is sent the
//     token;
//   - a RoleBinding deleted stops working within the cache's 10 s;
//   - deleting the Sessions removes their local sessions, and nothing is
//     left once the agent stopped.
func TestNodeEndpoint(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	k := startCluster(t)
	c, adminKubeconfig := k.c, k.kubeconfig
	ctx := t.Context()
	// Published by name: the CLI dials what the AirlockNode says.
	n := startNode(t, env, adminKubeconfig, "node-e", 5, "--node-capacity", "4", "--kubernetes-advertise-address", "localhost")

	var node v1alpha1.AirlockNode
	kubetest.Eventually(t, 30*time.Second, "node-e publishes its endpoint", func() (bool, string) {
		err := c.Get(ctx, client.ObjectKey{Name: "node-e"}, &node)
		return err == nil && node.Status.Endpoint.Address != "" && node.Status.Endpoint.Certificate != "", fmt.Sprintf("%v %+v", err, node.Status)
	})
	ep := node.Status.Endpoint
	if !strings.HasPrefix(ep.Address, "localhost:") {
		t.Errorf("endpoint address %q, want --kubernetes-advertise-address's host with the port it listens on", ep.Address)
	}

	// Two namespaces; alice and bob in team-a.
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	roles := map[string][]rbacv1.PolicyRule{
		"alice": {
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"create", "get", "list", "delete"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/log", "sessions/diff", "sessions/audit"}, Verbs: []string{"get"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/commit"}, Verbs: []string{"update"}},
		},
		"bob": {
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"create", "get", "list"}},
		},
	}
	kubeconfig, tokens := userContexts(t, k, "team-a", roles)
	airlockIn := airlockAs(t, env, kubeconfig)
	airlock := func(user string, args ...string) (stdout, stderr string, code int) {
		t.Helper()
		return airlockIn(user, "", args...)
	}

	// alice runs a manifest: its output streamed, its exit code hers.
	ws, err := os.MkdirTemp("/tmp", "alk-ws-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "hello.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, `session "hello" {
  image   = %q
  user    = "1000:1000"
  command = ["sh", "-c", "echo hello from airlock; echo to stderr >&2; echo new > /workspace/made.txt; exit 7"]
  timeout = "1m"
  workspace %q {
    target = "/workspace"
  }
}
`, daemontest.AgentImage, ws), 0o644); err != nil {
		t.Fatal(err)
	}
	phase := time.Now()
	out, errOut, code := airlock("alice", "run", "-f", manifest)
	if out != "hello from airlock\n" || !strings.Contains(errOut, "to stderr\n") || code != 7 {
		t.Fatalf("alice's run: exit %d, stdout %q, stderr %q; want exit 7, stdout the command's line, stderr its line", code, out, errOut)
	}
	t.Logf("airlock --context alice run -f: Session created, placed, run and streamed in %s", time.Since(phase).Round(time.Millisecond))
	out, errOut, code = airlock("alice", "ps", "-q")
	name := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(name, "hello-") || strings.Contains(name, "\n") {
		t.Fatalf("alice's ps -q: exit %d, %q %q; want one Session hello-*", code, out, errOut)
	}
	out, errOut, code = airlock("alice", "diff", name)
	if code != 0 || !strings.Contains(out, "made.txt") {
		t.Errorf("alice's diff %s: exit %d, stdout %q, stderr %q; want made.txt listed", name, code, out, errOut)
	}
	if out, errOut, code = airlock("alice", "audit", name); code != 0 || !strings.Contains(out, "LAYER") {
		t.Errorf("alice's audit %s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
	}

	// A manifest the node's admission policy refuses: exit 125 with why.
	refused := filepath.Join(t.TempDir(), "refused.hcl")
	if err := os.WriteFile(refused, fmt.Appendf(nil, `session "refused" {
  image   = %q
  command = ["true"]
  workspace "/root" {
    target = "/workspace"
  }
}
`, daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := airlock("alice", "run", "--rm", "-f", refused); code != 125 || out != "" ||
		!strings.Contains(errOut, "Failed on node \"node-e\", refused: admission") {
		t.Errorf("alice's run of a manifest admission refuses: exit %d, stdout %q, stderr %q; want 125 and the refusal", code, out, errOut)
	}

	// Interrupted: SIGINT stops waiting, exit 130; --rm deletes the
	// Session.
	sleeper := filepath.Join(t.TempDir(), "sleeper.hcl")
	if err := os.WriteFile(sleeper, fmt.Appendf(nil, "session \"sleeper\" {\n  image = %q\n  command = [\"sleep\", \"300\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(ctx, filepath.Join(env.BinDir, "airlock"), "--kubeconfig", kubeconfig, "--context", "alice", "run", "--rm", "-f", sleeper)
	run.Env = []string{"HOME=/nonexistent"}
	var runErr bytes.Buffer
	run.Stderr = &runErr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	var sleeping string
	kubetest.Eventually(t, 60*time.Second, "the sleeper Running", func() (bool, string) {
		var list v1alpha1.SessionList
		if err := c.List(ctx, &list, client.InNamespace("team-a")); err != nil {
			return false, err.Error()
		}
		for _, s := range list.Items {
			if strings.HasPrefix(s.Name, "sleeper-") && s.Status.State == v1alpha1.SessionRunning {
				sleeping = s.Name
				return true, ""
			}
		}
		return false, fmt.Sprint(len(list.Items), " Sessions")
	})
	time.Sleep(500 * time.Millisecond) // streaming its (empty) output
	// Streams are bounded per user: alice's run follows the sleeper's
	// log; 15 more of hers are taken, the next is refused (429), and
	// once one of hers ends she may open another.
	streamPool := x509.NewCertPool()
	streamPool.AppendCertsFromPEM([]byte(ep.Certificate))
	streamClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: streamPool}}}
	t.Cleanup(streamClient.CloseIdleConnections)
	follow := func(token string) (*http.Response, context.CancelFunc) {
		t.Helper()
		sctx, cancel := context.WithCancel(ctx)
		req, err := http.NewRequestWithContext(sctx, http.MethodGet, "https://"+ep.Address+"/v1/namespaces/team-a/sessions/"+sleeping+"/logs?follow=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := streamClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, func() { cancel(); resp.Body.Close() }
	}
	var held []context.CancelFunc
	for range 15 {
		resp, stop := follow(tokens["alice"])
		held = append(held, stop)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("alice's follow stream %d: %s", len(held), resp.Status)
		}
	}
	if resp, stop := follow(tokens["alice"]); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("alice's 17th open request: %s, want 429 Too Many Requests", resp.Status)
		stop()
	} else {
		b, _ := io.ReadAll(resp.Body)
		stop()
		if !strings.Contains(string(b), "has 16 requests open on node node-e") {
			t.Errorf("the 429 says %q, not why", b)
		}
	}
	held[0]()
	kubetest.Eventually(t, 10*time.Second, "a place of alice's given back", func() (bool, string) {
		resp, stop := follow(tokens["alice"])
		defer stop()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	for _, stop := range held[1:] {
		stop()
	}
	if err := run.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if err := run.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("alice's run interrupted: %v, stderr %q; want exit 130", err, runErr.String())
	}
	kubetest.Eventually(t, 30*time.Second, "the interrupted --rm Session deleted", func() (bool, string) {
		var s v1alpha1.Session
		err := c.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: sleeping}, &s)
		return err != nil && strings.Contains(err.Error(), "not found"), fmt.Sprintf("%v %s", err, s.Status.State)
	})

	// bob may read Sessions, not their subresources.
	if out, errOut, code = airlock("bob", "logs", name); code == 0 || out != "" ||
		!strings.Contains(errOut, "forbidden: system:serviceaccount:team-a:bob may not get sessions/log of Session team-a/"+name) {
		t.Errorf("bob's logs %s: exit %d, stdout %q, stderr %q; want forbidden", name, code, out, errOut)
	}
	t.Logf("bob's logs: %s", strings.TrimSpace(errOut))
	if _, errOut, code = airlock("bob", "commit", name); code == 0 || !strings.Contains(errOut, "may not update sessions/commit") {
		t.Errorf("bob's commit %s: exit %d, stderr %q; want forbidden", name, code, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "made.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("made.txt on the host before alice's commit: %v", err)
	}
	// alice commits: the file reaches the host.
	if out, errOut, code = airlock("alice", "commit", name); code != 0 {
		t.Errorf("alice's commit %s: exit %d, stdout %q, stderr %q", name, code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "made.txt")); err != nil || string(b) != "new\n" {
		t.Errorf("made.txt on the host after alice's commit: %q, %v", b, err)
	}
	// The node's audit says who committed.
	const alice = "kubernetes user system:serviceaccount:team-a:alice"
	committedBy := ""
	for _, v := range n.Labelled(t) {
		if v.Labels[agent.LabelSession] != "team-a/"+name {
			continue
		}
		evs, err := n.API.Audit(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Layer == "fs" && ev.Action == "applied" && strings.HasSuffix(ev.Subject, "/made.txt") {
				committedBy = fmt.Sprint(ev.Fields["by"])
			}
		}
	}
	if committedBy != alice {
		t.Errorf("the node's audit of alice's commit of made.txt says it was by %q, want %q", committedBy, alice)
	}

	// Straight to the endpoint, as an attacker would.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(ep.Certificate)) {
		t.Fatal("the published certificate is not PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(token, ns, session string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+ep.Address+"/v1/namespaces/"+ns+"/sessions/"+session+"/logs", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, body := get("", "team-a", name); st != http.StatusUnauthorized || !strings.Contains(body, "needs a bearer token") {
		t.Errorf("no token: %d %s; want 401", st, body)
	}
	if st, body := get("not-a-token-the-api-server-knows", "team-a", name); st != http.StatusUnauthorized || !strings.Contains(body, "unauthenticated") {
		t.Errorf("a made-up token: %d %s; want 401", st, body)
	}
	if st, body := get(tokens["alice"], "team-a", name); st != http.StatusOK || !strings.Contains(body, "hello from airlock") {
		t.Errorf("alice's own Session's log: %d %q; want 200 and the output", st, body)
	}

	// A Session in team-b, run on this node: alice's token reads none of it.
	secret := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "secret"},
		Spec: v1alpha1.SessionSpec{NodeName: "node-e", Policy: policies.Policy{
			Label: "secret", Image: daemontest.AgentImage, Command: []string{"echo", "team-b's secret"}}},
	}
	if err := c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 60*time.Second, "team-b's Session ends", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			return false, err.Error()
		}
		return secret.Status.State == v1alpha1.SessionExited, fmt.Sprintf("%+v", secret.Status)
	})
	if st, body := get(tokens["alice"], "team-b", "secret"); st != http.StatusForbidden || strings.Contains(body, "secret'") ||
		!strings.Contains(body, "may not get sessions/log of Session team-b/secret") {
		t.Errorf("alice's token on team-b's Session: %d %s; want 403", st, body)
	}

	// A node that is not this one, whose published address a server
	// without its certificate holds (an address taken over): the CLI
	// refuses it before it sends anything.
	var asked atomic.Int32
	fake := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		fmt.Fprintln(w, "forged")
	}))
	fake.Config.ErrorLog = log.New(io.Discard, "", 0)
	fake.StartTLS()
	t.Cleanup(fake.Close)
	other := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-other"}}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Status = v1alpha1.AirlockNodeStatus{Capacity: 0, Endpoint: v1alpha1.NodeEndpoint{
		Address: strings.TrimPrefix(fake.URL, "https://"), Certificate: ep.Certificate}}
	if err := c.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	elsewhere := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "elsewhere"},
		Spec: v1alpha1.SessionSpec{NodeName: "node-other", Policy: policies.Policy{
			Label: "elsewhere", Image: daemontest.AgentImage, Command: []string{"true"}}},
	}
	if err := c.Create(ctx, elsewhere); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code = airlock("alice", "logs", "elsewhere"); code == 0 || out != "" ||
		!strings.Contains(errOut, "not the one its AirlockNode publishes") || asked.Load() != 0 {
		t.Errorf("alice's logs of a Session whose node's address a forger holds: exit %d, stdout %q, stderr %q, forger asked %d times; want refused, never asked",
			code, out, errOut, asked.Load())
	}
	t.Logf("a forged endpoint: %s", strings.TrimSpace(errOut))
	// Asked of this node, that Session is not here.
	if st, body := get(tokens["alice"], "team-a", "elsewhere"); st != http.StatusNotFound || !strings.Contains(body, "is not on node node-e") {
		t.Errorf("another node's Session asked of node-e: %d %s; want 404", st, body)
	}

	// A right revoked takes effect once the cached decision expires
	// (10 s).
	if err := c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice"}}); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	kubetest.Eventually(t, 20*time.Second, "alice's revoked right refused", func() (bool, string) {
		st, body := get(tokens["alice"], "team-a", name)
		return st == http.StatusForbidden, fmt.Sprintf("%d %.200s", st, body)
	})
	t.Logf("a revoked RoleBinding refused by the endpoint %s after its deletion", time.Since(revoked).Round(time.Millisecond))
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "alice"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "team-a", Name: "alice"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "alice"}}); err != nil {
		t.Fatal(err)
	}

	// Nothing leaks: rm deletes the Session, its node removes its local
	// session; once the agent stopped nothing of it is left.
	if out, errOut, code = airlock("alice", "rm", name); code != 0 {
		t.Errorf("alice's rm %s: exit %d, %q %q", name, code, out, errOut)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if err := c.DeleteAllOf(ctx, &v1alpha1.Session{}, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, 60*time.Second, "every Session gone", func() (bool, string) {
		var list v1alpha1.SessionList
		if err := c.List(ctx, &list); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprint(len(list.Items), " left")
	})
	kubetest.Eventually(t, 30*time.Second, "node-e's local sessions removed", func() (bool, string) {
		left, err := n.API.ListSessions(ctx)
		return err == nil && len(left) == 0, fmt.Sprintf("%d left, %v", len(left), err)
	})
	if err := n.Stop(); err != nil {
		t.Error(err)
	}
	agentproc.WantNothingLeft(t, n.Root)
	t.Logf("TestNodeEndpoint took %s", time.Since(began).Round(time.Millisecond))
}

// serviceAccountToken creates sa and objs (its roles and bindings) and
// returns an hour's token of sa (TokenRequest).
func serviceAccountToken(t *testing.T, c client.Client, sa *corev1.ServiceAccount, objs ...client.Object) string {
	t.Helper()
	for _, obj := range append([]client.Object{sa}, objs...) {
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
		}
	}
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	if err := c.SubResource("token").Create(t.Context(), sa, tr); err != nil {
		t.Fatalf("token of %s: %v", sa.Name, err)
	}
	return tr.Status.Token
}
