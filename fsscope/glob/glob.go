// Package glob matches slash-separated paths relative to a workspace root
// against gitignore-style patterns.
//
// Syntax:
//   - "*" matches any run of characters within one path element, "?" one
//     character, "[a-z]" / "[!a-z]" / "[^a-z]" a character class; "\" escapes
//     the next character.
//   - "**" as a whole element matches any number of elements: "**/x" matches
//     x at any depth, "a/**/b" matches a/b, a/x/b, a/x/y/b, and a trailing
//     "a/**" matches everything beneath a (but not a itself).
//   - A pattern without a slash (other than a trailing one) matches at any
//     depth, like a gitignore basename pattern: "*.pem" is "**/*.pem".
//     A pattern with a leading or inner slash is anchored at the root.
//   - A trailing slash matches directories only.
//
// Paths and patterns are compared in Unicode NFC, so a name spelled in NFD
// matches a pattern written in NFC and vice versa. With Fold, letters are
// compared by Unicode simple case folding (the folding of regexp's (?i)):
// "*.PEM", "*.pem" and "*.Pem" are the same pattern.
package glob

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ErrBadPattern is returned (wrapped) for a pattern that cannot be compiled.
var ErrBadPattern = errors.New("invalid glob pattern")

// Pattern is a compiled glob.
type Pattern struct {
	src     string
	fold    bool
	dirOnly bool
	elems   []elem
}

// elem is one path element of a pattern.
type elem struct {
	kind    elemKind
	literal string  // kindLiteral: the (folded) text
	toks    []token // kindGlob
}

type elemKind uint8

const (
	kindLiteral elemKind = iota
	kindGlob
	kindAny     // "**" matching zero or more elements
	kindAnyPlus // trailing "**" matching one or more elements
)

// token is one piece of a glob element.
type token struct {
	kind   tokKind
	lit    []rune      // tokLiteral
	ranges []runeRange // tokClass
	negate bool        // tokClass
	fold   bool        // tokClass: match any rune of the case-folding orbit
}

type tokKind uint8

const (
	tokLiteral tokKind = iota
	tokStar
	tokQuestion
	tokClass
)

type runeRange struct{ lo, hi rune }

// Compile parses a pattern. With fold, matching ignores case.
func Compile(pattern string, fold bool) (*Pattern, error) {
	p := &Pattern{src: pattern, fold: fold}
	if pattern == "" {
		return nil, fmt.Errorf("%w: empty pattern", ErrBadPattern)
	}
	if strings.ContainsRune(pattern, 0) {
		return nil, fmt.Errorf("%w %q: contains NUL", ErrBadPattern, pattern)
	}
	if !utf8.ValidString(pattern) {
		return nil, fmt.Errorf("%w %q: not valid UTF-8", ErrBadPattern, pattern)
	}
	s := norm.NFC.String(pattern)
	anchored := strings.HasPrefix(s, "/")
	s = strings.TrimLeft(s, "/")
	if strings.HasSuffix(s, "/") {
		p.dirOnly = true
		s = strings.TrimRight(s, "/")
	}
	var parts []string
	for e := range strings.SplitSeq(s, "/") {
		if e == "" || e == "." {
			continue
		}
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w %q: matches nothing", ErrBadPattern, pattern)
	}
	if !anchored && len(parts) == 1 {
		parts = []string{"**", parts[0]}
	}
	for i, part := range parts {
		if part == "**" {
			kind := kindAny
			if i == len(parts)-1 && i > 0 {
				kind = kindAnyPlus
			}
			if n := len(p.elems); n > 0 && p.elems[n-1].kind == kindAny {
				// "**/**" is "**"; "**/**" at the end still needs one element.
				p.elems[n-1].kind = kind
				continue
			}
			p.elems = append(p.elems, elem{kind: kind})
			continue
		}
		toks, err := parseElem(part, fold)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrBadPattern, pattern, err)
		}
		if len(toks) == 1 && toks[0].kind == tokLiteral {
			p.elems = append(p.elems, elem{kind: kindLiteral, literal: string(toks[0].lit)})
			continue
		}
		p.elems = append(p.elems, elem{kind: kindGlob, toks: toks})
	}
	return p, nil
}

// MustCompile is Compile for patterns known to be valid; it panics otherwise.
func MustCompile(pattern string, fold bool) *Pattern {
	p, err := Compile(pattern, fold)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the pattern as written.
func (p *Pattern) String() string { return p.src }

func parseElem(s string, fold bool) ([]token, error) {
	var toks []token
	lit := func(r rune) {
		if fold {
			r = Fold(r)
		}
		if n := len(toks); n > 0 && toks[n-1].kind == tokLiteral {
			toks[n-1].lit = append(toks[n-1].lit, r)
			return
		}
		toks = append(toks, token{kind: tokLiteral, lit: []rune{r}})
	}
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			if n := len(toks); n == 0 || toks[n-1].kind != tokStar {
				toks = append(toks, token{kind: tokStar})
			}
		case '?':
			toks = append(toks, token{kind: tokQuestion})
		case '\\':
			if i+1 == len(rs) {
				return nil, errors.New("trailing backslash")
			}
			i++
			lit(rs[i])
		case '[':
			t, n, err := parseClass(rs[i+1:])
			if err != nil {
				return nil, err
			}
			t.fold = fold
			toks = append(toks, t)
			i += n
		default:
			lit(r)
		}
	}
	return toks, nil
}

// parseClass parses a class body after '['; it returns the token and the
// number of runes consumed, including the closing ']'.
func parseClass(rs []rune) (token, int, error) {
	t := token{kind: tokClass}
	i := 0
	if i < len(rs) && (rs[i] == '!' || rs[i] == '^') {
		t.negate = true
		i++
	}
	first := true
	for {
		if i >= len(rs) {
			return t, 0, errors.New("unterminated character class")
		}
		if rs[i] == ']' && !first {
			return t, i + 1, nil
		}
		first = false
		lo, n, err := classRune(rs[i:])
		if err != nil {
			return t, 0, err
		}
		i += n
		hi := lo
		if i+1 < len(rs) && rs[i] == '-' && rs[i+1] != ']' {
			hi, n, err = classRune(rs[i+1:])
			if err != nil {
				return t, 0, err
			}
			i += 1 + n
			if hi < lo {
				return t, 0, fmt.Errorf("character range %q-%q is reversed", lo, hi)
			}
		}
		t.ranges = append(t.ranges, runeRange{lo, hi})
	}
}

func classRune(rs []rune) (rune, int, error) {
	if rs[0] == '\\' {
		if len(rs) < 2 {
			return 0, 0, errors.New("unterminated character class")
		}
		return rs[1], 2, nil
	}
	return rs[0], 1, nil
}

// Match reports whether the path (relative to the root, slash-separated)
// matches the pattern itself. isDir says whether the path names a directory.
func (p *Pattern) Match(path string, isDir bool) bool {
	if p.dirOnly && !isDir {
		return false
	}
	return p.matchElems(splitPath(path, p.fold))
}

// Covers reports whether the path or one of its parent directories matches:
// what a pattern naming a directory protects or hides.
func (p *Pattern) Covers(path string, isDir bool) bool {
	return p.covers(splitPath(path, p.fold), isDir)
}

func (p *Pattern) covers(names []string, isDir bool) bool {
	for i := 1; i <= len(names); i++ {
		if p.dirOnly && i == len(names) && !isDir {
			continue
		}
		if p.matchElems(names[:i]) {
			return true
		}
	}
	return false
}

// splitPath normalises a path into its elements: NFC, empty and "."
// elements dropped, letters folded when fold is set.
func splitPath(path string, fold bool) []string {
	path = norm.NFC.String(path)
	var out []string
	for e := range strings.SplitSeq(path, "/") {
		if e == "" || e == "." {
			continue
		}
		if fold {
			e = FoldString(e)
		}
		out = append(out, e)
	}
	return out
}

// matchElems matches elements by dynamic programming over (pattern element,
// path element): linear in the product, whatever the number of "**".
func (p *Pattern) matchElems(names []string) bool {
	if len(names) == 0 {
		return false
	}
	n := len(names)
	// cur[j]: the elements so far match names[:j].
	cur := make([]bool, n+1)
	next := make([]bool, n+1)
	cur[0] = true
	for _, e := range p.elems {
		clear(next)
		switch e.kind {
		case kindAny, kindAnyPlus:
			min := 0
			if e.kind == kindAnyPlus {
				min = 1
			}
			reach := -1
			for j := 0; j <= n; j++ {
				if cur[j] && reach < 0 {
					reach = j
				}
				if reach >= 0 && j-reach >= min {
					next[j] = true
				}
			}
		default:
			for j := 0; j < n; j++ {
				if cur[j] && e.matchName(names[j]) {
					next[j+1] = true
				}
			}
		}
		cur, next = next, cur
	}
	return cur[n]
}

func (e *elem) matchName(name string) bool {
	if e.kind == kindLiteral {
		return e.literal == name
	}
	return matchToks(e.toks, []rune(name))
}

// matchToks is the classic glob match with single-star backtracking: when a
// later star is reached, earlier stars never need to be revisited.
func matchToks(toks []token, s []rune) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case tokStar:
				starT, starS = ti, si
				ti++
				continue
			case tokQuestion:
				if si < len(s) {
					ti++
					si++
					continue
				}
			case tokClass:
				if si < len(s) && t.matchClass(s[si]) {
					ti++
					si++
					continue
				}
			case tokLiteral:
				if si+len(t.lit) <= len(s) && runesEqual(t.lit, s[si:si+len(t.lit)]) {
					ti++
					si += len(t.lit)
					continue
				}
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS >= len(s) {
			return false
		}
		starS++
		ti, si = starT+1, starS
	}
}

func runesEqual(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// matchClass reports whether r (already folded when the pattern folds) is
// in the class. With folding, a class matches a rune when it contains any
// rune of the rune's case-folding orbit.
func (t *token) matchClass(r rune) bool {
	in := t.inRanges(r)
	if !in && t.fold {
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if t.inRanges(f) {
				in = true
				break
			}
		}
	}
	return in != t.negate
}

func (t *token) inRanges(r rune) bool {
	for _, rg := range t.ranges {
		if rg.lo <= r && r <= rg.hi {
			return true
		}
	}
	return false
}

// Fold maps r to the canonical member of its Unicode simple case-folding
// orbit (the smallest rune of the orbit), so that two runes are equal under
// folding exactly when their Fold values are equal.
func Fold(r rune) rune {
	min := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f < min {
			min = f
		}
	}
	return min
}

// FoldString applies Fold to every rune of s.
func FoldString(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'a' <= c && c <= 'z' {
			ascii = false
			break
		}
	}
	if ascii {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		b.WriteRune(Fold(r))
	}
	return b.String()
}
