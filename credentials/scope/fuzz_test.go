package scope

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that Parse never panics, returns either a scope or an
// error, and that the canonical form round-trips.
func FuzzParse(f *testing.F) {
	for _, tt := range parseTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := Parse(s)
		if err != nil {
			if !sc.IsZero() {
				t.Fatalf("Parse(%q) returned both a scope and an error", s)
			}
			return
		}
		if sc.IsZero() {
			t.Fatalf("Parse(%q) returned neither a scope nor an error", s)
		}
		c := sc.String()
		again, err := Parse(c)
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its canonical form %q fails: %v", s, c, err)
		}
		if !again.Equal(sc) || again.String() != c {
			t.Fatalf("canonical form %q does not round-trip: got %q", c, again.String())
		}
		if len(c) > len(s) {
			t.Fatalf("canonical form %q is longer than input %q", c, s)
		}
	})
}

// FuzzMatch compares pattern matching with a regexp-based reference.
func FuzzMatch(f *testing.F) {
	f.Add("refs/heads/alex/*", "refs/heads/alex/fix")
	f.Add("a/**/b", "a/x/y/b")
	f.Add(`\**x*`, "*yx")
	f.Add("*a*a*a*a*a*b", strings.Repeat("a", 64))
	f.Fuzz(func(t *testing.T, pat, v string) {
		if len(pat) > 64 || len(v) > 256 || !utf8.ValidString(v) {
			return
		}
		p, err := compile(pat)
		if err != nil {
			return
		}
		if got, want := p.match(v), refMatch(t, pat, v); got != want {
			t.Fatalf("pattern %q match %q = %v, reference says %v", pat, v, got, want)
		}
	})
}
