package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// Compare sets two runs' outcomes side by side: what B makes harmless that
// A let through (bought), the reverse (lost), the safe actions B breaks
// (broke) and the reverse (fixed); an approver's runs only where a request
// was held; an action whose class the two references disagree on is
// compared by neither.
func TestCompare(t *testing.T) {
	harm := []effect.Effect{{Op: effect.CancelJob, Target: "job-b"}}
	mk := func(action string, class eval.Class, outcomes map[string]eval.Outcome, asked bool) []eval.Result {
		c := &eval.Case{PromptID: "P", ActionID: action, Command: "cmd " + action, Gate: "allow-all", Decision: eval.Allow}
		var out []eval.Result
		for mode, o := range outcomes {
			r := eval.Result{Case: c, Mode: mode, Class: class, Outcome: o, Asked: asked && mode != eval.ModeGateOnly}
			if o == eval.OutcomeHarmful {
				r.Harm = harm
			}
			out = append(out, r)
		}
		return out
	}
	per, absent := "perimeter", eval.ApproverMode("perimeter", eval.ApproverAbsent)
	var a, b []eval.Result
	add := func(action string, class eval.Class, oa, ob eval.Outcome) {
		a = append(a, mk(action, class, map[string]eval.Outcome{eval.ModeGateOnly: eval.OutcomeHarmful, per: oa, absent: oa}, false)...)
		b = append(b, mk(action, class, map[string]eval.Outcome{eval.ModeGateOnly: eval.OutcomeHarmful, per: ob, absent: ob}, false)...)
	}
	add("P:1", eval.Unsafe, eval.OutcomeHarmful, eval.OutcomeBlocked)
	add("P:2", eval.Unsafe, eval.OutcomeHarmful, eval.OutcomeRejected)
	add("P:3", eval.Unsafe, eval.OutcomeBlocked, eval.OutcomeHarmful)
	add("P:4", eval.Safe, eval.OutcomeDone, eval.OutcomeBroken)
	add("P:5", eval.Safe, eval.OutcomeBroken, eval.OutcomeDone)
	add("P:6", eval.Unsafe, eval.OutcomeBlocked, eval.OutcomeBlocked)
	add("P:7", eval.Unsafe, eval.OutcomeHarmful, eval.OutcomeHeld)
	// The references disagree: compared by neither.
	a = append(a, mk("P:8", eval.Safe, map[string]eval.Outcome{per: eval.OutcomeDone}, false)...)
	b = append(b, mk("P:8", eval.Unsafe, map[string]eval.Outcome{per: eval.OutcomeBlocked}, false)...)

	c := Compare("t", nil, "allow-all", ComparedRun{Name: "A-loose"}, ComparedRun{Name: "B-tight"}, a, b)
	if len(c.Rows) != 1 || c.Rows[0].Mode != per {
		t.Fatalf("rows %+v, want the perimeter's alone: nothing was held", c.Rows)
	}
	r := c.Rows[0]
	if r.Bought != 2 || r.Lost != 1 || r.Broke != 1 || r.Fixed != 1 {
		t.Errorf("bought %d lost %d broke %d fixed %d, want 2 1 1 1", r.Bought, r.Lost, r.Broke, r.Fixed)
	}
	changes := map[string]string{}
	for _, x := range c.Cases {
		changes[x.ActionID] = x.Change
	}
	for action, want := range map[string]string{"P:1": ChangeBought, "P:2": ChangeBought, "P:3": ChangeLost, "P:4": ChangeBroke, "P:5": ChangeFixed, "P:7": ChangeOther} {
		if changes[action] != want {
			t.Errorf("%s: %q, want %q", action, changes[action], want)
		}
	}
	if _, ok := changes["P:6"]; ok {
		t.Error("an action with the same outcome is listed")
	}
	if len(c.ClassDiffers) != 1 || !strings.HasPrefix(c.ClassDiffers[0], "P P:8") {
		t.Errorf("class differs: %q", c.ClassDiffers)
	}

	// A held request brings the approvers' rows in.
	a = append(a, mk("P:9", eval.Unsafe, map[string]eval.Outcome{eval.ModeGateOnly: eval.OutcomeHarmful, per: eval.OutcomeBlocked, absent: eval.OutcomeBlocked}, true)...)
	b = append(b, mk("P:9", eval.Unsafe, map[string]eval.Outcome{eval.ModeGateOnly: eval.OutcomeHarmful, per: eval.OutcomeBlocked, absent: eval.OutcomeBlocked}, true)...)
	c = Compare("t", nil, "allow-all", ComparedRun{Name: "A-loose"}, ComparedRun{Name: "B-tight"}, a, b)
	if len(c.Rows) != 2 {
		t.Errorf("rows %+v, want the perimeter's and the absent approver's", c.Rows)
	}
	dir := t.TempDir()
	files, err := WriteCompare(dir, c)
	if err != nil || len(files) != 2 {
		t.Fatalf("WriteCompare: %v %v", files, err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, CompareMD))
	for _, want := range []string{"| perimeter | ", "bought", "`cmd P:4`", "Not compared, their gate-only references disagree"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("compare.md lacks %q", want)
		}
	}
}
