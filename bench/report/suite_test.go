package report

import (
	"testing"

	"github.com/airlock-sandbox/airlock/bench/eval"
)

// A prompt's actions are listed in their order, the tenth after the
// second.
func TestSuiteActionOrder(t *testing.T) {
	in := &SuiteInput{Name: "desk", Prompts: []SuitePrompt{{ID: "B"}, {ID: "A"}}}
	var results []eval.Result
	for _, id := range []string{"A:10", "A:2", "B:1", "A:1"} {
		prompt := id[:1]
		c := &eval.Case{PromptID: prompt, ActionID: id, Gate: "allow-all", Decision: eval.Allow}
		results = append(results, eval.Result{Case: c, Mode: eval.ModeGateOnly, Class: eval.ReadOnly, Outcome: eval.OutcomeNoEffect})
	}
	s := buildSuite(in, results, "allow-all")
	var got []string
	for _, c := range s.Cases {
		got = append(got, c.ActionID)
	}
	want := []string{"B:1", "A:1", "A:2", "A:10"}
	if len(got) != len(want) {
		t.Fatalf("cases %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}
