package token

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// Type is the "typ" header of airlock access tokens (RFC 9068).
const Type = "at+jwt"

// Claims are the claims of an airlock access token. On the wire they are
// the registered JWT claims iss, sub, aud, nbf, iat, exp and jti, plus
// "sid" (the session id, equal to sub) and "scopes" (a JSON array of scopes
// in canonical form; see package scope).
type Claims struct {
	Issuer    string
	Subject   string
	Audience  []string
	Session   string
	Scopes    []string
	NotBefore time.Time
	IssuedAt  time.Time
	Expiry    time.Time
	ID        string

	set scope.Set // parsed Scopes, filled by UnmarshalJSON
}

// Allows reports whether any of the token's scopes allows req.
func (c *Claims) Allows(req scope.Request) bool {
	if c == nil {
		return false
	}
	if c.set != nil {
		return c.set.Allows(req)
	}
	set, err := scope.ParseSet(c.Scopes)
	if err != nil {
		return false
	}
	return set.Allows(req)
}

// HasAudience reports whether aud is one of the token's audiences.
func (c *Claims) HasAudience(aud string) bool {
	for _, a := range c.Audience {
		if a == aud {
			return true
		}
	}
	return false
}

type wireClaims struct {
	Issuer    string      `json:"iss,omitempty"`
	Subject   string      `json:"sub,omitempty"`
	Audience  audience    `json:"aud,omitempty"`
	Session   string      `json:"sid,omitempty"`
	Scopes    []string    `json:"scopes"`
	NotBefore numericDate `json:"nbf,omitzero"`
	IssuedAt  numericDate `json:"iat,omitzero"`
	Expiry    numericDate `json:"exp,omitzero"`
	ID        string      `json:"jti,omitempty"`
}

// MarshalJSON encodes c as a JWT claims set.
func (c Claims) MarshalJSON() ([]byte, error) {
	scopes := c.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return json.Marshal(wireClaims{
		Issuer:    c.Issuer,
		Subject:   c.Subject,
		Audience:  c.Audience,
		Session:   c.Session,
		Scopes:    scopes,
		NotBefore: fromTime(c.NotBefore),
		IssuedAt:  fromTime(c.IssuedAt),
		Expiry:    fromTime(c.Expiry),
		ID:        c.ID,
	})
}

// UnmarshalJSON decodes a JWT claims set. It fails on a scope that does not
// parse, so a decoded Claims never silently drops part of a grant.
func (c *Claims) UnmarshalJSON(b []byte) error {
	var w wireClaims
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	set, err := scope.ParseSet(w.Scopes)
	if err != nil {
		return err
	}
	*c = Claims{
		Issuer:    w.Issuer,
		Subject:   w.Subject,
		Audience:  w.Audience,
		Session:   w.Session,
		Scopes:    set.Strings(),
		NotBefore: w.NotBefore.time(),
		IssuedAt:  w.IssuedAt.time(),
		Expiry:    w.Expiry.time(),
		ID:        w.ID,
		set:       set,
	}
	return nil
}

// audience is "aud": a string or an array of strings (RFC 7519 §4.1.3).
type audience []string

func (a audience) MarshalJSON() ([]byte, error) {
	if len(a) == 1 {
		return json.Marshal(a[0])
	}
	return json.Marshal([]string(a))
}

func (a *audience) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*a = audience{s}
		return nil
	}
	var l []string
	if err := json.Unmarshal(b, &l); err != nil {
		return errors.New("aud must be a string or an array of strings")
	}
	*a = l
	return nil
}

// numericDate is seconds since the epoch; zero means absent.
type numericDate int64

// maxDate bounds accepted dates (about year 36812) so that conversions
// never overflow.
const maxDate = 1 << 40

func fromTime(t time.Time) numericDate {
	if t.IsZero() {
		return 0
	}
	return numericDate(t.Unix())
}

func (n numericDate) time() time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(int64(n), 0).UTC()
}

func (n *numericDate) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*n = 0
		return nil
	}
	f, err := json.Number(b).Float64()
	if err != nil {
		return fmt.Errorf("invalid NumericDate %s", b)
	}
	if math.IsNaN(f) || f < 1 || f >= maxDate {
		return fmt.Errorf("NumericDate %s out of range", b)
	}
	*n = numericDate(math.Floor(f))
	return nil
}
