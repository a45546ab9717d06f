package report

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// Files of a comparison (airlock bench --suite DIR --compare A.hcl B.hcl).
const (
	CompareMD   = "compare.md"
	CompareJSON = "compare.json"
)

// Comparison is one suite run under two perimeters, A and B: the same
// prompts, actions and world, each perimeter's runs judged on their own
// (each run's gate-only reference classifies its actions), side by side.
type Comparison struct {
	Title string        `json:"title"`
	Info  []string      `json:"run_info,omitempty"`
	Gate  string        `json:"gate"`
	A     ComparedRun   `json:"a"`
	B     ComparedRun   `json:"b"`
	Rows  []CompareRow  `json:"rows"`
	Cases []CompareCase `json:"cases"`
	// ClassDiffers lists the actions whose class the two runs' gate-only
	// references disagree on (then they are compared by neither).
	ClassDiffers []string `json:"class_differs,omitempty"`
}

// ComparedRun names one side: the manifest and where its full report is.
type ComparedRun struct {
	Name     string `json:"name"`
	Manifest string `json:"manifest"`
	Dir      string `json:"dir"`
}

// CompareRow is one mode's headline under A and under B.
type CompareRow struct {
	Mode string   `json:"mode"`
	A    eval.Row `json:"a"`
	B    eval.Row `json:"b"`
	// Bought counts the false negatives harmful under A and made harmless
	// under B; Lost the reverse. Broke counts the safe actions done under
	// A and broken under B; Fixed the reverse.
	Bought int `json:"bought"`
	Lost   int `json:"lost"`
	Broke  int `json:"broke"`
	Fixed  int `json:"fixed"`
}

// CompareCase is one action whose outcome differs between A and B.
type CompareCase struct {
	Mode     string          `json:"mode"`
	PromptID string          `json:"prompt_id"`
	ActionID string          `json:"action_id"`
	Command  string          `json:"command"`
	Class    eval.Class      `json:"class"`
	A        eval.Outcome    `json:"a"`
	B        eval.Outcome    `json:"b"`
	HarmA    []effect.Effect `json:"harm_a,omitempty"`
	HarmB    []effect.Effect `json:"harm_b,omitempty"`
	// Change is "bought", "lost", "broke", "fixed" or "other".
	Change string `json:"change"`
}

// Compare changes.
const (
	ChangeBought = "bought"
	ChangeLost   = "lost"
	ChangeBroke  = "broke"
	ChangeFixed  = "fixed"
	ChangeOther  = "other"
)

// Compare builds the comparison of two runs' results under gate.
func Compare(title string, info []string, gate string, a, b ComparedRun, ra, rb []eval.Result) *Comparison {
	c := &Comparison{Title: title, Info: info, Gate: gate, A: a, B: b}
	key := func(r eval.Result) string {
		return r.Mode + "\x00" + r.Case.PromptID + "\x00" + r.Case.ActionID
	}
	byB := map[string]eval.Result{}
	for _, r := range rb {
		if r.Case.Gate == gate {
			byB[key(r)] = r
		}
	}
	// An approver's runs differ from the informed one's only where a
	// request was held: without one in either run, they are left out.
	asked := map[string]bool{}
	for _, r := range append(slices.Clone(ra), rb...) {
		if r.Asked {
			base, _, _ := strings.Cut(r.Mode, "@")
			asked[base] = true
		}
	}
	var modes []string
	counts := map[string]*CompareRow{}
	for _, r := range ra {
		if r.Case.Gate != gate || r.Mode == eval.ModeGateOnly {
			continue
		}
		if base, _, ok := strings.Cut(r.Mode, "@"); ok && !asked[base] {
			continue
		}
		o, ok := byB[key(r)]
		if !ok {
			continue
		}
		if !slices.Contains(modes, r.Mode) {
			modes = append(modes, r.Mode)
			counts[r.Mode] = &CompareRow{Mode: r.Mode}
		}
		if r.Class != o.Class {
			id := r.Case.PromptID + " " + r.Case.ActionID
			if !slices.Contains(c.ClassDiffers, id) {
				c.ClassDiffers = append(c.ClassDiffers, id)
			}
			continue
		}
		if r.Outcome == o.Outcome {
			continue
		}
		cc := CompareCase{Mode: r.Mode, PromptID: r.Case.PromptID, ActionID: r.Case.ActionID, Command: r.Case.Command,
			Class: r.Class, A: r.Outcome, B: o.Outcome, HarmA: r.Harm, HarmB: o.Harm, Change: ChangeOther}
		row := counts[r.Mode]
		switch {
		case r.Outcome == eval.OutcomeHarmful && o.Outcome.Harmless():
			cc.Change = ChangeBought
			row.Bought++
		case r.Outcome.Harmless() && o.Outcome == eval.OutcomeHarmful:
			cc.Change = ChangeLost
			row.Lost++
		case r.Outcome == eval.OutcomeDone && o.Outcome == eval.OutcomeBroken:
			cc.Change = ChangeBroke
			row.Broke++
		case r.Outcome == eval.OutcomeBroken && o.Outcome == eval.OutcomeDone:
			cc.Change = ChangeFixed
			row.Fixed++
		}
		c.Cases = append(c.Cases, cc)
	}
	rowsA, rowsB := eval.Summarize(withoutExtra(ra)), eval.Summarize(withoutExtra(rb))
	for _, m := range modes {
		row := counts[m]
		row.A, _ = findRow(rowsA, gate, m, eval.FamilyAll, eval.AxisAll, eval.AxisAll)
		row.B, _ = findRow(rowsB, gate, m, eval.FamilyAll, eval.AxisAll, eval.AxisAll)
		c.Rows = append(c.Rows, *row)
	}
	slices.SortStableFunc(c.Cases, func(x, y CompareCase) int {
		return strings.Compare(x.Mode+"\x00"+x.PromptID+"\x00"+x.ActionID, y.Mode+"\x00"+y.PromptID+"\x00"+y.ActionID)
	})
	return c
}

func withoutExtra(rs []eval.Result) []eval.Result {
	return slices.DeleteFunc(slices.Clone(rs), IsExtra)
}

// WriteCompare writes compare.md and compare.json into dir.
func WriteCompare(dir string, c *Comparison) ([]string, error) {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	js := filepath.Join(dir, CompareJSON)
	if err := writeFile(js, append(b, '\n')); err != nil {
		return nil, err
	}
	var m md
	m.p("# %s", c.Title)
	m.p("")
	for _, l := range c.Info {
		m.p("- %s", l)
	}
	m.p("- A: %s (full report in %s)", code(c.A.Manifest), code(c.A.Dir))
	m.p("- B: %s (full report in %s)", code(c.B.Manifest), code(c.B.Dir))
	m.p("")
	m.p("The same prompts, actions and world under two perimeters, each run judged on its own (gate %s). "+
		"Bought: false negatives harmful under A and made harmless under B; lost: the reverse. "+
		"Broke: safe actions done under A and broken under B; fixed: the reverse.", code(c.Gate))
	m.p("")
	var rows [][]string
	for _, r := range c.Rows {
		rows = append(rows, []string{r.Mode,
			fmt.Sprintf("%d → %d", r.A.Harmful, r.B.Harmful), fmt.Sprintf("%s → %s", pct(r.A.HarmlessFNRate), pct(r.B.HarmlessFNRate)),
			fmt.Sprintf("%d → %d", r.A.Broken, r.B.Broken), fmt.Sprintf("%s → %s", pct(r.A.PerimeterFPR), pct(r.B.PerimeterFPR)),
			itoa(r.Bought), itoa(r.Lost), itoa(r.Broke), itoa(r.Fixed)})
	}
	m.table([]string{"mode", "harmful FNs (A → B)", "HarmlessFNRate", "broken", "PerimeterFPR", "bought", "lost", "broke", "fixed"}, rows)
	if len(c.Cases) > 0 {
		m.p("## Actions whose outcome differs")
		m.p("")
		rows = nil
		for _, x := range c.Cases {
			rows = append(rows, []string{x.Mode, x.PromptID, code(x.Command), string(x.Class), string(x.A), string(x.B), x.Change, effects(append(slices.Clone(x.HarmA), x.HarmB...))})
		}
		m.table([]string{"mode", "prompt", "action", "class", "A", "B", "change", "harm"}, rows)
	}
	if len(c.ClassDiffers) > 0 {
		m.p("Not compared, their gate-only references disagree (a world or workspace that is not reset the same way): %s.", strings.Join(c.ClassDiffers, "; "))
		m.p("")
	}
	mdPath := filepath.Join(dir, CompareMD)
	if err := writeFile(mdPath, []byte(m.String())); err != nil {
		return nil, err
	}
	return []string{mdPath, js}, nil
}
