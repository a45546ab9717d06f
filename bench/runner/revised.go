package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/revisions"
	"github.com/airlock-sandbox/airlock/policies"
)

// Revised requests (docs/revised-requests.md).
//
// For each prompt selected (Options.Revised), two sessions run on one
// worker's world instance:
//
//   - live: a perimeter session with the prompt's manifest copies its
//     credential file to /tmp (what an agent that keeps its token holds),
//     runs the family's single-target actions (the before phase, judged
//     against the prompt's oracle), is revised live with PATCH
//     /v1/sessions/ID to the manifest manifest.Revise derives from the
//     prompt's text and its revision's, and runs the same actions again,
//     each twice: as it is, and with the credential file copied before
//     the revision (the after phase, judged against the revised oracle);
//   - fresh: a perimeter session started with the revised manifest runs
//     the same actions: the stop-and-restart baseline, against which
//     eval.JudgeRevised tells a stale-authority use and lost authority
//     apart from the revised manifest's own behaviour.
//
// Every action runs on a freshly reset world, as in the main run. An
// action that ends its session (an overlay workspace it changed, committed
// on exit) is followed by a new session of the first manifest, which is
// revised again (RevisionApplied.Reapplied) before the next action runs.
// Held requests are decided by the informed approver, who knows what the
// person means at the time: the prompt's oracle until the revision, the
// revised oracle from then on (and in the fresh session).

// RevisedSubsetDefault is the subset make bench revises: the S0 prompt of
// every B/R cell of the four families, so that each revision runs once
// (the S axis rephrases a request; the revision is its cell's).
// clean-up-branches costs the most: its actions change the workspace
// checkout, so each of its actions after the revision needs a session of
// its own, revised again (its working-history revisions change the
// workspace's protect_refs).
const RevisedSubsetDefault = "default"

// RevisedSubsetAll revises every selected prompt.
const RevisedSubsetAll = "all"

// RevisedFile holds the revised cases with their results.
const RevisedFile = "revised.jsonl"

// RevisedManifestsDir holds the revised manifests, one per revised prompt.
const RevisedManifestsDir = "manifests/revised"

// revisedOracleKey is the key of revision id's oracle among the plan's
// oracles.
func revisedOracleKey(id string) string { return "revision:" + id }

// heldToken is where a live session's credential file is copied before the
// revision.
const heldToken = "/tmp/airlock-held-token"

// revisedPrompts returns the prompts to revise for the selection sel
// (RevisedSubsetDefault, RevisedSubsetAll or prompt ids separated by
// commas) among those the plan runs.
func (pl *plan) revisedPrompts(sel string) ([]data.Prompt, error) {
	var out []data.Prompt
	var ids []string
	switch sel {
	case "":
		return nil, nil
	case RevisedSubsetDefault, RevisedSubsetAll:
	default:
		ids = strings.Split(sel, ",")
	}
	for _, f := range pl.families {
		for _, p := range pl.prompts[f] {
			switch {
			case ids != nil && !slices.Contains(ids, p.ID):
				continue
			case sel == RevisedSubsetDefault && p.S != "S0":
				continue
			}
			out = append(out, p)
		}
	}
	for _, id := range ids {
		if !slices.ContainsFunc(out, func(p data.Prompt) bool { return p.ID == id }) {
			return nil, fmt.Errorf("revised prompt %s is not among the prompts this run selects: %w", id, errdefs.ErrInvalidArgument)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--revised %s selects no prompt of this run: %w", sel, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// revisedActions are the actions a revised prompt runs: its family's
// single-target actions in their canonical CLI form, one per fixture item.
func (pl *plan) revisedActions(family string) []catalog.Action {
	var out []catalog.Action
	for _, a := range pl.actions[family] {
		if a.Kind == catalog.KindSingle {
			out = append(out, a)
		}
	}
	return out
}

// revisedJob is one revised prompt's live or fresh session.
type revisedJob struct {
	prompt  data.Prompt
	rev     revisions.Revision
	fresh   bool
	first   *job // the first manifest's session configuration
	revised *policies.Policy
	actions []catalog.Action
}

// revisedOutput is what a revised job produced.
type revisedOutput struct {
	before, after []*RunRecord // after: both variants, in action order
	applied       *eval.RevisionApplied
}

// RevisedRun is one run of a revised prompt, as written to RevisedFile.
type RevisedRun struct {
	eval.RevisedCase
	Result  eval.RevisedResult `json:"result"`
	Session string             `json:"session"`
	// FreshSession is the fresh session's id (after phase).
	FreshSession string `json:"fresh_session,omitempty"`
}

// runRevised runs the revised prompts of sel on st's workers and judges
// them.
func runRevised(ctx context.Context, st *Stack, scratch string, pl *plan, opts Options, ak *asker) (*eval.RevisedSummary, []RevisedRun, error) {
	prompts, err := pl.revisedPrompts(opts.Revised)
	if err != nil || len(prompts) == 0 {
		return nil, nil, err
	}
	revs, err := revisions.Load()
	if err != nil {
		return nil, nil, err
	}
	var jobs []*revisedJob
	restart := map[string]int{}
	for _, p := range prompts {
		rev, ok := revisions.For(revs, p)
		if !ok {
			return nil, nil, fmt.Errorf("prompt %s has no revision", p.ID)
		}
		gopts := pl.genOpts[p.ID]
		m2, err := manifest.Revise(p.Family, p.Text, rev.Text, pl.ops[p.Family], gopts)
		if err != nil {
			return nil, nil, fmt.Errorf("revised manifest of %s: %w", p.ID, err)
		}
		if _, err := manifest.Write(filepath.Join(opts.Out, RevisedManifestsDir), p.ID, m2.Policy); err != nil {
			return nil, nil, err
		}
		wsDir := gopts.WorkspaceDir
		mp1, err := modePolicy(ModePerimeter, pl.manifests[p.ID].Policy, wsDir)
		if err != nil {
			return nil, nil, err
		}
		mp2, err := modePolicy(ModePerimeter, m2.Policy, wsDir)
		if err != nil {
			return nil, nil, err
		}
		restart[p.ID] = len(mp2.Credentials)
		acts := pl.revisedActions(p.Family)
		for _, fresh := range []bool{false, true} {
			key, pol, oracle := "revised-live-"+p.ID, mp1, p.ID
			if fresh {
				key, pol, oracle = "revised-fresh-"+p.ID, mp2, revisedOracleKey(rev.ID)
			}
			j := &job{key: key, family: p.Family, policy: pol, modes: []string{"revised"}, prompts: []string{oracle},
				overlay: overlay(pol), actions: acts, approver: eval.ApproverInformed, prompt: p.Text}
			jobs = append(jobs, &revisedJob{prompt: p, rev: rev, fresh: fresh, first: j, revised: mp2, actions: acts})
		}
	}

	start := time.Now()
	outs, err := executeRevised(ctx, st, scratch, pl, jobs, opts, ak)
	if err != nil {
		return nil, nil, err
	}
	wall := time.Since(start)
	nruns := 0
	for _, o := range outs {
		nruns += len(o.before) + len(o.after)
	}

	// Judge: each live run against the oracle in force, each run after the
	// revision beside the fresh session's run of the same action.
	var runs []RevisedRun
	var results []eval.RevisedResult
	var applied []eval.RevisionApplied
	for _, p := range prompts {
		live, fresh := outs["revised-live-"+p.ID], outs["revised-fresh-"+p.ID]
		rev, _ := revisions.For(revs, p)
		a := *live.applied
		a.RestartMints = restart[p.ID]
		applied = append(applied, a)
		freshBy := map[string]*RunRecord{}
		for _, r := range fresh.after {
			freshBy[r.ActionID] = r
		}
		add := func(r *RunRecord, phase string) error {
			c := eval.RevisedCase{Family: p.Family, PromptID: p.ID, RevisionID: rev.ID, Kind: rev.Kind,
				ActionID: r.ActionID, Command: r.Command, Phase: phase, Variant: eval.VariantLive,
				First: pl.oracles[p.ID], Revised: pl.oracles[revisedOracleKey(rev.ID)], Live: eval.Run{Effects: r.Effects, Evidence: r.Evidence}}
			base, held := strings.CutSuffix(r.ActionID, "+"+eval.VariantHeldToken)
			if held {
				c.Variant, c.ActionID = eval.VariantHeldToken, base
			}
			rr := RevisedRun{RevisedCase: c, Session: r.Session}
			if phase == eval.PhaseAfter {
				f := freshBy[base]
				if f == nil {
					return fmt.Errorf("no fresh run of %s for revised %s", base, p.ID)
				}
				rr.Fresh = &eval.Run{Effects: f.Effects, Evidence: f.Evidence}
				rr.FreshSession = f.Session
			}
			res, err := eval.JudgeRevised(&rr.RevisedCase)
			if err != nil {
				return err
			}
			rr.Result = res
			runs = append(runs, rr)
			return nil
		}
		for _, r := range live.before {
			if err := add(r, eval.PhaseBefore); err != nil {
				return nil, nil, err
			}
		}
		for _, r := range live.after {
			if err := add(r, eval.PhaseAfter); err != nil {
				return nil, nil, err
			}
		}
	}
	for i := range runs {
		runs[i].Result.Case = &runs[i].RevisedCase
		results = append(results, runs[i].Result)
	}
	sum := &eval.RevisedSummary{
		Subset:  revisedSubsetNote(opts.Revised, prompts, pl),
		Command: revisedCommand(opts),
		Runs:    nruns, WallSeconds: wall.Seconds(), Workers: opts.Workers,
		Rows:    eval.SummarizeRevised(results, applied),
		Applied: applied,
		Results: eval.Findings(results),
	}
	if err := writeJSONLines(filepath.Join(opts.Out, RevisedFile), runs); err != nil {
		return nil, nil, err
	}
	return sum, runs, nil
}

// revisedCommand is the command that runs the revised prompts of opts
// again.
func revisedCommand(opts Options) string {
	cmd := "airlock bench"
	for _, f := range opts.Families {
		cmd += " --family " + f
	}
	cmd += " --revised " + opts.Revised
	if len(opts.Prompts) > 0 || len(opts.Actions) > 0 {
		cmd += " (this run also selected prompts and actions)"
	}
	if opts.Revised == RevisedSubsetDefault && len(opts.Families) == 0 {
		cmd = "make bench, or " + cmd
	}
	return cmd
}

// revisedSubsetNote says in words what the revised runs covered.
func revisedSubsetNote(sel string, prompts []data.Prompt, pl *plan) string {
	fams := map[string]int{}
	var names []string
	for _, p := range prompts {
		if fams[p.Family] == 0 {
			names = append(names, p.Family)
		}
		fams[p.Family]++
	}
	var parts []string
	for _, f := range names {
		parts = append(parts, fmt.Sprintf("%s %d prompts × %d single-target actions", f, fams[f], len(pl.revisedActions(f))))
	}
	what := "the prompts named"
	switch sel {
	case RevisedSubsetDefault:
		what = "the S0 prompt of every B/R cell (each revision once) of each selected family"
	case RevisedSubsetAll:
		what = "every prompt of the run"
	}
	return fmt.Sprintf("%s: %s; each action once before the revision, twice after it (as it is, and with the credential file held from before), and once in a fresh session under the revised manifest",
		what, strings.Join(parts, "; "))
}

// executeRevised runs the revised jobs on opts.Workers workers and
// returns their outputs by job key.
func executeRevised(ctx context.Context, st *Stack, scratch string, pl *plan, jobs []*revisedJob, opts Options, ak *asker) (map[string]*revisedOutput, error) {
	total := 0
	for _, j := range jobs {
		total += len(j.actions)
		if !j.fresh {
			total += 2 * len(j.actions)
		}
	}
	var (
		mu   sync.Mutex
		done int
		out  = map[string]*revisedOutput{}
	)
	tick := func() {
		mu.Lock()
		done++
		n := done
		mu.Unlock()
		if opts.Progress != nil {
			opts.Progress(n, total)
		}
	}
	var workers []*worker
	for i := range opts.Workers {
		w := &worker{id: i, client: st.Client, worlds: st.Worlds, spaces: pl.spaces, dirs: map[string][]string{},
			timeout: opts.Timeout, done: tick, asker: ak}
		for _, f := range pl.families {
			w.dirs[f] = []string{filepath.Join(scratch, "rev", fmt.Sprint(i), f, "a"), filepath.Join(scratch, "rev", fmt.Sprint(i), f, "b")}
		}
		workers = append(workers, w)
	}
	err := runPool(ctx, workers, jobs, func(ctx context.Context, w *worker, j *revisedJob) error {
		o, err := w.runRevised(ctx, j)
		if err != nil {
			return fmt.Errorf("revised %s: %w", j.first.key, err)
		}
		mu.Lock()
		out[j.first.key] = o
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runRevised runs one revised job: the fresh session's actions, or the live
// session's before the revision, the revision, and after it.
func (w *worker) runRevised(ctx context.Context, rj *revisedJob) (_ *revisedOutput, retErr error) {
	j := rj.first
	wld := w.worlds.World(w.id)
	ws := w.spaces[j.family]
	hasWS := len(j.policy.Workspaces) > 0
	var free []string
	var pristineRefs map[string]string
	if hasWS {
		free = slices.Clone(w.dirs[j.family])
		for _, d := range free {
			if err := ws.Restore(d); err != nil {
				return nil, err
			}
		}
		var err error
		if pristineRefs, err = ws.PristineRefs(); err != nil {
			return nil, err
		}
	}
	var cur *live
	defer func() {
		if cur != nil {
			_, _, _ = w.end(context.WithoutCancel(ctx), cur, false)
		}
	}()
	// open starts a session of j's configuration and waits for it.
	open := func() error {
		d := ""
		if hasWS {
			d, free = free[0], free[1:]
		}
		cur = w.open(ctx, j, d)
		<-cur.ready
		return cur.err
	}
	// ended puts a finished session's directory back.
	ended := func() error {
		if cur.dir != "" {
			if err := ws.Restore(cur.dir); err != nil {
				return err
			}
			free = append(free, cur.dir)
		}
		cur = nil
		return nil
	}
	o := &revisedOutput{}
	run := func(a catalog.Action) (*RunRecord, error) {
		rec, end, err := w.runAction(ctx, j, a, cur, wld, ws, pristineRefs)
		if err != nil {
			return nil, fmt.Errorf("%s in %s: %w", a.ID, j.key, err)
		}
		w.done()
		if end {
			return rec, ended()
		}
		return rec, nil
	}

	if rj.fresh {
		for _, a := range rj.actions {
			if cur == nil {
				if err := open(); err != nil {
					return nil, err
				}
			}
			rec, err := run(a)
			if err != nil {
				return nil, err
			}
			o.after = append(o.after, rec)
		}
		return o, nil
	}

	// hold copies the session's credential file, as an agent keeping its
	// token would, before any action runs.
	hold := func() error {
		out, err := cur.sh.run(`cp "$`+catalog.EnvTokenFile+`" `+heldToken, w.timeout)
		if err != nil {
			return err
		}
		if out.ExitCode != 0 {
			return fmt.Errorf("copy the credential file: exit %d: %s", out.ExitCode, out.Stderr)
		}
		return nil
	}
	o.applied = &eval.RevisionApplied{Family: j.family, PromptID: rj.prompt.ID, RevisionID: rj.rev.ID, Kind: rj.rev.Kind}
	// revise applies the revised manifest to the current session, live.
	first := true
	revise := func() error {
		p := rj.revised.Clone()
		p.Label = labelPrefix + j.family + "-" + j.key[:8]
		for i := range p.Workspaces {
			p.Workspaces[i].HostPath = cur.dir
		}
		start := time.Now()
		s, err := w.client.UpdateSession(ctx, cur.id, api.UpdateRequest{Policy: *p})
		ms := float64(time.Since(start).Microseconds()) / 1000
		if w.asker != nil {
			// From now on the person means the revised request, whether
			// or not the daemon took it; the approver's dry run uses the
			// credential the session holds.
			after := *j
			after.prompts = []string{revisedOracleKey(rj.rev.ID)}
			if err == nil {
				after.policy = rj.revised
			}
			w.asker.register(cur.id, &after, w.id)
		}
		if !first {
			o.applied.Reapplied++
			if err != nil && o.applied.Refused == "" {
				// The new session runs on under the first manifest: say so.
				o.applied.Refused = fmt.Sprintf("applied again to session %s: %v", cur.id, err)
			}
			return nil
		}
		first = false
		o.applied.Session, o.applied.Millis = cur.id, ms
		switch {
		case err != nil && (api.IsFailedPrecondition(err) || api.IsInvalidArgument(err)):
			// Refused: the session runs on under the first manifest, and
			// its runs after the revision say what that means.
			o.applied.Refused = err.Error()
		case err != nil:
			return fmt.Errorf("revise session %s: %w", cur.id, err)
		case s.Revision != nil:
			o.applied.Version = s.Revision.Version
			o.applied.Reminted = s.Revision.CredentialsReminted
			o.applied.ConnectionsCut = s.Revision.ConnectionsCut
			o.applied.Unpinned = len(s.Revision.Unpinned)
		default:
			o.applied.Version = s.PolicyVersion
		}
		return nil
	}
	for _, a := range rj.actions {
		if cur == nil {
			if err := open(); err != nil {
				return nil, err
			}
			if err := hold(); err != nil {
				return nil, err
			}
		}
		rec, err := run(a)
		if err != nil {
			return nil, err
		}
		o.before = append(o.before, rec)
	}
	revised := false
	for _, a := range rj.actions {
		held := a
		held.ID = a.ID + "+" + eval.VariantHeldToken
		held.Command = "export " + catalog.EnvTokenFile + "=" + heldToken + "; " + a.Command
		for _, v := range []catalog.Action{a, held} {
			if cur == nil {
				if err := open(); err != nil {
					return nil, err
				}
				if err := hold(); err != nil {
					return nil, err
				}
				revised = false
			}
			if !revised {
				if err := revise(); err != nil {
					return nil, err
				}
				revised = true
			}
			rec, err := run(v)
			if err != nil {
				return nil, err
			}
			o.after = append(o.after, rec)
		}
	}
	return o, nil
}
