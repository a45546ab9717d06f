package allowlist

import (
	"errors"
	"strings"
	"testing"
)

func TestToFQDN(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	// 4 labels of 63 plus 3 dots = 255 > 253; trim to exactly 253.
	name253 := label63 + "." + label63 + "." + label63 + "." + strings.Repeat("b", 61)
	tests := []struct {
		in      string
		want    FQDN
		wantErr error
	}{
		{in: "example.test", want: "example.test."},
		{in: "example.test.", want: "example.test."},
		{in: "ExAmPle.TEST", want: "example.test."},
		{in: "_acme-challenge.example.test", want: "_acme-challenge.example.test."},
		{in: "xn--bcher-kva.test", want: "xn--bcher-kva.test."},
		{in: "a-b.c_d.e9", want: "a-b.c_d.e9."},
		{in: "localhost", want: "localhost."},
		{in: ".", want: "."},
		{in: label63 + ".test", want: FQDN(label63 + ".test.")},
		{in: name253, want: FQDN(name253 + ".")},
		{in: name253 + ".", want: FQDN(name253 + ".")},

		{in: "", wantErr: ErrEmptyName},
		{in: "..", wantErr: ErrEmptyLabel},
		{in: "a..b", wantErr: ErrEmptyLabel},
		{in: ".a", wantErr: ErrEmptyLabel},
		{in: "a.b..", wantErr: ErrEmptyLabel},
		{in: strings.Repeat("a", 64) + ".test", wantErr: ErrLabelTooLong},
		{in: name253 + "b", wantErr: ErrNameTooLong},
		{in: "a\x00b.test", wantErr: ErrInvalidChar},
		{in: "a\nb.test", wantErr: ErrInvalidChar},
		{in: "a\x7fb.test", wantErr: ErrInvalidChar},
		{in: "a b.test", wantErr: ErrInvalidChar},
		{in: `a\000b.test`, wantErr: ErrInvalidChar},
		{in: `a\.b.test`, wantErr: ErrInvalidChar},
		{in: "*.example.test", wantErr: ErrInvalidChar},
		{in: "a*.example.test", wantErr: ErrInvalidChar},
		{in: "bücher.test", wantErr: ErrInvalidChar},
		{in: "a/b.test", wantErr: ErrInvalidChar},
		{in: "a:b.test", wantErr: ErrInvalidChar},
		{in: "-a.test", wantErr: ErrHyphenEdge},
		{in: "a-.test", wantErr: ErrHyphenEdge},
	}
	for _, test := range tests {
		t.Run(test.in, func(t *testing.T) {
			got, err := ToFQDN(test.in)
			if test.wantErr != nil {
				if !errors.Is(err, test.wantErr) {
					t.Fatalf("ToFQDN(%q) = %q, %v; want error %v", test.in, got, err, test.wantErr)
				}
				if got != "" {
					t.Errorf("ToFQDN(%q) returned %q with an error", test.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ToFQDN(%q) error: %v", test.in, err)
			}
			if got != test.want {
				t.Errorf("ToFQDN(%q) got %q, want %q", test.in, got, test.want)
			}
		})
	}
}

func TestToFQDNNoAllocWhenCanonical(t *testing.T) {
	in := "api.example.test."
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ToFQDN(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("ToFQDN(%q) allocates %v times, want 0", in, allocs)
	}
}

func TestFQDNRelations(t *testing.T) {
	tests := []struct {
		name, parent FQDN
		want         bool
	}{
		{"a.corp.test.", "corp.test.", true},
		{"b.a.corp.test.", "corp.test.", true},
		{"corp.test.", "corp.test.", false},
		{"evilcorp.test.", "corp.test.", false},
		{"corp.test.evil.test.", "corp.test.", false},
		{"a.test.", ".", true},
		{".", ".", false},
	}
	for _, test := range tests {
		if got := test.name.IsStrictSubdomainOf(test.parent); got != test.want {
			t.Errorf("%q.IsStrictSubdomainOf(%q) = %v, want %v", test.name, test.parent, got, test.want)
		}
	}
	if p, ok := FQDN("a.b.test.").Parent(); !ok || p != "b.test." {
		t.Errorf("Parent(a.b.test.) = %q, %v", p, ok)
	}
	if p, ok := FQDN("test.").Parent(); ok {
		t.Errorf("Parent(test.) = %q, want none", p)
	}
	if n := FQDN("a.b.test.").NumLabels(); n != 3 {
		t.Errorf("NumLabels = %d, want 3", n)
	}
	if s := FQDN("a.b.test.").WithoutTrailingDot(); s != "a.b.test" {
		t.Errorf("WithoutTrailingDot = %q", s)
	}
}

func FuzzToFQDN(f *testing.F) {
	for _, s := range []string{"example.test", "ExAmple.TEST.", ".", "", "a..b", "a\x00b", "*.x", "-a.b", "_a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ToFQDN(s)
		if (got == "") == (err == nil) {
			t.Fatalf("ToFQDN(%q) = %q, %v: want exactly one of name or error", s, got, err)
		}
		if err != nil {
			return
		}
		if !strings.HasSuffix(string(got), ".") {
			t.Fatalf("ToFQDN(%q) = %q: no trailing dot", s, got)
		}
		if len(got) > maxNameLen+1 {
			t.Fatalf("ToFQDN(%q) = %q: too long", s, got)
		}
		for i := 0; i < len(got); i++ {
			c := got[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
				t.Fatalf("ToFQDN(%q) = %q: byte %q survived", s, got, c)
			}
		}
		if !strings.EqualFold(strings.TrimSuffix(s, "."), got.WithoutTrailingDot()) && got != "." {
			t.Fatalf("ToFQDN(%q) = %q: not the same name", s, got)
		}
		again, err := ToFQDN(string(got))
		if err != nil || again != got {
			t.Fatalf("ToFQDN is not idempotent on %q: %q, %v", got, again, err)
		}
	})
}
