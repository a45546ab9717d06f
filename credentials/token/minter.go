// Package token mints airlock's own credentials: JWTs signed with Ed25519
// (EdDSA) keys from a rotating Keyring. Verification lives in package
// verify; the scope grammar in package scope.
//
// A token's header carries "alg": "EdDSA", "typ": "at+jwt" and the signing
// key's "kid". Its claims are described by Claims.
package token

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// ErrInvalidRequest is wrapped by Mint's errors for a request it refuses.
var ErrInvalidRequest = errors.New("invalid token request")

// Minter mints signed tokens with the active key of a Keyring.
type Minter struct {
	issuer string
	ring   *Keyring
	clock  clock.Clock
}

// MinterOption configures NewMinter.
type MinterOption func(*Minter)

// WithMinterClock sets the minter's clock (default: the keyring's clock).
func WithMinterClock(c clock.Clock) MinterOption { return func(m *Minter) { m.clock = c } }

// NewMinter returns a Minter that writes issuer into "iss".
func NewMinter(issuer string, ring *Keyring, opts ...MinterOption) *Minter {
	m := &Minter{issuer: issuer, ring: ring, clock: ring.clock}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Issuer returns the "iss" value of the tokens m mints.
func (m *Minter) Issuer() string { return m.issuer }

// MintRequest describes one token.
type MintRequest struct {
	// Session becomes "sub" and "sid".
	Session string
	// Audience is the service the token is for.
	Audience string
	// Scopes must parse (package scope) and there must be at least one.
	Scopes []string
	// TTL is the token's lifetime, at most the keyring's MaxTTL.
	TTL time.Duration
}

// Mint signs a new token valid from now (rounded down to the second) for
// req.TTL, with a random 128-bit "jti".
func (m *Minter) Mint(req MintRequest) (Secret, *Claims, error) {
	if req.Session == "" {
		return "", nil, fmt.Errorf("%w: empty session", ErrInvalidRequest)
	}
	if req.Audience == "" {
		return "", nil, fmt.Errorf("%w: empty audience", ErrInvalidRequest)
	}
	if len(req.Scopes) == 0 {
		return "", nil, fmt.Errorf("%w: no scopes (a token without scopes allows nothing)", ErrInvalidRequest)
	}
	set, err := scope.ParseSet(req.Scopes)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if req.TTL < time.Second || req.TTL > m.ring.MaxTTL() {
		return "", nil, fmt.Errorf("%w: ttl %s outside [1s, %s]", ErrInvalidRequest, req.TTL, m.ring.MaxTTL())
	}
	jti, err := newID()
	if err != nil {
		return "", nil, err
	}
	now := m.clock.Now().UTC().Truncate(time.Second)
	c := &Claims{
		Issuer:    m.issuer,
		Subject:   req.Session,
		Audience:  []string{req.Audience},
		Session:   req.Session,
		Scopes:    set.Strings(),
		NotBefore: now,
		IssuedAt:  now,
		Expiry:    now.Add(req.TTL).Truncate(time.Second),
		ID:        jti,
		set:       set,
	}
	raw, err := m.sign(c)
	if err != nil {
		return "", nil, err
	}
	return raw, c, nil
}

func (m *Minter) sign(c *Claims) (Secret, error) {
	key := m.ring.active()
	signer, err := jose.NewSigner(jose.SigningKey{
		Algorithm: jose.EdDSA,
		Key:       jose.JSONWebKey{Key: key.priv, KeyID: key.kid, Algorithm: string(jose.EdDSA)},
	}, (&jose.SignerOptions{}).WithType(Type))
	if err != nil {
		return "", fmt.Errorf("token signer: %w", err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode claims: %w", err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		return "", fmt.Errorf("serialize token: %w", err)
	}
	return Secret(raw), nil
}

// newID returns a random 128-bit identifier, base64url encoded.
func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token id: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}
