package daemon_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// envCredPolicy has one credential delivered as the variable JOBS_TOKEN.
func envCredPolicy(cmd ...string) policies.Policy {
	p := policy(cmd...)
	p.Credentials = []policies.Credential{{
		Name: "envtok", Issuer: "airlock", Audience: "jobs.world.test", Deliver: policies.DeliverEnv, EnvVar: "JOBS_TOKEN",
		Scopes: []string{"jobs.list"}, TTL: policies.Duration(5 * time.Minute),
	}}
	return p
}

// specOf returns the session container's spec as containerd keeps it.
func specOf(t *testing.T, id string) string {
	t.Helper()
	rt := h.Daemon.Runtime()
	ctx := namespaces.WithNamespace(t.Context(), rt.Namespace())
	c, err := rt.Client().LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(struct {
		Spec   any
		Labels map[string]string
	}{spec, info.Labels})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEnvCredentialNotInContainerSpec: an env-delivered token reaches the
// command through the launch message and exec'd processes from the
// daemon's memory; containerd's metadata never holds it.
func TestEnvCredentialNotInContainerSpec(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: envCredPolicy("sh", "-c", `printf %s "$JOBS_TOKEN" > /tmp/main-token; sleep 300`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if spec := specOf(t, s.ID); strings.Contains(spec, "JOBS_TOKEN") {
		t.Error("the created session's container spec names the credential variable")
	}
	if _, err := h.Daemon.Start(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	tok, code := execOut(t, s.ID, "sh", "-c", `printf %s "$JOBS_TOKEN"`)
	if code != 0 || strings.Count(tok, ".") != 2 {
		t.Fatalf("env credential in an exec'd process: %q (exit %d), want a token", tok, code)
	}
	var main string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if main, _ = execOut(t, s.ID, "cat", "/tmp/main-token"); main != "" {
			break
		}
	}
	if main != tok {
		t.Errorf("the command got %q, an exec'd process %q: want the same token", main, tok)
	}
	if spec := specOf(t, s.ID); strings.Contains(spec, tok) || strings.Contains(spec, "JOBS_TOKEN") {
		t.Error("the token is kept in containerd's container metadata")
	}
}

// TestEnvCredentialAfterRestart: a daemon restarted under live sessions
// never hands out a token it did not mint. A running session's exec'd
// processes get no env credential (the command keeps its own); a created
// session started by the new daemon gets a freshly minted one, which its
// exec'd processes share.
func TestEnvCredentialAfterRestart(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	running, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: envCredPolicy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), running.ID, true); assertGone(t, running.ID) })
	created, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: envCredPolicy("sh", "-c", `printf %s "$JOBS_TOKEN" > /tmp/main-token; sleep 300`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), created.ID, true); assertGone(t, created.ID) })
	old, _ := execOut(t, running.ID, "sh", "-c", `printf %s "$JOBS_TOKEN"`)
	if strings.Count(old, ".") != 2 {
		t.Fatalf("env credential before the restart: %q", old)
	}

	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if got, code := execOut(t, running.ID, "sh", "-c", `printf %s "${JOBS_TOKEN-unset}"`); code != 0 || got != "unset" {
		t.Errorf("exec in a session re-adopted while running: JOBS_TOKEN %q (exit %d), want unset", got, code)
	}
	if _, err := h.Daemon.Start(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	tok, _ := execOut(t, created.ID, "sh", "-c", `printf %s "$JOBS_TOKEN"`)
	var main string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if main, _ = execOut(t, created.ID, "cat", "/tmp/main-token"); main != "" {
			break
		}
	}
	if strings.Count(main, ".") != 2 || main != tok {
		t.Fatalf("session started after the restart: the command got %q, an exec'd process %q; want one token", main, tok)
	}
	srv := httptest.NewServer(h.Daemon.CredentialsHandler())
	defer srv.Close()
	claims, err := verify.ForIssuer(srv.URL).Verify(ctx, main, "jobs.world.test")
	if err != nil {
		t.Fatalf("the token of the session started after the restart: %v", err)
	}
	if claims.Subject != created.ID {
		t.Errorf("token subject %q, want %s", claims.Subject, created.ID)
	}
	for _, id := range []string{running.ID, created.ID} {
		if spec := specOf(t, id); strings.Contains(spec, "JOBS_TOKEN") {
			t.Errorf("session %s: the container spec names the credential variable", id)
		}
	}
}
