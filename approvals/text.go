package approvals

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
)

// BodyText renders a held request's body for a person (a terminal, the
// console), "" when it has none. The sandbox chose every byte of it, so nothing of it reaches the
// terminal raw: text (valid UTF-8 without NUL) is shown with every
// character that is not printable escaped (control characters, C1
// controls, Unicode format characters such as bidi overrides) and
// backslashes doubled, cut to at most n characters (n < 0: uncut) with
// a note of its size; a body in a Content-Encoding other than identity
// that is not text, or any other bytes, is shown as its size and what it
// is. Notes first: a Content-Encoding the text does not have, a JSON key
// twice in one object.
func BodyText(a api.Approval, n int) string {
	if len(a.Body) == 0 {
		return ""
	}
	size := fmt.Sprintf("%d bytes", len(a.Body))
	if a.BodyTruncated {
		size = fmt.Sprintf("more than %d bytes", len(a.Body))
	}
	ct := "none"
	if a.ContentType != "" {
		ct = cut(EscapeText(a.ContentType), 64)
	}
	b := a.Body
	if a.BodyTruncated {
		// The cut may fall inside a character.
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	isText := utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
	note := ""
	if ce := strings.TrimSpace(a.ContentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		ce = cut(EscapeText(ce), 32)
		if !isText {
			return fmt.Sprintf("(%s, %s-encoded, content-type %s)", size, ce, ct)
		}
		// Compressed data is not text: a service that ignores the header
		// (Go's net/http does not decode request bodies) reads this.
		note = "(declared " + ce + "-encoded, but it is text) "
	}
	if !isText {
		return fmt.Sprintf("(%s, binary, content-type %s)", size, ct)
	}
	// A key twice in one object: the service reads one of them (Go's
	// encoding/json the last, case-insensitively), which may not be the
	// one a person reads first, or sees before the cut.
	if k, ok := duplicateKey(b); ok {
		note += "(duplicate key \"" + cut(EscapeText(k), 32) + "\": a service may act on either) "
	}
	text := EscapeText(string(b))
	if n >= 0 && utf8.RuneCountInString(text) > n {
		// Cut at an escape's start, never inside one.
		var out strings.Builder
		w := 0
		for _, r := range string(b) {
			e := EscapeText(string(r))
			if w += utf8.RuneCountInString(e); w > n {
				break
			}
			out.WriteString(e)
		}
		return note + out.String() + "… (" + size + ", cut)"
	}
	if a.BodyTruncated {
		return note + text + "… (" + size + ", cut)"
	}
	return note + text
}

// duplicateKey reports the first key of b, read as JSON, that an object
// holds twice, compared as Go's encoding/json matches keys to fields
// (without regard to case, under Unicode folding: "nameſ" is "names"),
// as far as b reads as JSON.
func duplicateKey(b []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	// One set of keys per open object; nil for an open array. An
	// object's next string token is a key when expectKey is true.
	var stack []map[string]bool
	var expectKey []bool
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := len(stack) - 1
		switch t := tok.(type) {
		case json.Delim:
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true // the object's value ends
			}
			switch t {
			case '{':
				stack, expectKey = append(stack, map[string]bool{}), append(expectKey, true)
			case '[':
				stack, expectKey = append(stack, nil), append(expectKey, false)
			default:
				stack, expectKey = stack[:top], expectKey[:top]
				if top-1 >= 0 && stack[top-1] != nil {
					expectKey[top-1] = true
				}
			}
		case string:
			if top >= 0 && stack[top] != nil && expectKey[top] {
				f := strings.ToUpper(strings.ToLower(t))
				if stack[top][f] {
					return t, true
				}
				stack[top][f], expectKey[top] = true, false
				continue
			}
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true
			}
		default:
			if top >= 0 && stack[top] != nil {
				expectKey[top] = true
			}
		}
	}
}

// EscapeText escapes what in s is not a printable character (see
// BodyText): \n, \r and \t by name, other ASCII as \xNN, the rest as
// \uNNNN or \UNNNNNNNN; a backslash is doubled, so that an escape in the
// text cannot pass for one of these.
func EscapeText(s string) string {
	var out strings.Builder
	for _, r := range s {
		switch {
		case r == '\\':
			out.WriteString(`\\`)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r == utf8.RuneError:
			out.WriteString(`\ufffd`)
		case unicode.IsPrint(r):
			out.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&out, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			fmt.Fprintf(&out, `\U%08x`, r)
		}
	}
	return out.String()
}

// cut shortens s to n characters, the last an ellipsis.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// PathText renders a held request's path and query for a person, the
// query after a "?" (its end marked "…" when the gateway cut it), every
// character that is not printable escaped as EscapeText does.
func PathText(a api.Approval) string {
	s := EscapeText(a.Path)
	if a.Query != "" || a.QueryTruncated {
		s += "?" + EscapeText(a.Query)
		if a.QueryTruncated {
			s += "…"
		}
	}
	return s
}

// HeadersText renders a held request's header fields on one line, "" when
// it has none: Name="value" (the value quoted with Go's escapes, so that
// neither a quote nor a non-printable character in it can pass for the
// next field), a secret's name after a header bound to one, cut to at
// most n characters (n < 0: uncut) with a note of the fields' count.
func HeadersText(a api.Approval, n int) string {
	if len(a.Headers) == 0 && !a.HeadersTruncated {
		return ""
	}
	parts := make([]string, 0, len(a.Headers)+1)
	for _, h := range a.Headers {
		p := EscapeText(h.Name) + "=" + strconv.Quote(h.Value)
		if h.Truncated {
			p += "…"
		}
		if h.Secret != "" {
			p += " (secret " + EscapeText(h.Secret) + ")"
		}
		parts = append(parts, p)
	}
	if a.HeadersTruncated {
		parts = append(parts, "(more headers not shown)")
	}
	s := strings.Join(parts, " ")
	if n >= 0 && utf8.RuneCountInString(s) > n {
		return cut(s, n) + fmt.Sprintf(" (%d fields)", len(a.Headers))
	}
	return s
}
