package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/credentials/clock"
)

// RevocationChecker tells whether a token whose signature, dates and
// audience have been verified may still be used.
type RevocationChecker interface {
	// CheckRevoked returns nil if the token may be used, an error wrapping
	// ErrRevoked if it may not, or another error if that cannot be told
	// (the token is then refused as ErrUnavailable).
	CheckRevoked(ctx context.Context, raw string, c *Claims) error
}

// NoRevocation is a RevocationChecker that accepts every token. A verifier
// using it honours revocation only through token expiry; pass it explicitly
// when that is the intent.
var NoRevocation RevocationChecker = noRevocation{}

type noRevocation struct{}

func (noRevocation) CheckRevoked(context.Context, string, *Claims) error { return nil }

// RevocationList is an in-memory set of revoked token ids. Each entry is
// kept until the token's expiry, after which the token is refused as
// expired anyway, and Prune drops it.
type RevocationList struct {
	clock clock.Clock

	mu sync.Mutex
	// +checklocks:mu
	revoked map[string]time.Time // jti -> token expiry
}

// NewRevocationList returns an empty list that ages entries with c (nil
// means clock.Real).
func NewRevocationList(c clock.Clock) *RevocationList {
	if c == nil {
		c = clock.Real
	}
	return &RevocationList{clock: c, revoked: map[string]time.Time{}}
}

// Revoke adds jti, to be kept until expiry.
func (l *RevocationList) Revoke(jti string, expiry time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.revoked[jti]; !ok || expiry.After(cur) {
		l.revoked[jti] = expiry
	}
}

// IsRevoked reports whether jti has been revoked.
func (l *RevocationList) IsRevoked(jti string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.revoked[jti]
	return ok
}

// Prune drops the entries whose tokens have expired, keeping them for
// margin past expiry (to cover verifiers' leeway), and returns how many it
// dropped.
func (l *RevocationList) Prune(margin time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	cutoff := l.clock.Now().Add(-margin)
	n := 0
	for jti, exp := range l.revoked {
		if !exp.After(cutoff) {
			delete(l.revoked, jti)
			n++
		}
	}
	return n
}

// Len returns the number of entries.
func (l *RevocationList) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.revoked)
}

// CheckRevoked implements RevocationChecker.
func (l *RevocationList) CheckRevoked(_ context.Context, _ string, c *Claims) error {
	if l.IsRevoked(c.ID) {
		return ErrRevoked
	}
	return nil
}

// Introspection is the response of the issuer's introspection endpoint,
// after RFC 7662. Inactive responses carry only Active, Reason (see Reason)
// and, when the token's signature was valid, ID and Subject. Scopes is a
// JSON array: scopes contain spaces, so RFC 7662's space-separated "scope"
// cannot carry them.
type Introspection struct {
	Active    bool     `json:"active"`
	Reason    string   `json:"reason,omitempty"`
	ID        string   `json:"jti,omitempty"`
	Subject   string   `json:"sub,omitempty"`
	Session   string   `json:"sid,omitempty"`
	Issuer    string   `json:"iss,omitempty"`
	Audience  []string `json:"aud,omitempty"`
	Scopes    []string `json:"scopes,omitempty"`
	Expiry    int64    `json:"exp,omitempty"`
	IssuedAt  int64    `json:"iat,omitempty"`
	NotBefore int64    `json:"nbf,omitempty"`
	TokenType string   `json:"token_type,omitempty"`
}

// Introspector asks the issuer's introspection endpoint whether a token is
// still active. As a RevocationChecker it sees a session's stop as soon as
// the daemon has processed it.
type Introspector struct {
	url    string
	client *http.Client
}

// NewIntrospector returns an Introspector that POSTs to url (the daemon's
// /v1/introspect).
func NewIntrospector(url string, opts ...RemoteOption) *Introspector {
	rc := newRemoteConfig(opts)
	return &Introspector{url: url, client: rc.client}
}

const maxIntrospectionSize = 64 << 10

// Introspect sends raw as form field "token" and returns the answer.
func (in *Introspector) Introspect(ctx context.Context, raw string) (*Introspection, error) {
	form := url.Values{"token": {raw}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := in.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("introspect: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("introspect %s: status %s", in.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxIntrospectionSize))
	if err != nil {
		return nil, fmt.Errorf("introspect %s: %w", in.url, err)
	}
	var out Introspection
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("introspect %s: bad response: %w", in.url, err)
	}
	return &out, nil
}

// CheckRevoked implements RevocationChecker. A token the issuer reports
// inactive is refused with the issuer's reason; an unknown reason counts
// as revoked.
func (in *Introspector) CheckRevoked(ctx context.Context, raw string, c *Claims) error {
	res, err := in.Introspect(ctx, raw)
	if err != nil {
		return err
	}
	if res.Active {
		if res.ID != c.ID {
			return fmt.Errorf("introspect %s: answer is about jti %q, not %q", in.url, res.ID, c.ID)
		}
		return nil
	}
	kind := ErrorForReason(res.Reason)
	if kind == nil || kind == ErrScopeDenied || kind == ErrUnavailable {
		kind = ErrRevoked
	}
	return &Error{Kind: kind, Detail: "issuer reports token inactive (" + res.Reason + ")"}
}
