package policies

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	in := `session "t" {
image="airlock/agent:bookworm"
  command = [ "a","b" ]
      resources {
  cpus=2
    memory = "1GiB"
  }
}
`
	want := `session "t" {
  image   = "airlock/agent:bookworm"
  command = ["a", "b"]
  resources {
    cpus   = 2
    memory = "1GiB"
  }
}
`
	got, err := Format([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("Format:\n%s\nwant:\n%s", got, want)
	}
	again, err := Format(got)
	if err != nil || string(again) != string(got) {
		t.Errorf("Format is not idempotent:\n%s\nthen:\n%s (%v)", got, again, err)
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
