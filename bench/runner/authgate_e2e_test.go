package runner

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// stubPerimeter stands in for the generator in tests: whatever the
// request says, an overlay workspace committed whole on exit, and egress
// nowhere (the L7 gateway on). Its outcomes are known without reading any
// request: every workspace change reaches the host through the commit,
// and every request to a service is refused.
func stubPerimeter(in PerimeterInput) (*policies.Policy, []PerimeterDecision, error) {
	p := &policies.Policy{
		Label: in.Label, Image: in.Image, Command: in.Command, User: in.User, Timeout: in.Timeout, Workdir: in.Target,
		Workspaces: []policies.Workspace{{HostPath: in.WorkspaceDir, Target: in.Target, Mode: policies.ModeOverlay, OnExit: policies.OnExitCommit}},
		Egress:     &policies.Egress{L7: policies.L7Check},
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	return p, []PerimeterDecision{{What: "everything", Verdict: "withhold", Why: "test stub"}}, nil
}

// TestContrastPairsE2E runs two pairs of two families in both modes (12
// sessions: gate-only's once per pair), and
// checks what must hold whatever the generator does: under gate-only the
// allow-all gate lets every action have its effect, so every base half is
// harmful (FNR 100%) and every inverted half allowed, the invariant rate
// 100%. The stub perimeter's own outcomes check the plumbing: a workspace
// change committed on exit reaches the host, and an upload refused by the
// gateway leaves audit evidence and no paste in the world.
func TestContrastPairsE2E(t *testing.T) {
	st := sharedStack(t)
	out := t.TempDir()
	start := time.Now()
	res, err := Run(t.Context(), st, Options{
		Families: []string{authgate.ScopeEscalation, authgate.ExternalSharing},
		Prompts:  []string{"SE-01", "SE-02", "ES-01", "ES-02"},
		Out:      out, Perimeter: stubPerimeter, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	cr := res.Contrast
	// Gate-only's session is one per pair, for both halves.
	if cr == nil || len(cr.Runs) != 12 || len(cr.Halves) != 16 {
		t.Fatalf("contrast result %+v", cr)
	}
	t.Logf("run in %v, the 12 sessions in %.1fs", time.Since(start).Round(time.Second), cr.Summary.WallSeconds)
	for _, h := range cr.Halves {
		rec := findRun(t, cr.Runs, h)
		want := eval.HalfAllowed
		switch {
		case h.Mode == ModeGateOnly && h.Half == authgate.HalfBase:
			want = eval.HalfHarmful
		case h.Mode == ModePerimeter && h.Family == authgate.ScopeEscalation && h.Half == authgate.HalfBase:
			want = eval.HalfHarmful // the stub commits everything
		case h.Mode == ModePerimeter && h.Family == authgate.ExternalSharing:
			want = eval.HalfBlocked // the stub allows no host
		}
		if h.Outcome != want {
			t.Errorf("%s/%s in %s: %s (effects %v, evidence %+v, exit %d: %s%s); want %s",
				h.PairID, h.Half, h.Mode, h.Outcome, h.Effects, h.Evidence, rec.ExitCode, rec.Stdout, rec.Stderr, want)
		}
		if h.Mode == ModeGateOnly && !h.Happened {
			t.Errorf("%s/%s: gate-only lacks an expected effect: got %v, want %v", h.PairID, h.Half, h.Effects, h.Expect)
		}
		if h.Family == authgate.ExternalSharing && h.Mode == ModeGateOnly &&
			!slices.ContainsFunc(rec.World, func(e world.Event) bool { return e.Service == world.ServicePaste }) {
			t.Errorf("%s: the paste site's request did not reach the run's world instance: %+v", rec.ID, rec.World)
		}
		if h.Family == authgate.ScopeEscalation {
			for _, e := range h.Effects {
				if e.Op != effect.WorkspaceWrite {
					t.Errorf("%s: effect %v beside the workspace's", rec.ID, e)
				}
			}
		}
	}

	rows := cr.Summary.Rows
	for _, r := range rows {
		if r.Mode != ModeGateOnly {
			continue
		}
		if r.FNR.Num != r.FNR.Den || r.FPR.Num != 0 || r.Invariant.Num != r.Invariant.Den || r.Acc.Num*2 != r.Acc.Den || r.Unexplained != 0 {
			t.Errorf("gate-only row %s: Acc %v FPR %v FNR %v invariant %v unexplained %d", r.Family, r.Acc, r.FPR, r.FNR, r.Invariant, r.Unexplained)
		}
	}
	if len(rows) != 6 {
		t.Errorf("%d rows, want 6 (two families and all, two modes)", len(rows))
	}

	// What was written: the report's section, the records, a manifest per
	// perimeter half.
	b, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Contrast pairs", "### Published figures, on the paper's instances"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, f := range []string{ContrastRunsFile, ContrastHalfFile, ContrastAsksFile, filepath.Join(ContrastManifests, "SE-01-inverted.json")} {
		if _, err := os.Stat(filepath.Join(out, ContrastDir, f)); err != nil {
			t.Error(err)
		}
	}
	var sum struct {
		Contrast struct {
			Rows []eval.ContrastRow `json:"rows"`
		} `json:"contrast_pairs"`
	}
	b, err = os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Contrast.Rows) != 6 {
		t.Errorf("summary.json: %v, %d contrast rows", err, len(sum.Contrast.Rows))
	}
	n := 0
	f, err := os.Open(filepath.Join(out, ContrastDir, ContrastRunsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		n++
	}
	if n != 12 {
		t.Errorf("%s has %d records, want 12", ContrastRunsFile, n)
	}
}

// findRun returns the session that ran half h.
func findRun(t *testing.T, recs []*ContrastRecord, h eval.HalfResult) *ContrastRecord {
	t.Helper()
	for _, r := range recs {
		if r.Pair == h.PairID && r.Mode == h.Mode && slices.Contains(r.Halves, h.Half) {
			return r
		}
	}
	t.Fatalf("no run of %s/%s in %s", h.PairID, h.Half, h.Mode)
	return nil
}
