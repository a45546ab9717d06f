package runner

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

func fakeToken(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"EdDSA","typ":"at+jwt","kid":"k"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig"))
}

func TestTokenSubject(t *testing.T) {
	for tok, want := range map[string]string{
		fakeToken(`{"sub":"s1","aud":"x"}`): "s1",
		fakeToken(`{"aud":"x"}`):            "",
		fakeToken(`not json`):               "",
		"a.b":                               "",
		"a.!!!.c":                           "",
		"":                                  "",
	} {
		if got := tokenSubject(tok); got != want {
			t.Errorf("tokenSubject(%q) = %q, want %q", tok, got, want)
		}
	}
}

// TestWorldsRouting sends requests with tokens of bound and unbound
// sessions and checks which instance saw them. The tokens are not signed:
// the instance refuses them, and records the request in its audit.
func TestWorldsRouting(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ws, err := NewWorlds(ctx, 2, v)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if ws.Len() != 2 {
		t.Fatalf("Len = %d", ws.Len())
	}
	ws.Bind("s0", 0)
	ws.Bind("s1", 1)
	srv := httptest.NewServer(ws.Handler((*world.World).JobsHandler))
	defer srv.Close()
	get := func(tok string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/jobs", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", resp.StatusCode)
		}
	}
	get(fakeToken(`{"sub":"s1"}`))
	get(fakeToken(`{"sub":"s1"}`))
	get(fakeToken(`{"sub":"s0"}`))
	get(fakeToken(`{"sub":"stranger"}`))
	get("")
	ws.Unbind("s1")
	get(fakeToken(`{"sub":"s1"}`))
	for i, want := range []int{1, 2, 3} { // worker 0, worker 1, the extra instance
		if got := len(ws.World(i).Audit(0)); got != want {
			t.Errorf("instance %d saw %d requests, want %d", i, got, want)
		}
	}
}

// TestVhost serves a handler under two names and refuses others.
func TestVhost(t *testing.T) {
	h := vhost([]string{"jobs.bench.test", "jobs-admin.bench.test"}, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusNoContent)
	}))
	for host, want := range map[string]int{
		"jobs.bench.test":          http.StatusNoContent,
		"jobs-admin.bench.test":    http.StatusNoContent,
		"JOBS-Admin.bench.test.":   http.StatusNoContent,
		"jobs.bench.test:80":       http.StatusNoContent,
		"services.bench.test":      http.StatusMisdirectedRequest,
		"10.214.0.5":               http.StatusMisdirectedRequest,
		"":                         http.StatusMisdirectedRequest,
		"jobs.bench.test.evil.com": http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/jobs", nil)
		r.Host = host
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, r)
		if rw.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rw.Code, want)
		}
	}
}
