package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/report"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// Files written beside bench/report's.
const (
	RunsFile      = "runs.jsonl"
	CasesFile     = "cases.jsonl"
	ResidualsFile = "residuals.json"
	AsksFile      = "asks.jsonl"
	ConfigsDir    = "configs"
	ManifestsDir  = "manifests"
)

// writeConfigs writes each session configuration as a manifest, named by
// its key, with the modes and prompts that use it in configs/index.json.
func writeConfigs(out string, jobs []*job) error {
	dir := filepath.Join(out, ConfigsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	type entry struct {
		Family  string   `json:"family"`
		Modes   []string `json:"modes"`
		Prompts []string `json:"prompts"`
		Actions int      `json:"actions"`
		Overlay bool     `json:"overlay"`
	}
	index := map[string]entry{}
	for _, j := range jobs {
		p := j.policy.Clone()
		p.Label = labelPrefix + j.family + "-" + j.key[:8]
		b, err := policies.Marshal(p)
		if err != nil {
			return err
		}
		head := fmt.Sprintf("# Session configuration %s of %s: modes %s; prompts %s.\n", j.key, j.family, strings.Join(j.modes, ", "), strings.Join(j.prompts, ", "))
		if err := os.WriteFile(filepath.Join(dir, j.key+".hcl"), append([]byte(head), b...), 0o644); err != nil {
			return err
		}
		index[j.key] = entry{Family: j.family, Modes: j.modes, Prompts: j.prompts, Actions: len(j.actions), Overlay: j.overlay}
	}
	return writeJSONFile(filepath.Join(dir, "index.json"), index)
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func writeJSONLines[T any](path string, items []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// caseRecord is one line of cases.jsonl.
type caseRecord struct {
	Family    string                 `json:"family"`
	PromptID  string                 `json:"prompt_id"`
	ActionID  string                 `json:"action_id"`
	Gate      string                 `json:"gate"`
	Decision  string                 `json:"decision"`
	Class     eval.Class             `json:"class"`
	Reference []effect.Effect        `json:"reference"`
	Modes     map[string]caseOutcome `json:"modes"`
}

type caseOutcome struct {
	Outcome eval.Outcome    `json:"outcome"`
	Harm    []effect.Effect `json:"harm,omitempty"`
	// Run is the id of the run in runs.jsonl ("" when the gate denied).
	Run string `json:"run,omitempty"`
}

// ResidualReason is a harmful false negative of the perimeter with why it
// got through.
type ResidualReason struct {
	eval.Residual
	Run    string `json:"run"`
	Reason string `json:"reason"`
}

// writeResults writes the report (bench/report), the per-run and per-case
// records, and the reasons for the residual harmful false negatives.
func writeResults(opts Options, pl *plan, res *Result, st *Stack) error {
	runs := map[string]*RunRecord{}
	for _, r := range res.Runs {
		runs[r.ID] = r
	}
	ops := map[string]*policy.Operator{}
	for _, f := range pl.families {
		ops[f] = pl.ops[f]
	}
	title := opts.Title
	switch {
	case title != "":
	case pl.suite != nil:
		title = "airlock bench: suite " + pl.suite.Name
	default:
		title = "airlock bench"
	}
	info := slices.Clone(opts.RunInfo)
	info = append(info,
		fmt.Sprintf("daemon %s (containerd %s); image %s", st.Daemon.Version, st.Daemon.Containerd, st.Image),
		fmt.Sprintf("families %s; modes %s; gates %s", strings.Join(pl.families, ", "), strings.Join(pl.modes, ", "), strings.Join(gateNames(opts.Gates), ", ")),
		fmt.Sprintf("%d cases from %d runs in %d session configurations (%s), %d workers; wall time %s",
			res.Stats.Cases, res.Stats.Runs, res.Stats.Configs, reuseNote(opts.Naive), opts.Workers, res.Stats.Wall.Round(1e9)),
		"effects: the world's state diff; local branches of the workspace checkout; workspace files outside .git (and .git/hooks) by content",
	)
	retried := 0
	for _, r := range res.Runs {
		if r.CommitRetried {
			retried++
		}
	}
	if retried > 0 {
		info = append(info, fmt.Sprintf("%d overlay commits failed in the daemon when their session stopped and were committed through the API with the same policy (commit_retried in %s)", retried, RunsFile))
	}
	if line := askNote(pl, res.Results); line != "" {
		info = append(info, line)
	}
	if opts.Agent != nil {
		info = append(info, agentNotes(opts.Agent, st, res)...)
	}
	if len(res.Stats.Excluded) > 0 {
		info = append(info, fmt.Sprintf("excluded, the daemon has no filesystem layer (%s): %s", res.Stats.FS.Note, strings.Join(res.Stats.Excluded, "; ")))
	}
	in := report.Input{
		Title: title, RunInfo: info, Catalog: pl.catalog, Extra: pl.extra, Policies: ops,
		Results: res.Results, ManifestDir: ManifestsDir,
	}
	if res.Contrast != nil {
		in.Contrast = res.Contrast.Summary
	}
	in.Revised = res.Revised
	if pl.suite != nil {
		in.Suite = suiteInput(pl, opts)
		in.Policies = nil
	}
	files, err := report.Write(opts.Out, in)
	if err != nil {
		return err
	}
	res.Summary = report.Build(in)

	// Cases, with each mode's outcome and run.
	byCase := map[*eval.Case]*caseRecord{}
	var recs []*caseRecord
	for _, r := range res.Results {
		c := r.Case
		cr := byCase[c]
		if cr == nil {
			cr = &caseRecord{Family: c.Family, PromptID: c.PromptID, ActionID: c.ActionID, Gate: c.Gate, Decision: c.Decision,
				Class: r.Class, Reference: c.Reference, Modes: map[string]caseOutcome{}}
			byCase[c] = cr
			recs = append(recs, cr)
		}
		o := caseOutcome{Outcome: r.Outcome, Harm: r.Harm}
		if c.Decision == eval.Allow {
			if rr := pl.runFor(runs, c.PromptID, r.Mode, c.ActionID); rr != nil {
				o.Run = rr.ID
			}
		}
		cr.Modes[r.Mode] = o
	}
	if err := writeJSONLines(filepath.Join(opts.Out, CasesFile), recs); err != nil {
		return err
	}
	if err := writeJSONLines(filepath.Join(opts.Out, RunsFile), res.Runs); err != nil {
		return err
	}
	if err := writeJSONLines(filepath.Join(opts.Out, AsksFile), res.Asks); err != nil {
		return err
	}

	// Why each residual harmful false negative of the perimeter got
	// through.
	var reasons []ResidualReason
	perimeter := slices.Clone(res.Summary.Residuals[ModePerimeter])
	if x := res.Summary.Extra; x != nil {
		perimeter = append(perimeter, x.Residuals[ModePerimeter]...)
	}
	for _, r := range perimeter {
		rr := pl.runFor(runs, r.PromptID, ModePerimeter, r.ActionID)
		rs := ResidualReason{Residual: r}
		if rr != nil {
			rs.Run = rr.ID
			rs.Reason = residualReason(r, rr, pl.manifests[r.PromptID], pl.suite != nil)
		}
		reasons = append(reasons, rs)
	}
	if err := writeJSONFile(filepath.Join(opts.Out, ResidualsFile), reasons); err != nil {
		return err
	}
	if err := appendReasons(filepath.Join(opts.Out, report.ReportMD), reasons); err != nil {
		return err
	}
	if opts.Agent != nil {
		if err := writeJSONFile(filepath.Join(opts.Out, TranscriptsDir, "INDEX.json"), res.Agents); err != nil {
			return err
		}
		files = append(files, filepath.Join(opts.Out, TranscriptsDir))
	}
	res.Files = append(files,
		filepath.Join(opts.Out, CasesFile), filepath.Join(opts.Out, RunsFile), filepath.Join(opts.Out, AsksFile), filepath.Join(opts.Out, ResidualsFile),
		filepath.Join(opts.Out, ConfigsDir), filepath.Join(opts.Out, ManifestsDir))
	return nil
}

// askNote checks that every perimeter run that held a request did so
// under a prompt whose generated grant the generator held, by a reason it
// recorded, and says so.
func askNote(pl *plan, results []eval.Result) string {
	if pl.suite != nil {
		n := 0
		for _, r := range results {
			if r.Mode == ModePerimeter && r.Asked {
				n++
			}
		}
		if n == 0 {
			return ""
		}
		return fmt.Sprintf("asks: %d perimeter cases held a request, under the ask rules of the operator's manifests", n)
	}
	asked, stray := 0, map[string]bool{}
	for _, r := range results {
		if r.Mode != ModePerimeter || !r.Asked {
			continue
		}
		asked++
		m := pl.manifests[r.Case.PromptID]
		if m == nil || !slices.ContainsFunc(m.Decisions, func(d manifest.Decision) bool { return d.Decision == manifest.DecideAsk }) {
			stray[r.Case.PromptID] = true
		}
	}
	switch {
	case asked == 0:
		return ""
	case len(stray) > 0:
		return fmt.Sprintf("asks: %d perimeter cases held a request, some under prompts whose grant the generator did not hold: %s", asked, strings.Join(slices.Sorted(maps.Keys(stray)), ", "))
	}
	return fmt.Sprintf("asks: %d perimeter cases held a request, each under a prompt whose grant the generator held, for the reason in %s/PROMPT.decisions.json", asked, ManifestsDir)
}

func reuseNote(naive bool) string {
	if naive {
		return "a fresh session per prompt, mode and action"
	}
	return "each action once per distinct session policy"
}

func gateNames(gs []Gate) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Name())
	}
	return out
}

// residualReason explains, from the run's own records, how each harmful
// effect got past the perimeter: which world request the token allowed, or
// which change the commit carried, under what the manifest granted.
//
// For an operator's suite, whose manifests are written rather than read
// from a request, it says instead which rule of the gateway let the
// request through and what the manifest's credentials grant.
func residualReason(r eval.Residual, rr *RunRecord, m *manifest.Manifest, suite bool) string {
	var parts []string
	for _, e := range r.Harm {
		switch e.Where {
		case effect.World:
			// The request that changed it: a write the world allowed that
			// names the target (a listing names it too, but changes
			// nothing).
			var hit *world.Event
			for i, ev := range rr.World {
				if ev.Decision != world.DecisionAllow || !slices.Contains(ev.Targets, e.Target) {
					continue
				}
				if hit == nil || (hit.Method == "GET" && ev.Method != "GET") {
					hit = &rr.World[i]
				}
			}
			if hit == nil {
				parts = append(parts, fmt.Sprintf("%s %s: no request of the session that the world allowed names it", e.Op, e.Target))
				continue
			}
			part := fmt.Sprintf("%s %s: the session's token allowed %s on it (%s %s)", e.Op, e.Target, hit.Action, hit.Method, hit.Path)
			if suite {
				part += "; " + gatewayRule(rr.Audit, hit)
			}
			parts = append(parts, part)
		case effect.Workspace:
			parts = append(parts, fmt.Sprintf("%s %s: the commit carried it; no protect or protect_refs rule of the manifest covers it", e.Op, e.Target))
		}
	}
	if m != nil && suite {
		for _, c := range m.Policy.Credentials {
			parts = append(parts, fmt.Sprintf("credential %s (%s) grants %q", c.Name, c.Audience, c.Scopes))
		}
	} else if m != nil {
		var scopes []string
		for _, c := range m.Policy.Credentials {
			scopes = append(scopes, c.Scopes...)
		}
		req := m.Request
		read := fmt.Sprintf("the request was read as: change=%v owners=%v lanes=%v", req.Mutate, req.Owners, req.Lanes)
		if len(req.IDs) > 0 {
			read += fmt.Sprintf(" ids=%v", req.IDs)
		}
		if req.Ticket != "" {
			read += " ticket=" + req.Ticket
		}
		if req.Topic != "" {
			read += " topic=" + req.Topic
		}
		parts = append(parts, read, fmt.Sprintf("granted scopes %q", scopes))
		for _, w := range m.Policy.Workspaces {
			if len(w.ProtectRefs) > 0 {
				parts = append(parts, fmt.Sprintf("protect_refs %q", w.ProtectRefs))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// appendReasons adds the reasons to report.md.
func appendReasons(path string, reasons []ResidualReason) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("\n## Why the residual harmful false negatives of the perimeter got through\n\n")
	if len(reasons) == 0 {
		b.WriteString("None.\n")
	}
	for _, r := range reasons {
		fmt.Fprintf(&b, "- %s %s, `%s` (gate %s, run `%s`): %s\n", r.Family, r.PromptID, r.ActionID, r.Gate, r.Run, r.Reason)
	}
	_, err = io.WriteString(f, b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteHeadline prints the headline table: HarmlessFNRate and PerimeterFPR
// per family and mode, for the headline gate; and the contrast pairs'
// metrics per family and mode.
func WriteHeadline(w io.Writer, s *report.Summary) error {
	if len(s.Rows) > 0 {
		if err := writeCatalogHeadline(w, s); err != nil {
			return err
		}
	}
	if c := s.Contrast; c != nil {
		if len(s.Rows) > 0 {
			fmt.Fprintln(w)
		}
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintf(tw, "contrast pairs, approver %s\n", c.Approver)
		fmt.Fprintln(tw, "FAMILY\tMODE\tPAIRS\tAcc\tFPR\tFNR\tINVARIANT\tASKED\tUNEXPLAINED")
		for _, mode := range c.Modes {
			for _, r := range c.Rows {
				if r.Mode == mode {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Family, mode, r.Pairs, r.Acc, r.FPR, r.FNR, r.Invariant, r.Asked, r.Unexplained)
				}
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r := s.Revised; r != nil {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "revised requests (targets: stale authority 0, authority lost 0)")
		fmt.Fprintln(tw, "FAMILY\tKIND\tPROMPTS\tREFUSED\tRUNS AFTER\tSTALE AUTHORITY\tAUTHORITY LOST\tGRANT MISSING\tRE-MINTED\tRESTART MINTS")
		for _, x := range r.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", x.Family, x.Kind, x.Prompts, x.Refused, x.After, x.Stale, x.Lost, x.GrantMissing, x.Reminted, x.RestartMints)
		}
		return tw.Flush()
	}
	return nil
}

func writeCatalogHeadline(w io.Writer, s *report.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "gate %s\n", s.HeadlineGate)
	fmt.Fprintln(tw, "FAMILY\tMODE\tFN\tHARMFUL\tHarmlessFNRate\tPerimeterFPR")
	for _, fam := range append([]string{eval.FamilyAll}, s.Families...) {
		for _, mode := range s.Modes {
			for _, r := range s.Rows {
				if r.Gate == s.HeadlineGate && r.Mode == mode && r.Family == fam && r.Axis == eval.AxisAll {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", fam, mode, r.FN, r.Harmful, r.HarmlessFNRate, r.PerimeterFPR)
				}
			}
		}
	}
	return tw.Flush()
}

// gatewayRule says how the L7 gateway let the world request ev through:
// the rule its audit names for the same method and path, or that the
// gateway did not read the request.
func gatewayRule(audit []api.AuditEvent, ev *world.Event) string {
	for _, a := range audit {
		if a.Layer != "l7" || a.Fields == nil {
			continue
		}
		method, _ := a.Fields["method"].(string)
		path, _ := a.Fields["path"].(string)
		if method != ev.Method || path != ev.Path {
			continue
		}
		if rule, _ := a.Fields["rule"].(string); rule != "" {
			return fmt.Sprintf("the gateway %s it by the rule %s", a.Action, rule)
		}
		if a.Reason != "" {
			return fmt.Sprintf("the gateway %s it: %s", a.Action, a.Reason)
		}
		return fmt.Sprintf("the gateway %s it: the manifest has no HTTP rule that decides it", a.Action)
	}
	return "the gateway did not read the request (no l7 check of its host)"
}
