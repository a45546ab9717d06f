package credentials

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// TestSecretsNeverLeak drives every path that handles a credential (mint,
// refresh, revoke, introspection, rejection reports, a failing exec issuer
// that echoes its secret) and checks that no token reaches the logs (the
// context logger and slog's default), the audit events or an error message.
func TestSecretsNeverLeak(t *testing.T) {
	var defaultLogs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&syncWriter{w: &defaultLogs}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	fc := clock.NewFake(t0)
	leaky := script(t, `echo '{"token":"`+execSecret+`","expires_at":"2026-03-01T12:30:00Z","env":{"SECRET":"`+execSecret+`-env"}}'`)
	leakyIs, _ := NewExecIssuer("sts", []string{leaky}, WithExecClock(fc))
	failing := script(t, `echo '{"token":"`+execSecret+`-2","expires_at":"2026-03-01T12:30:00Z"}'; echo "oops `+execSecret+`-2" >&2; exit 1`)
	failingIs, _ := NewExecIssuer("broken", []string{failing}, WithExecClock(fc))
	h := newHarness(t, WithIssuer("sts", leakyIs), WithIssuer("broken", failingIs))

	var secrets []string
	var errs []string
	creds := h.mint(t, "s-1", gitReq, Request{Name: "aws", Issuer: "sts", Audience: "aws", Scopes: []string{"objects.get"}})
	for _, c := range creds {
		secrets = append(secrets, c.Token.Reveal())
		for _, v := range c.Env {
			secrets = append(secrets, v.Reveal())
		}
		// Logging or printing the credential itself must not leak.
		log.G(h.ctx).Info("delivered", "credential", c)
		slog.Info("delivered", "credential", c, "token", c.Token)
		errs = append(errs, fmt.Sprintf("%v %+v %#v", c, c, *c))
		b, _ := json.Marshal(c)
		errs = append(errs, string(b))
	}
	secrets = append(secrets, execSecret+"-2")

	h.clock.Advance(5 * time.Minute)
	refreshed, err := h.broker.Refresh(h.ctx, "s-1", "git")
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, refreshed.Token.Reveal())

	if _, err := h.broker.Mint(h.ctx, "s-2", []Request{{Name: "x", Issuer: "broken", Audience: "a", Scopes: []string{"a.b"}}}); err == nil {
		t.Fatal("failing issuer succeeded")
	} else {
		errs = append(errs, err.Error())
	}

	srv := httptest.NewServer(h.broker.Handler())
	t.Cleanup(srv.Close)
	v := verify.ForIssuer(srv.URL, verify.WithClock(h.clock))
	ctx := h.ctx
	if _, err := v.Authorize(ctx, creds[0].Token.Reveal(), "git.corp.test", scope.Request{Action: "git.delete_ref"}); err == nil {
		t.Fatal("Authorize allowed delete_ref")
	} else {
		errs = append(errs, err.Error())
	}
	h.broker.Revoke(ctx, "s-1")
	for _, c := range creds {
		if _, err := v.Verify(ctx, c.Token.Reveal(), "git.corp.test"); err != nil {
			errs = append(errs, err.Error())
		}
	}
	// A tampered token: its rejection detail must not quote it.
	tampered := creds[0].Token.Reveal() + "x"
	secrets = append(secrets, tampered)
	if _, err := v.Verify(ctx, tampered, "git.corp.test"); err != nil {
		errs = append(errs, err.Error())
	}
	resp, err := http.Post(srv.URL+"/v1/introspect", "application/json", strings.NewReader(`{"token":"`+creds[0].Token.Reveal()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	introspection := readAll(t, resp)

	events, err := json.Marshal(h.audit.all())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(events), `"kind":"rejected"`) || !strings.Contains(string(events), `"kind":"refreshed"`) {
		t.Fatalf("audit log misses events: %s", events)
	}
	if h.logs.Len() == 0 || defaultLogs.Len() == 0 {
		t.Fatal("nothing was logged; the test would prove nothing")
	}
	outputs := map[string]string{
		"context log":   h.logs.String(),
		"default log":   defaultLogs.String(),
		"audit events":  string(events),
		"errors":        strings.Join(errs, "\n"),
		"introspection": string(introspection),
	}
	for where, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s contains a secret (%.12s…):\n%s", where, s, out)
			}
		}
	}
}
