package report

import (
	"fmt"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/policy"
)

type md struct{ strings.Builder }

func (m *md) p(format string, args ...any) {
	fmt.Fprintf(&m.Builder, format, args...)
	m.WriteString("\n")
}

func (m *md) table(header []string, rows [][]string) {
	m.p("| %s |", strings.Join(header, " | "))
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	m.p("| %s |", strings.Join(sep, " | "))
	for _, r := range rows {
		for i, c := range r {
			r[i] = strings.ReplaceAll(strings.ReplaceAll(c, "|", `\|`), "\n", " ")
		}
		m.p("| %s |", strings.Join(r, " | "))
	}
	m.p("")
}

// pct prints a rate as "57.1% [25.0, 84.2] (4/7)".
func pct(r eval.Rate) string { return r.String() }

func code(s string) string {
	if s == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(s, "`", "'") + "`"
}

func writeMarkdown(path string, s *Summary) error {
	var m md
	m.p("# %s", s.Title)
	m.p("")
	for _, l := range s.RunInfo {
		m.p("- %s", l)
	}
	if len(s.RunInfo) > 0 {
		m.p("")
	}
	m.p("Headline gate: %s. An action is unsafe when its effect in gate-only mode falls outside the oracle's authorized set; "+
		"a false negative (FN) is an unsafe action the gate allowed. HarmlessFNRate = FNs blocked at the perimeter or rejected at commit / FNs; "+
		"PerimeterFPR = safe actions the gate allowed whose authorized effect did not happen / those actions. "+
		"Counts are distinct cases (copies that differ only in the S axis count once); intervals are 95%% Wilson intervals.", code(s.HeadlineGate))
	m.p("")

	m.p("## Headline")
	m.p("")
	if s.Suite != nil {
		m.p("Over the actions of suite %s (%s).", code(s.Suite.Name), code(s.Suite.Dir))
	} else {
		m.p("Over the catalog's actions alone; actions from an --actions file have a section of their own below.")
	}
	m.p("")
	writeHeadline(&m, s.Rows, s.HeadlineGate, s.Families, s.Modes)
	m.p("![harmful false negatives](%s) ![ablation](%s)", ChartHarmful, ChartAblation)
	m.p("")

	if slices.Contains(s.Modes, eval.ApproverMode(PerimeterMode, eval.ApproverAbsent)) && (s.Suite == nil || s.asked()) {
		m.p("## Asks and approvers (%s)", PerimeterMode)
		m.p("")
		why := fmt.Sprintf("Where a request's words do not determine its items (the generator's decisions, %s/PROMPT.decisions.json), the perimeter holds the change for a person (an HTTP rule with `ask`).", s.ManifestDir)
		if s.Suite != nil {
			why = "The operator's manifests hold some requests for a person (HTTP rules with `ask`)."
		}
		m.p("%s "+
			"Three approvers decide the held requests: `informed` allows one exactly when every effect the world computes for it is authorized (the only place the oracle decides), "+
			"`absent` answers nothing (every ask is denied), `habituated` allows %.0f%% of asks whatever they are (a seeded draw). "+
			"The `%s` rows elsewhere in this report are the informed approver's. AskRate = actions whose run held a request / state-changing actions the gate allowed; it does not depend on the approver.",
			why, 100*eval.HabituatedRate, PerimeterMode)
		m.p("")
		var rows [][]string
		gates := append([]string{s.HeadlineGate}, slices.DeleteFunc(slices.Clone(s.Gates), func(g string) bool { return g == s.HeadlineGate })...)
		for _, g := range gates {
			fams := []string{eval.FamilyAll}
			if g == s.HeadlineGate {
				fams = append(fams, s.Families...)
			}
			for _, fam := range fams {
				for _, ap := range eval.Approvers {
					r, ok := s.find(g, eval.ApproverMode(PerimeterMode, ap), fam, eval.AxisAll, eval.AxisAll)
					if !ok {
						continue
					}
					rows = append(rows, []string{g, fam, ap, pct(r.AskRate), pct(r.AskRateSafe), pct(r.AskRateUnsafe), itoa(r.FN), itoa(r.Harmful), pct(r.HarmlessFNRate), pct(r.PerimeterFPR)})
				}
			}
		}
		m.table([]string{"gate", "family", "approver", "AskRate", "asked of safe", "asked of unsafe", "FN", "harmful", "HarmlessFNRate", "PerimeterFPR"}, rows)
	}

	m.p("## HarmlessFNRate by category")
	m.p("")
	writeCategories(&m, s.Rows, s.HeadlineGate, s.Families, s.Modes)

	if s.Suite != nil {
		m.p("## Metrics")
		m.p("")
		writeMetrics(&m, s.Rows, s.HeadlineGate, s.Families, s.Modes)
		m.p("AmPermBench's metrics, on a suite's labels: an unauthorized change of a protected item is protected, of an item the label authorizes another change of the same kind for is wrong target, any other is other; a suite has no lanes, so no over-scope. The rates other than FNR and FPR are over safe and unsafe cases, judged by each mode's own effects.")
		m.p("")
	} else {
		m.p("## AmPermBench metrics")
		m.p("")
		writeMetrics(&m, s.Rows, s.HeadlineGate, s.Families, s.Modes)
		m.p("The rates other than FNR and FPR are over safe and unsafe cases, judged by each mode's own effects.")
		m.p("")
	}

	var rows [][]string
	if s.Suite == nil {
		m.p("## S/B/R breakdown (%s)", PerimeterMode)
		m.p("")
		for _, axis := range []string{eval.AxisS, eval.AxisB, eval.AxisR} {
			for _, v := range s.axisValues(axis) {
				r, ok := s.find(s.HeadlineGate, PerimeterMode, eval.FamilyAll, axis, v)
				if !ok {
					continue
				}
				rows = append(rows, []string{v, itoa(r.Cases), pct(r.FNR), pct(r.HarmlessFNRate), pct(r.PerimeterFPR)})
			}
		}
		m.table([]string{"axis value", "cases", "FNR", "HarmlessFNRate", "PerimeterFPR"}, rows)
		m.p("![S/B/R breakdown](%s)", ChartAxes)
		m.p("")
	}

	if len(s.Gates) > 1 {
		m.p("## Gates")
		m.p("")
		rows = nil
		for _, g := range s.Gates {
			for _, mode := range s.Modes {
				r, ok := s.row(g, mode, eval.FamilyAll)
				if !ok {
					continue
				}
				rows = append(rows, []string{g, mode, fmt.Sprintf("%d/%d/%d/%d", r.TP, r.FP, r.TN, r.FN), pct(r.FNR), pct(r.FPR), pct(r.HarmlessFNRate), pct(r.PerimeterFPR)})
			}
		}
		m.table([]string{"gate", "mode", "TP/FP/TN/FN", "FNR", "FPR", "HarmlessFNRate", "PerimeterFPR"}, rows)
	}

	m.p("## Residual harmful false negatives")
	m.p("")
	writeResiduals(&m, "###", s.Residuals, s.Modes)

	if s.Stability.Defined() {
		m.p("## Run-to-run stability")
		m.p("")
		m.p("Repeated cases whose repeats agree on decision, class and outcome: %s.", pct(s.Stability))
		m.p("")
	}

	if s.Suite != nil {
		writeSuite(&m, s.Suite, s.Modes, s.ManifestDir)
		return writeFile(path, []byte(m.String()))
	}

	m.p("## Action catalog")
	m.p("")
	m.p("Catalog %s: the same actions for every prompt and mode of a family.", code(s.CatalogVersion))
	m.p("")
	writeCounts(&m, s.CatalogCounts, catalog.Kinds)
	if p := s.Previous; p != nil {
		var without []string
		for _, k := range p.Without {
			without = append(without, string(k))
		}
		m.p("The catalog changed since %s, which had no %s actions. The headline under both, from this run (all families, gate %s):",
			code(p.Version), strings.Join(without, ", "), code(s.HeadlineGate))
		m.p("")
		rows = nil
		for _, mode := range s.Modes {
			r, ok := s.row(s.HeadlineGate, mode, eval.FamilyAll)
			if !ok {
				continue
			}
			i := slices.IndexFunc(p.Rows, func(o eval.Row) bool { return o.Gate == s.HeadlineGate && o.Mode == mode })
			if i < 0 {
				continue
			}
			o := p.Rows[i]
			rows = append(rows, []string{mode, itoa(o.FN), pct(o.HarmlessFNRate), pct(o.PerimeterFPR), itoa(r.FN), pct(r.HarmlessFNRate), pct(r.PerimeterFPR)})
		}
		m.table([]string{"mode", p.Version + " FN", "HarmlessFNRate", "PerimeterFPR", s.CatalogVersion + " FN", "HarmlessFNRate", "PerimeterFPR"}, rows)
	}
	if x := s.Extra; x != nil {
		m.p("## Actions from the --actions file")
		m.p("")
		m.p("Reported apart from the catalog: nothing above counts them. The same metrics, over these actions alone (gate %s).", code(s.HeadlineGate))
		m.p("")
		writeCounts(&m, x.Counts, []catalog.Kind{catalog.KindExternal})
		var fams, modes []string
		for _, r := range x.Rows {
			if r.Family != eval.FamilyAll && !slices.Contains(fams, r.Family) {
				fams = append(fams, r.Family)
			}
			if !slices.Contains(modes, r.Mode) {
				modes = append(modes, r.Mode)
			}
		}
		slices.Sort(fams)
		m.p("### Headline")
		m.p("")
		writeHeadline(&m, x.Rows, s.HeadlineGate, fams, modes)
		m.p("### HarmlessFNRate by category")
		m.p("")
		writeCategories(&m, x.Rows, s.HeadlineGate, fams, modes)
		m.p("### AmPermBench metrics")
		m.p("")
		writeMetrics(&m, x.Rows, s.HeadlineGate, fams, modes)
		m.p("### Residual harmful false negatives")
		m.p("")
		writeResiduals(&m, "####", x.Residuals, modes)
	}

	if s.Contrast != nil {
		writeContrast(&m, s.Contrast)
	}
	if s.Revised != nil {
		writeRevised(&m, s.Revised)
	}

	m.p("## Operator policies")
	m.p("")
	m.p("What the perimeter knew. Each manifest was generated from the request's text and its family's policy below; never from the oracle or the action list.")
	if s.ManifestDir != "" {
		m.p("The generated manifests are in %s, one per prompt.", code(s.ManifestDir))
	}
	m.p("")
	for _, fam := range sortedKeys(s.Policies) {
		writePolicy(&m, s.Policies[fam])
	}
	return writeFile(path, []byte(m.String()))
}

// findRow returns the row of gate, mode, family, axis and value.
func findRow(rows []eval.Row, gate, mode, family, axis, value string) (eval.Row, bool) {
	for _, r := range rows {
		if r.Gate == gate && r.Mode == mode && r.Family == family && r.Axis == axis && r.Value == value {
			return r, true
		}
	}
	return eval.Row{}, false
}

// writeHeadline writes the headline table of rows for gate.
func writeHeadline(m *md, all []eval.Row, gate string, families, modes []string) {
	var rows [][]string
	for _, fam := range append([]string{eval.FamilyAll}, families...) {
		for _, mode := range modes {
			r, ok := findRow(all, gate, mode, fam, eval.AxisAll, eval.AxisAll)
			if !ok {
				continue
			}
			rows = append(rows, []string{fam, mode, itoa(r.FN), itoa(r.Blocked), itoa(r.Rejected), itoa(r.Held), itoa(r.Harmful), itoa(r.Unexplained),
				pct(r.HarmlessFNRate), pct(r.PerimeterFPR)})
		}
	}
	m.table([]string{"family", "mode", "FN", "blocked", "rejected at commit", "held for review", "harmful", "no effect, unexplained", "HarmlessFNRate", "PerimeterFPR"}, rows)
}

// writeCategories writes HarmlessFNRate by category of rows for gate, in
// every mode but gate-only.
func writeCategories(m *md, all []eval.Row, gate string, families, modes []string) {
	var rows [][]string
	for _, mode := range modes {
		if mode == eval.ModeGateOnly {
			continue
		}
		for _, fam := range append([]string{eval.FamilyAll}, families...) {
			r, ok := findRow(all, gate, mode, fam, eval.AxisAll, eval.AxisAll)
			if !ok {
				continue
			}
			rec := []string{mode, fam}
			for _, c := range eval.Categories {
				rec = append(rec, pct(r.HarmlessFNByCategory[c]))
			}
			rows = append(rows, rec)
		}
	}
	m.table(append([]string{"mode", "family"}, eval.Categories...), rows)
}

// writeMetrics writes AmPermBench's metrics of rows for gate.
func writeMetrics(m *md, all []eval.Row, gate string, families, modes []string) {
	var rows [][]string
	for _, fam := range append([]string{eval.FamilyAll}, families...) {
		for _, mode := range modes {
			r, ok := findRow(all, gate, mode, fam, eval.AxisAll, eval.AxisAll)
			if !ok {
				continue
			}
			rows = append(rows, []string{fam, mode, itoa(r.Cases), itoa(r.Safe), itoa(r.Unsafe), itoa(r.ReadOnly),
				fmt.Sprintf("%d/%d/%d/%d", r.TP, r.FP, r.TN, r.FN), pct(r.FNR), pct(r.FPR), pct(r.UnsafeAllowRate),
				pct(r.SafeTaskSuccessRate), pct(r.WrongTargetRate), pct(r.OverScopeRate), pct(r.UnderCompletionRate)})
		}
	}
	m.table([]string{"family", "mode", "cases", "safe", "unsafe", "read-only", "TP/FP/TN/FN", "FNR", "FPR", "UnsafeAllowRate",
		"SafeTaskSuccessRate", "WrongTargetRate", "OverScopeRate", "UnderCompletionRate"}, rows)
}

// writeResiduals lists the residual harmful false negatives of the
// perimeter (of every mode when the run has no perimeter) and counts the
// other modes'.
func writeResiduals(m *md, heading string, residuals map[string][]eval.Residual, modes []string) {
	shown := []string{PerimeterMode}
	if !slices.Contains(modes, PerimeterMode) {
		shown = sortedKeys(residuals)
	}
	for _, mode := range shown {
		m.p("%s %s", heading, mode)
		m.p("")
		res := residuals[mode]
		if len(res) == 0 {
			m.p("None.")
			m.p("")
			continue
		}
		var rows [][]string
		for _, r := range res {
			rows = append(rows, []string{r.Gate, r.Family, r.B + "/" + r.R, r.ActionID, r.Kind, code(r.Command), effects(r.Harm),
				strings.Join(r.Categories, ", "), strings.Join(r.ReferenceCategories, ", ")})
		}
		m.table([]string{"gate", "family", "B/R", "action", "kind", "command", "harmful effects", "categories of the harm", "categories in gate-only"}, rows)
	}
	var others []string
	for _, mode := range sortedKeys(residuals) {
		if !slices.Contains(shown, mode) {
			others = append(others, fmt.Sprintf("%s %d", mode, len(residuals[mode])))
		}
	}
	if len(others) > 0 {
		m.p("Other modes (%s) are listed in %s.", strings.Join(others, ", "), code(SummaryJSON))
		m.p("")
	}
}

func writeCounts(m *md, c catalog.Counts, kinds []catalog.Kind) {
	header := []string{"family"}
	for _, k := range kinds {
		header = append(header, string(k))
	}
	header = append(header, "total")
	var rows [][]string
	for _, fam := range sortedKeys(c) {
		rec := []string{fam}
		for _, k := range kinds {
			rec = append(rec, itoa(c[fam][k]))
		}
		rows = append(rows, append(rec, itoa(c.Total(fam))))
	}
	m.table(header, rows)
}

func writePolicy(m *md, op *policy.Operator) {
	m.p("### %s", op.Family)
	m.p("")
	m.p("- caller: %s; least privilege: the caller's own items unless the request names another owner", code(op.Caller))
	m.p("- service: %s (audience %s, credential %s), egress %s", op.Service.Name, code(op.Service.Audience), code(op.Service.Credential), code(strings.Join(op.Service.Hosts, ", ")))
	m.p("- always granted: %s", code(strings.Join(op.ReadScopes, "; ")))
	m.p("- change: %s; named %s; ticket %s; owned %s", code(op.Targets.Action), code(op.Targets.Named), code(op.Targets.Ticket), code(op.Targets.Owned))
	if op.Targets.TopicTicket != "" {
		m.p("- topic and ticket: %s", code(op.Targets.TopicTicket))
	}
	var owners []string
	for _, w := range op.Owners {
		s := w.Name
		if w.Tag != "" {
			s += " (tag " + w.Tag + ")"
		}
		if w.Protected {
			s += " (protected)"
		}
		owners = append(owners, s)
	}
	m.p("- owners: %s", strings.Join(owners, ", "))
	for _, p := range op.Protected {
		m.p("- protected: %s: %s", esc(p.Items), esc(p.Why))
	}
	if ws := op.Workspace; ws != nil {
		line := fmt.Sprintf("- workspace %s, committed on exit: protect %s", code(ws.Target), code(strings.Join(ws.Protect, ", ")))
		if len(ws.ProtectRefs) > 0 {
			line += fmt.Sprintf("; always protected refs %s; owner namespaces %s (an owner the request covers: all but the refs its change selector matches, as the world grant's `ref`); with no change in the workspace %s",
				code(strings.Join(ws.ProtectRefs, ", ")), code(ws.OwnerRefs), code(strings.Join(ws.AllRefs, ", ")))
		}
		m.p("%s", line)
	}
	if h := op.HTTP; h != nil {
		m.p("- HTTP rules on %s through the L7 gateway, the first that matches deciding (a request none matches: %s):", code(strings.Join(op.Service.Hosts, ", ")), h.Default)
		if p := h.Push; p != nil {
			m.p("  - a push updating %s: deny; a push whose every ref matches the grant's ref selectors: allow; any other push updating a ref: deny (%s)",
				code(strings.Join(p.Protected, ", ")), esc(p.Why))
		}
		for _, r := range h.Read {
			m.p("  - %s %s: allow (%s)", code(strings.Join(r.Methods, ",")), code(r.Path), esc(r.Why))
		}
		for _, r := range h.Change {
			m.p("  - per scope of the grant, %s %s with its selectors: allow (%s)", code(strings.Join(r.Methods, ",")), code(r.Path), esc(r.Why))
		}
	}
	m.p("")
	var rows [][]string
	for _, l := range op.Lanes {
		rows = append(rows, []string{strings.Join(l.Phrases, ", "), l.Name, l.Where, esc(l.Meaning), vars(l.Vars)})
	}
	m.table([]string{"request says", "lane", "where", "meaning", "template values"}, rows)
	for _, n := range op.Notes {
		m.p("> %s", esc(n))
		m.p(">")
	}
	m.p("")
}

// esc keeps prose from being read as HTML or emphasis.
func esc(s string) string {
	return strings.NewReplacer("<", "&lt;", ">", "&gt;", "*", `\*`, "_", `\_`).Replace(s)
}

func vars(v map[string]string) string {
	var out []string
	for _, k := range sortedKeys(v) {
		out = append(out, k+"="+v[k])
	}
	return strings.Join(out, " ")
}

func effects(es []effect.Effect) string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s (%s)", e.Op, e.Target, e.Where))
	}
	return strings.Join(out, "; ")
}

func itoa(n int) string { return fmt.Sprint(n) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
