package credentials

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/log"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type auditLog struct {
	mu     sync.Mutex
	events []Event
}

func (a *auditLog) record(_ context.Context, e Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
}

func (a *auditLog) all() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

func (a *auditLog) kinds() []EventKind {
	var out []EventKind
	for _, e := range a.all() {
		out = append(out, e.Kind)
	}
	return out
}

type harness struct {
	clock  *clock.Fake
	ring   *token.Keyring
	broker *Broker
	audit  *auditLog
	logs   *bytes.Buffer
	ctx    context.Context
}

func newHarness(t *testing.T, opts ...Option) *harness {
	t.Helper()
	h := &harness{clock: clock.NewFake(t0), audit: &auditLog{}, logs: &bytes.Buffer{}}
	ring, err := token.OpenKeyring(filepath.Join(t.TempDir(), "keys"), token.WithClock(h.clock), token.WithMaxTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	h.ring = ring
	all := append([]Option{WithClock(h.clock), WithKeyring(ring, "airlock"), WithAudit(h.audit.record)}, opts...)
	h.broker, err = New(all...)
	if err != nil {
		t.Fatal(err)
	}
	h.ctx = log.WithLogger(t.Context(), slog.New(slog.NewJSONHandler(&syncWriter{w: h.logs}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	return h
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

var gitReq = Request{Name: "git", Audience: "git.corp.test", Scopes: []string{"git.push repo=app ref=refs/heads/alex/*"}, TTL: 15 * time.Minute}
var jobsReq = Request{Name: "jobs", Audience: "jobs.corp.test", Scopes: []string{"jobs.cancel owner=alex queue=dev"}}

func (h *harness) mint(t *testing.T, session string, reqs ...Request) []*Credential {
	t.Helper()
	creds, err := h.broker.Mint(h.ctx, session, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

func TestMintIntrospectRevoke(t *testing.T) {
	h := newHarness(t)
	creds := h.mint(t, "s-1", gitReq, jobsReq)
	if len(creds) != 2 {
		t.Fatalf("%d credentials, want 2", len(creds))
	}
	git, jobs := creds[0], creds[1]
	if git.Name != "git" || git.Issuer != BuiltinIssuer || !git.Revocable || git.Audience != "git.corp.test" {
		t.Fatalf("git credential %+v", git)
	}
	if !git.Expiry.Equal(t0.Add(15*time.Minute)) || !jobs.Expiry.Equal(t0.Add(DefaultTTL)) {
		t.Fatalf("expiries %v, %v", git.Expiry, jobs.Expiry)
	}

	res := h.broker.Introspect(h.ctx, git.Token.Reveal())
	if !res.Active || res.ID != git.ID || res.Subject != "s-1" || res.Session != "s-1" ||
		!slices.Equal(res.Audience, []string{"git.corp.test"}) || res.Expiry != git.Expiry.Unix() ||
		!slices.Equal(res.Scopes, []string{"git.push ref=refs/heads/alex/* repo=app"}) {
		t.Fatalf("introspection %+v", res)
	}
	if got := h.broker.Sessions(); !slices.Equal(got, []string{"s-1"}) {
		t.Fatalf("Sessions() = %v", got)
	}

	h.broker.Revoke(h.ctx, "s-1")
	for _, c := range creds {
		if !h.broker.IsRevoked(c.ID) {
			t.Errorf("%s not revoked", c.Name)
		}
		res := h.broker.Introspect(h.ctx, c.Token.Reveal())
		if res.Active || res.Reason != "revoked" || res.ID != c.ID {
			t.Errorf("introspection after revoke %+v", res)
		}
	}
	if got := h.broker.Sessions(); len(got) != 0 {
		t.Fatalf("Sessions() after revoke = %v", got)
	}
	if got, want := h.audit.kinds(), []EventKind{EventMinted, EventMinted, EventRevoked, EventRevoked}; !slices.Equal(got, want) {
		t.Fatalf("audit kinds %v, want %v", got, want)
	}
	ev := h.audit.all()
	if ev[0].Session != "s-1" || ev[0].Name != "git" || ev[0].ID != git.ID || !ev[0].Expires.Equal(git.Expiry) ||
		ev[0].Audience != "git.corp.test" || len(ev[0].Scopes) != 1 {
		t.Fatalf("minted event %+v", ev[0])
	}
	if ev[2].Name != "git" || ev[2].Reason != "session stopped" || ev[3].Name != "jobs" {
		t.Fatalf("revoked events %+v", ev[2:])
	}
	// Revoking again emits nothing.
	h.broker.Revoke(h.ctx, "s-1")
	if n := len(h.audit.all()); n != 4 {
		t.Fatalf("%d events after a second revoke, want 4", n)
	}
}

// TestRevocationReachesServices runs the endpoints over HTTP and checks that
// a service's verifier refuses a token within a second of the session's stop.
func TestRevocationReachesServices(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.broker.Handler())
	t.Cleanup(srv.Close)
	v := verify.ForIssuer(srv.URL, verify.WithClock(h.clock), verify.WithIssuer("airlock"))

	git := h.mint(t, "s-1", gitReq)[0]
	push := scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": "refs/heads/alex/fix"}}
	if _, err := v.Authorize(h.ctx, git.Token.Reveal(), "git.corp.test", push); err != nil {
		t.Fatalf("Authorize before stop: %v", err)
	}
	main := scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": "refs/heads/main"}}
	if _, err := v.Authorize(h.ctx, git.Token.Reveal(), "git.corp.test", main); !errors.Is(err, verify.ErrScopeDenied) {
		t.Fatalf("Authorize push to main = %v, want ErrScopeDenied", err)
	}

	start := time.Now()
	h.broker.Revoke(h.ctx, "s-1")
	_, err := v.Authorize(h.ctx, git.Token.Reveal(), "git.corp.test", push)
	if !errors.Is(err, verify.ErrRevoked) {
		t.Fatalf("Authorize after stop = %v, want ErrRevoked", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("revocation took %s to reach the service", d)
	}

	// Both rejections were reported and audited, tied to the session.
	var rejected []Event
	for _, e := range h.audit.all() {
		if e.Kind == EventRejected {
			rejected = append(rejected, e)
		}
	}
	if len(rejected) != 2 {
		t.Fatalf("rejected events %+v, want 2", rejected)
	}
	if r := rejected[0]; r.Reason != "scope_denied" || r.Session != "s-1" || r.Name != "git" || r.Action != "git.push" || r.ID != git.ID {
		t.Fatalf("first rejection %+v", r)
	}
	if r := rejected[1]; r.Reason != "revoked" || r.Session != "s-1" {
		t.Fatalf("second rejection %+v", r)
	}
}

func TestMintRefuses(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		name    string
		session string
		reqs    []Request
		class   func(error) bool
		wantMsg string
	}{
		{"no session", "", []Request{gitReq}, errdefs.IsInvalidArgument, "empty session"},
		{"bad name", "s", []Request{{Name: "../x", Audience: "a", Scopes: []string{"git.fetch"}}}, errdefs.IsInvalidArgument, `credential name "../x"`},
		{"unknown issuer", "s", []Request{{Name: "x", Issuer: "vault", Audience: "a", Scopes: []string{"git.fetch"}}}, errdefs.IsInvalidArgument, `issuer "vault" is not configured`},
		{"no audience", "s", []Request{{Name: "x", Scopes: []string{"git.fetch"}}}, errdefs.IsInvalidArgument, "no audience"},
		{"no scopes", "s", []Request{{Name: "x", Audience: "a"}}, errdefs.IsInvalidArgument, "no scopes"},
		{"negative ttl", "s", []Request{{Name: "x", Audience: "a", Scopes: []string{"git.fetch"}, TTL: -time.Second}}, errdefs.IsInvalidArgument, "negative ttl"},
		{"declared twice", "s", []Request{gitReq, gitReq}, errdefs.IsInvalidArgument, "declared twice"},
		{"ttl over max", "s", []Request{{Name: "x", Audience: "a", Scopes: []string{"git.fetch"}, TTL: 2 * time.Hour}}, errdefs.IsInvalidArgument, `credential "x" (issuer "airlock")`},
		{"bad scope", "s", []Request{{Name: "x", Audience: "a", Scopes: []string{"git push"}}}, errdefs.IsInvalidArgument, "invalid scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			creds, err := h.broker.Mint(h.ctx, tt.session, tt.reqs)
			if err == nil || creds != nil {
				t.Fatalf("Mint = %v, %v; want error", creds, err)
			}
			if !tt.class(err) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("Mint error %q, want class and %q", err, tt.wantMsg)
			}
		})
	}
	if got := h.broker.Sessions(); len(got) != 0 {
		t.Fatalf("failed mints left sessions %v", got)
	}

	h.mint(t, "s", gitReq)
	_, err := h.broker.Mint(h.ctx, "s", []Request{gitReq})
	if !errdefs.IsAlreadyExists(err) {
		t.Fatalf("minting an existing credential = %v, want AlreadyExists", err)
	}
}

type failingIssuer struct{ err error }

func (f failingIssuer) Issue(context.Context, IssueRequest) (*Credential, error) { return nil, f.err }

func TestMintRollsBack(t *testing.T) {
	h := newHarness(t, WithIssuer("broken", failingIssuer{errors.New("sts: access denied")}))
	_, err := h.broker.Mint(h.ctx, "s-1", []Request{gitReq, {Name: "aws", Issuer: "broken", Audience: "aws", Scopes: []string{"objects.get"}}})
	if err == nil || !strings.Contains(err.Error(), `credential "aws" (issuer "broken"): sts: access denied`) {
		t.Fatalf("Mint = %v", err)
	}
	if got := h.broker.Sessions(); len(got) != 0 {
		t.Fatalf("Sessions() = %v after a failed start", got)
	}
	ev := h.audit.all()
	if len(ev) != 2 || ev[0].Kind != EventMinted || ev[1].Kind != EventRevoked || ev[1].Reason != "session start failed" {
		t.Fatalf("audit %+v", ev)
	}
	if !h.broker.IsRevoked(ev[0].ID) {
		t.Fatal("the token minted before the failure is not revoked")
	}
}

func TestRefresh(t *testing.T) {
	h := newHarness(t)
	first := h.mint(t, "s-1", gitReq)[0]
	h.clock.Advance(5 * time.Minute)
	second, err := h.broker.Refresh(h.ctx, "s-1", "git")
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || !second.Expiry.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("refreshed %+v", second)
	}
	for _, c := range []*Credential{first, second} {
		if res := h.broker.Introspect(h.ctx, c.Token.Reveal()); !res.Active {
			t.Fatalf("%s inactive after refresh: %+v", c.ID, res)
		}
	}
	if k := h.audit.kinds(); !slices.Equal(k, []EventKind{EventMinted, EventRefreshed}) {
		t.Fatalf("audit %v", k)
	}
	if _, err := h.broker.Refresh(h.ctx, "s-1", "nope"); !errdefs.IsNotFound(err) {
		t.Fatalf("Refresh(unknown name) = %v", err)
	}
	h.broker.Revoke(h.ctx, "s-1")
	for _, c := range []*Credential{first, second} {
		if !h.broker.IsRevoked(c.ID) {
			t.Fatalf("%s not revoked", c.ID)
		}
	}
	if _, err := h.broker.Refresh(h.ctx, "s-1", "git"); !errdefs.IsNotFound(err) {
		t.Fatalf("Refresh after revoke = %v, want NotFound", err)
	}
}

func TestIntrospectDeniesByDefault(t *testing.T) {
	h := newHarness(t)
	// Signed with the broker's key but never recorded by it.
	raw, _, err := token.NewMinter("airlock", h.ring).Mint(token.MintRequest{Session: "s", Audience: "a", Scopes: []string{"git.fetch"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if res := h.broker.Introspect(h.ctx, raw.Reveal()); res.Active || res.Reason != "revoked" {
		t.Fatalf("unrecorded token: %+v", res)
	}
	if res := h.broker.Introspect(h.ctx, "garbage"); res.Active || res.Reason != "malformed" || res.ID != "" {
		t.Fatalf("garbage: %+v", res)
	}
}

func TestIntrospectExpiryAndPrune(t *testing.T) {
	h := newHarness(t)
	git := h.mint(t, "s-1", gitReq)[0]
	h.clock.Set(git.Expiry)
	if res := h.broker.Introspect(h.ctx, git.Token.Reveal()); res.Active || res.Reason != "expired" || res.ID != git.ID {
		t.Fatalf("at expiry: %+v", res)
	}
	h.broker.Revoke(h.ctx, "s-1")
	if !h.broker.IsRevoked(git.ID) {
		t.Fatal("not revoked")
	}
	h.clock.Advance(recordMargin + time.Second)
	h.broker.Prune(h.ctx)
	if h.broker.IsRevoked(git.ID) {
		t.Fatal("record of an expired token kept past the margin")
	}
}

func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "credentials.json")
	h := newHarness(t, WithStateFile(state))
	git := h.mint(t, "s-1", gitReq)[0]
	jobs := h.mint(t, "s-2", jobsReq)[0]

	fi, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file mode %#o", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(state)
	for _, c := range []*Credential{git, jobs} {
		if bytes.Contains(data, []byte(c.Token.Reveal())) {
			t.Fatal("state file contains a token")
		}
	}

	// A restarted daemon knows the live tokens and the grants.
	b2, err := New(WithClock(h.clock), WithKeyring(h.ring, "airlock"), WithStateFile(state))
	if err != nil {
		t.Fatal(err)
	}
	if res := b2.Introspect(h.ctx, git.Token.Reveal()); !res.Active {
		t.Fatalf("after restart: %+v", res)
	}
	if got := b2.Sessions(); !slices.Equal(got, []string{"s-1", "s-2"}) {
		t.Fatalf("Sessions() after restart = %v", got)
	}
	if _, err := b2.Refresh(h.ctx, "s-2", "jobs"); err != nil {
		t.Fatalf("Refresh after restart: %v", err)
	}
	b2.Revoke(h.ctx, "s-1")

	b3, err := New(WithClock(h.clock), WithKeyring(h.ring, "airlock"), WithStateFile(state))
	if err != nil {
		t.Fatal(err)
	}
	if !b3.IsRevoked(git.ID) || b3.IsRevoked(jobs.ID) {
		t.Fatal("revocation not persisted")
	}
	if res := b3.Introspect(h.ctx, git.Token.Reveal()); res.Active {
		t.Fatal("revoked token active after restart")
	}

	if err := os.WriteFile(state, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(WithStateFile(state)); err == nil {
		t.Fatal("New accepted a corrupt state file")
	}
}

func TestHandler(t *testing.T) {
	h := newHarness(t)
	srv := httptest.NewServer(h.broker.Handler())
	t.Cleanup(srv.Close)
	git := h.mint(t, "s-1", gitReq)[0]

	// JWKS.
	resp, err := http.Get(srv.URL + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("JWKS: %s %s", resp.Status, body)
	}
	ks, err := verify.ParseJWKS(body)
	if err != nil || ks.Len() != 1 {
		t.Fatalf("JWKS: %v, %d keys", err, ks.Len())
	}
	if bytes.Contains(body, []byte(`"d"`)) {
		t.Fatal("JWKS contains a private key")
	}

	post := func(ct, body string) (int, []byte) {
		resp, err := http.Post(srv.URL+"/v1/introspect", ct, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, readAll(t, resp)
	}
	for _, tc := range []struct {
		ct, body string
	}{
		{"application/x-www-form-urlencoded", url.Values{"token": {git.Token.Reveal()}}.Encode()},
		{"application/json; charset=utf-8", `{"token":"` + git.Token.Reveal() + `"}`},
	} {
		status, body := post(tc.ct, tc.body)
		var res verify.Introspection
		if err := json.Unmarshal(body, &res); err != nil || status != 200 || !res.Active || res.ID != git.ID {
			t.Fatalf("introspect (%s): %d %s", tc.ct, status, body)
		}
	}
	for _, tc := range []struct {
		ct, body string
		status   int
	}{
		{"application/x-www-form-urlencoded", "", 400},
		{"application/json", `{"token":`, 400},
		{"text/plain", git.Token.Reveal(), 415},
		{"application/json", `{"token":"` + strings.Repeat("a", maxIntrospectBody) + `"}`, 400},
	} {
		status, body := post(tc.ct, tc.body)
		if status != tc.status || !bytes.Contains(body, []byte(`"class"`)) {
			t.Errorf("introspect %s %.40q: %d %s, want %d", tc.ct, tc.body, status, body, tc.status)
		}
	}
	resp, err = http.Get(srv.URL + "/v1/introspect")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /v1/introspect: %s", resp.Status)
	}

	// Reports.
	rep := `{"jti":"` + git.ID + `","sub":"forged","audience":"git.corp.test","action":"git.push","reason":"scope_denied","detail":"line1\nFAKE LOG LINE"}`
	resp, err = http.Post(srv.URL+"/v1/report", "application/json", strings.NewReader(rep))
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("report: %s", resp.Status)
	}
	ev := h.audit.all()
	last := ev[len(ev)-1]
	if last.Kind != EventRejected || last.Session != "s-1" || last.Name != "git" || last.Reason != "scope_denied" ||
		last.Detail != "line1FAKE LOG LINE" || last.Remote == "" || !last.Expires.Equal(git.Expiry) {
		t.Fatalf("rejected event %+v", last)
	}
	for _, body := range []string{`{`, `{"jti":"x"}`} {
		resp, err = http.Post(srv.URL+"/v1/report", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 400 {
			t.Errorf("report %s: %s, want 400", body, resp.Status)
		}
	}

	// Without a keyring, JWKS and introspection are absent.
	bare, err := New()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	bare.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/.well-known/jwks.json", nil))
	if rec.Code != 404 {
		t.Fatalf("JWKS without keyring: %d", rec.Code)
	}
	if res := bare.Introspect(h.ctx, git.Token.Reveal()); res.Active || res.Reason != "unavailable" {
		t.Fatalf("Introspect without keyring: %+v", res)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestNewRefusesBadOptions(t *testing.T) {
	for name, opt := range map[string]Option{
		"nil keyring":        WithKeyring(nil, "airlock"),
		"empty issuer name":  WithIssuer("", failingIssuer{}),
		"nil issuer":         WithIssuer("x", nil),
		"builtin overridden": WithIssuer(BuiltinIssuer, failingIssuer{}),
	} {
		if _, err := New(opt); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
}

func TestRevise(t *testing.T) {
	h := newHarness(t, WithStateFile(filepath.Join(t.TempDir(), "credentials.json")))
	first := h.mint(t, "s-1", gitReq, jobsReq)
	h.mint(t, "s-2", gitReq)
	h.clock.Advance(time.Minute)
	refreshed, err := h.broker.Refresh(h.ctx, "s-1", "git")
	if err != nil {
		t.Fatal(err)
	}
	active := func(c *Credential) bool { return h.broker.Introspect(h.ctx, c.Token.Reveal()).Active }

	// An issuer failing leaves everything as it was.
	narrow := gitReq
	narrow.Scopes = []string{"git.push ref=refs/heads/alex/fix repo=app"}
	bad := Request{Name: "kube", Issuer: "broken", Audience: "k.test", Scopes: []string{"x"}}
	h2 := newHarness(t, WithIssuer("broken", failingIssuer{errors.New("issuer down")}))
	if _, _, err := h2.broker.Revise(h2.ctx, "s-1", []Request{narrow, bad}, nil, "revision"); err == nil {
		t.Fatal("Revise with a failing issuer succeeded")
	}
	if _, _, err := h.broker.Revise(h.ctx, "s-1", []Request{narrow, {Name: "kube", Audience: "k.test"}}, nil, "revision"); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Revise with a request without scopes: %v", err)
	}
	if !active(first[0]) || !active(refreshed) || !active(first[1]) || h.broker.Grants("s-1")["git"].Scopes[0] != gitReq.Scopes[0] {
		t.Fatal("a refused revision changed credentials")
	}

	// A refresh under the old grant that ends after the revision.
	late, err := h.broker.issue(h.ctx, "s-1", h.broker.Grants("s-1")["git"])
	if err != nil {
		t.Fatal(err)
	}

	kube := Request{Name: "kube", Audience: "k.test", Scopes: []string{"k8s.get namespace=dev"}, TTL: 10 * time.Minute}
	minted, revoked, err := h.broker.Revise(h.ctx, "s-1", []Request{narrow, kube}, []string{"jobs"}, "revision")
	if err != nil {
		t.Fatal(err)
	}
	if len(minted) != 2 || minted[0].Name != "git" || minted[1].Name != "kube" {
		t.Fatalf("minted %+v", minted)
	}
	want := []TokenID{{"git", first[0].ID}, {"git", refreshed.ID}, {"jobs", first[1].ID}}
	slices.SortFunc(want, func(x, y TokenID) int { return strings.Compare(x.Name+x.ID, y.Name+y.ID) })
	if !slices.Equal(revoked, want) {
		t.Fatalf("revoked %v, want %v", revoked, want)
	}
	for _, c := range append(first, refreshed) {
		if active(c) || !h.broker.IsRevoked(c.ID) {
			t.Errorf("%s (%s) still active after the revision", c.Name, c.ID)
		}
	}
	for _, c := range minted {
		res := h.broker.Introspect(h.ctx, c.Token.Reveal())
		if !res.Active {
			t.Errorf("%s inactive after the revision: %+v", c.Name, res)
		}
	}
	if !slices.Equal(minted[0].Scopes, narrow.Scopes) {
		t.Errorf("re-minted scopes %v", minted[0].Scopes)
	}
	if live := h.broker.Live("s-1"); len(live) != 2 || live["git"] != minted[0].ID || live["kube"] != minted[1].ID {
		t.Errorf("Live = %v", live)
	}
	if !active(h.mint(t, "s-3", gitReq)[0]) || h.broker.Live("s-2")["git"] == "" {
		t.Error("another session's credentials were touched")
	}
	if err := h.broker.commit("s-1", gitReq, late, false); !errdefs.IsNotFound(err) || !h.broker.IsRevoked(late.ID) {
		t.Errorf("a refresh under the replaced grant: %v, revoked %v; want NotFound and revoked", err, h.broker.IsRevoked(late.ID))
	}
	if _, err := h.broker.Refresh(h.ctx, "s-1", "jobs"); !errdefs.IsNotFound(err) {
		t.Errorf("Refresh of a removed credential: %v", err)
	}
	next, err := h.broker.Refresh(h.ctx, "s-1", "git")
	if err != nil || !slices.Equal(next.Scopes, narrow.Scopes) {
		t.Fatalf("Refresh after the revision: %+v %v, want the narrowed scopes", next, err)
	}

	// The revision is in the state file.
	b2, err := New(WithClock(h.clock), WithKeyring(h.ring, "airlock"), WithStateFile(h.broker.statePath))
	if err != nil {
		t.Fatal(err)
	}
	if !b2.IsRevoked(first[0].ID) || b2.IsRevoked(minted[0].ID) || b2.Grants("s-1")["jobs"].Name != "" || b2.Grants("s-1")["kube"].TTL != kube.TTL {
		t.Error("the revision was not persisted")
	}
	var kinds []string
	for _, e := range h.audit.all() {
		if e.Reason == "revision" || e.Kind == EventMinted && e.Time.After(t0) {
			kinds = append(kinds, string(e.Kind)+" "+e.Name)
		}
	}
	if !slices.Contains(kinds, "revoked jobs") || !slices.Contains(kinds, "minted kube") || !slices.Contains(kinds, "minted git") {
		t.Errorf("audit %v", kinds)
	}
}
