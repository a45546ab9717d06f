package revisions

import (
	"fmt"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
)

// TestEveryPromptHasOneRevision: each of the 128 prompts gets exactly one
// revision, and each revised oracle names only items of the fixture, in
// its lane, none protected.
func TestEveryPromptHasOneRevision(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := data.LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := LoadOracles()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, p := range prompts {
		n := 0
		for _, r := range revs {
			if r.Applies(p) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d revisions, want 1", p.ID, n)
		}
	}
	for _, r := range revs {
		kinds[r.Kind]++
		fam, err := fams.Get(r.Family)
		if err != nil {
			t.Fatal(err)
		}
		o := oracles[r.ID]
		for _, id := range o.Authorized {
			it, ok := fam.Item(id)
			switch {
			case !ok:
				t.Errorf("%s: authorized item %q is not in the fixture", r.ID, id)
			case it.Lane != o.Lane:
				t.Errorf("%s: authorized item %q is in lane %s, the oracle's lane is %s", r.ID, id, it.Lane, o.Lane)
			case it.Protected || slices.Contains(o.Protected, id):
				t.Errorf("%s: authorized item %q is protected", r.ID, id)
			}
		}
	}
	if kinds[Narrowing] == 0 || kinds[Widening] == 0 {
		t.Errorf("kinds %v: want both narrowing and widening revisions", kinds)
	}
}

// TestOraclesAreAmPermBenchs: each revised oracle is AmPermBench's own
// ground truth for the request the revision restates: a narrowing to
// ticket 4812 is the B1 oracle of its lane, a widening to the ticket range
// the B2 oracle; a widening contains the first oracle's set and a
// narrowing is contained in it.
func TestOraclesAreAmPermBenchs(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	amp, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := LoadOracles()
	if err != nil {
		t.Fatal(err)
	}
	prefix := map[string]string{data.CleanUpBranches: "CB", data.CancelJobs: "CJ", data.RestartServices: "RS", data.CleanUpArtifacts: "CA"}
	for _, r := range revs {
		slot := "B1"
		if r.Kind == Widening {
			slot = "B2"
		}
		same := amp[fmt.Sprintf("%s-S0-%s-%s", prefix[r.Family], slot, r.R)]
		got := oracles[r.ID]
		if got.Lane != same.Lane || !slices.Equal(got.Authorized, same.Authorized) || !slices.Equal(got.Protected, same.Protected) || !slices.Equal(got.MustPreserve, same.MustPreserve) {
			t.Errorf("%s: revised oracle %+v, want AmPermBench's %s oracle %+v", r.ID, got, slot, same)
		}
		first := amp[fmt.Sprintf("%s-S0-%s-%s", prefix[r.Family], r.B, r.R)]
		sub, super := got.Authorized, first.Authorized
		if r.Kind == Widening {
			sub, super = super, sub
		}
		for _, id := range sub {
			if !slices.Contains(super, id) {
				t.Errorf("%s (%s): %s is in %v but not in %v", r.ID, r.Kind, id, sub, super)
			}
		}
		if slices.Equal(sub, super) {
			t.Errorf("%s (%s): the revision changes nothing the oracle authorizes", r.ID, r.Kind)
		}
	}
}
