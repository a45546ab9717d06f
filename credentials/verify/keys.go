package verify

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/token"
)

// KeySource finds the public key that verifies a token. *token.Keyring is a
// KeySource, for verification inside the issuing daemon.
type KeySource interface {
	// PublicKey returns the key with the given id, or an error wrapping
	// token.ErrUnknownKey when there is no such key. Other errors mean the
	// keys could not be obtained.
	PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error)
}

// KeySet is a fixed set of public keys.
type KeySet struct {
	keys map[string]ed25519.PublicKey
}

// NewKeySet returns the Ed25519 signing keys of set. Keys of other types,
// keys meant for encryption and keys without an id are left out.
func NewKeySet(set jose.JSONWebKeySet) *KeySet {
	ks := &KeySet{keys: map[string]ed25519.PublicKey{}}
	for _, k := range set.Keys {
		pub, ok := k.Key.(ed25519.PublicKey)
		if !ok || k.KeyID == "" || (k.Use != "" && k.Use != "sig") {
			continue
		}
		if k.Algorithm != "" && k.Algorithm != string(jose.EdDSA) {
			continue
		}
		ks.keys[k.KeyID] = pub
	}
	return ks
}

// ParseJWKS parses a JSON Web Key Set document, e.g. the body of the
// daemon's /.well-known/jwks.json.
func ParseJWKS(data []byte) (*KeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("parse JWKS: %w", err)
	}
	return NewKeySet(set), nil
}

// Len returns the number of keys.
func (s *KeySet) Len() int { return len(s.keys) }

// PublicKey implements KeySource.
func (s *KeySet) PublicKey(_ context.Context, kid string) (ed25519.PublicKey, error) {
	if k, ok := s.keys[kid]; ok {
		return k, nil
	}
	return nil, fmt.Errorf("key id %q: %w", kid, token.ErrUnknownKey)
}

// Defaults of RemoteKeys.
const (
	DefaultJWKSMaxAge     = 5 * time.Minute
	DefaultJWKSMinRefresh = time.Second
	maxJWKSSize           = 1 << 20
)

// RemoteKeys fetches a JWKS over HTTP and caches it. It fetches again when
// the cache is older than the maximum age, or when a token names a key id it
// does not hold (a key rotation), but not more often than once per minimum
// refresh interval, so that tokens with made-up key ids cannot flood the
// issuer. When a fetch fails, the previous set is used.
type RemoteKeys struct {
	url        string
	client     *http.Client
	clock      clock.Clock
	maxAge     time.Duration
	minRefresh time.Duration

	mu sync.Mutex // held during fetches, so that they never overlap
	// +checklocks:mu
	set *KeySet
	// +checklocks:mu
	fetched time.Time
	// +checklocks:mu
	attempted time.Time
	// +checklocks:mu
	lastErr error
}

// RemoteOption configures NewRemoteKeys, NewIntrospector and NewHTTPReporter.
type RemoteOption func(*remoteConfig)

type remoteConfig struct {
	client     *http.Client
	clock      clock.Clock
	maxAge     time.Duration
	minRefresh time.Duration
}

// WithHTTPClient sets the HTTP client (default: one with a 5s timeout).
func WithHTTPClient(c *http.Client) RemoteOption { return func(r *remoteConfig) { r.client = c } }

// WithRemoteClock sets the clock that ages the cache (default clock.Real).
func WithRemoteClock(c clock.Clock) RemoteOption { return func(r *remoteConfig) { r.clock = c } }

// WithCache sets how long a fetched JWKS is used and how often an unknown
// key id may trigger a fetch.
func WithCache(maxAge, minRefresh time.Duration) RemoteOption {
	return func(r *remoteConfig) { r.maxAge, r.minRefresh = maxAge, minRefresh }
}

func newRemoteConfig(opts []RemoteOption) remoteConfig {
	rc := remoteConfig{
		client:     &http.Client{Timeout: 5 * time.Second},
		clock:      clock.Real,
		maxAge:     DefaultJWKSMaxAge,
		minRefresh: DefaultJWKSMinRefresh,
	}
	for _, o := range opts {
		o(&rc)
	}
	return rc
}

// NewRemoteKeys returns a KeySource that reads the JWKS at url.
func NewRemoteKeys(url string, opts ...RemoteOption) *RemoteKeys {
	rc := newRemoteConfig(opts)
	return &RemoteKeys{url: url, client: rc.client, clock: rc.clock, maxAge: rc.maxAge, minRefresh: rc.minRefresh}
}

// PublicKey implements KeySource.
func (r *RemoteKeys) PublicKey(ctx context.Context, kid string) (ed25519.PublicKey, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clock.Now()
	if r.set != nil && now.Sub(r.fetched) < r.maxAge {
		if k, err := r.set.PublicKey(ctx, kid); err == nil {
			return k, nil
		}
	}
	if r.attempted.IsZero() || now.Sub(r.attempted) >= r.minRefresh {
		r.attempted = now
		set, err := r.fetch(ctx)
		r.lastErr = err
		if err == nil {
			r.set, r.fetched = set, now
		}
	}
	if r.set == nil {
		return nil, fmt.Errorf("fetch JWKS %s: %w", r.url, r.lastErr)
	}
	return r.set.PublicKey(ctx, kid)
}

func (r *RemoteKeys) fetch(ctx context.Context) (*KeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSSize+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxJWKSSize {
		return nil, errors.New("JWKS larger than 1 MiB")
	}
	return ParseJWKS(body)
}
