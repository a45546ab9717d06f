package report

import (
	"encoding/csv"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/policy"
)

// fixture builds results for two families, three modes and two gates from
// the real catalog, prompts and oracles: a reference effect per single
// action (its target changed), gate-only runs that do it, perimeter runs
// that block everything outside the authorized set, and an fs-only mode
// that blocks nothing.
func fixture(t *testing.T) Input {
	t.Helper()
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
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	all, err := catalog.BuildAll(fams)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := policy.LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	var cases []eval.Case
	for _, p := range prompts {
		if p.Family != data.CancelJobs && p.Family != data.CleanUpArtifacts {
			continue
		}
		op, _ := eval.ChangeOp(p.Family)
		for _, a := range all {
			if a.Family != p.Family || (a.Kind != catalog.KindSingle && a.Kind != catalog.KindReadOnly) {
				continue
			}
			var ref []effect.Effect
			if a.Kind == catalog.KindSingle {
				ref = []effect.Effect{{Family: p.Family, Op: op, Target: a.Target, Where: effect.World}}
			}
			o := oracles[p.ID]
			var kept []effect.Effect
			for _, e := range ref {
				if eval.Authorized(e, o) {
					kept = append(kept, e)
				}
			}
			for _, gate := range []string{"allow-all", "rules:example"} {
				decision := eval.Allow
				if gate == "rules:example" && strings.Contains(a.Command, "prod") {
					decision = eval.Deny
				}
				runs := map[string]eval.Run{
					eval.ModeGateOnly: {Effects: ref},
					"fs-only":         {Effects: ref},
					PerimeterMode:     {Effects: kept, Evidence: eval.Evidence{Blocked: len(kept) < len(ref), BlockedBy: []string{"credentials"}}},
				}
				// One action slips through the perimeter, to be listed.
				if a.ID == "CJ-single-job-dev-vision-a" {
					runs[PerimeterMode] = eval.Run{Effects: ref}
				}
				if decision == eval.Deny {
					for m := range runs {
						runs[m] = eval.Run{}
					}
				}
				cases = append(cases, eval.Case{
					Family: p.Family, PromptID: p.ID, S: p.S, B: p.B, R: p.R,
					ActionID: a.ID, ActionKind: string(a.Kind), Command: a.Command, Gate: gate, Decision: decision,
					Reference: ref, Runs: runs, Oracle: o, Deterministic: true,
				})
			}
		}
	}
	results, err := eval.Evaluate(fams, cases)
	if err != nil {
		t.Fatal(err)
	}
	extra := []catalog.Action{{ID: "file:1", Family: data.CancelJobs, Kind: catalog.KindExternal, Command: "scancel x", Source: "a.jsonl"}}
	return Input{
		Title: "test run", RunInfo: []string{"catalog " + catalog.Version},
		Catalog: all, Extra: extra, Policies: pols, Results: results, ManifestDir: "manifests",
	}
}

func TestWrite(t *testing.T) {
	in := fixture(t)
	dir := t.TempDir()
	paths, err := Write(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 7 {
		t.Fatalf("wrote %v", paths)
	}

	b, err := os.ReadFile(filepath.Join(dir, SummaryJSON))
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("summary.json: %v", err)
	}
	if s.HeadlineGate != "allow-all" || len(s.Gates) != 2 || len(s.Modes) != 3 || s.Modes[0] != eval.ModeGateOnly || s.Modes[2] != PerimeterMode {
		t.Errorf("gates %v modes %v headline %s", s.Gates, s.Modes, s.HeadlineGate)
	}
	if s.CatalogCounts.Total(data.CancelJobs) != 58 || s.Extra == nil || s.Extra.Counts.Total("") != 1 || len(s.Policies) != 4 {
		t.Errorf("catalog %v extra %+v policies %d", s.CatalogCounts, s.Extra, len(s.Policies))
	}
	var head eval.Row
	for _, r := range s.Rows {
		if r.Gate == "allow-all" && r.Mode == PerimeterMode && r.Family == data.CancelJobs && r.Axis == eval.AxisAll {
			head = r
		}
	}
	// cancel-jobs: 8 distinct B/R prompts x 14 single actions; the B0/B1
	// prompts authorize one job, B2/B3 three.
	if head.Cases != 8*17 || head.Safe != 16 || head.Unsafe != 96 || head.ReadOnly != 24 {
		t.Errorf("cancel-jobs perimeter row: cases %d safe %d unsafe %d read-only %d", head.Cases, head.Safe, head.Unsafe, head.ReadOnly)
	}
	// job-dev-vision-a is unsafe for every cancel-jobs prompt: 8 harmful.
	if head.Harmful != 8 || head.Blocked != 88 || head.HarmlessFNRate.Num != 88 || head.PerimeterFPR.Num != 0 {
		t.Errorf("harmful %d blocked %d harmless %v fpr %v", head.Harmful, head.Blocked, head.HarmlessFNRate, head.PerimeterFPR)
	}
	// Both gates let it through for every B/R prompt.
	if res := s.Residuals[PerimeterMode]; len(res) != 16 || res[0].ActionID != "CJ-single-job-dev-vision-a" || res[0].Gate != "allow-all" {
		t.Errorf("perimeter residuals %+v", res)
	}

	f, err := os.Open(filepath.Join(dir, SummaryCSV))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("summary.csv: %v", err)
	}
	if len(recs) != len(s.Rows)+1 || strings.Join(recs[0], ",") != strings.Join(CSVHeader(), ",") {
		t.Errorf("csv: %d records for %d rows, header %v", len(recs), len(s.Rows), recs[0])
	}

	md, err := os.ReadFile(filepath.Join(dir, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# test run", "## Headline", "| all | perimeter |", "HarmlessFNRate", "PerimeterFPR",
		"scancel job-dev-vision-a", "## Operator policies", "workbench lane", "shared-history side",
		"jobs.cancel", "## Gates", "rules:example", catalog.Version, "manifests", "Other modes (fs-only ",
		"| categories of the harm | categories in gate-only |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}

	for _, name := range []string{ChartHarmful, ChartAblation, ChartAxes} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("%s: %v", name, b)
		}
	}
}

// TestPreviousCatalog adds runs of the maintenance actions under every
// clean-up-branches prompt, safe and broken under the perimeter, and checks
// that the report shows the headline without them beside the headline
// with them.
func TestPreviousCatalog(t *testing.T) {
	in := fixture(t)
	if s := Build(in); s.Previous != nil {
		t.Fatalf("no action of a new kind ran, yet previous catalog %+v", s.Previous)
	}
	before := Build(in)
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
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := []effect.Effect{{Family: data.CleanUpBranches, Op: effect.PackRefs, Target: ".git/packed-refs", Where: effect.Workspace}}
	var cases []eval.Case
	for _, p := range prompts {
		if p.Family != data.CleanUpBranches {
			continue
		}
		for _, a := range in.Catalog {
			if a.Family != p.Family || catalog.InPrevious(a.Kind) {
				continue
			}
			cases = append(cases, eval.Case{
				Family: p.Family, PromptID: p.ID, S: p.S, B: p.B, R: p.R,
				ActionID: a.ID, ActionKind: string(a.Kind), Command: a.Command, Gate: "allow-all", Decision: eval.Allow,
				Reference: ref, Oracle: oracles[p.ID], Deterministic: true,
				Runs: map[string]eval.Run{
					eval.ModeGateOnly: {Effects: ref},
					"fs-only":         {Evidence: eval.Evidence{RejectedAtCommit: true}},
					PerimeterMode:     {Evidence: eval.Evidence{RejectedAtCommit: true}},
				},
			})
		}
	}
	added, err := eval.Evaluate(fams, cases)
	if err != nil {
		t.Fatal(err)
	}
	in.Results = append(in.Results, added...)
	s := Build(in)
	p := s.Previous
	if p == nil || p.Version != catalog.PreviousVersion || !slices.Equal(p.Without, catalog.AddedSincePrevious) {
		t.Fatalf("previous catalog %+v", p)
	}
	for _, mode := range s.Modes {
		old, _ := before.row("allow-all", mode, eval.FamilyAll)
		now, _ := s.row("allow-all", mode, eval.FamilyAll)
		i := slices.IndexFunc(p.Rows, func(r eval.Row) bool { return r.Gate == "allow-all" && r.Mode == mode })
		if i < 0 {
			t.Fatalf("no previous row for %s", mode)
		}
		prev := p.Rows[i]
		// 8 distinct B/R prompts x 2 actions, all safe; broken but in
		// gate-only.
		broken := 16
		if mode == eval.ModeGateOnly {
			broken = 0
		}
		if prev.TN != old.TN || prev.PerimeterFPR != old.PerimeterFPR || now.TN != old.TN+16 || now.Broken != old.Broken+broken || now.FN != old.FN {
			t.Errorf("%s: TN before %d, previous %d, now %d; broken before %d, now %d", mode, old.TN, prev.TN, now.TN, old.Broken, now.Broken)
		}
	}
	out := t.TempDir()
	if _, err := Write(out, in); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"which had no maintenance actions", "| " + catalog.PreviousVersion + " FN |", "| perimeter | "} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// TestExtraActionsApart adds results of two --actions file actions, one
// unsafe and harmful under the perimeter, one safe, and checks that every
// catalog number is the same as without them while their own section
// counts them.
func TestExtraActionsApart(t *testing.T) {
	in := fixture(t)
	in.Extra = nil
	before := Build(in)
	if before.Extra != nil {
		t.Fatalf("no extra actions, yet extra summary %+v", before.Extra)
	}
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	in.Extra = []catalog.Action{
		{ID: "file:1", Family: data.CancelJobs, Kind: catalog.KindExternal, Command: "scancel job-dev-vision-a", Source: "a.jsonl"},
		{ID: "file:2", Family: data.CancelJobs, Kind: catalog.KindExternal, Command: "scancel $AUTHORIZED", Source: "a.jsonl"},
	}
	var cases []eval.Case
	for _, r := range in.Results {
		c := r.Case
		if r.Mode != eval.ModeGateOnly || c.ActionID != "CJ-read-only-squeue" {
			continue
		}
		for _, a := range in.Extra {
			target := "job-dev-vision-a"
			if a.ID == "file:2" {
				target = c.Oracle.Authorized[0]
			}
			ref := []effect.Effect{{Family: c.Family, Op: effect.CancelJob, Target: target, Where: effect.World}}
			nc := *c
			nc.ActionID, nc.ActionKind, nc.Command, nc.Reference, nc.Decision = a.ID, string(a.Kind), a.Command, ref, eval.Allow
			nc.Runs = map[string]eval.Run{eval.ModeGateOnly: {Effects: ref}, "fs-only": {Effects: ref}, PerimeterMode: {Effects: ref}}
			cases = append(cases, nc)
		}
	}
	added, err := eval.Evaluate(fams, cases)
	if err != nil {
		t.Fatal(err)
	}
	in.Results = append(slices.Clone(in.Results), added...)
	s := Build(in)
	if !reflect.DeepEqual(s.Rows, before.Rows) || !reflect.DeepEqual(s.Residuals, before.Residuals) || s.Stability != before.Stability || s.Previous != nil {
		t.Errorf("extra actions changed the catalog's numbers")
	}
	head, _ := s.row("allow-all", PerimeterMode, eval.FamilyAll)
	if old, _ := before.row("allow-all", PerimeterMode, eval.FamilyAll); head.FN != old.FN || head.Harmful != old.Harmful {
		t.Errorf("headline FN %d harmful %d, without extra actions %d %d", head.FN, head.Harmful, old.FN, old.Harmful)
	}
	x := s.Extra
	if x == nil || x.Counts.Total(data.CancelJobs) != 2 {
		t.Fatalf("extra summary %+v", x)
	}
	// Each action under 8 distinct B/R prompts, with both gates.
	r, ok := findRow(x.Rows, "allow-all", PerimeterMode, eval.FamilyAll, eval.AxisAll, eval.AxisAll)
	if !ok || r.Cases != 16 || r.Safe != 8 || r.Unsafe != 8 || r.FN != 8 || r.Harmful != 8 || r.TN != 8 || r.Broken != 0 || r.HarmlessFNRate.Num != 0 {
		t.Errorf("extra perimeter row %+v", r)
	}
	if res := x.Residuals[PerimeterMode]; len(res) != 16 || res[0].ActionID != "file:1" {
		t.Errorf("extra residuals %+v", res)
	}
	out := t.TempDir()
	paths, err := Write(out, in)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(paths, filepath.Join(out, ExtraCSV)) {
		t.Errorf("wrote %v, no %s", paths, ExtraCSV)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	text := string(md)
	i := strings.Index(text, "## Actions from the --actions file")
	if i < 0 {
		t.Fatalf("report.md has no section of the extra actions:\n%s", text)
	}
	if !strings.Contains(text[i:], "### HarmlessFNRate by category") {
		t.Errorf("extra section has no categories")
	}
	if strings.Contains(text[:i], "file:1") || !strings.Contains(text[i:], "| allow-all | cancel-jobs | B0/R0 | file:1 |") {
		t.Errorf("extra residuals not apart:\n%s", text)
	}
}

func TestWriteEmpty(t *testing.T) {
	if _, err := Write(t.TempDir(), Input{}); err == nil {
		t.Error("Write with no results succeeded")
	}
}

// TestWriteGateOnly covers a run without a perimeter mode: the charts and
// the report still render.
func TestWriteGateOnly(t *testing.T) {
	in := fixture(t)
	var kept []eval.Result
	for _, r := range in.Results {
		if r.Mode == eval.ModeGateOnly {
			kept = append(kept, r)
		}
	}
	in.Results = kept
	dir := t.TempDir()
	if _, err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportMD))
	if !strings.Contains(string(md), "## Residual harmful false negatives") {
		t.Errorf("report.md:\n%s", md)
	}
}

// TestAsksAndApprovers: the perimeter's runs under each approver give
// their own rows; AskRate counts the asked state-changing cases and is the
// same under every approver; the report shows them side by side.
func TestAsksAndApprovers(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	o := oracles["CJ-S0-B0-R0"]
	cancel := func(id string) []effect.Effect {
		return []effect.Effect{{Family: data.CancelJobs, Op: effect.CancelJob, Target: id, Where: effect.World}}
	}
	asked := eval.Evidence{Asked: true}
	denied := eval.Evidence{Asked: true, Blocked: true, BlockedBy: []string{"approval denied"}}
	absent, habituated := eval.ApproverMode(PerimeterMode, eval.ApproverAbsent), eval.ApproverMode(PerimeterMode, eval.ApproverHabituated)
	mk := func(id string, runs map[string]eval.Run) eval.Case {
		runs[eval.ModeGateOnly] = eval.Run{Effects: cancel(id)}
		return eval.Case{Family: data.CancelJobs, PromptID: "CJ-S0-B0-R0", S: "S0", B: "B0", R: "R0", ActionID: id, Gate: "allow-all",
			Decision: eval.Allow, Reference: cancel(id), Runs: runs, Oracle: o, Deterministic: true}
	}
	cases := []eval.Case{
		mk("job-dev-4812-a", map[string]eval.Run{PerimeterMode: {Effects: cancel("job-dev-4812-a"), Evidence: asked},
			absent: {Evidence: denied}, habituated: {Effects: cancel("job-dev-4812-a"), Evidence: asked}}),
		mk("job-dev-4812-s", map[string]eval.Run{PerimeterMode: {Evidence: denied},
			absent: {Evidence: denied}, habituated: {Effects: cancel("job-dev-4812-s"), Evidence: asked}}),
		mk("job-dev-shared", map[string]eval.Run{PerimeterMode: {Evidence: eval.Evidence{Blocked: true}},
			absent: {Evidence: eval.Evidence{Blocked: true}}, habituated: {Evidence: eval.Evidence{Blocked: true}}}),
	}
	results, err := eval.Evaluate(fams, cases)
	if err != nil {
		t.Fatal(err)
	}
	s := Build(Input{Results: results})
	for mode, want := range map[string]struct{ harmful, broken int }{PerimeterMode: {0, 0}, absent: {0, 1}, habituated: {1, 0}} {
		r, ok := s.row("allow-all", mode, eval.FamilyAll)
		if !ok {
			t.Fatalf("no row for %s", mode)
		}
		if r.AskRate.Num != 2 || r.AskRate.Den != 3 || r.AskRateSafe.Num != 1 || r.AskRateUnsafe.Num != 1 {
			t.Errorf("%s: AskRate %v (safe %v, unsafe %v), want 2/3 (1 of 1 safe, 1 of 2 unsafe)", mode, r.AskRate, r.AskRateSafe, r.AskRateUnsafe)
		}
		if r.Harmful != want.harmful || r.Broken != want.broken {
			t.Errorf("%s: harmful %d broken %d, want %d and %d", mode, r.Harmful, r.Broken, want.harmful, want.broken)
		}
	}
	out := t.TempDir()
	if _, err := Write(out, Input{Results: results, ManifestDir: "manifests"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Asks and approvers", "| allow-all | all | informed | 66.7%", "| allow-all | all | absent |", "| allow-all | all | habituated |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}
