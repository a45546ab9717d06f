package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	benchworld "github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

func credPolicy(cmd ...string) policies.Policy {
	p := policy(cmd...)
	p.Credentials = []policies.Credential{{
		Name: "world", Issuer: "airlock", Audience: "jobs.world.test",
		Scopes: []string{"jobs.cancel owner=alex queue=dev"}, TTL: policies.Duration(5 * time.Minute),
	}}
	return p
}

func execOut(t *testing.T, id string, args ...string) (string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := h.Daemon.Exec(t.Context(), id, runtime.ExecOptions{Args: args, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return out.String() + errb.String(), code
}

func TestCredentialLifecycle(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	a, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: credPolicy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), a.ID, true); assertGone(t, a.ID) })
	b, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: credPolicy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), b.ID, true); assertGone(t, b.ID) })

	meta, code := execOut(t, a.ID, "stat", "-c", "%a %u:%g", "/run/airlock/credentials/world")
	if code != 0 || strings.TrimSpace(meta) != "400 65534:65534" {
		t.Errorf("credential file: %q (exit %d), want mode 400 owned by the session user", meta, code)
	}
	tokA, code := execOut(t, a.ID, "cat", "/run/airlock/credentials/world")
	if code != 0 || strings.Count(tokA, ".") != 2 {
		t.Fatalf("reading the token: %q exit %d", tokA, code)
	}
	if out, code := execOut(t, a.ID, "sh", "-c", "echo x > /run/airlock/credentials/world"); code == 0 {
		t.Errorf("the credential file is writable from the sandbox: %q", out)
	}

	// A service verifies the token against the daemon's JWKS and introspection.
	srv := httptest.NewServer(h.Daemon.CredentialsHandler())
	defer srv.Close()
	v := verify.ForIssuer(srv.URL)
	claims, err := v.Authorize(ctx, tokA, "jobs.world.test", scope.Request{Action: "jobs.cancel",
		Attrs: map[string]string{"owner": "alex", "queue": "dev", "id": "job-1", "name": "x"}})
	if err != nil {
		t.Fatalf("in-scope action refused: %v", err)
	}
	if claims.Subject != a.ID || claims.Session != a.ID {
		t.Errorf("token subject %q / sid %q, want session %s", claims.Subject, claims.Session, a.ID)
	}
	_, err = v.Authorize(ctx, tokA, "jobs.world.test", scope.Request{Action: "jobs.cancel",
		Attrs: map[string]string{"owner": "alice", "queue": "dev", "id": "job-2", "name": "y"}})
	if !errors.Is(err, verify.ErrScopeDenied) {
		t.Errorf("other owner's job: %v, want scope denied", err)
	}
	if _, err := v.Verify(ctx, tokA, "k8s.world.test"); !errors.Is(err, verify.ErrWrongAudience) {
		t.Errorf("wrong audience: %v", err)
	}

	// One session cannot read another's credential.
	tokB, _ := execOut(t, b.ID, "cat", "/run/airlock/credentials/world")
	if tokB == tokA {
		t.Fatal("two sessions got the same token")
	}
	if out, _ := execOut(t, b.ID, "sh", "-c", "grep -rsl -F '"+tokA+"' /run /tmp /proc/self/environ; true"); strings.TrimSpace(out) != "" {
		t.Errorf("session B can read session A's token in %q", out)
	}
	if strings.Contains(tokA, "\n") || tokA == "" {
		t.Fatal("token not read")
	}

	// Stop revokes: within a second, introspection rejects the token.
	start := time.Now()
	if _, err := h.Daemon.Stop(ctx, a.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, tokA, "jobs.world.test"); !errors.Is(err, verify.ErrRevoked) {
		t.Errorf("token after stop: %v, want revoked", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("revocation took %v", d)
	}

	// The token never reaches inspect, the audit log or the daemon log.
	insp, err := h.Daemon.Inspect(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	evs, err := h.Daemon.Audit(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Layer == "credentials" {
			actions = append(actions, ev.Action)
		}
	}
	if !strings.Contains(strings.Join(actions, ","), "minted") || !strings.Contains(strings.Join(actions, ","), "revoked") {
		t.Errorf("credential audit actions %v, want minted and revoked", actions)
	}
	raw, _ := os.ReadFile(filepath.Join(h.Root, "sessions", a.ID, "audit.jsonl"))
	for what, text := range map[string]string{
		"inspect": insp.Policy.Label + strings.Join(insp.Command, " "), "audit log": string(raw),
		"daemon log": h.Log.String(), "session record": readFile(t, filepath.Join(h.Root, "sessions", a.ID, "session.json")),
	} {
		if strings.Contains(text, tokA) {
			t.Errorf("the token appears in the %s", what)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCredentialIssuerFailureFailsCreate(t *testing.T) {
	testutil.RequiresRoot(t)
	p := credPolicy("true")
	p.Credentials[0].Issuer = "no-such-issuer"
	before := len(h.Daemon.List(t.Context()))
	_, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p, Start: true})
	if err == nil || !strings.Contains(err.Error(), "no-such-issuer") {
		t.Fatalf("create with an unknown issuer: %v", err)
	}
	if after := len(h.Daemon.List(t.Context())); after != before {
		t.Errorf("a failed create left a session behind")
	}
	entries, _ := os.ReadDir(filepath.Join(h.Root, "sessions"))
	if len(entries) != before {
		t.Errorf("%d session directories after a failed create, want %d", len(entries), before)
	}
}

// TestCredentialAgainstWorldService: a session's token, used from inside
// the sandbox over the egress perimeter, works against a real world service
// for an in-scope action, is refused for an out-of-scope one, and is refused
// after the session is stopped.
// jobsService serves the benchmark world's job scheduler on name:8080 in
// the test world, verifying tokens against the daemon, until the test
// ends.
func jobsService(t *testing.T, name, addr string) (*benchworld.World, netip.Addr) {
	t.Helper()
	srv := httptest.NewServer(h.Daemon.CredentialsHandler())
	t.Cleanup(srv.Close)
	w, err := benchworld.New(t.Context(), verify.ForIssuer(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	ip := worldHost(t, name, addr)
	l, err := netns.Listen(h.World.NetnsPath(), "tcp", netip.AddrPortFrom(ip, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	jobs := &http.Server{Handler: w.JobsHandler()}
	go jobs.Serve(l)
	t.Cleanup(func() { jobs.Close() })
	return w, ip
}

func TestCredentialAgainstWorldService(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	w, ip := jobsService(t, "jobs.bench.test", "10.214.0.20")

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"jobs.bench.test:8080"}}
	p.Credentials = []policies.Credential{{Name: "jobs", Issuer: "airlock", Audience: "jobs.bench.test",
		Scopes: []string{"jobs.cancel owner=alex queue=dev"}, TTL: policies.Duration(5 * time.Minute)}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	cancel := func(job string) string {
		out, _ := execOut(t, s.ID, "sh", "-c", `curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -X POST `+
			`-H "Authorization: Bearer $(cat /run/airlock/credentials/jobs)" http://jobs.bench.test:8080/v1/jobs/`+job+`/cancel`)
		return out
	}
	if code := cancel("job-dev-4812-a"); code != "200" && code != "204" {
		t.Errorf("in-scope cancel: HTTP %s, want success", code)
	}
	if code := cancel("job-prod-4812-a"); code != "403" {
		t.Errorf("out-of-scope cancel (other queue): HTTP %s, want 403", code)
	}
	token, _ := execOut(t, s.ID, "cat", "/run/airlock/credentials/jobs")
	if _, err := h.Daemon.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	// From the host, with the stopped session's token: refused as revoked.
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return h.World.Dialer()(ctx, network, netip.AddrPortFrom(ip, 8080).String())
	}}}
	req, _ := http.NewRequest("POST", "http://jobs.bench.test:8080/v1/jobs/job-dev-4819-a/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 && resp.StatusCode != 403 || !strings.Contains(string(body), "revoked") {
		t.Errorf("token after stop: %d %s, want refused as revoked", resp.StatusCode, body)
	}
	var denied bool
	for _, ev := range w.Audit(0) {
		if ev.Decision == "deny" && strings.Contains(strings.Join(ev.Targets, ","), "job-prod-4812-a") {
			denied = true
		}
	}
	if !denied {
		t.Error("the world's audit does not show the out-of-scope denial")
	}
}

// TestExecIssuer mints credentials through the worked example
// examples/issuers/static-file.sh, delivered as a file and as an
// environment variable, and fails a session whose issuer fails.
func TestExecIssuer(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	secret := "reg-" + time.Now().Format("150405.000000")
	if err := os.WriteFile(filepath.Join(h.IssuerTokens(), "registry.test"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := policy("sleep", "300")
	p.Credentials = []policies.Credential{
		{Name: "reg", Issuer: "static-file", Audience: "registry.test", Scopes: []string{"read"}, TTL: policies.Duration(5 * time.Minute)},
		{Name: "regenv", Issuer: "static-file", Audience: "registry.test", Scopes: []string{"read"},
			TTL: policies.Duration(5 * time.Minute), Deliver: policies.DeliverEnv, EnvVar: "REG_TOKEN"},
	}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if got, _ := execOut(t, s.ID, "cat", "/run/airlock/credentials/reg"); got != secret {
		t.Errorf("file credential %q, want %q", got, secret)
	}
	if got, _ := execOut(t, s.ID, "sh", "-c", `printf %s "$REG_TOKEN"`); got != secret {
		t.Errorf("env credential %q, want %q", got, secret)
	}
	if strings.Contains(h.Log.String(), secret) {
		t.Error("the daemon logged an exec issuer's token")
	}

	p.Credentials[0].Audience = "unknown.test"
	_, err = h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err == nil || !strings.Contains(err.Error(), "no token for unknown.test") {
		t.Errorf("create with a failing issuer: %v, want the issuer's stderr", err)
	}
}
