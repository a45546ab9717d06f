// Package allowlist parses egress allow and deny entries and matches DNS
// names and addresses against them.
//
// Names are handled as [FQDN] values: lower case, with a trailing dot, and
// checked to be hostnames. A wildcard rule "*.example.test" matches names
// below example.test on label boundaries only: "a.example.test" and
// "b.a.example.test", never "example.test" itself, "evilexample.test" or
// "example.test.evil.test". Deny entries win over allow entries; a name no
// entry allows is denied.
package allowlist

import (
	"errors"
	"fmt"
	"strings"
)

// Limits from RFC 1035 section 2.3.4, counted in presentation form without
// the trailing dot.
const (
	maxLabelLen = 63
	maxNameLen  = 253
)

// FQDN is a fully qualified, lower-case DNS hostname with a trailing dot,
// such as "api.example.test.". The root is ".". Values are produced by
// [ToFQDN]; converting an arbitrary string skips the validation.
type FQDN string

// Error values returned (wrapped) by ToFQDN.
var (
	ErrEmptyName    = errors.New("empty name")
	ErrEmptyLabel   = errors.New("empty label")
	ErrLabelTooLong = errors.New("label longer than 63 characters")
	ErrNameTooLong  = errors.New("name longer than 253 characters")
	ErrInvalidChar  = errors.New("invalid character")
	ErrHyphenEdge   = errors.New("label starts or ends with a hyphen")
)

// ToFQDN validates s as a hostname and returns it in canonical form.
//
// It accepts letters, digits, '-' (not at either end of a label) and '_'
// (for service labels such as "_acme-challenge"), an optional trailing dot,
// and the root ".". It rejects empty labels, labels longer than 63
// characters, names longer than 253 characters, control characters, '*',
// '\\' (escaped presentation-format bytes) and any other character.
// A name that is already canonical is returned without allocating.
func ToFQDN(s string) (FQDN, error) {
	if s == "" {
		return "", ErrEmptyName
	}
	if s == "." {
		return ".", nil
	}
	body := s
	hasDot := s[len(s)-1] == '.'
	if hasDot {
		body = s[:len(s)-1]
	}
	if len(body) > maxNameLen {
		return "", fmt.Errorf("%w (%d)", ErrNameTooLong, len(body))
	}
	upper := false
	labelStart := 0
	for i := 0; i <= len(body); i++ {
		if i == len(body) || body[i] == '.' {
			n := i - labelStart
			switch {
			case n == 0:
				return "", ErrEmptyLabel
			case n > maxLabelLen:
				return "", fmt.Errorf("%w (%d)", ErrLabelTooLong, n)
			case body[labelStart] == '-' || body[i-1] == '-':
				return "", fmt.Errorf("%w: %q", ErrHyphenEdge, body[labelStart:i])
			}
			labelStart = i + 1
			continue
		}
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c < 0x20 || c == 0x7f:
			return "", fmt.Errorf("%w: control character 0x%02x", ErrInvalidChar, c)
		default:
			return "", fmt.Errorf("%w %q", ErrInvalidChar, rune(c))
		}
	}
	if !upper && hasDot {
		return FQDN(s), nil
	}
	var b strings.Builder
	b.Grow(len(body) + 1)
	for i := 0; i < len(body); i++ {
		c := body[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	b.WriteByte('.')
	return FQDN(b.String()), nil
}

// String returns the name with its trailing dot.
func (f FQDN) String() string { return string(f) }

// WithoutTrailingDot returns the name without its trailing dot ("" for the
// root).
func (f FQDN) WithoutTrailingDot() string { return strings.TrimSuffix(string(f), ".") }

// IsRoot reports whether f is the root name ".".
func (f FQDN) IsRoot() bool { return f == "." }

// NumLabels returns the number of labels in f, 0 for the root.
func (f FQDN) NumLabels() int {
	if f == "." || f == "" {
		return 0
	}
	return strings.Count(string(f), ".")
}

// Parent returns f without its first label, and false for the root and for
// single-label names' parent (the root is never returned).
func (f FQDN) Parent() (FQDN, bool) {
	i := strings.IndexByte(string(f), '.')
	if i < 0 || i+1 >= len(f) {
		return "", false
	}
	return f[i+1:], true
}

// IsStrictSubdomainOf reports whether f lies below parent on a label
// boundary: "a.b.test." is below "b.test.", "ab.test." is not, and no name is
// below itself.
func (f FQDN) IsStrictSubdomainOf(parent FQDN) bool {
	if parent == "." {
		return f != "." && f != ""
	}
	return len(f) > len(parent) &&
		f[len(f)-len(parent)-1] == '.' &&
		f[len(f)-len(parent):] == parent
}
