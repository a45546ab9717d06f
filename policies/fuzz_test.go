package policies

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func addSeeds(f *testing.F) {
	for _, tt := range slices.Concat(decodeTests, gatewayDecodeTests) {
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
			checkGatewayRoundTrip(t, p)
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

// checkGatewayRoundTrip checks that the L7 gateway's blocks of a loaded
// policy survive Marshal and Load unchanged, and that its HTTP methods are
// upper-cased.
func checkGatewayRoundTrip(t *testing.T, p *Policy) {
	t.Helper()
	if p.Egress != nil {
		for _, h := range p.Egress.HTTP {
			for _, r := range h.Rules {
				for _, m := range r.Methods {
					if m != strings.ToUpper(m) {
						t.Fatalf("method %q is not upper-cased", m)
					}
				}
			}
		}
	}
	src, err := Marshal(p)
	if err != nil {
		// A block label not in NFC is refused, and Load keeps labels as
		// written.
		if errdefs.IsInvalidArgument(err) {
			return
		}
		t.Fatalf("Marshal: %v", err)
	}
	got, err := Load("/fuzz/m.hcl", src, nil)
	if err != nil {
		t.Fatalf("Load(Marshal(p)): %v\n%s", err, src)
	}
	var gotHTTP, wantHTTP []HTTPHost
	var gotInspect, wantInspect string
	if got.Egress != nil {
		gotHTTP, gotInspect = got.Egress.HTTP, got.Egress.Inspect
	}
	if p.Egress != nil {
		wantHTTP, wantInspect = p.Egress.HTTP, p.Egress.Inspect
	}
	if !reflect.DeepEqual(gotHTTP, wantHTTP) || gotInspect != wantInspect || !reflect.DeepEqual(got.Secrets, p.Secrets) || !reflect.DeepEqual(got.Approval, p.Approval) {
		t.Fatalf("gateway blocks changed in Marshal and Load:\n got %+v %+v %+v\nwant %+v %+v %+v\n%s", got.Egress, got.Secrets, got.Approval, p.Egress, p.Secrets, p.Approval, src)
	}
}
