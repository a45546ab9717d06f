package world

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

const testIssuer = "https://airlock.test"

// testEnv is a world served over loopback, with a keyring to mint tokens.
type testEnv struct {
	w       *World
	ring    *token.Keyring
	minter  *token.Minter
	revoked *verify.RevocationList

	jobs, services, objects, git, control *httptest.Server
	tracker, models, packages, paste      *httptest.Server
}

func newTestEnv(t testing.TB, opts ...Option) *testEnv {
	t.Helper()
	ring, err := token.OpenKeyring(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	revoked := verify.NewRevocationList(nil)
	v, err := verify.New(ring, revoked, verify.WithIssuer(testIssuer))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(context.Background(), v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	e := &testEnv{w: w, ring: ring, minter: token.NewMinter(testIssuer, ring), revoked: revoked}
	for _, s := range []struct {
		dst **httptest.Server
		srv *httptest.Server
	}{
		{&e.jobs, httptest.NewServer(w.JobsHandler())},
		{&e.services, httptest.NewServer(w.ServicesHandler())},
		{&e.objects, httptest.NewServer(w.ObjectsHandler())},
		{&e.git, httptest.NewServer(w.GitHandler())},
		{&e.control, httptest.NewServer(w.ControlHandler())},
		{&e.tracker, httptest.NewServer(w.TrackerHandler())},
		{&e.models, httptest.NewServer(w.ModelsHandler())},
		{&e.packages, httptest.NewServer(w.PackagesHandler())},
		{&e.paste, httptest.NewServer(w.PasteHandler())},
	} {
		*s.dst = s.srv
		t.Cleanup(s.srv.Close)
	}
	return e
}

// token mints a token for audience with scopes, valid for a minute.
func (e *testEnv) token(t testing.TB, audience string, scopes ...string) string {
	t.Helper()
	raw, _, err := e.minter.Mint(token.MintRequest{Session: "sess-" + t.Name(), Audience: audience, Scopes: scopes, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return raw.Reveal()
}

// tokenAt mints a token as of time at (for expired tokens).
func (e *testEnv) tokenAt(t testing.TB, at time.Time, ttl time.Duration, audience string, scopes ...string) (string, *token.Claims) {
	t.Helper()
	m := token.NewMinter(testIssuer, e.ring, token.WithMinterClock(clock.NewFake(at)))
	raw, c, err := m.Mint(token.MintRequest{Session: "sess-old", Audience: audience, Scopes: scopes, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return raw.Reveal(), c
}

func (e *testEnv) client(srv *httptest.Server, tok string) *worldapi.Client {
	return &worldapi.Client{BaseURL: srv.URL, Token: tok, HTTP: srv.Client()}
}
