// Package verify checks airlock tokens for the services that receive them.
//
// A service builds one Verifier at start and calls Authorize for each
// request, with its own name as the audience and the request's action and
// attributes (package scope documents the actions and their attributes):
//
//	v := verify.ForIssuer("http://10.214.0.1:8181")
//	raw, err := verify.TokenFromRequest(r)
//	...
//	claims, err := v.Authorize(verify.RequestContext(r), raw, "git.corp.test", scope.Request{
//		Action: "git.push",
//		Attrs:  map[string]string{"repo": "app", "ref": "refs/heads/alex/fix"},
//	})
//	switch {
//	case errors.Is(err, verify.ErrScopeDenied):   // 403
//	case err != nil:                              // 401
//	}
//
// RequestContext makes a rejection report carry the request's connection,
// so that the issuer can put a token it cannot identify (forged,
// malformed) into the audit of the session that sent it.
//
// A token is accepted only if all of these hold, checked in this order;
// the first failure decides the error:
//
//  1. it is a compact JWS no larger than MaxTokenSize, with "typ" "at+jwt"
//     and a "kid" (ErrMalformed);
//  2. its "alg" is EdDSA and its signature verifies with the key named by
//     "kid" (ErrBadSignature; "none", HMAC and every other algorithm are
//     refused before any key is looked at);
//  3. its claims decode and include "sub", "aud", "exp" and "jti", and every
//     scope parses (ErrMalformed);
//  4. "iss" is the configured issuer, if one is configured (ErrWrongIssuer);
//  5. now+leeway is not before "nbf" or "iat" (ErrNotYetValid), and
//     now-leeway is before "exp" (ErrExpired);
//  6. "aud" contains the audience (ErrWrongAudience);
//  7. the revocation checker accepts it (ErrRevoked, or ErrUnavailable
//     when the issuer cannot be asked: verification fails closed).
//
// Authorize then requires a scope that allows the request (ErrScopeDenied).
// The leeway (DefaultLeeway, 2s; set with WithLeeway) absorbs clock skew
// between the issuer and the service; keep it to a few seconds.
package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Claims are a verified token's claims.
type Claims = token.Claims

// DefaultLeeway is the clock skew tolerated on "nbf", "iat" and "exp".
const DefaultLeeway = 2 * time.Second

// MaxTokenSize is the largest token accepted, in bytes.
const MaxTokenSize = 16 << 10

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct {
	keys        KeySource
	revocations RevocationChecker
	issuer      string
	leeway      time.Duration
	clock       clock.Clock
	reporter    Reporter
}

// Option configures a Verifier.
type Option func(*Verifier)

// WithIssuer requires "iss" to equal iss.
func WithIssuer(iss string) Option { return func(v *Verifier) { v.issuer = iss } }

// WithLeeway sets the tolerated clock skew; negative means zero.
func WithLeeway(d time.Duration) Option { return func(v *Verifier) { v.leeway = max(d, 0) } }

// WithClock sets the clock (default clock.Real).
func WithClock(c clock.Clock) Option { return func(v *Verifier) { v.clock = c } }

// WithReporter sends every rejection, except ErrUnavailable, to r.
func WithReporter(r Reporter) Option { return func(v *Verifier) { v.reporter = r } }

// New returns a Verifier that takes keys from keys and asks revocations
// about every otherwise valid token. Both are required; pass NoRevocation to
// rely on expiry alone.
func New(keys KeySource, revocations RevocationChecker, opts ...Option) (*Verifier, error) {
	if keys == nil {
		return nil, errors.New("verifier: nil key source")
	}
	if revocations == nil {
		return nil, errors.New("verifier: nil revocation checker (use NoRevocation to rely on expiry alone)")
	}
	v := &Verifier{keys: keys, revocations: revocations, leeway: DefaultLeeway, clock: clock.Real}
	for _, o := range opts {
		o(v)
	}
	return v, nil
}

// ForIssuer returns a Verifier for tokens of the airlock daemon whose
// credential endpoints are at baseURL: keys from baseURL/.well-known/jwks.json,
// revocation through baseURL/v1/introspect, rejections reported to
// baseURL/v1/report.
func ForIssuer(baseURL string, opts ...Option) *Verifier {
	base := strings.TrimSuffix(baseURL, "/")
	v, _ := New(NewRemoteKeys(base+"/.well-known/jwks.json"), NewIntrospector(base+"/v1/introspect"),
		append([]Option{WithReporter(NewHTTPReporter(base + "/v1/report"))}, opts...)...)
	return v
}

// Verify checks raw for audience (see the package documentation) and
// returns its claims, or nil and an error wrapping exactly one of the Err*
// values.
func (v *Verifier) Verify(ctx context.Context, raw, audience string) (*Claims, error) {
	if audience == "" {
		return nil, reject(ErrWrongAudience, "verifier called with an empty audience", nil)
	}
	c, err := v.verify(ctx, raw, audience)
	if err != nil {
		v.report(ctx, err, audience, "")
		return nil, err
	}
	return c, nil
}

// VerifyIgnoringAudience is Verify without the audience check. It is meant
// for the issuer's introspection endpoint, which answers for every
// audience; a service must use Verify or Authorize.
func (v *Verifier) VerifyIgnoringAudience(ctx context.Context, raw string) (*Claims, error) {
	c, err := v.verify(ctx, raw, "")
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Authorize verifies raw like Verify and then requires one of its scopes to
// allow req; otherwise it returns an error wrapping ErrScopeDenied.
func (v *Verifier) Authorize(ctx context.Context, raw, audience string, req scope.Request) (*Claims, error) {
	if audience == "" {
		return nil, reject(ErrWrongAudience, "verifier called with an empty audience", nil)
	}
	c, err := v.verify(ctx, raw, audience)
	if err == nil && !c.Allows(req) {
		err = Denied(c, req)
	}
	if err != nil {
		v.report(ctx, err, audience, req.Action)
		return nil, err
	}
	return c, nil
}

// Denied returns the error Authorize returns when c does not allow req: it
// wraps ErrScopeDenied and carries c's ID and subject. It is for a service
// that holds claims it trusts without a token (given in-process, not sent
// by a client); it checks nothing and reports nothing to the issuer.
func Denied(c *Claims, req scope.Request) *Error {
	e := reject(ErrScopeDenied, fmt.Sprintf("no scope allows %s", describe(req)), nil)
	if c != nil {
		e.ID, e.Subject = c.ID, c.Subject
	}
	return e
}

// describe renders req for an error message, attributes sorted.
func describe(req scope.Request) string {
	var b strings.Builder
	b.WriteString(req.Action)
	for _, k := range sortedKeys(req.Attrs) {
		fmt.Fprintf(&b, " %s=%q", k, req.Attrs[k])
	}
	return b.String()
}

func (v *Verifier) report(ctx context.Context, err error, audience, action string) {
	if v.reporter == nil || errors.Is(err, ErrUnavailable) {
		return
	}
	rej := Rejection{Audience: audience, Action: action, Reason: Reason(err)}
	if c, ok := ctx.Value(connKey{}).(conn); ok {
		rej.Client, rej.Server = c.client, c.server
	}
	var e *Error
	if errors.As(err, &e) {
		rej.ID, rej.Subject, rej.Detail = e.ID, e.Subject, e.Detail
	}
	if rerr := v.reporter.Report(ctx, rej); rerr != nil {
		log.G(ctx).Warn("could not report token rejection", "reason", rej.Reason, "jti", rej.ID, "error", rerr)
	}
}

func (v *Verifier) verify(ctx context.Context, raw, audience string) (*Claims, error) {
	if raw == "" {
		return nil, reject(ErrMalformed, "empty token", nil)
	}
	if len(raw) > MaxTokenSize {
		return nil, reject(ErrMalformed, fmt.Sprintf("token larger than %d bytes", MaxTokenSize), nil)
	}
	if strings.Count(raw, ".") != 2 {
		return nil, reject(ErrMalformed, "not a compact JWS (three dot-separated parts)", nil)
	}
	jws, err := jose.ParseSignedCompact(raw, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return nil, reject(ErrBadSignature, fmt.Sprintf("algorithm %q is not accepted (only EdDSA)", alg.Got), nil)
		}
		return nil, reject(ErrMalformed, "", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, reject(ErrMalformed, "want exactly one signature", nil)
	}
	h := jws.Signatures[0].Header
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != token.Type {
		return nil, reject(ErrMalformed, fmt.Sprintf("typ %q, want %q", typ, token.Type), nil)
	}
	if h.KeyID == "" {
		return nil, reject(ErrMalformed, "no key id (kid) in header", nil)
	}
	pub, err := v.keys.PublicKey(ctx, h.KeyID)
	if err != nil {
		if errors.Is(err, token.ErrUnknownKey) {
			return nil, reject(ErrBadSignature, fmt.Sprintf("unknown key id %q", h.KeyID), nil)
		}
		return nil, reject(ErrUnavailable, "keys", err)
	}
	payload, err := jws.Verify(pub)
	if err != nil {
		return nil, reject(ErrBadSignature, "signature does not verify", nil)
	}

	var c Claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, reject(ErrMalformed, "claims", err)
	}
	withID := func(e *Error) *Error {
		e.ID, e.Subject = c.ID, c.Subject
		return e
	}
	switch {
	case c.ID == "":
		return nil, reject(ErrMalformed, "no jti", nil)
	case c.Subject == "":
		return nil, withID(reject(ErrMalformed, "no sub", nil))
	case len(c.Audience) == 0:
		return nil, withID(reject(ErrMalformed, "no aud", nil))
	case c.Expiry.IsZero():
		return nil, withID(reject(ErrMalformed, "no exp", nil))
	}
	if v.issuer != "" && c.Issuer != v.issuer {
		return nil, withID(reject(ErrWrongIssuer, fmt.Sprintf("iss %q, want %q", c.Issuer, v.issuer), nil))
	}
	now := v.clock.Now()
	if !c.NotBefore.IsZero() && now.Add(v.leeway).Before(c.NotBefore) {
		return nil, withID(reject(ErrNotYetValid, "valid from "+c.NotBefore.UTC().Format(time.RFC3339), nil))
	}
	if !c.IssuedAt.IsZero() && now.Add(v.leeway).Before(c.IssuedAt) {
		return nil, withID(reject(ErrNotYetValid, "issued in the future, at "+c.IssuedAt.UTC().Format(time.RFC3339), nil))
	}
	if !now.Add(-v.leeway).Before(c.Expiry) {
		return nil, withID(reject(ErrExpired, "expired at "+c.Expiry.UTC().Format(time.RFC3339), nil))
	}
	if audience != "" && !c.HasAudience(audience) {
		return nil, withID(reject(ErrWrongAudience, fmt.Sprintf("token is for %q, not %q", c.Audience, audience), nil))
	}
	if err := v.revocations.CheckRevoked(ctx, raw, &c); err != nil {
		var e *Error
		switch {
		case errors.As(err, &e) && e.Kind != nil:
			return nil, withID(reject(e.Kind, e.Detail, nil))
		case errors.Is(err, ErrRevoked):
			return nil, withID(reject(ErrRevoked, "", nil))
		default:
			return nil, withID(reject(ErrUnavailable, "revocation status", err))
		}
	}
	return &c, nil
}
