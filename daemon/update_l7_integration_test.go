package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// keepAlive is a python3 program for the sandbox: on one HTTPS
// connection to argv[1] it sends GET / every 0.3 seconds, counting the
// answers in /tmp/NAME.n (argv[2]); when /tmp/NAME.go appears it sends
// argv[3] argv[4] on the same connection and writes the status to
// /tmp/NAME.status; when the connection fails it writes /tmp/NAME.done.
const keepAlive = `
import http.client, os, ssl, sys, time
host, name, method, path = sys.argv[1:5]
# A spliced connection meets the world's own CA, which the sandbox does
# not trust; what is tested here is which connections live.
c = http.client.HTTPSConnection(host, timeout=20, context=ssl._create_unverified_context())
n, sent = 0, False
try:
    while True:
        if not sent and os.path.exists('/tmp/%s.go' % name):
            c.request(method, path, body=b'{}', headers={'Content-Type': 'application/json'})
            r = c.getresponse(); r.read()
            open('/tmp/%s.status' % name, 'w').write(str(r.status))
            sent = True
            continue
        c.request('GET', '/')
        r = c.getresponse(); r.read()
        n += 1
        open('/tmp/%s.n' % name, 'w').write(str(n))
        time.sleep(0.3)
except Exception as e:
    open('/tmp/%s.done' % name, 'w').write(repr(e))
`

// TestUpdateL7Live revises a running session's L7 gateway: its HTTP
// rules, inspect and secrets, live.
//   - A request held by an ask rule that the revision allows is let
//     through at once, one it denies is refused, both recorded as decided
//     by the revision, not by a person.
//   - A keep-alive connection opened before the revision has its next
//     request decided by the revised rules.
//   - A spliced TLS connection to a host that gains rules is cut (its
//     requests would pass unseen); a new one is terminated and checked.
//   - A secret whose source changes injects the new value into the next
//     request; the placeholder in the sandbox stays the same.
//   - Adding a secret is refused, changing nothing.
//   - The revision's event lists the http hosts and secrets, and later
//     l7 events carry the new version.
func TestUpdateL7Live(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	dir := t.TempDir()
	values := map[string]string{}
	for _, n := range []string{"old", "new"} {
		var rnd [12]byte
		rand.Read(rnd[:])
		values[n] = "sk-" + n + "-" + hex.EncodeToString(rnd[:])
		if err := os.WriteFile(filepath.Join(dir, n), []byte(values[n]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a := policies.DefaultAdmission()
	a.SecretSources = []policies.SecretSource{
		{From: "file:" + filepath.Join(dir, "old"), Hosts: []string{"api.l7rev.test"}},
		{From: "file:" + filepath.Join(dir, "new"), Hosts: []string{"api.l7rev.test"}},
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	var mu sync.Mutex
	var keys []string // the x-api-key each /key request carried
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/key" {
			mu.Lock()
			keys = append(keys, r.Header.Get("x-api-key"))
			mu.Unlock()
		}
		fmt.Fprintf(rw, "%s %s", r.Method, r.URL.Path)
	})
	for name, ip := range map[string]string{"api.l7rev.test": "10.214.0.90", "plain.l7rev.test": "10.214.0.91"} {
		if err := h.World.AddHost(name, netip.MustParseAddr(ip), world.WithHandler(svc), world.WithTLS()); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
	}

	secret := func(from string) []policies.Secret {
		return []policies.Secret{{Name: "KEY", From: "file:" + filepath.Join(dir, from), EnvVar: "API_KEY",
			Inject: []policies.SecretInject{{Host: "api.l7rev.test", Header: "x-api-key"}}}}
	}
	egress := func(hosts ...policies.HTTPHost) *policies.Egress {
		return &policies.Egress{Allow: []string{"api.l7rev.test:443", "plain.l7rev.test:443"}, L7: policies.L7Check, HTTP: hosts}
	}
	p := policy("sleep", "600")
	p.Egress = egress(policies.HTTPHost{Host: "api.l7rev.test", Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk},
	}})
	p.Secrets = secret("old")
	p.Approval = &policies.Approval{Timeout: policies.Duration(time.Minute), OnTimeout: policies.OnTimeoutDeny}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	sh := func(script string) (string, int) {
		out, _, code := execIn(t, s.ID, nil, "sh", "-c", script)
		return out, code
	}
	curl := `curl -sS --max-time 60 -o /dev/null -w '%{http_code}' `
	if out, code := sh(curl + `-H "x-api-key: $API_KEY" https://api.l7rev.test/key`); code != 0 || out != "200" {
		t.Fatalf("before the revision: %q (exit %d)", out, code)
	}
	placeholder, _ := sh(`printf %s "$API_KEY"`)

	// Two keep-alive connections: one the gateway serves (api, rules),
	// one it splices (plain, no rules yet).
	if _, _, code := execIn(t, s.ID, strings.NewReader(keepAlive), "sh", "-c", "cat > /tmp/keepalive.py"); code != 0 {
		t.Fatal("write the keep-alive program")
	}
	for _, c := range [][]string{{"api.l7rev.test", "served", "POST", "/deploy/c"}, {"plain.l7rev.test", "spliced", "GET", "/secret"}} {
		script := "python3 /tmp/keepalive.py " + strings.Join(c, " ") + " >/tmp/" + c[1] + ".log 2>&1 &"
		if out, code := sh(script); code != 0 {
			t.Fatalf("start %s: %q (exit %d)", c[1], out, code)
		}
	}
	count := func(name string) (int, bool) {
		out, _ := sh("cat /tmp/" + name + ".n 2>/dev/null; test -e /tmp/" + name + ".done && echo done")
		n := 0
		fmt.Sscan(out, &n)
		return n, strings.Contains(out, "done")
	}
	for _, name := range []string{"served", "spliced"} {
		poll(t, name+" answers", func() bool {
			n, done := count(name)
			if done {
				out, _ := sh("cat /tmp/" + name + ".done /tmp/" + name + ".log")
				t.Fatalf("%s: the connection failed: %s", name, out)
			}
			return n >= 2
		})
	}

	// Two requests held by the ask rule.
	results := map[string]chan string{"/deploy/a": make(chan string, 1), "/deploy/b": make(chan string, 1)}
	for path, ch := range results {
		go func() {
			out, _ := sh(curl + `-X POST -d '{}' https://api.l7rev.test` + path)
			ch <- out
		}()
	}
	held := map[string]string{}
	poll(t, "both requests are held", func() bool {
		for _, ap := range h.Daemon.Approvals().List(s.ID) {
			if ap.State == api.ApprovalPending {
				held[ap.Path] = ap.ID
			}
		}
		return len(held) == 2
	})

	// Adding a secret is refused, and nothing changes.
	add := p.Clone()
	add.Secrets = append(add.Secrets, policies.Secret{Name: "MORE", From: "file:" + filepath.Join(dir, "new"),
		Inject: []policies.SecretInject{{Host: "api.l7rev.test", Header: "x-more"}}})
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: *add}); err == nil || !strings.Contains(err.Error(), "secret.MORE: "+policies.ReasonSecretAdded) {
		t.Errorf("adding a secret: %v, want it refused", err)
	}
	if v, _ := h.Daemon.Inspect(ctx, s.ID); v.PolicyVersion != 1 {
		t.Errorf("after a refused revision: version %d, want 1", v.PolicyVersion)
	}

	revised := policy("sleep", "600")
	revised.Egress = egress(
		policies.HTTPHost{Host: "api.l7rev.test", Rules: []policies.HTTPRule{
			{Methods: []string{"POST"}, Path: "/deploy/a", Action: policies.HTTPAllow},
			{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPDeny},
		}},
		policies.HTTPHost{Host: "plain.l7rev.test", Rules: []policies.HTTPRule{
			{Path: "/secret", Action: policies.HTTPDeny},
		}},
	)
	revised.Secrets = secret("new")
	revised.Approval = &policies.Approval{Timeout: policies.Duration(2 * time.Minute), OnTimeout: policies.OnTimeoutDeny}
	v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	r := v.Revision
	if r == nil || r.Version != 2 || r.HTTP == nil || r.Secrets == nil || !r.Approval {
		t.Fatalf("revision %+v", r)
	}
	if !slices.Equal(r.HTTP.Added, []string{"api.l7rev.test", "plain.l7rev.test"}) || !slices.Equal(r.HTTP.Removed, []string{"api.l7rev.test"}) ||
		!slices.Equal(r.Secrets.Changed, []string{"KEY"}) {
		t.Errorf("revision: http %+v, secrets %+v", r.HTTP, r.Secrets)
	}
	if r.ConnectionsCut < 1 {
		t.Errorf("revision cut %d connections; want the spliced one", r.ConnectionsCut)
	}

	// The held requests are decided by the revised rules at once.
	for path, want := range map[string]string{"/deploy/a": "200", "/deploy/b": "403"} {
		select {
		case out := <-results[path]:
			if out != want {
				t.Errorf("held %s after the revision: %s, want %s", path, out, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("held %s still waits after the revision", path)
		}
	}

	// The served keep-alive connection lives on, its next request decided
	// by the revised rules; the spliced one is cut.
	poll(t, "the spliced connection is cut", func() bool { _, done := count("spliced"); return done })
	n0, _ := count("served")
	poll(t, "the served connection answers on", func() bool {
		n, done := count("served")
		if done {
			t.Fatal("the served connection ended")
		}
		return n >= n0+2
	})
	sh("touch /tmp/served.go")
	poll(t, "the served connection's POST is answered", func() bool { out, _ := sh("cat /tmp/served.status 2>/dev/null"); return out != "" })
	if out, _ := sh("cat /tmp/served.status"); out != "403" {
		t.Errorf("POST /deploy/c on a connection opened before the revision: %s, want 403 (denied by the revised rules, not held)", out)
	}
	// A new connection to the host that gained rules is checked.
	if out, code := sh(curl + `https://plain.l7rev.test/secret`); code != 0 || out != "403" {
		t.Errorf("plain.l7rev.test/secret after the revision: %q (exit %d), want 403", out, code)
	}
	if out, code := sh(curl + `https://plain.l7rev.test/open`); code != 0 || out != "200" {
		t.Errorf("plain.l7rev.test/open after the revision: %q (exit %d), want 200", out, code)
	}

	// The secret's new value goes out; the sandbox's placeholder is the
	// one it had.
	if out, code := sh(curl + `-H "x-api-key: $API_KEY" https://api.l7rev.test/key`); code != 0 || out != "200" {
		t.Errorf("after the revision: %q (exit %d)", out, code)
	}
	if now, _ := sh(`printf %s "$API_KEY"`); now != placeholder {
		t.Errorf("placeholder changed: %q, was %q", now, placeholder)
	}
	mu.Lock()
	got := slices.Clone(keys)
	mu.Unlock()
	if len(got) != 2 || got[0] != values["old"] || got[1] != values["new"] {
		t.Errorf("the service got keys %q; want the old value, then the new", got)
	}

	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var revisedEv *api.AuditEvent
	after, decided := 0, 0
	for i, ev := range evs {
		for _, val := range values {
			if strings.Contains(fmt.Sprint(ev), val) {
				t.Errorf("the audit holds a secret value: %+v", ev)
			}
		}
		switch {
		case ev.Layer == "approval" && ev.Action != "held":
			want := map[string]string{"/deploy/a": "allowed", "/deploy/b": "denied"}[strings.TrimPrefix(ev.Subject, "api.l7rev.test")]
			if ev.Action != want || ev.Fields["by"] != "policy revision 2" {
				t.Errorf("approval decided: %s %s by %v; want %s by policy revision 2", ev.Subject, ev.Action, ev.Fields["by"], want)
			}
			decided++
		case ev.Layer == "policy" && ev.Action == "revised":
			revisedEv = &evs[i]
		case revisedEv != nil && ev.Layer == "l7" && ev.Fields["kind"] == "request" && ev.Fields["path"] == "/key":
			after++
			if ev.PolicyVersion != 2 {
				t.Errorf("l7 event after the revision under version %d: %+v", ev.PolicyVersion, ev)
			}
		}
	}
	if revisedEv == nil || !strings.Contains(revisedEv.Subject, "egress") || !strings.Contains(revisedEv.Subject, "secrets") ||
		!strings.Contains(fmt.Sprint(revisedEv.Fields["http"]), "plain.l7rev.test") {
		t.Errorf("revision event %+v", revisedEv)
	}
	if after == 0 || decided != 2 {
		t.Errorf("%d l7 request events after the revision, %d held requests decided; want some, and 2", after, decided)
	}
}
