package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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

// diffLine is a line of a unified diff and its class: meta (a file's
// header lines), hunk (@@), add, del or ctx.
type diffLine struct {
	Class, Text string
}

// classifyDiff classes a unified diff's lines by its structure, not by
// their first characters alone: inside a hunk, the lines its header
// counts are content whatever they look like (a file's line
// "++ b/workspace/README.md", added, reads "+++ b/workspace/README.md",
// which is no file header).
func classifyDiff(lines []string) []diffLine {
	out := make([]diffLine, len(lines))
	var oldLeft, newLeft int
	for i, l := range lines {
		out[i].Text = l
		switch {
		case oldLeft > 0 || newLeft > 0:
			switch {
			case strings.HasPrefix(l, "+"):
				out[i].Class = "add"
				newLeft--
			case strings.HasPrefix(l, "-"):
				out[i].Class = "del"
				oldLeft--
			case strings.HasPrefix(l, `\`):
				out[i].Class = "meta" // \ No newline at end of file
			default:
				out[i].Class = "ctx"
				oldLeft--
				newLeft--
			}
		case strings.HasPrefix(l, "@@ "):
			out[i].Class = "hunk"
			oldLeft, newLeft = hunkCounts(l)
		default:
			out[i].Class = "meta"
		}
	}
	return out
}

// hunkCounts reads the line counts of a hunk header "@@ -a,b +c,d @@"
// (",b" left out means 1).
func hunkCounts(h string) (oldN, newN int) {
	f := strings.Fields(h)
	if len(f) < 3 {
		return 0, 0
	}
	count := func(r string) int {
		_, n, ok := strings.Cut(r[1:], ",")
		if !ok {
			return 1
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 0 {
			return 0
		}
		return v
	}
	return count(f[1]), count(f[2])
}
