package httprule

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrPath is the class of NormalizePath's errors: the path has no single
// meaning servers agree on, and the gateway refuses the request.
var ErrPath = errors.New("path cannot be normalized")

// NormalizePath returns the path rules are matched against, from the
// path of a request target as the client sent it (origin form, the query
// and anything after '?' already cut off; an absolute-form target reduced
// to its path). It errors, wrapping ErrPath, where servers could read the
// path differently from the result, so that a deny rule cannot be passed
// by spelling its path another way. In order:
//
//  1. The path must start with "/" ("*", the asterisk form of OPTIONS, is
//     refused) and hold no space, control character (NUL included), '\'
//     (some servers read it as '/'), ';' (path parameters: Tomcat and
//     other servers drop "/admin;x" to "/admin" and resolve "/..;/"), '?'
//     or '#'.
//  2. Dot segments are removed as RFC 3986 section 5.2.4 says, and runs of
//     '/' collapsed to one. Servers that collapse before removing dots
//     read "/a//../b" as "/b" where RFC 3986 says "/a/b": a path whose
//     two readings differ is refused.
//  3. Percent-encoding is decoded once. '%' not followed by two hex digits
//     is refused; so are encoded NUL and control characters, '\' and ';'.
//     "%2F" becomes '/': servers that decode it before routing see a
//     separator, and matching it as one keeps a deny rule on "/a/**"
//     over "/a%2Fx". A decoded path that is not already normal ("//",
//     "." or ".." segments made of "%2F" and "%2E") is refused rather than
//     guessed at, as is one that still holds '%' and two hex digits
//     (double encoding: "%2561" would be "a" to a server that decodes
//     twice) and one that is not valid UTF-8 (overlong forms such as
//     "%C0%AF").
//
// The result starts with "/", has no empty, "." or ".." segment (it may
// end in "/"), and holds the decoded characters, so "/%61dmin" is
// "/admin" and "/a%20b" is "/a b".
//
// Paths are case-sensitive, as RFC 3986 says: "/ADMIN" is not "/admin".
// A server that ignores case (IIS, a case-insensitive file system) serves
// "/ADMIN" as "/admin", so against such a server a deny rule covers only
// the spelling it names; write allow rules and deny by default there.
// Unicode is not folded either: a server that maps look-alikes ("／",
// U+FF0F) to ASCII is not modeled.
func NormalizePath(raw string) (string, error) {
	if raw == "" || raw[0] != '/' {
		return "", fmt.Errorf("%w: %q does not start with \"/\"", ErrPath, raw)
	}
	for i := 0; i < len(raw); i++ {
		if what := forbidden(raw[i]); what != "" {
			return "", fmt.Errorf("%w: %q contains %s", ErrPath, raw, what)
		}
		if raw[i] == '?' || raw[i] == '#' {
			return "", fmt.Errorf("%w: %q contains %q (the query or fragment is not part of the path)", ErrPath, raw, raw[i])
		}
	}
	segs := strings.Split(raw[1:], "/")
	merged := removeDots(segs, false)
	if rfc := collapseSlashes(removeDots(segs, true)); rfc != merged {
		return "", fmt.Errorf("%w: %q is %q to servers that remove dot segments first and %q to those that merge slashes first", ErrPath, raw, rfc, merged)
	}
	p, err := decodePercent(merged)
	if err == nil && strings.ContainsAny(p, "?#") {
		// A server or front proxy that decodes and parses the target
		// again would cut the path there.
		return "", fmt.Errorf("%w: %q decodes to '?' or '#'", ErrPath, raw)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrPath, raw, err)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: %q decodes to invalid UTF-8", ErrPath, raw)
	}
	if hasEncoded(p) {
		return "", fmt.Errorf("%w: %q is percent-encoded twice", ErrPath, raw)
	}
	dsegs := strings.Split(p[1:], "/")
	for i, s := range dsegs {
		switch {
		case s == "." || s == "..":
			return "", fmt.Errorf("%w: %q decodes to a %q segment", ErrPath, raw, s)
		case s == "" && i < len(dsegs)-1:
			return "", fmt.Errorf("%w: %q decodes to an empty segment (\"//\")", ErrPath, raw)
		}
	}
	return p, nil
}

// forbidden names what c is if a path may not hold it, raw or decoded.
func forbidden(c byte) string {
	switch {
	case c == 0:
		return "NUL"
	case c < ' ' || c == 0x7f:
		return "a control character"
	case c == ' ':
		return "a space"
	case c == '\\':
		return "'\\'"
	case c == ';':
		return "';'"
	}
	return ""
}

// removeDots removes "." and ".." segments from the segments of a path
// after its leading "/", and returns the path. With keepEmpty, empty
// segments stay segments a ".." can remove, as in RFC 3986 section 5.2.4;
// without, they are dropped first, as servers that merge slashes do. A
// path that ended in a dot segment or "/" ends in "/".
func removeDots(segs []string, keepEmpty bool) string {
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		trailing = false
		switch s {
		case ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		case "":
			if last {
				trailing = true
			} else if keepEmpty {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	p := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		p += "/"
	}
	return p
}

// collapseSlashes replaces every run of '/' in p with one.
func collapseSlashes(p string) string {
	if !strings.Contains(p, "//") {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && i > 0 && p[i-1] == '/' {
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// decodePercent decodes every "%XX" in p once.
func decodePercent(p string) (string, error) {
	if !strings.Contains(p, "%") {
		return p, nil
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			b.WriteByte(p[i])
			continue
		}
		if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
			return "", fmt.Errorf("invalid percent-encoding at byte %d", i)
		}
		c := unhex(p[i+1])<<4 | unhex(p[i+2])
		if what := forbidden(c); what != "" && c != ' ' {
			return "", fmt.Errorf("%%%c%c encodes %s", p[i+1], p[i+2], what)
		}
		b.WriteByte(c)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// IsReceivePack reports whether a request is a git smart-HTTP push
// (POST .../git-receive-pack), given its method and normalized path.
// Its body starts with the ref updates ReadPush reads. It errs towards
// yes: the method and the last segment are compared without regard to
// case, and a trailing "/" is ignored, in case a server routes them so.
func IsReceivePack(method, cleanPath string) bool {
	const last = "/git-receive-pack"
	p := strings.TrimSuffix(cleanPath, "/")
	return strings.EqualFold(method, "POST") && len(p) >= len(last) && strings.EqualFold(p[len(p)-len(last):], last)
}
