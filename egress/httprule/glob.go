package httprule

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// glob is a compiled path or ref pattern: its "/"-separated segments. A
// segment "**" matches zero or more whole segments; in any other segment
// "*" matches any run of bytes (segments hold no "/"), and every other
// byte matches itself.
type glob struct {
	src  string
	segs []string
}

// compileGlob checks the grammar shared by path and ref patterns: no
// control characters, no empty segment, no "." or ".." segment (a
// normalized path or a valid ref name has none, so such a pattern could
// never match), and "**" only as a whole segment.
func compileGlob(p string) (glob, error) {
	if !utf8.ValidString(p) {
		return glob{}, fmt.Errorf("%q is not valid UTF-8", p)
	}
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return glob{}, fmt.Errorf("%q contains a control character", p)
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch {
		case s == "" && i == len(segs)-1:
			// A trailing "/" (or the root path "/" alone): matches only
			// a name with a trailing "/".
		case s == "":
			return glob{}, fmt.Errorf("%q has an empty segment (\"//\")", p)
		case s == "." || s == "..":
			return glob{}, fmt.Errorf("%q has a %q segment, which no normalized name has", p, s)
		case s != "**" && strings.Contains(s, "**"):
			return glob{}, fmt.Errorf("%q: \"**\" must be a whole segment, as in \"a/**/b\"", p)
		}
	}
	return glob{src: p, segs: segs}, nil
}

// match reports whether the "/"-separated segments of name match g.
func (g glob) match(name string) bool {
	return matchSegments(g.segs, strings.Split(name, "/"))
}

// matchSegments matches names against pats, "**" consuming any number of
// names. Greedy with one backtrack point, as for "*" in a string: linear
// in the common case, len(pats)*len(names) segment matches at worst.
func matchSegments(pats, names []string) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(names) {
		switch {
		case p < len(pats) && pats[p] == "**":
			star, mark = p, n
			p++
		case p < len(pats) && matchSegment(pats[p], names[n]):
			p++
			n++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pats) && pats[p] == "**" {
		p++
	}
	return p == len(pats)
}

// matchSegment matches one segment: "*" matches any run of bytes, every
// other byte itself.
func matchSegment(pat, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pat) && pat[p] == '*':
			star, mark = p, i
			p++
		case p < len(pat) && pat[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pat) && pat[p] == '*' {
		p++
	}
	return p == len(pat)
}

// compilePathGlob checks a rule's path pattern: a glob over the
// normalized path, so it starts with "/" and spells every character
// itself (a percent-encoded triplet could never match a decoded path).
func compilePathGlob(p string) (glob, error) {
	if !strings.HasPrefix(p, "/") {
		return glob{}, fmt.Errorf("path %q does not start with \"/\"", p)
	}
	if strings.ContainsAny(p, "\\;") {
		return glob{}, fmt.Errorf("path %q contains '\\\\' or ';', which NormalizePath refuses", p)
	}
	if strings.ContainsAny(p, "?#") {
		return glob{}, fmt.Errorf("path %q contains '?' or '#': the query and fragment are not matched, only the path", p)
	}
	if hasEncoded(p) {
		return glob{}, fmt.Errorf("path %q contains a percent-encoded character; patterns match the decoded path, so write the character itself", p)
	}
	g, err := compileGlob(p[1:])
	if err != nil {
		return glob{}, fmt.Errorf("path %w", err)
	}
	g.src = p
	return g, nil
}

// compileRefGlob checks a rule's ref pattern: a full ref name or glob
// ("refs/heads/agent/*") in the characters git allows in ref names.
func compileRefGlob(r string) (glob, error) {
	if !strings.HasPrefix(r, "refs/") || len(r) == len("refs/") {
		return glob{}, fmt.Errorf("ref %q is not a full ref name starting with refs/", r)
	}
	if strings.ContainsFunc(r, func(c rune) bool { return c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?[\\", c) }) || strings.Contains(r, "@{") {
		return glob{}, fmt.Errorf("ref %q contains a character git does not allow in ref names", r)
	}
	if strings.Contains(r, "..") {
		return glob{}, fmt.Errorf("ref %q contains \"..\"", r)
	}
	g, err := compileGlob(r)
	if err != nil {
		return glob{}, fmt.Errorf("ref %w", err)
	}
	return g, nil
}

// hasEncoded reports whether s holds a '%' followed by two hex digits.
func hasEncoded(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
