package report

import (
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// SuiteInput is what the report says of an operator's suite
// (bench/suite) besides its results.
type SuiteInput struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Dir         string `json:"dir"`
	// Prompts are the prompts run, in suite order.
	Prompts []SuitePrompt `json:"prompts"`
}

// SuitePrompt is one prompt of a suite as run: its oracle label and
// perimeter.
type SuitePrompt struct {
	ID         string            `json:"id"`
	Pos        string            `json:"pos"`
	Trap       bool              `json:"trap,omitempty"`
	Note       string            `json:"note,omitempty"`
	Authorized []effect.Effect   `json:"authorized"`
	Manifest   string            `json:"manifest"`
	Vars       map[string]string `json:"vars,omitempty"`
}

// SuiteSummary is the suite's part of summary.json: the input, and every
// action's outcome per mode under the headline gate (the per-action
// scoring).
type SuiteSummary struct {
	SuiteInput
	Cases []SuiteCase `json:"cases"`
}

// SuiteCase is one action of a prompt, judged.
type SuiteCase struct {
	PromptID string     `json:"prompt_id"`
	ActionID string     `json:"action_id"`
	Command  string     `json:"command"`
	Decision string     `json:"decision"`
	Class    eval.Class `json:"class"`
	// Outcomes by mode; Harm are the unauthorized effects by mode, for the
	// modes that had any.
	Outcomes map[string]eval.Outcome    `json:"outcomes"`
	Harm     map[string][]effect.Effect `json:"harm,omitempty"`
}

func buildSuite(in *SuiteInput, results []eval.Result, gate string) *SuiteSummary {
	s := &SuiteSummary{SuiteInput: *in}
	idx := map[string]int{}
	for _, r := range results {
		c := r.Case
		if c.Gate != gate {
			continue
		}
		k := c.PromptID + "\x00" + c.ActionID
		i, ok := idx[k]
		if !ok {
			i = len(s.Cases)
			idx[k] = i
			s.Cases = append(s.Cases, SuiteCase{PromptID: c.PromptID, ActionID: c.ActionID, Command: c.Command, Decision: c.Decision,
				Class: r.Class, Outcomes: map[string]eval.Outcome{}})
		}
		sc := &s.Cases[i]
		sc.Outcomes[r.Mode] = r.Outcome
		if len(r.Harm) > 0 {
			if sc.Harm == nil {
				sc.Harm = map[string][]effect.Effect{}
			}
			sc.Harm[r.Mode] = r.Harm
		}
	}
	order := map[string]int{}
	for i, p := range in.Prompts {
		order[p.ID] = i
	}
	slices.SortStableFunc(s.Cases, func(a, b SuiteCase) int {
		if d := order[a.PromptID] - order[b.PromptID]; d != 0 {
			return d
		}
		return actionIndex(a.ActionID) - actionIndex(b.ActionID)
	})
	return s
}

// actionIndex is N of a suite action's id "PROMPT:N" (0 for an agent's
// one action under the prompt).
func actionIndex(id string) int {
	i := strings.LastIndexByte(id, ':')
	if i < 0 {
		return 0
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil {
		return 0
	}
	return n
}

// writeSuite writes the suite's sections: every action's outcome, and the
// perimeter each prompt ran under.
func writeSuite(m *md, s *SuiteSummary, modes []string, manifestDir string) {
	m.p("## Suite %s: every action", code(s.Name))
	m.p("")
	if s.Description != "" {
		m.p("%s", s.Description)
		m.p("")
	}
	m.p("Each prompt's actions, judged by their effects against the prompt's oracle label (%s); the class comes from the gate-only run.", code(s.Dir))
	m.p("")
	var shown []string
	for _, mode := range modes {
		if mode == eval.ModeGateOnly || strings.Contains(mode, "@") {
			continue
		}
		shown = append(shown, mode)
	}
	header := append([]string{"prompt", "action", "class", "gate"}, shown...)
	header = append(header, "harm ("+PerimeterMode+")")
	var rows [][]string
	traps := map[string]bool{}
	for _, p := range s.Prompts {
		traps[p.ID] = p.Trap
	}
	for _, c := range s.Cases {
		id := c.PromptID
		if traps[id] {
			id += " (trap)"
		}
		row := []string{id, code(c.Command), string(c.Class), c.Decision}
		for _, mode := range shown {
			row = append(row, string(c.Outcomes[mode]))
		}
		row = append(row, effects(c.Harm[PerimeterMode]))
		rows = append(rows, row)
	}
	m.table(header, rows)

	m.p("## Perimeter: the operator's manifests")
	m.p("")
	m.p("Each prompt ran under its manifest as written (the bench's image, command and user replace the manifest's; every other layer stays), loaded with the prompt's variables, or under the manifest generated from its text where the table says so (with the generator's decisions beside it). The manifests as run are in %s.", code(manifestDir))
	m.p("")
	rows = nil
	for _, p := range s.Prompts {
		var auth []string
		for _, e := range p.Authorized {
			auth = append(auth, e.Op+" "+e.Target)
		}
		label := strings.Join(auth, ", ")
		if label == "" {
			label = "nothing"
		}
		rows = append(rows, []string{p.ID, code(p.Manifest), vars(p.Vars), label})
	}
	m.table([]string{"prompt", "manifest", "vars", "authorized (oracle)"}, rows)
}

// asked reports whether any perimeter run held a request.
func (s *Summary) asked() bool {
	return slices.ContainsFunc(s.Rows, func(r eval.Row) bool { return r.AsksSafe+r.AsksUnsafe > 0 })
}
