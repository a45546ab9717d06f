package approvals

import (
	"strings"
	"testing"
	"unicode"

	"github.com/airlock-sandbox/airlock/api"
)

func TestBodyText(t *testing.T) {
	a := func(body string, truncated bool, ct, ce string) api.Approval {
		return api.Approval{Body: []byte(body), BodyTruncated: truncated, ContentType: ct, ContentEncoding: ce}
	}
	for _, tc := range []struct {
		a    api.Approval
		n    int
		want string
	}{
		{a("", false, "", ""), 40, ""},
		{a(`{"names":["a","b"]}`, false, "application/json", ""), 40, `{"names":["a","b"]}`},
		{a("a\x1b[2Jb\u009b\u0085\u202e\u200bc\\x1b", false, "", ""), -1, `a\x1b[2Jb\u009b\u0085\u202e\u200bc\\x1b`},
		{a("a\x9bb", false, "", ""), -1, "(3 bytes, binary, content-type none)"},
		{a("line\r\nnext\ttab\x00", false, "text/plain", ""), -1, "(15 bytes, binary, content-type text/plain)"},
		{a("\xff\xfe\x00\x01", false, "", ""), 40, "(4 bytes, binary, content-type none)"},
		{a("\x1f\x8b\x08", false, "application/json", "gzip"), 40, "(3 bytes, gzip-encoded, content-type application/json)"},
		// Declared gzip, sent plain: a Go service reads the JSON.
		{a(`{"names":["svc-prod-db"]}`, false, "application/json", "gzip"), -1, `(declared gzip-encoded, but it is text) {"names":["svc-prod-db"]}`},
		{a("x", false, "text/\x1b[31mred", "identity"), 40, "x"},
		{a("\xff", false, "text/\x1b[31mred", ""), 40, `(1 bytes, binary, content-type text/\x1b[31mred)`},
		// Cut at 10 characters, never inside an escape.
		{a("abcdefgh\x1bxyz", false, "", ""), 10, "abcdefgh… (12 bytes, cut)"},
		// Cut by the gateway inside a character: still text.
		{a("héllo\xc3", true, "", ""), -1, "héllo… (more than 7 bytes, cut)"},
		// A key twice: Go's encoding/json acts on the last, which the
		// padding puts past the cut; the note comes first.
		{a(`{"names":["svc-dev-a"]`+strings.Repeat(" ", 200)+`,"names":["svc-prod-db"]}`, false, "application/json", ""), 20,
			`(duplicate key "names": a service may act on either) {"names":["svc-dev-a… (247 bytes, cut)`},
		{a(`{"x":{"names":1,"nameſ":2}}`, false, "", ""), -1, `(duplicate key "nameſ": a service may act on either) {"x":{"names":1,"nameſ":2}}`},
		{a(`{"a":"a","b":{"a":["a",{"a":1}]},"c":[{"a":1},{"a":2}]}`, false, "", ""), -1, `{"a":"a","b":{"a":["a",{"a":1}]},"c":[{"a":1},{"a":2}]}`},
		{a(`{"a":1,"b":2`, true, "", ""), -1, `{"a":1,"b":2… (more than 12 bytes, cut)`},
	} {
		if got := BodyText(tc.a, tc.n); got != tc.want {
			t.Errorf("BodyText(%q, %d) = %q, want %q", tc.a.Body, tc.n, got, tc.want)
		}
		if strings.ContainsFunc(BodyText(tc.a, tc.n), func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
			t.Errorf("BodyText(%q) has a character that is not printable", tc.a.Body)
		}
	}
}
