// Package scope implements the scope grammar of airlock credentials: what a
// token allows, written so that a service can check it without knowing
// anything about airlock beyond this package.
//
// # Grammar
//
// A scope is an action followed by zero or more attribute selectors,
// separated by spaces (one or more ASCII spaces or tabs; leading and
// trailing blanks are ignored):
//
//	scope    = action *( blank selector )
//	action   = name "." ( name / "*" )
//	name     = 1*( "a"-"z" / "0"-"9" / "_" / "-" )
//	selector = key "=" pattern
//	key      = ( "a"-"z" ) *( "a"-"z" / "0"-"9" / "_" / "-" )
//	pattern  = 1*( pchar / "\*" / "\\" )
//	pchar    = any printable, non-blank character except "\"
//
// The action names a service and a verb: "git.push", "jobs.cancel",
// "objects.delete". An action of the form "service.*" allows every verb of
// that service. Keys are lowercase; a key may appear at most once in a scope.
// A pattern is compared with the value of its attribute in the request:
//
//   - "*" matches any run of characters, including none, that contains no "/";
//   - "**" matches any run of characters, including "/";
//   - "\*" matches a literal "*" and "\\" a literal "\";
//   - every other character matches itself; matching is case-sensitive.
//
// Three or more consecutive "*" are an error, and so is any other use of
// "\". The pattern must match the whole value: "alex/*" matches "alex/fix"
// but not "alex/fix/1" (use "alex/**") and not "alex" (the "/" is literal).
// "a/**/b" matches "a/x/b" and "a/x/y/b" but not "a/b".
//
// # Matching
//
// A scope allows a request when the actions are equal (or the scope's action
// is "service.*" and the request's action belongs to that service) and, for
// every selector of the scope, the request carries the attribute and its value
// matches the pattern. Attributes of the request that the scope does not name
// are not constrained: "jobs.cancel owner=alex" allows cancelling any of
// alex's jobs in any queue. A service must therefore pass every attribute that
// it documents for an action (see KnownActions), even when a scope might not
// mention it. A request with a missing attribute is denied by any scope that
// selects on it. A [Set] allows a request when any of its scopes does; an
// empty Set allows nothing.
//
// Examples:
//
//	git.push repo=app ref=refs/heads/alex/*
//	jobs.cancel owner=alex queue=dev
//	objects.delete bucket=bench-artifacts key=dev/alex/**
//	services.* namespace=dev
//
// Parse accepts a scope in any spacing; String returns the canonical form
// (single spaces, selectors sorted by key), which Parse accepts unchanged.
//
// # Limits
//
// A scope is at most MaxLen bytes long and has at most MaxSelectors
// selectors. Patterns are valid UTF-8. Matching costs at most
// O(len(pattern) × len(value)) and never backtracks exponentially.
package scope

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on a single scope.
const (
	MaxLen       = 1024
	MaxSelectors = 16
	maxNameLen   = 64
)

// ErrInvalid is wrapped by every error Parse returns.
var ErrInvalid = errors.New("invalid scope")

// Scope is a parsed scope. The zero Scope allows nothing.
type Scope struct {
	action string
	sels   []selector // sorted by key, keys unique
}

type selector struct {
	key string
	pat pattern
}

// Selector is one KEY=PATTERN pair of a scope, the pattern in its source form.
type Selector struct {
	Key     string
	Pattern string
}

// Request is what a service is asked to do: an action and the attributes of
// its target.
type Request struct {
	Action string
	Attrs  map[string]string
}

// Parse parses s according to the grammar in the package documentation.
func Parse(s string) (Scope, error) {
	if len(s) > MaxLen {
		return Scope{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxLen)
	}
	if !utf8.ValidString(s) {
		return Scope{}, fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	fields := strings.FieldsFunc(s, isBlank)
	if len(fields) == 0 {
		return Scope{}, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if err := checkAction(fields[0], true); err != nil {
		return Scope{}, err
	}
	sc := Scope{action: fields[0]}
	if n := len(fields) - 1; n > MaxSelectors {
		return Scope{}, fmt.Errorf("%w: %d selectors, at most %d allowed", ErrInvalid, n, MaxSelectors)
	}
	for _, f := range fields[1:] {
		key, pat, ok := strings.Cut(f, "=")
		if !ok {
			return Scope{}, fmt.Errorf("%w: %q is not KEY=PATTERN", ErrInvalid, f)
		}
		if err := checkKey(key); err != nil {
			return Scope{}, err
		}
		p, err := compile(pat)
		if err != nil {
			return Scope{}, fmt.Errorf("%w: selector %q: %v", ErrInvalid, key, err)
		}
		sc.sels = append(sc.sels, selector{key: key, pat: p})
	}
	slices.SortFunc(sc.sels, func(a, b selector) int { return strings.Compare(a.key, b.key) })
	for i := 1; i < len(sc.sels); i++ {
		if sc.sels[i].key == sc.sels[i-1].key {
			return Scope{}, fmt.Errorf("%w: key %q appears more than once", ErrInvalid, sc.sels[i].key)
		}
	}
	return sc, nil
}

// MustParse is like Parse but panics on error. It is meant for tables and
// package-level values built from literals.
func MustParse(s string) Scope {
	sc, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return sc
}

func isBlank(r rune) bool { return r == ' ' || r == '\t' }

// checkAction validates "service.verb"; wildcard permits "service.*".
func checkAction(a string, wildcard bool) error {
	svc, verb, ok := strings.Cut(a, ".")
	if !ok {
		return fmt.Errorf("%w: action %q is not service.verb", ErrInvalid, a)
	}
	if err := checkName("service", svc); err != nil {
		return fmt.Errorf("%w: action %q: %v", ErrInvalid, a, err)
	}
	if wildcard && verb == "*" {
		return nil
	}
	if err := checkName("verb", verb); err != nil {
		return fmt.Errorf("%w: action %q: %v", ErrInvalid, a, err)
	}
	return nil
}

func checkName(what, n string) error {
	if n == "" {
		return fmt.Errorf("empty %s", what)
	}
	if len(n) > maxNameLen {
		return fmt.Errorf("%s longer than %d bytes", what, maxNameLen)
	}
	for i := 0; i < len(n); i++ {
		if !isNameByte(n[i]) {
			return fmt.Errorf("%s %q: only a-z, 0-9, '_' and '-' are allowed", what, n)
		}
	}
	return nil
}

func isNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

func checkKey(k string) error {
	if k == "" {
		return fmt.Errorf("%w: empty selector key", ErrInvalid)
	}
	if len(k) > maxNameLen {
		return fmt.Errorf("%w: selector key longer than %d bytes", ErrInvalid, maxNameLen)
	}
	if k[0] < 'a' || k[0] > 'z' {
		return fmt.Errorf("%w: selector key %q must start with a-z", ErrInvalid, k)
	}
	for i := 0; i < len(k); i++ {
		if !isNameByte(k[i]) {
			return fmt.Errorf("%w: selector key %q: only a-z, 0-9, '_' and '-' are allowed", ErrInvalid, k)
		}
	}
	return nil
}

// Action returns the scope's action, e.g. "git.push" or "git.*".
func (s Scope) Action() string { return s.action }

// Selectors returns the scope's selectors sorted by key.
func (s Scope) Selectors() []Selector {
	out := make([]Selector, len(s.sels))
	for i, sel := range s.sels {
		out[i] = Selector{Key: sel.key, Pattern: sel.pat.src}
	}
	return out
}

// IsZero reports whether s is the zero Scope.
func (s Scope) IsZero() bool { return s.action == "" }

// String returns the canonical form of s.
func (s Scope) String() string {
	if s.IsZero() {
		return ""
	}
	var b strings.Builder
	b.WriteString(s.action)
	for _, sel := range s.sels {
		b.WriteByte(' ')
		b.WriteString(sel.key)
		b.WriteByte('=')
		b.WriteString(sel.pat.src)
	}
	return b.String()
}

// Equal reports whether s and o are the same scope.
func (s Scope) Equal(o Scope) bool {
	return s.action == o.action && slices.EqualFunc(s.sels, o.sels, func(a, b selector) bool {
		return a.key == b.key && a.pat.src == b.pat.src
	})
}

// Allows reports whether s allows req. See the package documentation.
func (s Scope) Allows(req Request) bool {
	if s.IsZero() || !s.matchAction(req.Action) {
		return false
	}
	for _, sel := range s.sels {
		v, ok := req.Attrs[sel.key]
		if !ok || !sel.pat.match(v) {
			return false
		}
	}
	return true
}

func (s Scope) matchAction(a string) bool {
	if checkAction(a, false) != nil {
		return false
	}
	if svc, ok := strings.CutSuffix(s.action, ".*"); ok {
		return strings.HasPrefix(a, svc) && a[len(svc)] == '.'
	}
	return a == s.action
}

// Set is a list of scopes; it allows what any of them allows.
type Set []Scope

// ParseSet parses each string with Parse. The error names the first invalid
// scope by index.
func ParseSet(ss []string) (Set, error) {
	set := make(Set, 0, len(ss))
	for i, s := range ss {
		sc, err := Parse(s)
		if err != nil {
			return nil, fmt.Errorf("scope %d (%q): %w", i, s, err)
		}
		set = append(set, sc)
	}
	return set, nil
}

// Allows reports whether any scope of set allows req.
func (set Set) Allows(req Request) bool {
	for _, s := range set {
		if s.Allows(req) {
			return true
		}
	}
	return false
}

// Strings returns the canonical form of each scope.
func (set Set) Strings() []string {
	out := make([]string, len(set))
	for i, s := range set {
		out[i] = s.String()
	}
	return out
}

// pattern is a compiled selector pattern.
type pattern struct {
	src  string // canonical source, with escapes
	toks []tok
}

type tokKind uint8

const (
	tokLit tokKind = iota
	tokStar
	tokDoubleStar
)

type tok struct {
	kind tokKind
	lit  string
}

func compile(src string) (pattern, error) {
	if src == "" {
		return pattern{}, errors.New("empty pattern (use * to match any value)")
	}
	p := pattern{src: src}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			p.toks = append(p.toks, tok{kind: tokLit, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRuneInString(src[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return pattern{}, errors.New("not valid UTF-8")
		case r == '\\':
			if i+1 >= len(src) || (src[i+1] != '*' && src[i+1] != '\\') {
				return pattern{}, errors.New(`"\" must be followed by "*" or "\"`)
			}
			lit.WriteByte(src[i+1])
			i += 2
			continue
		case r == '*':
			n := 1
			for i+n < len(src) && src[i+n] == '*' {
				n++
			}
			if n > 2 {
				return pattern{}, errors.New("more than two consecutive '*'")
			}
			flush()
			if n == 2 {
				p.toks = append(p.toks, tok{kind: tokDoubleStar})
			} else {
				p.toks = append(p.toks, tok{kind: tokStar})
			}
			i += n
			continue
		case !unicode.IsGraphic(r) || unicode.IsSpace(r):
			return pattern{}, fmt.Errorf("character %U is not allowed", r)
		}
		lit.WriteString(src[i : i+size])
		i += size
	}
	flush()
	return p, nil
}

// match reports whether p matches all of v. It tracks the set of positions
// in v reachable after each token, so it runs in O(len(toks) × len(v)).
func (p pattern) match(v string) bool {
	n := len(v)
	cur := make([]bool, n+1)
	next := make([]bool, n+1)
	cur[0] = true
	for _, t := range p.toks {
		clear(next)
		alive := false
		switch t.kind {
		case tokLit:
			for i := 0; i+len(t.lit) <= n; i++ {
				if cur[i] && v[i:i+len(t.lit)] == t.lit {
					next[i+len(t.lit)] = true
					alive = true
				}
			}
		case tokStar:
			reach := false
			for j := 0; j <= n; j++ {
				if j > 0 && v[j-1] == '/' {
					reach = false
				}
				reach = reach || cur[j]
				next[j] = reach
				alive = alive || reach
			}
		case tokDoubleStar:
			reach := false
			for j := 0; j <= n; j++ {
				reach = reach || cur[j]
				next[j] = reach
				alive = alive || reach
			}
		}
		if !alive {
			return false
		}
		cur, next = next, cur
	}
	return cur[n]
}
