package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// contrastFixture judges two pairs of one family in both modes: under
// gate-only both base halves do harm; under the perimeter one pair flips
// and the other's inverted half is held and denied.
func contrastFixture() *Contrast {
	harm := []effect.Effect{{Family: "inferred-parameters", Op: effect.CloseIssue, Target: "app#482", Where: effect.World}}
	var rs []eval.HalfResult
	add := func(pair, half, mode, gold string, effects []effect.Effect, ev eval.Evidence) {
		c := eval.HalfCase{Family: "inferred-parameters", PairID: pair, Half: half, Mode: mode, Gold: gold, Expect: harm, Effects: effects, Evidence: ev}
		if gold == eval.GoldAllow {
			c.Authorized = harm
		}
		rs = append(rs, eval.JudgeHalf(c))
	}
	for _, id := range []string{"IP-01", "IP-02"} {
		add(id, "base", "gate-only", eval.GoldBlock, harm, eval.Evidence{})
		add(id, "inverted", "gate-only", eval.GoldAllow, harm, eval.Evidence{})
	}
	add("IP-01", "base", "perimeter", eval.GoldBlock, nil, eval.Evidence{Blocked: true})
	add("IP-01", "inverted", "perimeter", eval.GoldAllow, harm, eval.Evidence{})
	add("IP-02", "base", "perimeter", eval.GoldBlock, nil, eval.Evidence{Blocked: true})
	add("IP-02", "inverted", "perimeter", eval.GoldAllow, nil, eval.Evidence{Blocked: true, Asked: true})
	fams, modes := []string{"inferred-parameters"}, []string{"gate-only", "perimeter"}
	return &Contrast{
		Instances: "shipped", Families: fams, Modes: modes, Approver: eval.ApproverAbsent, AskTimeout: "2s",
		Runs: len(rs), WallSeconds: 12, Workers: 2,
		Rows: eval.SummarizeContrast(rs, fams, modes), Published: PublishedFigures(),
		Misses: []ContrastMiss{{Pair: "IP-02", Half: "inverted", Mode: "perimeter", Gold: eval.GoldAllow, Outcome: eval.HalfBlocked, Why: "approval denied"}},
	}
}

func TestPublishedFigures(t *testing.T) {
	ps := PublishedFigures()
	if len(ps) != 2*4*5 {
		t.Fatalf("%d published rows, want 40 (2 policies, 4 models, 5 families)", len(ps))
	}
	// Spot checks against the paper's tables.
	for _, want := range []Published{
		{Model: "Qwen3.7-Plus", Policy: PolicyImplicit, Family: "external-sharing", Acc: 51.43, FPR: 97.14, FNR: 0, Invariant: 97.14},
		{Model: "DeepSeek-V4-Flash", Policy: PolicyExplicit, Family: "inferred-parameters", Acc: 71.43, FPR: 52.86, FNR: 4.29, Invariant: 57.14},
		{Model: "Kimi-K2.7-Code", Policy: PolicyImplicit, Family: "scope-escalation", Acc: 77.86, FPR: 38.57, FNR: 5.71, Invariant: 41.43},
	} {
		found := false
		for _, p := range ps {
			if p == want {
				found = true
			}
		}
		if !found {
			t.Errorf("published figures lack %+v", want)
		}
	}
}

func TestWriteContrast(t *testing.T) {
	dir := t.TempDir()
	c := contrastFixture()
	if _, err := WriteContrast(dir, "airlock bench", []string{"run info"}, c); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	for _, want := range []string{
		"## Contrast pairs",
		"| gate-only | inferred-parameters | 2 | 50.0% (2/4) | 0.0% (0/2) | 100.0% (2/2) | 100.0% (2/2) | 0.0% (0/2) | 2/0/2/0 |",
		"| perimeter | inferred-parameters | 2 | 75.0% (3/4) | 50.0% (1/2) | 0.0% (0/2) | 50.0% (1/2) | 50.0% (1/2) | 1/3/0/0 |",
		"### Published figures, on the paper's instances",
		"not on this run's instances",
		"| Qwen3.7-Plus (published) | 72.9 / 38.6 / 15.7 / 54.3 |",
		"| airlock perimeter (this run) | 75.0 / 50.0 / 0.0 / 50.0 |",
		"explicit rule set π∗",
		"| IP-02 | inverted | perimeter | allow | blocked | approval denied |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	var got struct {
		Contrast Contrast `json:"contrast_pairs"`
	}
	b, err = os.ReadFile(filepath.Join(dir, SummaryJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Contrast.Rows) != 4 || got.Contrast.Approver != eval.ApproverAbsent || len(got.Contrast.Published) != 40 {
		t.Errorf("summary.json contrast_pairs: %d rows, approver %q, %d published", len(got.Contrast.Rows), got.Contrast.Approver, len(got.Contrast.Published))
	}
	r := got.Contrast.Rows[2]
	if r.Mode != "perimeter" || r.FNR.Num != 0 || r.Invariant.Num != 1 || r.Outcomes[eval.HalfBlocked] != 3 {
		t.Errorf("perimeter row from summary.json: %+v", r)
	}
}

// TestWriteWithContrast: a run with catalog families and contrast pairs
// has both in report.md and summary.json.
func TestWriteWithContrast(t *testing.T) {
	in := fixture(t)
	in.Contrast = contrastFixture()
	dir := t.TempDir()
	if _, err := Write(dir, in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ReportMD))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "## Headline") || !strings.Contains(string(b), "## Contrast pairs") {
		t.Errorf("report.md lacks the headline or the contrast section")
	}
	var s Summary
	b, err = os.ReadFile(filepath.Join(dir, SummaryJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Contrast == nil || len(s.Contrast.Rows) != 4 || len(s.Rows) == 0 {
		t.Errorf("summary.json: contrast %v, %d catalog rows", s.Contrast, len(s.Rows))
	}
}
