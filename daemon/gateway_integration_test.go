package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestGatewayEndToEnd runs a real sandbox through airlockd's L7 gateway
// against a world service over HTTPS with the world's own CA: curl in the
// sandbox sends the placeholder it holds, the service gets the real
// value; the placeholder over plain HTTP is refused; an echo of the
// request comes back with the placeholder; a request an `ask` rule holds
// waits for a decision through the daemon's approvals.
func TestGatewayEndToEnd(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	var rnd [16]byte
	rand.Read(rnd[:])
	value := "sk-e2e-" + hex.EncodeToString(rnd[:])
	src := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(src, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := policies.DefaultAdmission()
	a.SecretSources = []policies.SecretSource{{From: "file:" + src, Hosts: []string{"api.gw.test"}}}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	var mu sync.Mutex
	var saw []string
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("x-api-key")
		mu.Lock()
		saw = append(saw, r.Method+" "+r.URL.Path+" key-ok="+fmt.Sprint(key == value))
		mu.Unlock()
		switch r.URL.Path {
		case "/auth":
			// A token minted for the session: a JWT, never a placeholder.
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			fmt.Fprintf(rw, "jwt=%v", ok && strings.Count(tok, ".") == 2 && !strings.Contains(tok, "airlock-secret-"))
		case "/echo":
			io.WriteString(rw, "you sent "+key)
		default:
			fmt.Fprintf(rw, "key-ok=%v", key == value)
		}
	})
	ip := netip.MustParseAddr("10.214.0.50")
	if err := h.World.AddHost("api.gw.test", ip, world.WithHandler(svc), world.WithTLS()); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"api.gw.test:80", "api.gw.test:443"}, L7: policies.L7Check,
		HTTP: []policies.HTTPHost{{Host: "api.gw.test", Rules: []policies.HTTPRule{
			{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk},
		}}}}
	p.Secrets = []policies.Secret{{Name: "KEY", From: "file:" + src, EnvVar: "API_KEY",
		Inject: []policies.SecretInject{{Host: "api.gw.test", Header: "x-api-key"}}},
		{Name: "TOK", From: "credential:svc", EnvVar: "SVC_TOKEN",
			Inject: []policies.SecretInject{{Host: "api.gw.test", Bearer: true}}}}
	p.Credentials = []policies.Credential{{Name: "svc", Issuer: "airlock", Audience: "api.gw.test",
		Scopes: []string{"git.fetch repo=app"}, Deliver: policies.DeliverGateway}}
	p.Approval = &policies.Approval{Timeout: policies.Duration(time.Minute), OnTimeout: policies.OnTimeoutDeny}

	// An API caller naming the operator's key for a host of its own (in
	// its allowlist, so the gateway would send it there) is refused by
	// admission with a 403, and nothing is made.
	steal := p.Clone()
	steal.Egress.Allow = append(steal.Egress.Allow, "collect.gw.test:443")
	steal.Secrets[0].Inject = []policies.SecretInject{{Host: "collect.gw.test", Header: "x-api-key"}}
	cl := api.NewClient(h.Socket)
	defer cl.Close()
	before := stateOf(t)
	if stolen, err := cl.CreateSession(ctx, api.CreateRequest{Policy: *steal, Start: true}); err == nil {
		_ = h.Daemon.Remove(context.Background(), stolen.ID, true)
		t.Fatal("a session injecting the operator's key into the caller's host was admitted")
	} else if !api.IsPermissionDenied(err) || !strings.Contains(err.Error(), "may not be injected into collect.gw.test") {
		t.Errorf("stealing the key: %v, want a 403 naming the host", err)
	}
	if after := stateOf(t); after != before {
		t.Errorf("refused request changed the daemon: before %+v, after %+v", before, after)
	}

	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	sh := func(script string) (string, int) {
		out, _, code := execIn(t, s.ID, nil, "sh", "-c", script)
		return out, code
	}
	// curl trusts the session CA through the system bundle: no -k, no
	// --cacert.
	if out, code := sh(`curl -sS --max-time 10 -H "x-api-key: $API_KEY" https://api.gw.test/v1`); code != 0 || out != "key-ok=true" {
		t.Errorf("placeholder to the bound host: %q (exit %d); want the service to get the value", out, code)
	}
	// A credential delivered to the gateway: the sandbox holds a
	// placeholder, the service gets the session's token. (A JWT's header,
	// {"alg":..., is eyJhbGciOi in base64url: no file or variable of the
	// sandbox holds one.)
	if out, code := sh(`case "$SVC_TOKEN" in airlock-secret-*) ;; *) echo "SVC_TOKEN=$SVC_TOKEN"; exit 1;; esac; curl -sS --max-time 10 -H "Authorization: Bearer $SVC_TOKEN" https://api.gw.test/auth`); code != 0 || out != "jwt=true" {
		t.Errorf("gateway credential: %q (exit %d); want the service to get a token", out, code)
	}
	if out, code := sh(`grep -rls 'eyJhbGciOi' /run /tmp /etc 2>/dev/null; env | grep -c 'eyJhbGciOi'`); strings.TrimSpace(out) != "0" {
		t.Errorf("a token in the sandbox: %q (exit %d)", out, code)
	}
	if out, code := sh(`curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H "x-api-key: $API_KEY" http://api.gw.test/v1`); code != 0 || out != "403" {
		t.Errorf("placeholder over plain HTTP: %q (exit %d); want 403", out, code)
	}
	if out, code := sh(`curl -sS --max-time 10 -H "x-api-key: $API_KEY" https://api.gw.test/echo; echo; echo "$API_KEY"`); code != 0 ||
		strings.Contains(out, value) || !strings.HasPrefix(out, "you sent airlock-secret-") {
		t.Errorf("echo: %q (exit %d); want the placeholder back, never the value", out, code)
	}

	// An ask, held until approved through the daemon's approvals.
	done := make(chan string, 1)
	go func() {
		out, _ := sh(`curl -sS --max-time 30 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -H 'X-HTTP-Method-Override: DELETE' -H "x-api-key: $API_KEY" --data-raw '{"names":["billing-api"]}' 'https://api.gw.test/deploy/prod?env=production&force=true'`)
		done <- out
	}()
	var id string
	for deadline := time.Now().Add(10 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, ap := range h.Daemon.Approvals().List(s.ID) {
			if ap.Host == "api.gw.test" && ap.Path == "/deploy/prod" {
				id = ap.ID
				if string(ap.Body) != `{"names":["billing-api"]}` || ap.ContentType != "application/json" {
					t.Errorf("held %s with body %q, type %q; want curl's", ap.ID, ap.Body, ap.ContentType)
				}
				// What goes on if allowed is shown: the query and the
				// headers, the bound one as the placeholder.
				shown := map[string]api.HeaderField{}
				for _, f := range ap.Headers {
					shown[f.Name] = f
				}
				if ap.Query != "env=production&force=true" || shown["X-Http-Method-Override"].Value != "DELETE" ||
					!strings.HasPrefix(shown["X-Api-Key"].Value, "airlock-secret-") || shown["X-Api-Key"].Secret != "KEY" ||
					strings.Contains(fmt.Sprint(ap), value) {
					t.Errorf("held %s with query %q, headers %+v; want curl's, the placeholder and not the value", ap.ID, ap.Query, ap.Headers)
				}
			}
		}
	}
	if id == "" {
		t.Fatal("no approval held for POST /deploy/prod")
	}
	select {
	case out := <-done:
		t.Fatalf("the held request was answered %s before a decision", out)
	case <-time.After(200 * time.Millisecond):
	}
	if _, err := h.Daemon.Approvals().Decide(ctx, id, true, "looks right", "test"); err != nil {
		t.Fatal(err)
	}
	if out := <-done; out != "200" {
		t.Errorf("approved request: %q, want 200", out)
	}

	// The audit has each request, never the value.
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var l7, held, exfil int
	for _, ev := range evs {
		if strings.Contains(fmt.Sprint(ev), value) {
			t.Errorf("the audit holds the value: %+v", ev)
		}
		switch {
		case ev.Layer == "l7" && ev.Fields["kind"] == "request":
			l7++
			if ev.Action == "exfiltration" {
				exfil++
			}
		case ev.Layer == "approval" && ev.Action == "held":
			held++
		}
	}
	if l7 < 5 || exfil != 1 || held != 1 {
		t.Errorf("audit: %d l7 request events, %d exfiltration, %d held; want >= 5, 1, 1", l7, exfil, held)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(saw, "|") != "GET /v1 key-ok=true|GET /auth key-ok=true|GET /echo key-ok=true|POST /deploy/prod key-ok=true" {
		t.Errorf("the service saw %q", saw)
	}
}
