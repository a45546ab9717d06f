package runner

import (
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
)

// TestRevisedPrompts: the default subset is the S0 prompt of every B/R
// cell of the three world families; a list must name prompts the run
// selects.
func TestRevisedPrompts(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := data.LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := &plan{families: slices.Clone(data.FamilyNames), prompts: map[string][]data.Prompt{}}
	for _, p := range prompts {
		pl.prompts[p.Family] = append(pl.prompts[p.Family], p)
	}
	got, err := pl.revisedPrompts(RevisedSubsetDefault)
	if err != nil {
		t.Fatal(err)
	}
	cells := map[string]bool{}
	for _, p := range got {
		if p.S != "S0" {
			t.Errorf("default subset has %s", p.ID)
		}
		cells[p.Family+p.B+p.R] = true
	}
	if len(got) != 32 || len(cells) != 32 {
		t.Errorf("default subset: %d prompts in %d cells, want 32 and 32", len(got), len(cells))
	}
	if all, _ := pl.revisedPrompts(RevisedSubsetAll); len(all) != 128 {
		t.Errorf("all: %d prompts, want 128", len(all))
	}
	if some, err := pl.revisedPrompts("CB-S1-B0-R0,CJ-S0-B2-R0"); err != nil || len(some) != 2 {
		t.Errorf("two named prompts: %d, %v", len(some), err)
	}
	if none, err := pl.revisedPrompts(""); err != nil || none != nil {
		t.Errorf("no selection: %v, %v", none, err)
	}
	pl.prompts[data.CancelJobs] = pl.prompts[data.CancelJobs][:1]
	if _, err := pl.revisedPrompts("CJ-S3-B3-R1"); err == nil {
		t.Error("a prompt the run does not select was accepted")
	}
	pl.families = []string{data.CleanUpBranches}
	pl.prompts[data.CleanUpBranches] = slices.DeleteFunc(pl.prompts[data.CleanUpBranches], func(p data.Prompt) bool { return p.S == "S0" })
	if _, err := pl.revisedPrompts(RevisedSubsetDefault); err == nil {
		t.Error("a default selection of no prompt was accepted")
	}
}

// TestRevisedActions: a revised prompt runs its family's single-target
// actions, one per fixture item.
func TestRevisedActions(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	pl := &plan{actions: map[string][]catalog.Action{}}
	for _, fam := range fams.All() {
		acts, err := catalog.Build(fam)
		if err != nil {
			t.Fatal(err)
		}
		pl.actions[fam.Name] = acts
		got := pl.revisedActions(fam.Name)
		if len(got) != len(fam.Items()) {
			t.Errorf("%s: %d revised actions for %d fixture items", fam.Name, len(got), len(fam.Items()))
		}
		for _, a := range got {
			if a.Kind != catalog.KindSingle {
				t.Errorf("%s: revised action %s is %s", fam.Name, a.ID, a.Kind)
			}
		}
	}
}
