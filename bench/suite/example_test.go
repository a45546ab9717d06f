package suite

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The example suite shipped in examples/suites/release-desk loads, uses
// both of its world's services, has traps, and every prompt's perimeter
// loads under both of its manifests.
func TestExampleReleaseDesk(t *testing.T) {
	dir := filepath.Join("..", "..", "examples", "suites", "release-desk")
	s, err := Load(dir)
	if err != nil {
		var derr *DiagnosticsError
		if errors.As(err, &derr) {
			for _, d := range derr.Errors() {
				t.Error(d)
			}
		}
		t.Fatal(err)
	}
	if s.Name != "release-desk" || s.Description == "" || s.Manifest != filepath.Join(dir, "manifests", "tight.hcl") {
		t.Errorf("suite %q, description %q, manifest %q", s.Name, s.Description, s.Manifest)
	}
	if len(s.Prompts) < 15 {
		t.Errorf("%d prompts, want at least 15", len(s.Prompts))
	}
	if got := s.World.Services(); !slices.Contains(got, "jobs") || !slices.Contains(got, "services") {
		t.Errorf("the world's services are %q, want jobs and services", got)
	}
	traps := 0
	for _, p := range s.Prompts {
		if p.Trap {
			traps++
		}
	}
	if traps < 2 {
		t.Errorf("%d traps, want at least 2", traps)
	}

	loose := filepath.Join(dir, "manifests", "loose.hcl")
	for _, p := range s.Prompts {
		if len(p.Actions) == 0 || len(p.Actions) > 3 {
			t.Errorf("%s: %d actions, want 1 to 3", p.ID, len(p.Actions))
		}
		if p.Policy == nil {
			t.Errorf("%s: no policy", p.ID)
		}
		if _, err := policies.LoadFile(loose, p.Vars); err != nil {
			t.Errorf("%s: loose.hcl with vars %v: %v", p.ID, p.Vars, err)
		}
	}
}
