package policies

import (
	"os"
	"testing"
)

func addSeeds(f *testing.F) {
	for _, tt := range decodeTests {
		f.Add([]byte(tt.src))
	}
	for _, path := range examples(f) {
		src, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
}

// FuzzLoad checks that Load returns either a policy or an error, and that
// every policy it returns passes Validate.
func FuzzLoad(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Load("/fuzz/m.hcl", src, nil)
		if (p == nil) == (err == nil) {
			t.Fatalf("Load returned policy %v and error %v: want exactly one", p, err)
		}
		if p != nil {
			if verr := p.Validate(); verr != nil {
				t.Fatalf("Load returned a policy that fails Validate: %v", verr)
			}
			return
		}
		derr, ok := err.(*DiagnosticsError)
		if !ok {
			t.Fatalf("error is %T, want *DiagnosticsError", err)
		}
		if !derr.HasErrors() || len(derr.Errors()) == 0 {
			t.Fatalf("DiagnosticsError without errors: %v", err)
		}
		for _, d := range derr.Diagnostics() {
			if d.Line == 0 || d.Summary == "" {
				t.Fatalf("diagnostic without location or summary: %+v", d)
			}
		}
	})
}

// FuzzFormat checks that formatting is idempotent whenever it succeeds.
func FuzzFormat(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		once, err := Format(src)
		if err != nil {
			return
		}
		twice, err := Format(once)
		if err != nil {
			t.Fatalf("formatted source does not parse: %v\n%s", err, once)
		}
		if string(once) != string(twice) {
			t.Fatalf("Format is not idempotent:\n%q\nthen\n%q", once, twice)
		}
	})
}
