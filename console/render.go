package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
)

// maxBodyText bounds the characters of a held request's body shown.
const maxBodyText = 4000

// when formats a time for a page: UTC, to the second.
func when(t any) string {
	switch t := t.(type) {
	case time.Time:
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	}
	return ""
}

// escapeText escapes every character of s that is not printable
// (control characters, C1 controls, Unicode format characters such as
// bidi overrides, invalid bytes) as \xNN, \uNNNN or \UNNNNNNNN, and
// doubles backslashes, so that what the sandbox sent cannot rearrange
// or hide what a person reads. html/template escapes the rest for HTML.
func escapeText(s string) string { return escape(s, false, true) }

// lineText is escapeText for a line of a diff, which keeps its tabs and
// backslashes.
func lineText(s string) string { return escape(s, true, false) }

// jsonText is escapeText for JSON, whose backslashes are escapes already.
func jsonText(s string) string { return escape(s, false, false) }

func escape(s string, keepTabs, doubleBackslashes bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\t' && keepTabs:
			b.WriteRune(r)
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\' && doubleBackslashes:
			b.WriteString(`\\`)
		case r == ' ' || (unicode.IsPrint(r) && !unicode.Is(unicode.Cf, r)):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	return b.String()
}

// bodyText renders a held request's body as airlock approvals does
// (approvals.BodyText), cut at maxBodyText characters.
func bodyText(a api.Approval) string { return approvals.BodyText(a, maxBodyText) }

// fieldsText renders an audit event's fields as "key=value" pairs in key
// order, values as JSON.
func fieldsText(f map[string]any) string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		var v bytes.Buffer
		enc := json.NewEncoder(&v)
		enc.SetEscapeHTML(false) // html/template escapes the page
		if err := enc.Encode(f[k]); err != nil {
			v.Reset()
			v.WriteString("?")
		}
		b.WriteString(escapeText(k) + "=" + jsonText(strings.TrimSuffix(v.String(), "\n")))
	}
	return b.String()
}

// diffClass is the CSS class of a unified diff's line.
func diffClass(line string) string {
	switch {
	case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"), strings.HasPrefix(line, "diff "):
		return "meta"
	case strings.HasPrefix(line, "@@"):
		return "hunk"
	case strings.HasPrefix(line, "+"):
		return "add"
	case strings.HasPrefix(line, "-"):
		return "del"
	}
	return "ctx"
}
