package policies

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "session and resources",
			in: `session "t" {
image="airlock/agent:bookworm"
  command = [ "a","b" ]
      resources {
  cpus=2
    memory = "1GiB"
  }
}
`,
			want: `session "t" {
  image   = "airlock/agent:bookworm"
  command = ["a", "b"]
  resources {
    cpus   = 2
    memory = "1GiB"
  }
}
`,
		},
		{
			name: "pool",
			in: `session "t" {
image="airlock/agent:bookworm"
    pool {
size=4
      }
}
`,
			want: `session "t" {
  image = "airlock/agent:bookworm"
  pool {
    size = 4
  }
}
`,
		},
		{
			name: "pool on one line",
			in:   "session \"t\" {\n  image = \"x\"\n  pool {   size=4 }\n}\n",
			want: "session \"t\" {\n  image = \"x\"\n  pool { size = 4 }\n}\n",
		},
		{
			// Format lays out what it does not check: Load reports these.
			name: "pool with unknown attribute and duplicate block",
			in:   "session \"t\" {\n  image = \"x\"\n  pool {\n  size=1\n      min=2\n  }\n  pool {\nsize=-1\n}\n}\n",
			want: "session \"t\" {\n  image = \"x\"\n  pool {\n    size = 1\n    min  = 2\n  }\n  pool {\n    size = -1\n  }\n}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Format([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Format:\n%s\nwant:\n%s", got, tt.want)
			}
			again, err := Format(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("Format is not idempotent:\n%s\nthen:\n%s (%v)", got, again, err)
			}
		})
	}
}

// TestFormatRoundTrip checks that formatting never changes what a manifest
// means: the formatted source decodes to the same policy, or fails with the
// same first error on the same line.
func TestFormatRoundTrip(t *testing.T) {
	for _, tt := range decodeTests {
		t.Run(tt.name, func(t *testing.T) {
			formatted, err := Format([]byte(tt.src))
			if err != nil {
				if tt.summary == "" {
					t.Fatalf("Format of a valid manifest: %v", err)
				}
				return
			}
			p, derr := Decode("/manifests/m.hcl", []byte(tt.src), tt.vars)
			fp, fderr := Decode("/manifests/m.hcl", formatted, tt.vars)
			if !reflect.DeepEqual(fp, p) {
				t.Errorf("formatted source decodes to\n%+v\nwant\n%+v\nformatted:\n%s", fp, p, formatted)
			}
			if derr.HasErrors() != fderr.HasErrors() {
				t.Fatalf("errors before formatting: %v; after: %v", derr, fderr)
			}
			if derr.HasErrors() {
				e, fe := derr.Errors()[0], fderr.Errors()[0]
				if fe.Summary != e.Summary || fe.Line != e.Line {
					t.Errorf("first error after formatting = %q at line %d, want %q at line %d", fe.Summary, fe.Line, e.Summary, e.Line)
				}
			}
		})
	}
}

func TestFormatSyntaxError(t *testing.T) {
	_, err := FormatSource("bad.hcl", []byte("session \"t\" {\n  image = \n"))
	var derr *DiagnosticsError
	if !errors.As(err, &derr) {
		t.Fatalf("err = %v (%T), want *DiagnosticsError", err, err)
	}
	if !strings.HasPrefix(err.Error(), "bad.hcl:2,") {
		t.Errorf("Error() = %q, want a bad.hcl:2 location", err)
	}
}

// TestExamplesFormatted keeps the examples in canonical layout.
func TestExamplesFormatted(t *testing.T) {
	for _, path := range examples(t) {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Format(src)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if string(got) != string(src) {
			t.Errorf("%s is not formatted; run airlock fmt on it", path)
		}
	}
}

func examples(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob("../examples/*.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no examples found")
	}
	return paths
}
