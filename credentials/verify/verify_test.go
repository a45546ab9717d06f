package verify

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/token"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const aud = "git.corp.test"

type fixture struct {
	clock  *clock.Fake
	ring   *token.Keyring
	minter *token.Minter
	revs   *RevocationList
	v      *Verifier
}

func newFixture(t testing.TB, opts ...Option) *fixture {
	t.Helper()
	fc := clock.NewFake(t0)
	ring, err := token.OpenKeyring(t.TempDir(), token.WithClock(fc), token.WithMaxTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	revs := NewRevocationList(fc)
	v, err := New(ring, revs, append([]Option{WithClock(fc), WithIssuer("airlock"), WithLeeway(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{clock: fc, ring: ring, minter: token.NewMinter("airlock", ring), revs: revs, v: v}
}

var gitScopes = []string{"git.fetch repo=app", "git.push repo=app ref=refs/heads/alex/*"}

func (f *fixture) mint(t testing.TB, ttl time.Duration) (string, *token.Claims) {
	t.Helper()
	raw, c, err := f.minter.Mint(token.MintRequest{Session: "s-1", Audience: aud, Scopes: gitScopes, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return raw.Reveal(), c
}

func wantErr(t *testing.T, c *Claims, err, kind error) {
	t.Helper()
	if c != nil {
		t.Errorf("claims returned with error %v", err)
	}
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	for _, r := range reasons {
		if r.err != kind && errors.Is(err, r.err) {
			t.Fatalf("error %v wraps both %v and %v", err, kind, r.err)
		}
	}
}

func TestVerifyValid(t *testing.T) {
	f := newFixture(t)
	raw, minted := f.mint(t, 15*time.Minute)
	c, err := f.v.Verify(t.Context(), raw, aud)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != minted.ID || c.Subject != "s-1" || c.Session != "s-1" || !c.Expiry.Equal(minted.Expiry) {
		t.Fatalf("claims %+v, want %+v", c, minted)
	}
	if !c.Allows(scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": "refs/heads/alex/x"}}) {
		t.Fatal("verified claims deny their scope")
	}
}

func TestVerifyTime(t *testing.T) {
	f := newFixture(t)
	raw, c := f.mint(t, 10*time.Minute)

	f.clock.Set(c.Expiry.Add(-time.Second))
	if _, err := f.v.Verify(t.Context(), raw, aud); err != nil {
		t.Fatalf("one second before expiry: %v", err)
	}
	f.clock.Set(c.Expiry)
	got, err := f.v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrExpired)
	var e *Error
	if !errors.As(err, &e) || e.ID != c.ID || e.Subject != "s-1" {
		t.Fatalf("expired error %#v lacks jti/sub", err)
	}

	// With leeway the token lasts a little longer.
	lv, _ := New(f.ring, f.revs, WithClock(f.clock), WithLeeway(5*time.Second))
	f.clock.Set(c.Expiry.Add(4 * time.Second))
	if _, err := lv.Verify(t.Context(), raw, aud); err != nil {
		t.Fatalf("within leeway: %v", err)
	}
	f.clock.Set(c.Expiry.Add(5 * time.Second))
	got, err = lv.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrExpired)

	// Before nbf (the issuer's clock runs ahead of the service's).
	f.clock.Set(t0.Add(-time.Second))
	got, err = f.v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrNotYetValid)
	f.clock.Set(t0.Add(-4 * time.Second))
	if _, err := lv.Verify(t.Context(), raw, aud); err != nil {
		t.Fatalf("nbf within leeway: %v", err)
	}
	f.clock.Set(t0.Add(-6 * time.Second))
	got, err = lv.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrNotYetValid)
}

func TestVerifyAudienceAndIssuer(t *testing.T) {
	f := newFixture(t)
	raw, _ := f.mint(t, time.Minute)
	got, err := f.v.Verify(t.Context(), raw, "jobs.corp.test")
	wantErr(t, got, err, ErrWrongAudience)
	got, err = f.v.Verify(t.Context(), raw, "")
	wantErr(t, got, err, ErrWrongAudience)

	other := token.NewMinter("someone-else", f.ring)
	raw2, _, err := other.Mint(token.MintRequest{Session: "s", Audience: aud, Scopes: gitScopes, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got, err = f.v.Verify(t.Context(), raw2.Reveal(), aud)
	wantErr(t, got, err, ErrWrongIssuer)

	c, err := f.v.VerifyIgnoringAudience(t.Context(), raw)
	if err != nil || c == nil {
		t.Fatalf("VerifyIgnoringAudience = %v, %v", c, err)
	}
}

func TestVerifyRevoked(t *testing.T) {
	f := newFixture(t)
	raw, c := f.mint(t, time.Minute)
	f.revs.Revoke(c.ID, c.Expiry)
	got, err := f.v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrRevoked)

	// An expired revoked token is reported as expired: the cheaper check
	// comes first and the list may have been pruned.
	f.clock.Set(c.Expiry.Add(time.Minute))
	if n := f.revs.Prune(30 * time.Second); n != 1 {
		t.Fatalf("Prune dropped %d entries, want 1", n)
	}
	got, err = f.v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrExpired)
}

type checkerFunc func(ctx context.Context, raw string, c *Claims) error

func (f checkerFunc) CheckRevoked(ctx context.Context, raw string, c *Claims) error {
	return f(ctx, raw, c)
}

func TestVerifyRevocationUnavailable(t *testing.T) {
	f := newFixture(t)
	v, _ := New(f.ring, checkerFunc(func(context.Context, string, *Claims) error {
		return errors.New("connection refused")
	}), WithClock(f.clock))
	raw, _ := f.mint(t, time.Minute)
	got, err := v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrUnavailable)
	if !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("error %q lacks the cause", err)
	}
}

func TestNewRequiresSources(t *testing.T) {
	if _, err := New(nil, NoRevocation); err == nil {
		t.Error("New(nil keys) succeeded")
	}
	if _, err := New(NewKeySet(jose.JSONWebKeySet{}), nil); err == nil {
		t.Error("New(nil revocations) succeeded")
	}
}

// segments splits a compact JWS.
func segments(t *testing.T, raw string) (header, payload map[string]any, sig string) {
	t.Helper()
	parts := strings.Split(raw, ".")
	dec := func(s string) map[string]any {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	return dec(parts[0]), dec(parts[1]), parts[2]
}

func enc(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestVerifyForgedAndTampered(t *testing.T) {
	f := newFixture(t)
	raw, _ := f.mint(t, time.Minute)
	header, payload, sig := segments(t, raw)
	kid := header["kid"].(string)

	// A token minted by another keyring (an attacker's key).
	other, err := token.OpenKeyring(t.TempDir(), token.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := token.NewMinter("airlock", other).Mint(token.MintRequest{Session: "s-1", Audience: aud, Scopes: []string{"git.*"}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The same, with the header claiming our key id.
	fh, fp, _ := segments(t, forged.Reveal())
	fh["kid"] = kid
	signingInput := enc(t, fh) + "." + enc(t, fp)
	otherPriv := otherKey(t, other)
	forgedKid := signingInput + "." + base64.RawURLEncoding.EncodeToString(ed25519.Sign(otherPriv, []byte(signingInput)))

	// Payload altered to widen the scopes, signature kept.
	wider := clone(payload)
	wider["scopes"] = []string{"git.*"}
	altered := enc(t, header) + "." + enc(t, wider) + "." + sig

	// Expiry pushed out, signature kept.
	later := clone(payload)
	later["exp"] = payload["exp"].(float64) + 3600
	extended := enc(t, header) + "." + enc(t, later) + "." + sig

	// A flipped signature bit.
	sigBytes, _ := base64.RawURLEncoding.DecodeString(sig)
	sigBytes[0] ^= 1
	flipped := enc(t, header) + "." + enc(t, payload) + "." + base64.RawURLEncoding.EncodeToString(sigBytes)

	// alg "none" with no signature.
	noneHeader := clone(header)
	noneHeader["alg"] = "none"
	none := enc(t, noneHeader) + "." + enc(t, wider) + "."

	// HS256 keyed with the public key: the classic key-confusion attack.
	pub, _ := f.ring.PublicKey(t.Context(), kid)
	hsHeader := clone(header)
	hsHeader["alg"] = "HS256"
	hsInput := enc(t, hsHeader) + "." + enc(t, wider)
	mac := hmac.New(sha256.New, pub)
	mac.Write([]byte(hsInput))
	hs256 := hsInput + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))

	// ES256 with an attacker's key embedded as "jwk".
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signer, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: ecKey},
		(&jose.SignerOptions{EmbedJWK: true}).WithType(token.Type).WithHeader("kid", kid))
	esJWS, _ := signer.Sign(mustJSON(t, wider))
	es256, _ := esJWS.CompactSerialize()

	// EdDSA by an attacker's key embedded as "jwk", claiming our kid.
	edSigner, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: otherPriv},
		(&jose.SignerOptions{EmbedJWK: true}).WithType(token.Type).WithHeader("kid", kid))
	edJWS, _ := edSigner.Sign(mustJSON(t, wider))
	embedded, _ := edJWS.CompactSerialize()

	tests := []struct {
		name string
		raw  string
		kind error
	}{
		{"other key", forged.Reveal(), ErrBadSignature},
		{"other key claiming our kid", forgedKid, ErrBadSignature},
		{"altered scopes", altered, ErrBadSignature},
		{"extended expiry", extended, ErrBadSignature},
		{"flipped signature bit", flipped, ErrBadSignature},
		{"alg none", none, ErrBadSignature},
		{"HS256 with the public key", hs256, ErrBadSignature},
		{"ES256 with embedded jwk", es256, ErrBadSignature},
		{"EdDSA with embedded jwk", embedded, ErrBadSignature},
		{"no signature", enc(t, header) + "." + enc(t, payload) + ".", ErrBadSignature},
		{"empty", "", ErrMalformed},
		{"garbage", "not a token", ErrMalformed},
		{"two parts", enc(t, header) + "." + enc(t, payload), ErrMalformed},
		{"JWE shape", "a.b.c.d.e", ErrMalformed},
		{"bad base64", "!!!." + enc(t, payload) + "." + sig, ErrMalformed},
		{"too large", raw + strings.Repeat("A", MaxTokenSize), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.v.Verify(t.Context(), tt.raw, aud)
			wantErr(t, c, err, tt.kind)
			var e *Error
			if errors.As(err, &e) && (e.ID != "" || e.Subject != "") {
				t.Fatalf("rejection of an unverified token carries jti/sub: %+v", e)
			}
		})
	}
}

func otherKey(t *testing.T, ring *token.Keyring) ed25519.PrivateKey {
	t.Helper()
	// Read the private key back from the keyring's file, as an attacker
	// holding their own key would.
	kid := ring.Keys()[0].KID
	dir := ringDir(t, ring)
	b := readFile(t, dir+"/"+kid+".json")
	var kf struct {
		Key jose.JSONWebKey `json:"key"`
	}
	if err := json.Unmarshal(b, &kf); err != nil {
		t.Fatal(err)
	}
	return kf.Key.Key.(ed25519.PrivateKey)
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// signWith signs payload with the fixture's active key and header fields.
func (f *fixture) signWith(t *testing.T, payload any, typ string, withKid bool) string {
	t.Helper()
	dir := ringDir(t, f.ring)
	kid := f.ring.Keys()[len(f.ring.Keys())-1].KID
	var kf struct {
		Key jose.JSONWebKey `json:"key"`
	}
	if err := json.Unmarshal(readFile(t, dir+"/"+kid+".json"), &kf); err != nil {
		t.Fatal(err)
	}
	key := jose.SigningKey{Algorithm: jose.EdDSA, Key: kf.Key.Key}
	if withKid {
		key.Key = jose.JSONWebKey{Key: kf.Key.Key, KeyID: kid}
	}
	opts := &jose.SignerOptions{}
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	s, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(mustJSON(t, payload))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestVerifyMalformedClaims(t *testing.T) {
	f := newFixture(t)
	exp := t0.Add(time.Minute).Unix()
	good := map[string]any{"iss": "airlock", "sub": "s", "aud": aud, "exp": exp, "jti": "j", "scopes": []string{"git.fetch"}}
	without := func(k string) map[string]any {
		m := clone(good)
		delete(m, k)
		return m
	}
	with := func(k string, v any) map[string]any {
		m := clone(good)
		m[k] = v
		return m
	}
	tests := []struct {
		name    string
		raw     string
		kind    error
		wantMsg string
	}{
		{"ok", f.signWith(t, good, token.Type, true), nil, ""},
		{"no typ", f.signWith(t, good, "", true), ErrMalformed, "typ"},
		{"typ JWT", f.signWith(t, good, "JWT", true), ErrMalformed, "typ"},
		{"no kid", f.signWith(t, good, token.Type, false), ErrMalformed, "kid"},
		{"no jti", f.signWith(t, without("jti"), token.Type, true), ErrMalformed, "no jti"},
		{"no sub", f.signWith(t, without("sub"), token.Type, true), ErrMalformed, "no sub"},
		{"no aud", f.signWith(t, without("aud"), token.Type, true), ErrMalformed, "no aud"},
		{"no exp", f.signWith(t, without("exp"), token.Type, true), ErrMalformed, "no exp"},
		{"bad scope", f.signWith(t, with("scopes", []string{"GIT"}), token.Type, true), ErrMalformed, "invalid scope"},
		{"exp string", f.signWith(t, with("exp", "soon"), token.Type, true), ErrMalformed, "NumericDate"},
		{"payload not an object", f.signWith(t, []int{1}, token.Type, true), ErrMalformed, "claims"},
		{"iat in future", f.signWith(t, with("iat", t0.Add(time.Minute).Unix()), token.Type, true), ErrNotYetValid, "issued in the future"},
		{"aud array", f.signWith(t, with("aud", []string{"x", aud}), token.Type, true), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := f.v.Verify(t.Context(), tt.raw, aud)
			if tt.kind == nil {
				if err != nil || c == nil {
					t.Fatalf("Verify = %v, %v", c, err)
				}
				return
			}
			wantErr(t, c, err, tt.kind)
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %q lacks %q", err, tt.wantMsg)
			}
		})
	}
}

type recordingReporter struct {
	mu   sync.Mutex
	rejs []Rejection
}

func (r *recordingReporter) Report(_ context.Context, rej Rejection) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejs = append(r.rejs, rej)
	return nil
}

func TestAuthorize(t *testing.T) {
	rep := &recordingReporter{}
	f := newFixture(t, WithReporter(rep))
	raw, c := f.mint(t, time.Minute)
	push := func(ref string) scope.Request {
		return scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": ref}}
	}
	got, err := f.v.Authorize(t.Context(), raw, aud, push("refs/heads/alex/fix"))
	if err != nil || got.ID != c.ID {
		t.Fatalf("Authorize own branch = %v, %v", got, err)
	}
	got, err = f.v.Authorize(t.Context(), raw, aud, push("refs/heads/main"))
	wantErr(t, got, err, ErrScopeDenied)
	if !strings.Contains(err.Error(), `git.push ref="refs/heads/main" repo="app"`) {
		t.Fatalf("error %q does not describe the request", err)
	}
	got, err = f.v.Authorize(t.Context(), raw, "other", push("refs/heads/alex/fix"))
	wantErr(t, got, err, ErrWrongAudience)
	_, err = f.v.Authorize(t.Context(), raw, "", push("refs/heads/alex/fix"))
	wantErr(t, nil, err, ErrWrongAudience)

	rep.mu.Lock()
	defer rep.mu.Unlock()
	if len(rep.rejs) != 2 {
		t.Fatalf("reported %d rejections, want 2: %+v", len(rep.rejs), rep.rejs)
	}
	want := Rejection{ID: c.ID, Subject: "s-1", Audience: aud, Action: "git.push", Reason: "scope_denied", Detail: rep.rejs[0].Detail}
	if rep.rejs[0] != want {
		t.Fatalf("rejection %+v, want %+v", rep.rejs[0], want)
	}
	if rep.rejs[1].Reason != "wrong_audience" || rep.rejs[1].Audience != "other" {
		t.Fatalf("rejection %+v", rep.rejs[1])
	}
	for _, r := range rep.rejs {
		if strings.Contains(fmt.Sprint(r), raw) {
			t.Fatal("rejection carries the token")
		}
	}
}

func TestReasonRoundTrip(t *testing.T) {
	for _, r := range reasons {
		if got := Reason(fmt.Errorf("wrapped: %w", r.err)); got != r.reason {
			t.Errorf("Reason(%v) = %q, want %q", r.err, got, r.reason)
		}
		if ErrorForReason(r.reason) != r.err {
			t.Errorf("ErrorForReason(%q) != %v", r.reason, r.err)
		}
	}
	if Reason(nil) != "" || Reason(errors.New("x")) != "error" || ErrorForReason("nope") != nil {
		t.Error("Reason/ErrorForReason edge cases")
	}
}

func TestRemoteKeys(t *testing.T) {
	f := newFixture(t)
	var fetches atomic.Int32
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(f.ring.JWKS())
	}))
	t.Cleanup(srv.Close)

	rk := NewRemoteKeys(srv.URL, WithRemoteClock(f.clock), WithCache(time.Minute, time.Second))
	v, _ := New(rk, NoRevocation, WithClock(f.clock))
	raw, _ := f.mint(t, time.Hour)
	for range 3 {
		if _, err := v.Verify(t.Context(), raw, aud); err != nil {
			t.Fatal(err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for three verifications, want 1", n)
	}

	// After a rotation the new kid triggers a fetch.
	if err := f.ring.Rotate(); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Second)
	raw2, _ := f.mint(t, time.Hour)
	if _, err := v.Verify(t.Context(), raw2, aud); err != nil {
		t.Fatalf("token of the rotated key: %v", err)
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}
	// The old key keeps verifying.
	if _, err := v.Verify(t.Context(), raw, aud); err != nil {
		t.Fatalf("token of the retired key: %v", err)
	}

	// Unknown kids do not cause a fetch more than once per second.
	bogus := f.signBogusKid(t)
	for range 5 {
		c, err := v.Verify(t.Context(), bogus, aud)
		wantErr(t, c, err, ErrBadSignature)
	}
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches after bogus kids within a second of the last fetch, want 2", n)
	}
	f.clock.Advance(time.Second)
	for range 5 {
		c, err := v.Verify(t.Context(), bogus, aud)
		wantErr(t, c, err, ErrBadSignature)
	}
	if n := fetches.Load(); n != 3 {
		t.Fatalf("%d fetches after bogus kids a second later, want 3", n)
	}

	// When the issuer is down, the cached keys are used.
	fail.Store(true)
	f.clock.Advance(2 * time.Minute)
	if _, err := v.Verify(t.Context(), raw2, aud); err != nil {
		t.Fatalf("with the issuer down: %v", err)
	}

	// Without any cached keys, the token is refused as unavailable.
	cold := NewRemoteKeys(srv.URL, WithRemoteClock(f.clock))
	v2, _ := New(cold, NoRevocation, WithClock(f.clock))
	c, err := v2.Verify(t.Context(), raw2, aud)
	wantErr(t, c, err, ErrUnavailable)
}

func (f *fixture) signBogusKid(t *testing.T) string {
	t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: jose.JSONWebKey{Key: priv, KeyID: "bogus"}},
		(&jose.SignerOptions{}).WithType(token.Type))
	jws, _ := s.Sign([]byte(`{}`))
	raw, _ := jws.CompactSerialize()
	return raw
}

func TestParseJWKS(t *testing.T) {
	f := newFixture(t)
	b, _ := json.Marshal(f.ring.JWKS())
	ks, err := ParseJWKS(b)
	if err != nil || ks.Len() != 1 {
		t.Fatalf("ParseJWKS = %v, %v", ks, err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	mixed := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: ecKey.Public(), KeyID: "ec"},
		{Key: edPriv.Public(), KeyID: ""},
		{Key: edPriv.Public(), KeyID: "enc", Use: "enc"},
		{Key: edPriv.Public(), KeyID: "ok", Use: "sig", Algorithm: "EdDSA"},
	}}
	if ks := NewKeySet(mixed); ks.Len() != 1 {
		t.Fatalf("NewKeySet kept %d keys, want 1", ks.Len())
	}
	if _, err := ParseJWKS([]byte("{")); err == nil {
		t.Fatal("ParseJWKS accepted bad JSON")
	}
}

func TestIntrospector(t *testing.T) {
	f := newFixture(t)
	raw, c := f.mint(t, time.Minute)
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.FormValue("token") != raw {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(answer.Load().(string)))
	}))
	t.Cleanup(srv.Close)
	v, _ := New(f.ring, NewIntrospector(srv.URL+"/v1/introspect"), WithClock(f.clock))

	tests := []struct {
		answer string
		kind   error
	}{
		{fmt.Sprintf(`{"active":true,"jti":%q}`, c.ID), nil},
		{`{"active":true,"jti":"someone-else"}`, ErrUnavailable},
		{`{"active":false,"reason":"revoked"}`, ErrRevoked},
		{`{"active":false,"reason":"unknown"}`, ErrRevoked},
		{`{"active":false}`, ErrRevoked},
		{`{"active":false,"reason":"expired"}`, ErrExpired},
		{`not json`, ErrUnavailable},
	}
	for _, tt := range tests {
		answer.Store(tt.answer)
		got, err := v.Verify(t.Context(), raw, aud)
		if tt.kind == nil {
			if err != nil {
				t.Errorf("answer %s: %v", tt.answer, err)
			}
			continue
		}
		if got != nil || !errors.Is(err, tt.kind) {
			t.Errorf("answer %s: %v, want %v", tt.answer, err, tt.kind)
		}
	}

	srv.Close()
	got, err := v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrUnavailable)
}

func TestHTTPReporter(t *testing.T) {
	got := make(chan Rejection, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rej Rejection
		if err := json.NewDecoder(r.Body).Decode(&rej); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- rej
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	want := Rejection{ID: "j", Subject: "s", Audience: aud, Action: "git.push", Reason: "scope_denied", Detail: "d"}
	if err := NewHTTPReporter(srv.URL).Report(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	if r := <-got; r != want {
		t.Fatalf("server got %+v, want %+v", r, want)
	}
	bad := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(bad.Close)
	if err := NewHTTPReporter(bad.URL).Report(t.Context(), want); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Report to a 404 = %v", err)
	}
}

func TestForIssuer(t *testing.T) {
	f := newFixture(t)
	raw, c := f.mint(t, time.Hour)
	reported := make(chan Rejection, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(f.ring.JWKS())
	})
	mux.HandleFunc("POST /v1/introspect", func(w http.ResponseWriter, r *http.Request) {
		active := !f.revs.IsRevoked(c.ID)
		fmt.Fprintf(w, `{"active":%v,"jti":%q,"reason":%q}`, active, c.ID, map[bool]string{false: "revoked"}[active])
	})
	mux.HandleFunc("POST /v1/report", func(w http.ResponseWriter, r *http.Request) {
		var rej Rejection
		json.NewDecoder(r.Body).Decode(&rej)
		reported <- rej
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	v := ForIssuer(srv.URL+"/", WithClock(f.clock))
	if _, err := v.Verify(t.Context(), raw, aud); err != nil {
		t.Fatal(err)
	}
	f.revs.Revoke(c.ID, c.Expiry)
	got, err := v.Verify(t.Context(), raw, aud)
	wantErr(t, got, err, ErrRevoked)
	if rej := <-reported; rej.Reason != "revoked" || rej.ID != c.ID || rej.Client != "" {
		t.Fatalf("reported %+v", rej)
	}

	// A service passing the request's context reports its connection, so
	// that the issuer can attribute a token it cannot identify.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.215.0.1:40000"
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 214, 0, 20), Port: 8080}))
	_, err = v.Verify(RequestContext(r), "not-a-token", aud)
	wantErr(t, nil, err, ErrMalformed)
	if rej := <-reported; rej.Reason != "malformed" || rej.Client != "10.215.0.1:40000" || rej.Server != "10.214.0.20:8080" {
		t.Fatalf("reported %+v, want the connection's ends", rej)
	}
}

func TestTokenFromRequest(t *testing.T) {
	tests := []struct {
		header string
		want   string
	}{
		{"Bearer abc.def.ghi", "abc.def.ghi"},
		{"bearer  abc ", "abc"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:abc.def.ghi")), "abc.def.ghi"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("user:")), ""},
		{"Bearer ", ""},
		{"Digest foo", ""},
		{"", ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if tt.header != "" {
			r.Header.Set("Authorization", tt.header)
		}
		got, err := TokenFromRequest(r)
		if tt.want == "" {
			if !errors.Is(err, ErrNoToken) {
				t.Errorf("TokenFromRequest(%q) = %q, %v; want ErrNoToken", tt.header, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("TokenFromRequest(%q) = %q, %v; want %q", tt.header, got, err, tt.want)
		}
	}
}

func ringDir(t *testing.T, ring *token.Keyring) string {
	t.Helper()
	return ring.Dir()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
