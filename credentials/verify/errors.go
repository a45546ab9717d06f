package verify

import (
	"errors"
	"fmt"
	"strings"
)

// Why a token was rejected. Every error of Verify and Authorize wraps exactly
// one of these; test with errors.Is.
var (
	// ErrMalformed: not a compact JWS, bad JSON, a missing required claim,
	// or a scope that does not parse.
	ErrMalformed = errors.New("malformed token")
	// ErrBadSignature: forged or altered, signed with an unknown key, or
	// with an algorithm other than EdDSA (including "none" and HMAC).
	ErrBadSignature = errors.New("bad signature")
	// ErrExpired: at or past "exp" (beyond the leeway).
	ErrExpired = errors.New("token expired")
	// ErrNotYetValid: before "nbf", or "iat" in the future (beyond the leeway).
	ErrNotYetValid = errors.New("token not yet valid")
	// ErrWrongAudience: "aud" does not name this service.
	ErrWrongAudience = errors.New("wrong audience")
	// ErrWrongIssuer: "iss" is not the configured issuer.
	ErrWrongIssuer = errors.New("wrong issuer")
	// ErrRevoked: the issuer revoked the token (its session ended), or
	// does not know it.
	ErrRevoked = errors.New("token revoked")
	// ErrScopeDenied: the token is valid but none of its scopes allows the
	// request (Authorize only).
	ErrScopeDenied = errors.New("scope denied")
	// ErrUnavailable: the keys or the revocation status could not be
	// fetched; the token is refused, but it may be fine.
	ErrUnavailable = errors.New("verification unavailable")
)

var reasons = []struct {
	err    error
	reason string
}{
	{ErrMalformed, "malformed"},
	{ErrBadSignature, "bad_signature"},
	{ErrExpired, "expired"},
	{ErrNotYetValid, "not_yet_valid"},
	{ErrWrongAudience, "wrong_audience"},
	{ErrWrongIssuer, "wrong_issuer"},
	{ErrRevoked, "revoked"},
	{ErrScopeDenied, "scope_denied"},
	{ErrUnavailable, "unavailable"},
}

// Reason returns a short machine-readable reason for err: "malformed",
// "bad_signature", "expired", "not_yet_valid", "wrong_audience",
// "wrong_issuer", "revoked", "scope_denied" or "unavailable"; "" for nil and
// "error" for anything else. Introspection responses and rejection reports
// carry these strings.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "error"
}

// ErrorForReason returns the error that Reason maps to reason, or nil if
// reason is not one of them.
func ErrorForReason(reason string) error {
	for _, r := range reasons {
		if r.reason == reason {
			return r.err
		}
	}
	return nil
}

// Error is a rejection. Kind is one of the Err* values above; Detail says
// what exactly was wrong. ID and Subject are set only once the signature
// has been verified, so they are never attacker-chosen.
type Error struct {
	Kind    error
	Detail  string
	ID      string // "jti"
	Subject string // "sub": the session
	cause   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	if e.ID != "" {
		fmt.Fprintf(&b, " (jti %s)", e.ID)
	}
	return b.String()
}

// Unwrap returns Kind and the underlying cause, if any.
func (e *Error) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Kind, e.cause}
	}
	return []error{e.Kind}
}

func reject(kind error, detail string, cause error) *Error {
	return &Error{Kind: kind, Detail: detail, cause: cause}
}
