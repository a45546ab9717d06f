package l7

import "testing"

func TestLenientUnescape(t *testing.T) {
	for in, want := range map[string]string{
		"/a%62c":          "/abc",
		"/x%zz?k=%61b":    "/x%zz?k=ab",
		"%":               "%",
		"%4":              "%4",
		"%41":             "A",
		"a+b%2Bc":         "a+b+c",
		"/p%2561":         "/p%61", // once, as servers do
		"trailing%4":      "trailing%4",
		"two%41%42":       "twoAB",
		"no escapes here": "no escapes here",
	} {
		if got := lenientUnescape(in); got != want {
			t.Errorf("lenientUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}
