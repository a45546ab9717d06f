// Package report writes a benchmark run's results: summary.json (every
// metrics row, the residual harmful false negatives, the catalog counts and
// the operator policies), summary.csv (one line per metrics row),
// report.md (the headline table and the details a reader needs to check
// it), and PNG charts.
//
// Actions from an --actions file are summarized apart (Summary.Extra,
// summary-extra.csv, a section of report.md of their own): the headline,
// every catalog row, the residuals and the charts are computed from the
// catalog's actions alone, so extra actions never move them.
package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/policy"
)

// File names written by Write.
const (
	SummaryJSON = "summary.json"
	SummaryCSV  = "summary.csv"
	// ExtraCSV has the --actions file's rows, written when it has any.
	ExtraCSV      = "summary-extra.csv"
	ReportMD      = "report.md"
	ChartHarmful  = "harmful-fn.png"
	ChartAblation = "ablation.png"
	ChartAxes     = "sbr.png"
)

// DefaultHeadlineGate is the gate of the headline numbers (SPEC: headline
// numbers use allow-all).
const DefaultHeadlineGate = "allow-all"

// PerimeterMode is the mode with every layer on.
const PerimeterMode = "perimeter"

// Input is what a report is written from.
type Input struct {
	// Title heads report.md; RunInfo lines follow it (versions, date,
	// flags).
	Title   string
	RunInfo []string
	// Catalog are the catalog's actions; Extra the --actions file's.
	Catalog []catalog.Action
	Extra   []catalog.Action
	// Policies are the operator policies, by family.
	Policies map[string]*policy.Operator
	Results  []eval.Result
	// HeadlineGate defaults to DefaultHeadlineGate, or the only gate.
	HeadlineGate string
	// ManifestDir is where the generated manifests are, relative to the
	// report's directory; named in the report when set.
	ManifestDir string
	// Contrast is the contrast-pair families' part of the run, if any.
	Contrast *Contrast
	// Revised is the revised requests' part of the run, if any.
	Revised *eval.RevisedSummary
	// Suite is the operator's suite the run ran, if any.
	Suite *SuiteInput
}

// Summary is summary.json.
type Summary struct {
	Title          string                      `json:"title"`
	RunInfo        []string                    `json:"run_info,omitempty"`
	CatalogVersion string                      `json:"catalog_version"`
	CatalogCounts  catalog.Counts              `json:"catalog_counts"`
	HeadlineGate   string                      `json:"headline_gate"`
	Gates          []string                    `json:"gates"`
	Modes          []string                    `json:"modes"`
	Families       []string                    `json:"families"`
	Rows           []eval.Row                  `json:"rows"`
	Residuals      map[string][]eval.Residual  `json:"residuals"`
	Stability      eval.Rate                   `json:"run_to_run_stability"`
	Policies       map[string]*policy.Operator `json:"operator_policies"`
	ManifestDir    string                      `json:"manifest_dir,omitempty"`
	// Previous is the headline under the previous catalog, when the run
	// has actions of the kinds added since.
	Previous *PreviousCatalog `json:"previous_catalog,omitempty"`
	// Extra summarizes the --actions file's actions on their own; nil
	// without any. Rows, Residuals and Stability above never count them.
	Extra *ExtraSummary `json:"extra,omitempty"`
	// Contrast is the contrast-pair families' part of the run; nil
	// without any.
	Contrast *Contrast `json:"contrast_pairs,omitempty"`
	// Revised is the revised requests' part of the run; nil without
	// any.
	Revised *eval.RevisedSummary `json:"revised_requests,omitempty"`
	// Suite is the operator's suite the run ran, with every action's
	// outcome; nil for AmPermBench's families.
	Suite *SuiteSummary `json:"suite,omitempty"`
}

// ExtraSummary is the --actions file's part of a run: the same metrics as
// the catalog's, over its actions alone.
type ExtraSummary struct {
	Counts    catalog.Counts             `json:"counts"`
	Rows      []eval.Row                 `json:"rows"`
	Residuals map[string][]eval.Residual `json:"residuals"`
}

// IsExtra reports whether r is the result of an --actions file's action.
func IsExtra(r eval.Result) bool { return r.Case.ActionKind == string(catalog.KindExternal) }

// PreviousCatalog is the headline under catalog.PreviousVersion: the same
// run's results without the actions of the kinds the current catalog
// added, so that a reader sees how much of a change in the numbers is the
// catalog's.
type PreviousCatalog struct {
	Version string         `json:"version"`
	Without []catalog.Kind `json:"without"`
	// Rows are every gate's and mode's rows over all families and axis
	// values.
	Rows []eval.Row `json:"rows"`
}

// Build computes the summary of in.
func Build(in Input) *Summary {
	var results, extra []eval.Result
	for _, r := range in.Results {
		if IsExtra(r) {
			extra = append(extra, r)
		} else {
			results = append(results, r)
		}
	}
	rows := eval.Summarize(results)
	s := &Summary{
		Title:          in.Title,
		RunInfo:        in.RunInfo,
		CatalogVersion: catalog.Version,
		CatalogCounts:  catalog.Count(in.Catalog),
		Rows:           rows,
		Residuals:      map[string][]eval.Residual{},
		Stability:      eval.RunToRunStability(results),
		Policies:       in.Policies,
		ManifestDir:    in.ManifestDir,
		Contrast:       in.Contrast,
		Revised:        in.Revised,
	}
	if s.Title == "" {
		s.Title = "airlock bench"
	}
	for _, r := range rows {
		if !slices.Contains(s.Gates, r.Gate) {
			s.Gates = append(s.Gates, r.Gate)
		}
		if !slices.Contains(s.Modes, r.Mode) {
			s.Modes = append(s.Modes, r.Mode)
		}
		if r.Family != eval.FamilyAll && !slices.Contains(s.Families, r.Family) {
			s.Families = append(s.Families, r.Family)
		}
	}
	slices.Sort(s.Gates)
	switch {
	case in.HeadlineGate != "":
		s.HeadlineGate = in.HeadlineGate
	case slices.Contains(s.Gates, DefaultHeadlineGate) || len(s.Gates) == 0:
		s.HeadlineGate = DefaultHeadlineGate
	default:
		s.HeadlineGate = s.Gates[0]
	}
	if in.Suite != nil {
		s.Suite = buildSuite(in.Suite, results, s.HeadlineGate)
	}
	s.Residuals = residuals(results, s.Modes)
	s.Previous = previousCatalog(results)
	if len(in.Extra) > 0 || len(extra) > 0 {
		s.Extra = &ExtraSummary{Counts: catalog.Count(in.Extra), Rows: eval.Summarize(extra)}
		var modes []string
		for _, r := range s.Extra.Rows {
			if !slices.Contains(modes, r.Mode) {
				modes = append(modes, r.Mode)
			}
		}
		s.Extra.Residuals = residuals(extra, modes)
	}
	return s
}

// residuals returns the residual harmful false negatives of every mode but
// gate-only that has any.
func residuals(results []eval.Result, modes []string) map[string][]eval.Residual {
	out := map[string][]eval.Residual{}
	for _, m := range modes {
		if m == eval.ModeGateOnly {
			continue
		}
		if res := eval.Residuals(results, m); len(res) > 0 {
			out[m] = res
		}
	}
	return out
}

// previousCatalog summarizes the results of the actions in the previous
// catalog; nil when every result's action is in it.
func previousCatalog(results []eval.Result) *PreviousCatalog {
	var prev []eval.Result
	for _, r := range results {
		if catalog.InPrevious(catalog.Kind(r.Case.ActionKind)) {
			prev = append(prev, r)
		}
	}
	if len(prev) == len(results) {
		return nil
	}
	p := &PreviousCatalog{Version: catalog.PreviousVersion, Without: catalog.AddedSincePrevious}
	for _, r := range eval.Summarize(prev) {
		if r.Family == eval.FamilyAll && r.Axis == eval.AxisAll {
			p.Rows = append(p.Rows, r)
		}
	}
	return p
}

// Write writes every report file into dir and returns their paths.
func Write(dir string, in Input) ([]string, error) {
	if len(in.Results) == 0 {
		return nil, fmt.Errorf("report: no results: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	s := Build(in)
	var paths []string
	for _, f := range []struct {
		name  string
		write func(string, *Summary) error
	}{
		{SummaryJSON, writeJSON},
		{SummaryCSV, writeCSV},
		{ExtraCSV, writeExtraCSV},
		{ReportMD, writeMarkdown},
		{ChartHarmful, chartHarmful},
		{ChartAblation, chartAblation},
		{ChartAxes, chartAxes},
	} {
		p := filepath.Join(dir, f.name)
		if f.name == ExtraCSV && s.Extra == nil {
			continue
		}
		if err := f.write(p, s); err != nil {
			return paths, fmt.Errorf("report: %s: %w", f.name, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// writeFile writes data to path through a temporary file.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func writeJSON(path string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// rateColumns are the rates of a row in CSV order.
func rateColumns(r eval.Row) []struct {
	name string
	rate eval.Rate
} {
	cols := []struct {
		name string
		rate eval.Rate
	}{
		{"fnr", r.FNR},
		{"fpr", r.FPR},
		{"unsafe_allow_rate", r.UnsafeAllowRate},
		{"safe_task_success_rate", r.SafeTaskSuccessRate},
		{"wrong_target_rate", r.WrongTargetRate},
		{"over_scope_rate", r.OverScopeRate},
		{"under_completion_rate", r.UnderCompletionRate},
		{"harmless_fn_rate", r.HarmlessFNRate},
	}
	for _, c := range eval.Categories {
		cols = append(cols, struct {
			name string
			rate eval.Rate
		}{"harmless_fn_rate_" + c, r.HarmlessFNByCategory[c]})
	}
	return append(cols, struct {
		name string
		rate eval.Rate
	}{"perimeter_fpr", r.PerimeterFPR})
}

// CSVHeader is the header of summary.csv.
func CSVHeader() []string {
	h := []string{"gate", "mode", "family", "axis", "value", "cases", "runs", "safe", "unsafe", "read_only",
		"tp", "fp", "tn", "fn", "blocked", "rejected_at_commit", "held_for_review", "harmful", "no_effect_unexplained", "broken"}
	for _, c := range rateColumns(eval.Row{}) {
		h = append(h, c.name, c.name+"_lo", c.name+"_hi", c.name+"_num", c.name+"_den")
	}
	return h
}

func writeCSV(path string, s *Summary) error { return writeRowsCSV(path, s.Rows) }

func writeExtraCSV(path string, s *Summary) error { return writeRowsCSV(path, s.Extra.Rows) }

func writeRowsCSV(path string, rows []eval.Row) error {
	var b strings.Builder
	w := csv.NewWriter(&b)
	if err := w.Write(CSVHeader()); err != nil {
		return err
	}
	for _, r := range rows {
		rec := []string{r.Gate, r.Mode, r.Family, r.Axis, r.Value}
		for _, n := range []int{r.Cases, r.Runs, r.Safe, r.Unsafe, r.ReadOnly, r.TP, r.FP, r.TN, r.FN,
			r.Blocked, r.Rejected, r.Held, r.Harmful, r.Unexplained, r.Broken} {
			rec = append(rec, strconv.Itoa(n))
		}
		for _, c := range rateColumns(r) {
			if !c.rate.Defined() {
				rec = append(rec, "", "", "", strconv.Itoa(c.rate.Num), "0")
				continue
			}
			rec = append(rec, ftoa(c.rate.Value), ftoa(c.rate.Lo), ftoa(c.rate.Hi), strconv.Itoa(c.rate.Num), strconv.Itoa(c.rate.Den))
		}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return writeFile(path, []byte(b.String()))
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 6, 64) }

// row returns the row of gate, mode, family over all axis values.
func (s *Summary) row(gate, mode, family string) (eval.Row, bool) {
	return s.find(gate, mode, family, eval.AxisAll, eval.AxisAll)
}

func (s *Summary) find(gate, mode, family, axis, value string) (eval.Row, bool) {
	for _, r := range s.Rows {
		if r.Gate == gate && r.Mode == mode && r.Family == family && r.Axis == axis && r.Value == value {
			return r, true
		}
	}
	return eval.Row{}, false
}

// axisValues returns the values of axis present in the rows, sorted.
func (s *Summary) axisValues(axis string) []string {
	var out []string
	for _, r := range s.Rows {
		if r.Axis == axis && !slices.Contains(out, r.Value) {
			out = append(out, r.Value)
		}
	}
	slices.Sort(out)
	return out
}
