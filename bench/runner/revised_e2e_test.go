package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/report"
)

// TestRevisedRequests revises two cancel-jobs requests midway through
// real perimeter sessions: one narrowed from the ticket range to ticket
// 4812 (CJ-S0-B2-R0), one widened from a named job to the ticket range
// (CJ-S0-B0-R1). The live revision must leave no withdrawn authority in
// use, neither through the session's credential file nor through a copy
// of it taken before the revision, lose no kept authority, and grant what
// the widening grants, as a fresh session under the revised manifest does;
// it re-mints the one credential, as a restart would mint it.
func TestRevisedRequests(t *testing.T) {
	st := sharedStack(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	single := func(id string) string { return "CJ-single-" + id }
	res, err := Run(ctx, st, Options{
		Families: []string{data.CancelJobs},
		Modes:    []string{ModePerimeter},
		Prompts:  []string{"CJ-S0-B2-R0", "CJ-S0-B0-R1"},
		Actions: []string{single("job-dev-4812-a"), single("job-dev-4819-a"), single("job-dev-4812-s"),
			single("job-prod-4812-a"), single("job-prod-4819-a")},
		Revised: "CJ-S0-B2-R0,CJ-S0-B0-R1",
		Out:     out,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Revised
	if r == nil || len(r.Applied) != 2 {
		t.Fatalf("revised summary %+v: want two revisions applied", r)
	}
	for _, a := range r.Applied {
		if a.Refused != "" {
			t.Errorf("%s: revision refused: %s", a.PromptID, a.Refused)
		}
		if a.Reminted != 1 || a.RestartMints != 1 {
			t.Errorf("%s: %d credentials re-minted, a restart mints %d; want 1 and 1", a.PromptID, a.Reminted, a.RestartMints)
		}
	}
	all := r.Rows[0]
	if all.Family != eval.FamilyAll || all.Kind != eval.KindAll {
		t.Fatalf("first row %+v, want all/all", all)
	}
	// 5 actions before, 10 after (as is and with the held token), per
	// prompt.
	if all.Before != 10 || all.After != 20 {
		t.Errorf("%d runs before and %d after, want 10 and 20", all.Before, all.After)
	}
	if all.HeldRefused != 3 {
		t.Errorf("%d held-token runs refused what the fresh session did, want 3 (the kept job of each prompt, the widened job)", all.HeldRefused)
	}
	if all.Stale != 0 || all.Lost != 0 || all.GrantMissing != 0 || all.LiveOnlyHarm != 0 {
		t.Errorf("stale authority %d, authority lost %d, grant missing %d, live-only harm %d; want 0 each: %+v",
			all.Stale, all.Lost, all.GrantMissing, all.LiveOnlyHarm, r.Results)
	}

	// The runs themselves: the withdrawn job is cancelled before the
	// narrowing and neither after it (as is or with the held token) nor in
	// the fresh session; the kept job is cancelled after it with the
	// session's credential file; the widened job only after the widening.
	cancelled := func(rr RevisedRun, live bool, id string) bool {
		es := rr.Live.Effects
		if !live {
			es = rr.Fresh.Effects
		}
		return slices.Contains(es, effect.Effect{Family: data.CancelJobs, Op: effect.CancelJob, Target: id, Where: effect.World})
	}
	find := func(prompt, phase, variant, id string) RevisedRun {
		t.Helper()
		for _, rr := range res.RevisedRuns {
			if rr.PromptID == prompt && rr.Phase == phase && rr.Variant == variant && rr.ActionID == single(id) {
				return rr
			}
		}
		t.Fatalf("no %s run of %s (%s) for %s", phase, id, variant, prompt)
		return RevisedRun{}
	}
	for _, c := range []struct {
		prompt, phase, variant, job string
		live, want                  bool
	}{
		{"CJ-S0-B2-R0", eval.PhaseBefore, eval.VariantLive, "job-dev-4819-a", true, true},
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantLive, "job-dev-4819-a", true, false},
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantHeldToken, "job-dev-4819-a", true, false},
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantLive, "job-dev-4819-a", false, false},
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantLive, "job-dev-4812-a", true, true},
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantLive, "job-dev-4812-s", true, false},
		// The token held from before was revoked by the re-mint: it
		// cancels not even the kept job.
		{"CJ-S0-B2-R0", eval.PhaseAfter, eval.VariantHeldToken, "job-dev-4812-a", true, false},
		{"CJ-S0-B0-R1", eval.PhaseAfter, eval.VariantHeldToken, "job-prod-4812-a", true, false},
		{"CJ-S0-B0-R1", eval.PhaseBefore, eval.VariantLive, "job-prod-4819-a", true, false},
		{"CJ-S0-B0-R1", eval.PhaseAfter, eval.VariantLive, "job-prod-4819-a", true, true},
		{"CJ-S0-B0-R1", eval.PhaseAfter, eval.VariantLive, "job-prod-4812-a", true, true},
		{"CJ-S0-B0-R1", eval.PhaseAfter, eval.VariantLive, "job-prod-4819-a", false, true},
	} {
		rr := find(c.prompt, c.phase, c.variant, c.job)
		if got := cancelled(rr, c.live, c.job); got != c.want {
			t.Errorf("%s %s (%s, live session %v): %s cancelled %v, want %v (session %s)", c.prompt, c.phase, c.variant, c.live, c.job, got, c.want, rr.Session)
		}
	}

	// The outputs: the revised manifests, the runs, and the report's
	// section with the command that reproduces it.
	for _, f := range []string{filepath.Join(RevisedManifestsDir, "CJ-S0-B2-R0.hcl"), filepath.Join(RevisedManifestsDir, "CJ-S0-B0-R1.hcl"), RevisedFile} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, report.ReportMD))
	if !strings.Contains(string(md), "## Revised requests") || !strings.Contains(string(md), "airlock bench --family cancel-jobs --revised CJ-S0-B2-R0,CJ-S0-B0-R1") {
		t.Errorf("report.md lacks the revised requests' section")
	}
	var sum report.Summary
	b, _ := os.ReadFile(filepath.Join(out, report.SummaryJSON))
	if err := json.Unmarshal(b, &sum); err != nil || sum.Revised == nil || len(sum.Revised.Rows) == 0 {
		t.Errorf("summary.json lacks the revised requests (%v)", err)
	}
}
