package verify

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzVerify checks that Verify never panics, returns claims or an error but
// never both, wraps exactly one rejection reason, and accepts nothing but
// the one token the fixture signed.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	raw, c := fx.mint(f, time.Hour)
	parts := strings.Split(raw, ".")
	f.Add(raw)
	f.Add(parts[0] + "." + parts[1] + ".")
	f.Add(parts[0] + ".e30." + parts[2])
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("a.b.c")
	f.Add("")
	f.Add(strings.Repeat(".", 5))
	f.Fuzz(func(t *testing.T, in string) {
		got, err := fx.v.Verify(t.Context(), in, aud)
		if (got == nil) == (err == nil) {
			t.Fatalf("Verify(%q) = %v, %v: want exactly one of claims and error", in, got, err)
		}
		if err != nil {
			n := 0
			for _, r := range reasons {
				if errors.Is(err, r.err) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("Verify(%q) error %v wraps %d reasons", in, err, n)
			}
			return
		}
		if got.ID != c.ID {
			t.Fatalf("Verify(%q) accepted a token the fixture never signed: %+v", in, got)
		}
	})
}
