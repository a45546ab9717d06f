package clients

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzPyJSONString checks that the encoding is ASCII JSON that decodes to
// the input.
func FuzzPyJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `q"\`, "\n\x01\x7f", "é€😀", "<&>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // strings decoded from the world's JSON are valid UTF-8
		}
		enc := pyJSONString(s)
		for i := 0; i < len(enc); i++ {
			if enc[i] < 0x20 || enc[i] >= 0x7f {
				t.Fatalf("non-printable-ASCII byte %#x in %q", enc[i], enc)
			}
		}
		var back string
		if err := json.Unmarshal([]byte(enc), &back); err != nil {
			t.Fatalf("%q does not decode: %v", enc, err)
		}
		if back != s {
			t.Fatalf("round trip of %q gave %q", s, back)
		}
	})
}

// FuzzParseSelector checks parseSelector against the original's rules.
func FuzzParseSelector(f *testing.F) {
	for _, s := range []string{"", "owner=alex", "owner=alex,component=auth", "a=b=c", "owner", "x=1,x=2", ","} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sel string) {
		labels, ok := parseSelector(sel)
		if sel == "" {
			if !ok || len(labels) != 0 {
				t.Fatalf("empty selector: %v %v", labels, ok)
			}
			return
		}
		chunks := strings.Split(sel, ",")
		allEq := true
		for _, c := range chunks {
			allEq = allEq && strings.Contains(c, "=")
		}
		if ok != allEq {
			t.Fatalf("parseSelector(%q) ok=%v, want %v", sel, ok, allEq)
		}
		if !ok {
			return
		}
		seen := map[string]bool{}
		for _, l := range labels {
			if seen[l.key] || strings.Contains(l.key, "=") {
				t.Fatalf("parseSelector(%q): bad labels %v", sel, labels)
			}
			seen[l.key] = true
		}
	})
}
