package token

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestSecretRedacts(t *testing.T) {
	const raw = "eyJhbGciOi.very-secret.sig"
	s := Secret(raw)
	type holder struct {
		Name  string
		Token Secret
	}
	h := holder{Name: "git", Token: s}
	outputs := []string{
		s.String(),
		fmt.Sprint(s),
		fmt.Sprintf("%v %s %q %x %X %#v %+v %d", s, s, s, s, s, s, s, s),
		fmt.Sprintf("%v %+v %#v", h, h, h),
		fmt.Sprintf("%v", &h),
	}
	j, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(j))
	var buf bytes.Buffer
	for _, hdl := range []slog.Handler{slog.NewJSONHandler(&buf, nil), slog.NewTextHandler(&buf, nil)} {
		l := slog.New(hdl)
		l.Info("minted", "token", s, "holder", h, slog.Any("any", s))
	}
	outputs = append(outputs, buf.String())
	for _, out := range outputs {
		if strings.Contains(out, "secret") || strings.Contains(out, hexOf(raw)) {
			t.Errorf("secret leaked: %s", out)
		}
		if !strings.Contains(out, Redacted) {
			t.Errorf("output lacks %q: %s", Redacted, out)
		}
	}
	if s.Reveal() != raw {
		t.Errorf("Reveal() = %q", s.Reveal())
	}
}

func hexOf(s string) string { return fmt.Sprintf("%x", []byte(s)) }

func openRing(t *testing.T, dir string, c clock.Clock) *Keyring {
	t.Helper()
	k, err := OpenKeyring(dir, WithClock(c), WithMaxTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestKeyringCreatesAndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	fc := clock.NewFake(t0)
	k := openRing(t, dir, fc)

	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %#o, want 0700", fi.Mode().Perm())
	}
	keys := k.Keys()
	if len(keys) != 1 || !keys[0].RetainUntil.IsZero() {
		t.Fatalf("Keys() = %+v, want one active key", keys)
	}
	kid := keys[0].KID
	fi, err = os.Stat(filepath.Join(dir, kid+".json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %#o, want 0600", fi.Mode().Perm())
	}

	k2 := openRing(t, dir, fc)
	if got := k2.Keys(); len(got) != 1 || got[0].KID != kid {
		t.Fatalf("reloaded keys %+v, want %s", got, kid)
	}
	pub, err := k2.PublicKey(t.Context(), kid)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := k.PublicKey(t.Context(), kid)
	if !pub.Equal(want) {
		t.Fatal("reloaded key differs")
	}
	if tp, _ := thumbprint(pub); tp != kid {
		t.Fatalf("kid %s is not the thumbprint %s", kid, tp)
	}
}

func TestKeyringTightensDirMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	openRing(t, dir, clock.NewFake(t0))
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %#o, want 0700", fi.Mode().Perm())
	}
}

func TestKeyringRefusesInsecureKeyFile(t *testing.T) {
	dir := t.TempDir()
	k := openRing(t, dir, clock.NewFake(t0))
	path := filepath.Join(dir, k.Keys()[0].KID+".json")
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenKeyring(dir)
	if err == nil || !strings.Contains(err.Error(), "other users may have read it") {
		t.Fatalf("OpenKeyring with a 0644 key = %v, want refusal", err)
	}
}

func TestKeyringRefusesMismatchedKID(t *testing.T) {
	dir := t.TempDir()
	k := openRing(t, dir, clock.NewFake(t0))
	kid := k.Keys()[0].KID
	if err := os.Rename(filepath.Join(dir, kid+".json"), filepath.Join(dir, "other.json")); err != nil {
		t.Fatal(err)
	}
	_, err := OpenKeyring(dir)
	if err == nil || !strings.Contains(err.Error(), "holds key") {
		t.Fatalf("OpenKeyring = %v, want kid mismatch", err)
	}
}

func TestKeyringRemovesTempFiles(t *testing.T) {
	dir := t.TempDir()
	tmp := filepath.Join(dir, ".tmp-abc.json-123")
	if err := os.WriteFile(tmp, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	openRing(t, dir, clock.NewFake(t0))
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file still there: %v", err)
	}
}

func TestKeyringRotation(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(t0)
	k := openRing(t, dir, fc)
	old := k.Keys()[0].KID

	fc.Advance(10 * time.Minute)
	if err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	keys := k.Keys()
	if len(keys) != 2 {
		t.Fatalf("after Rotate: %d keys, want 2", len(keys))
	}
	if keys[0].KID != old || !keys[0].RetainUntil.Equal(t0.Add(10*time.Minute+time.Hour)) {
		t.Fatalf("retired key %+v, want %s retained until rotation+maxTTL", keys[0], old)
	}
	if keys[1].KID == old || !keys[1].RetainUntil.IsZero() {
		t.Fatalf("active key %+v", keys[1])
	}
	if k.active().kid != keys[1].KID {
		t.Fatal("active() is not the newest key")
	}
	if n := len(k.JWKS().Keys); n != 2 {
		t.Fatalf("JWKS has %d keys, want 2", n)
	}

	// The retirement survives a reload.
	if got := openRing(t, dir, fc).Keys(); !slices.Equal(got, keys) {
		t.Fatalf("reloaded %+v, want %+v", got, keys)
	}

	// Just before retention ends the old key still verifies.
	fc.Set(keys[0].RetainUntil.Add(-time.Second))
	if _, err := k.PublicKey(t.Context(), old); err != nil {
		t.Fatalf("old key before retention end: %v", err)
	}
	// At retention end it stops verifying, even before it is pruned.
	fc.Set(keys[0].RetainUntil)
	if _, err := k.PublicKey(t.Context(), old); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("old key after retention: %v, want ErrUnknownKey", err)
	}
	if n := len(k.JWKS().Keys); n != 1 {
		t.Fatalf("JWKS has %d keys after retention, want 1", n)
	}
	rotated, err := k.RotateIfDue(24 * time.Hour)
	if err != nil || rotated {
		t.Fatalf("RotateIfDue = %v, %v; want no rotation", rotated, err)
	}
	if _, err := os.Stat(filepath.Join(dir, old+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("retired key file not pruned: %v", err)
	}
	if len(k.Keys()) != 1 {
		t.Fatalf("Keys() = %+v after prune", k.Keys())
	}
	if _, err := k.PublicKey(t.Context(), "nope"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("PublicKey(nope) = %v", err)
	}
}

func TestKeyringRotateIfDue(t *testing.T) {
	fc := clock.NewFake(t0)
	k := openRing(t, t.TempDir(), fc)
	fc.Advance(59 * time.Minute)
	if rotated, err := k.RotateIfDue(time.Hour); err != nil || rotated {
		t.Fatalf("RotateIfDue before period = %v, %v", rotated, err)
	}
	fc.Advance(time.Minute)
	if rotated, err := k.RotateIfDue(time.Hour); err != nil || !rotated {
		t.Fatalf("RotateIfDue at period = %v, %v", rotated, err)
	}
	if n := len(k.Keys()); n != 2 {
		t.Fatalf("%d keys, want 2", n)
	}
}

func TestKeyringResolvesTwoActiveKeys(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(t0)
	k := openRing(t, dir, fc)
	first := k.Keys()[0].KID
	// Simulate a crash in Rotate after the new key was written but before
	// the old one was retired.
	k.mu.Lock()
	fc.Advance(time.Minute)
	if err := k.addKeyLocked(fc.Now()); err != nil {
		t.Fatal(err)
	}
	k.mu.Unlock()
	second := k.Keys()[1].KID

	fc.Advance(time.Minute)
	k2 := openRing(t, dir, fc)
	keys := k2.Keys()
	if len(keys) != 2 || keys[0].KID != first || keys[1].KID != second {
		t.Fatalf("keys %+v", keys)
	}
	if keys[0].RetainUntil.IsZero() || !keys[1].RetainUntil.IsZero() {
		t.Fatalf("want the older key retired and the newer active: %+v", keys)
	}
}

func TestKeyringRun(t *testing.T) {
	fc := clock.NewFake(t0)
	k := openRing(t, t.TempDir(), fc)
	ctx := t.Context()
	done := make(chan struct{})
	go func() {
		k.Run(ctx, 30*time.Minute)
		close(done)
	}()
	t.Cleanup(func() { <-done })

	if err := fc.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d, _ := fc.NextWait(); d != 30*time.Minute {
		t.Fatalf("first wait %s, want 30m", d)
	}
	fc.Advance(30 * time.Minute)
	if err := fc.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(k.Keys()); n != 2 {
		t.Fatalf("%d keys after one period, want 2", n)
	}
	// Next event: the next rotation (30m) comes before the retired key's
	// deletion (1h).
	if d, _ := fc.NextWait(); d != 30*time.Minute {
		t.Fatalf("second wait %s, want 30m", d)
	}
	fc.Advance(30 * time.Minute) // rotation 2 at t0+60m; key 1 retained until t0+90m
	if err := fc.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fc.Advance(30 * time.Minute) // rotation 3 at t0+90m prunes key 1
	if err := fc.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(k.Keys()); n != 3 {
		t.Fatalf("%d keys after three periods, want 3 (one pruned): %+v", n, k.Keys())
	}
}

func mint(t *testing.T, m *Minter, req MintRequest) (Secret, *Claims) {
	t.Helper()
	raw, c, err := m.Mint(req)
	if err != nil {
		t.Fatal(err)
	}
	return raw, c
}

func TestMint(t *testing.T) {
	fc := clock.NewFake(t0.Add(700 * time.Millisecond))
	k := openRing(t, t.TempDir(), fc)
	m := NewMinter("airlock-test", k)
	if m.Issuer() != "airlock-test" {
		t.Fatal(m.Issuer())
	}
	raw, c := mint(t, m, MintRequest{
		Session:  "s-1",
		Audience: "git.corp.test",
		Scopes:   []string{"git.push  repo=app ref=refs/heads/alex/*"},
		TTL:      15 * time.Minute,
	})
	want := Claims{
		Issuer:    "airlock-test",
		Subject:   "s-1",
		Audience:  []string{"git.corp.test"},
		Session:   "s-1",
		Scopes:    []string{"git.push ref=refs/heads/alex/* repo=app"},
		NotBefore: t0,
		IssuedAt:  t0,
		Expiry:    t0.Add(15 * time.Minute),
		ID:        c.ID,
	}
	if !claimsEqual(*c, want) {
		t.Fatalf("claims %+v, want %+v", *c, want)
	}
	if id, err := base64.RawURLEncoding.DecodeString(c.ID); err != nil || len(id) != 16 {
		t.Fatalf("jti %q is not 128 bits of base64url", c.ID)
	}

	jws, err := jose.ParseSignedCompact(raw.Reveal(), []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	h := jws.Signatures[0].Header
	if h.Algorithm != "EdDSA" || h.KeyID != k.Keys()[0].KID || h.ExtraHeaders[jose.HeaderType] != Type {
		t.Fatalf("header %+v", h)
	}
	pub, _ := k.PublicKey(t.Context(), h.KeyID)
	payload, err := jws.Verify(pub)
	if err != nil {
		t.Fatal(err)
	}
	var got Claims
	if err := json.Unmarshal(payload, &got); err != nil {
		t.Fatal(err)
	}
	if !claimsEqual(got, want) {
		t.Fatalf("decoded claims %+v, want %+v", got, want)
	}
	if !got.Allows(scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": "refs/heads/alex/x"}}) {
		t.Fatal("claims deny their own scope")
	}
	if got.Allows(scope.Request{Action: "git.push", Attrs: map[string]string{"repo": "app", "ref": "refs/heads/main"}}) {
		t.Fatal("claims allow push to main")
	}

	_, c2 := mint(t, m, MintRequest{Session: "s-1", Audience: "a", Scopes: []string{"git.fetch"}, TTL: time.Minute})
	if c2.ID == c.ID {
		t.Fatal("two tokens share a jti")
	}

	// After rotation the new key signs.
	if err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	raw3, _ := mint(t, m, MintRequest{Session: "s-1", Audience: "a", Scopes: []string{"git.fetch"}, TTL: time.Minute})
	jws3, _ := jose.ParseSignedCompact(raw3.Reveal(), []jose.SignatureAlgorithm{jose.EdDSA})
	if kid := jws3.Signatures[0].Header.KeyID; kid != k.Keys()[1].KID {
		t.Fatalf("token after rotation signed by %s, want %s", kid, k.Keys()[1].KID)
	}
}

func claimsEqual(a, b Claims) bool {
	return a.Issuer == b.Issuer && a.Subject == b.Subject && slices.Equal(a.Audience, b.Audience) &&
		a.Session == b.Session && slices.Equal(a.Scopes, b.Scopes) && a.NotBefore.Equal(b.NotBefore) &&
		a.IssuedAt.Equal(b.IssuedAt) && a.Expiry.Equal(b.Expiry) && a.ID == b.ID
}

func TestMintRefuses(t *testing.T) {
	k := openRing(t, t.TempDir(), clock.NewFake(t0))
	m := NewMinter("airlock", k)
	ok := MintRequest{Session: "s", Audience: "a", Scopes: []string{"git.fetch"}, TTL: time.Minute}
	tests := []struct {
		name    string
		mod     func(*MintRequest)
		wantErr string
	}{
		{"no session", func(r *MintRequest) { r.Session = "" }, "empty session"},
		{"no audience", func(r *MintRequest) { r.Audience = "" }, "empty audience"},
		{"no scopes", func(r *MintRequest) { r.Scopes = nil }, "no scopes"},
		{"bad scope", func(r *MintRequest) { r.Scopes = []string{"git.fetch", "Git push"} }, "scope 1"},
		{"zero ttl", func(r *MintRequest) { r.TTL = 0 }, "ttl"},
		{"ttl over max", func(r *MintRequest) { r.TTL = time.Hour + time.Second }, "ttl 1h0m1s outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.mod(&req)
			raw, c, err := m.Mint(req)
			if err == nil || !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Mint = %v, want ErrInvalidRequest containing %q", err, tt.wantErr)
			}
			if raw != "" || c != nil {
				t.Fatal("Mint returned a token with an error")
			}
		})
	}
}

func TestClaimsJSON(t *testing.T) {
	tests := []struct {
		in      string
		wantAud []string
		wantExp time.Time
		wantErr string
	}{
		{in: `{"aud":"x","exp":1700000000,"scopes":[]}`, wantAud: []string{"x"}, wantExp: time.Unix(1700000000, 0)},
		{in: `{"aud":["x","y"],"exp":1700000000.9}`, wantAud: []string{"x", "y"}, wantExp: time.Unix(1700000000, 0)},
		{in: `{"exp":null}`},
		{in: `{"aud":5}`, wantErr: "aud must be"},
		{in: `{"exp":"1700000000"}`, wantErr: "invalid NumericDate"},
		{in: `{"exp":-1}`, wantErr: "out of range"},
		{in: `{"exp":1e300}`, wantErr: "out of range"},
		{in: `{"scopes":["bad"]}`, wantErr: "invalid scope"},
		{in: `{"scopes":"git.fetch"}`, wantErr: "cannot unmarshal"},
	}
	for _, tt := range tests {
		var c Claims
		err := json.Unmarshal([]byte(tt.in), &c)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Unmarshal(%s) = %v, want error containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Unmarshal(%s): %v", tt.in, err)
			continue
		}
		if !slices.Equal(c.Audience, tt.wantAud) || !c.Expiry.Equal(tt.wantExp) {
			t.Errorf("Unmarshal(%s) = aud %q exp %v", tt.in, c.Audience, c.Expiry)
		}
	}

	b, err := json.Marshal(Claims{Audience: []string{"only"}, Expiry: time.Unix(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"aud":"only","scopes":[],"exp":100}` {
		t.Errorf("Marshal = %s", got)
	}
	if (*Claims)(nil).Allows(scope.Request{Action: "git.fetch"}) {
		t.Error("nil claims allow")
	}
	manual := &Claims{Scopes: []string{"git.fetch repo=app"}}
	if !manual.Allows(scope.Request{Action: "git.fetch", Attrs: map[string]string{"repo": "app"}}) {
		t.Error("hand-built claims deny their scope")
	}
	if (&Claims{Scopes: []string{"bad"}}).Allows(scope.Request{Action: "git.fetch"}) {
		t.Error("claims with an unparsable scope allow")
	}
}

func TestThumbprintIsStable(t *testing.T) {
	pub := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32)).Public().(ed25519.PublicKey)
	a, _ := thumbprint(pub)
	b, _ := thumbprint(pub)
	if a != b || len(a) != 43 {
		t.Fatalf("thumbprint %q %q", a, b)
	}
}
