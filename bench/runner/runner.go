// Package runner runs `airlock bench`: it ties the benchmark's packages to
// real airlock sandboxes.
//
// For each task family it builds the action catalog (bench/catalog), writes
// each prompt's perimeter manifest from the request text and the family's
// operator policy (bench/manifest; the oracles are read only to judge), and
// derives every mode's session policy from it: gate-only (the operator's
// credentials, open egress to the world, the workspace read-write), the
// single-layer ablations, and the perimeter. Every action runs in an
// airlock sandbox on a freshly reset world (bench/world) and workspace;
// its effect is the world's state diff plus what reached the host
// workspace. Effects and the sessions' audit evidence are judged by
// bench/eval and written by bench/report.
//
// # Reuse
//
// The result of a run depends only on the session's policy and the action,
// so equal work is done once: an action's gate-only run (its reference
// effect) once per family, and in every other mode once per distinct
// session policy (prompts whose manifests agree share runs). A session
// runs many actions (each a fresh `bash -c` process, as an exec would
// start) while its layers make that equivalent to a fresh session: always
// with a read-write workspace, which is restored between actions; with an
// overlay workspace only until an action changes it, since the commit at
// the session's end is part of that action's effect. Workers run jobs in
// parallel, each against its own instance of the world. Options.Naive runs
// every (prompt, mode, action) in a fresh session instead, to check that
// the two agree.
//
// # Contrast pairs
//
// The contrast-pair families (bench/authgate, after AuthGateBench) run
// beside AmPermBench's, through the same stack (authgate.go): each half
// of a pair in the perimeter generated from its request, each pair once in
// gate-only, every session on a freshly loaded world instance and a fresh
// git checkout, judged by bench/eval's contrast metrics.
package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/report"
	"github.com/airlock-sandbox/airlock/bench/revisions"
	"github.com/airlock-sandbox/airlock/bench/suite"
	"github.com/airlock-sandbox/airlock/policies"
)

// Options configure a benchmark run.
type Options struct {
	// Families, Modes and Gates select what runs; empty means every
	// family, every mode, and the allow-all gate.
	Families []string
	Modes    []string
	Gates    []Gate
	// Extra are actions from an --actions file.
	Extra []catalog.Action
	// Prompts and Actions, when set, restrict the prompts and the
	// catalog's actions to these ids.
	Prompts []string
	Actions []string
	// Out is the results directory (required).
	Out string
	// DataDir is AmPermBench's data directory (default data.DefaultDir).
	DataDir string
	// Workers run jobs in parallel (default: the stack's world instances).
	Workers int
	// Naive runs every (prompt, mode, action) in a fresh session of its
	// own, reusing nothing.
	Naive bool
	// Timeout bounds one action (default 2 minutes).
	Timeout time.Duration
	// Progress is called after each run with the runs done and the total.
	Progress func(done, total int)
	// Title and RunInfo head the report.
	Title   string
	RunInfo []string
	// Seed fixes the habituated approver's draws.
	Seed uint64
	// AskTimeout is how long a held request waits in the perimeter's
	// sessions (default 30s); the runner's approvers decide at once.
	AskTimeout time.Duration
	// ExecAgent, when set, is an operator's own agent command: under each
	// prompt it runs once in the sandbox, with the request in
	// $AIRLOCK_BENCH_PROMPT, and that whole run is the one action judged
	// (catalog.KindAgentExec), as an agent's task is.
	ExecAgent string
	// Agent, when set, carries out every action as a tool call of a real
	// agent (see Agent); the stack must serve model hosts
	// (StackConfig.ModelHosts) and run the agent's bench image. The
	// agent's permission mode is then the only gate.
	Agent *Agent

	// Instances is a directory of contrast-pair instances to run instead
	// of the shipped set (bench/authgate, docs/authgatebench.md).
	Instances string
	// Perimeter generates the contrast pairs' perimeter policies
	// (default DefaultPerimeter).
	Perimeter Perimeter
	// Revised selects the prompts whose requests are revised midway
	// (revised.go): RevisedSubsetDefault, RevisedSubsetAll, or prompt ids
	// separated by commas; empty runs none.
	Revised string

	// Suite, when set, runs an operator's own suite instead of
	// AmPermBench's families (suite.go); SuiteManifest, when set, is the
	// perimeter of every prompt instead of the suite's manifests (for
	// --compare), loaded with each prompt's variables. The stack's world
	// must hold the suite's state (StackConfig.Fixture).
	Suite         *suite.Suite
	SuiteManifest string

	// ContrastAskTimeout is how long a held request waits in a contrast
	// pair's perimeter session (default DefaultContrastAskTimeout).
	ContrastAskTimeout time.Duration
}

// Result is a finished run.
type Result struct {
	Summary *report.Summary
	Cases   []eval.Case
	Results []eval.Result
	Runs    []*RunRecord
	// Asks are the held requests and how the approvers decided them.
	Asks []AskRecord
	// Agents are the agent processes of an agent run.
	Agents []AgentRun
	// Contrast is the contrast pairs' part of the run, if any ran.
	Contrast *ContrastResult
	// Revised is the revised requests' part of the run, if any ran, and
	// RevisedRuns its runs.
	Revised     *eval.RevisedSummary
	RevisedRuns []RevisedRun
	// Files are the files written into Options.Out.
	Files []string
	Stats Stats
}

// Stats count the work done.
type Stats struct {
	Configs  int           `json:"configs"`
	Runs     int           `json:"runs"`
	Cases    int           `json:"cases"`
	Wall     time.Duration `json:"wall"`
	FS       FSSupport     `json:"fs"`
	Excluded []string      `json:"excluded,omitempty"`
}

// plan is what a run will do.
type plan struct {
	fams      *data.Families
	families  []string
	prompts   map[string][]data.Prompt // by family
	oracles   map[string]data.Oracle
	ops       map[string]*policy.Operator
	actions   map[string][]catalog.Action // catalog and extra, by family
	catalog   []catalog.Action
	extra     []catalog.Action
	modes     []string
	manifests map[string]*manifest.Manifest // by prompt
	genOpts   map[string]manifest.Options   // by prompt: what its manifest was generated with
	spaces    map[string]*Workspace         // by family; none without workspaces
	// cfg maps prompt and mode to the job that runs them.
	cfg  map[[2]string]*job
	jobs []*job
	// reruns are the perimeter's jobs again under the other approvers,
	// with the actions whose runs held a request; rerun maps prompt and
	// approver to the one that ran its cases.
	reruns []*job
	rerun  map[[2]string]*job
	// decisions by gate name, prompt and action.
	decisions map[[3]string]string
	// suite is the operator's suite the plan runs, if any.
	suite *suite.Suite
}

// Run runs the benchmark on st and writes the results into opts.Out.
func Run(ctx context.Context, st *Stack, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Out == "" {
		return nil, fmt.Errorf("no output directory: %w", errdefs.ErrInvalidArgument)
	}
	if opts.Agent != nil {
		if err := checkAgentRun(st, opts); err != nil {
			return nil, err
		}
		opts.Gates = []Gate{agentGate{opts.Agent}}
	}
	if len(opts.Gates) == 0 {
		opts.Gates = []Gate{allowAll{}}
	}
	if len(opts.Modes) == 0 {
		opts.Modes = Modes
	}
	for _, m := range opts.Modes {
		if _, err := modeLayers(m); err != nil {
			return nil, err
		}
	}
	if opts.Workers <= 0 || opts.Workers > st.Worlds.Len() {
		opts.Workers = st.Worlds.Len()
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Minute
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, err
	}
	if opts.Suite != nil && suiteOneWorker(opts.Suite, opts.SuiteManifest) {
		// The external services are one instance, shared by every run;
		// requests without a session's token (the paste site's, a static
		// registry token's) go to one world instance.
		opts.Workers = 1
		st.Worlds.RouteUnbound(0)
		defer st.Worlds.RouteUnbound(-1)
	}
	var (
		amp, contrastFams []string
		runAmp            = true
		set               *authgate.Set
		setName           string
		err               error
	)
	if opts.Suite == nil {
		if amp, runAmp, contrastFams, set, setName, err = splitFamilies(opts); err != nil {
			return nil, err
		}
	}
	var cp *contrastPlan
	if opts.Agent != nil && len(contrastFams) > 0 {
		// An agent's run is AmPermBench's; the contrast pairs replay their
		// one action under the allow-all gate.
		if len(opts.Families) > 0 {
			return nil, fmt.Errorf("the contrast-pair families (%s) run without an agent: %w", strings.Join(contrastFams, ", "), errdefs.ErrInvalidArgument)
		}
		contrastFams = nil
	}
	if len(contrastFams) > 0 {
		if cp, err = newContrastPlan(set, setName, contrastFams, opts); err != nil {
			return nil, err
		}
	}
	if opts.Suite == nil {
		opts.Families = amp
	}
	if err := ProbeWorld(ctx, st.Client, st.Worlds, st.Image); err != nil {
		return nil, err
	}
	// Workspaces of this run live in a directory of their own.
	scratch, err := os.MkdirTemp(st.Root, "run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	fs, err := ProbeFS(ctx, st.Client, st.Image, scratch)
	if err != nil {
		return nil, err
	}
	res := &Result{Stats: Stats{FS: fs}}
	if !runAmp {
		if cp == nil {
			return nil, fmt.Errorf("nothing to run: the contrast-pair families run without an agent: %w", errdefs.ErrInvalidArgument)
		}
		return runContrastOnly(ctx, st, scratch, cp, opts, res, start)
	}

	var pl *plan
	if opts.Suite != nil {
		pl, err = newSuitePlan(ctx, st, scratch, opts, fs)
	} else {
		pl, err = newPlan(ctx, st, scratch, opts, fs, &res.Stats)
	}
	if err != nil {
		return nil, err
	}
	// The approvers: every job's sessions first run with nobody answering
	// (absent); the perimeter's runs that held a request are run again
	// under each other approver.
	ak := newAsker(st.Client, st.Worlds, pl.oracles, opts.Seed)
	actx, stopAsker := context.WithCancel(ctx)
	askerDone := make(chan struct{})
	go func() {
		defer close(askerDone)
		ak.follow(actx)
	}()
	agents := &agentLog{dir: filepath.Join(opts.Out, TranscriptsDir)}
	runs, err := execute(ctx, st, scratch, pl, pl.jobs, opts, ak, agents)
	if err == nil {
		pl.reruns = pl.rerunJobs(runs)
		var more []*RunRecord
		if more, err = execute(ctx, st, scratch, pl, pl.reruns, opts, ak, agents); err == nil {
			runs = append(runs, more...)
		}
	}
	if err == nil && opts.Revised != "" {
		res.Revised, res.RevisedRuns, err = runRevised(ctx, st, scratch, pl, opts, ak)
	}
	stopAsker()
	<-askerDone
	if err != nil {
		return nil, err
	}
	if cp != nil {
		if res.Contrast, err = runContrast(ctx, st, scratch, cp, opts); err != nil {
			return nil, err
		}
	}
	res.Asks = ak.take()
	res.Agents = agents.take()
	res.Runs = runs
	res.Stats.Configs, res.Stats.Runs = len(pl.jobs)+len(pl.reruns), len(runs)
	byID := map[string]*RunRecord{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	res.Cases, err = pl.cases(opts, byID)
	if err != nil {
		return nil, err
	}
	res.Stats.Cases = len(res.Cases)
	res.Results, err = eval.Evaluate(pl.fams, res.Cases)
	if err != nil {
		return nil, err
	}
	res.Stats.Wall = time.Since(start)
	if err := writeResults(opts, pl, res, st); err != nil {
		return nil, err
	}
	return res, nil
}

// newPlan loads the data, writes the manifests, decides what every gate
// lets through, and groups the runs into jobs.
func newPlan(ctx context.Context, st *Stack, scratch string, opts Options, fs FSSupport, stats *Stats) (*plan, error) {
	dir := opts.DataDir
	if dir == "" {
		var err error
		if dir, err = data.DefaultDir(); err != nil {
			return nil, err
		}
	}
	pl := &plan{prompts: map[string][]data.Prompt{}, actions: map[string][]catalog.Action{}, manifests: map[string]*manifest.Manifest{},
		genOpts: map[string]manifest.Options{}, cfg: map[[2]string]*job{}, decisions: map[[3]string]string{}}
	var err error
	if pl.fams, err = data.LoadFamilies(dir); err != nil {
		return nil, err
	}
	prompts, err := data.LoadPrompts(dir)
	if err != nil {
		return nil, err
	}
	// Oracles judge the runs; nothing that decides a session's policy
	// sees them.
	if pl.oracles, err = data.LoadOracles(dir); err != nil {
		return nil, err
	}
	if pl.ops, err = policy.LoadAll(); err != nil {
		return nil, err
	}

	pl.families = opts.Families
	if len(pl.families) == 0 {
		pl.families = slices.Clone(pl.fams.Order)
	}
	for _, f := range pl.families {
		if _, err := pl.fams.Get(f); err != nil {
			return nil, err
		}
	}
	pl.modes = slices.Clone(opts.Modes)
	if !fs.Workspaces {
		// Without a filesystem layer there is no workspace: the local side
		// of clean-up-branches and the file-edit actions cannot run, and
		// fs-only would equal gate-only.
		note := func(s string) { stats.Excluded = append(stats.Excluded, s) }
		if slices.Contains(pl.families, data.CleanUpBranches) {
			pl.families = slices.DeleteFunc(pl.families, func(f string) bool { return f == data.CleanUpBranches })
			note(data.CleanUpBranches + " (its local side is a workspace checkout)")
		}
		if slices.Contains(pl.modes, ModeFSOnly) {
			pl.modes = slices.DeleteFunc(pl.modes, func(m string) bool { return m == ModeFSOnly })
			note("mode " + ModeFSOnly)
		}
		note("file-edit actions")
		if len(pl.families) == 0 {
			return nil, fmt.Errorf("no family can run without the daemon's filesystem layer (%s): %w", fs.Note, errdefs.ErrFailedPrecondition)
		}
	}

	var tasks *Tasks
	if opts.Agent != nil {
		tasks = opts.Agent.Tasks
	}
	for _, p := range prompts {
		if !slices.Contains(pl.families, p.Family) || (len(opts.Prompts) > 0 && !slices.Contains(opts.Prompts, p.ID)) {
			continue
		}
		if tasks != nil && (st.Models == nil || st.Models.Upstream() == nil) && tasks.Scripts[p.ID] == nil {
			if len(opts.Prompts) > 0 {
				return nil, fmt.Errorf("prompt %s has no task script: %w", p.ID, errdefs.ErrInvalidArgument)
			}
			continue
		}
		if _, ok := pl.oracles[p.ID]; !ok {
			return nil, fmt.Errorf("prompt %s has no oracle", p.ID)
		}
		pl.prompts[p.Family] = append(pl.prompts[p.Family], p)
	}
	for _, f := range pl.families {
		if len(pl.prompts[f]) == 0 {
			return nil, fmt.Errorf("family %s: no prompt selected: %w", f, errdefs.ErrInvalidArgument)
		}
		fam, _ := pl.fams.Get(f)
		acts, err := catalog.Build(fam)
		if err != nil {
			return nil, err
		}
		for _, a := range acts {
			if len(opts.Actions) > 0 && !slices.Contains(opts.Actions, a.ID) {
				continue
			}
			if !fs.Workspaces && a.Kind == catalog.KindFileEdit {
				continue
			}
			pl.catalog = append(pl.catalog, a)
			pl.actions[f] = append(pl.actions[f], a)
		}
		for _, a := range opts.Extra {
			if a.Family == f {
				pl.extra = append(pl.extra, a)
				pl.actions[f] = append(pl.actions[f], a)
			}
		}
		if opts.ExecAgent != "" {
			// The agent command's run on each request is the only action.
			pl.catalog = slices.DeleteFunc(pl.catalog, func(a catalog.Action) bool { return a.Family == f })
			pl.actions[f] = nil
			for _, p := range pl.prompts[f] {
				a := execAction(f, p, opts.ExecAgent)
				pl.catalog = append(pl.catalog, a)
				pl.actions[f] = append(pl.actions[f], a)
			}
		}
		if tasks != nil {
			// The agent's run on each request is the only action.
			pl.catalog = slices.DeleteFunc(pl.catalog, func(a catalog.Action) bool { return a.Family == f })
			pl.actions[f] = nil
			for _, p := range pl.prompts[f] {
				a := taskAction(f, p)
				pl.catalog = append(pl.catalog, a)
				pl.actions[f] = append(pl.actions[f], a)
			}
		}
	}

	// Workspaces: a pristine copy per family, and the copy the written
	// manifests name.
	pl.spaces = map[string]*Workspace{}
	for _, f := range pl.families {
		if !fs.Workspaces {
			break
		}
		ws, err := NewWorkspace(ctx, f, filepath.Join(scratch, "pristine", f), st.Worlds.World(0))
		if err != nil {
			return nil, err
		}
		pl.spaces[f] = ws
		shown := filepath.Join(opts.Out, "workspaces", f)
		if err := os.RemoveAll(shown); err != nil {
			return nil, err
		}
		if err := ws.Restore(shown); err != nil {
			return nil, err
		}
	}

	// Manifests, decisions and jobs.
	modes := slices.Clone(pl.modes)
	if !slices.Contains(modes, ModeGateOnly) {
		modes = append([]string{ModeGateOnly}, modes...) // the reference
	}
	jobs := map[string]*job{}
	for _, f := range pl.families {
		op := pl.ops[f]
		// The environment signals: what a session created now would list
		// with the read scopes alone.
		signals, err := readSignals(ctx, st.Worlds.World(0), op)
		if err != nil {
			return nil, err
		}
		for _, p := range pl.prompts[f] {
			wsDir := ""
			if ws := pl.spaces[f]; ws != nil {
				wsDir = filepath.Join(opts.Out, "workspaces", f)
			}
			genOpts := manifest.Options{
				Label: labelPrefix + p.ID, Image: st.Image, Command: keeperCommand,
				WorkspaceDir: wsDir, User: SandboxUser, Timeout: policies.Duration(time.Hour),
				Signals: signals, AskTimeout: policies.Duration(askTimeout(opts)),
			}
			m, err := manifest.Generate(f, p.Text, op, genOpts)
			if err != nil {
				return nil, fmt.Errorf("manifest of %s: %w", p.ID, err)
			}
			pl.manifests[p.ID] = m
			pl.genOpts[p.ID] = genOpts
			if _, err := manifest.Write(filepath.Join(opts.Out, "manifests"), p.ID, m.Policy); err != nil {
				return nil, err
			}
			if err := writeDecisions(filepath.Join(opts.Out, "manifests"), p.ID, m); err != nil {
				return nil, err
			}
			if err := pl.addPrompt(ctx, f, p, m.Policy, wsDir, modes, jobs, opts); err != nil {
				return nil, err
			}
		}
	}
	if err := pl.finishJobs(jobs, opts); err != nil {
		return nil, err
	}
	if opts.Revised != "" {
		// Refuse a selection now rather than after the main run.
		if opts.Agent != nil {
			return nil, fmt.Errorf("revised requests run the scripted catalog, not an agent: %w", errdefs.ErrInvalidArgument)
		}
		if _, err := pl.revisedPrompts(opts.Revised); err != nil {
			return nil, err
		}
		// The revised oracles judge, and the informed approver decides
		// by them after a revision.
		revOracles, err := revisions.LoadOracles()
		if err != nil {
			return nil, err
		}
		for id, o := range revOracles {
			pl.oracles[revisedOracleKey(id)] = o
		}
	}
	return pl, nil
}

// askTimeout is how long a held request waits in the perimeter's
// sessions.
func askTimeout(opts Options) time.Duration {
	if opts.AskTimeout > 0 {
		return opts.AskTimeout
	}
	return DefaultAskTimeout
}

// addPrompt decides what every gate lets through of prompt p's actions
// and adds its runs in every mode to jobs, the session policies made from
// its perimeter manifest (modePolicy).
func (pl *plan) addPrompt(ctx context.Context, f string, p data.Prompt, perimeter *policies.Policy, wsDir string, modes []string, jobs map[string]*job, opts Options) error {
	for _, g := range opts.Gates {
		for _, a := range pl.actions[f] {
			if !applies(a, p.ID) {
				continue
			}
			d, err := g.Decide(ctx, gateRequest(f, p.ID, p.Text, a))
			if err != nil {
				return err
			}
			pl.decisions[[3]string{g.Name(), p.ID, a.ID}] = d
		}
	}
	for _, mode := range modes {
		mp, err := pl.modePolicy(mode, perimeter, wsDir)
		if err != nil {
			return err
		}
		key := configKey(mp)
		if opts.Naive {
			key += "-" + mode + "-" + p.ID
		}
		j := jobs[key]
		if j == nil {
			j = &job{key: key, family: f, policy: mp, overlay: overlay(mp), approver: eval.ApproverAbsent, prompt: p.Text}
			jobs[key] = j
		}
		if !slices.Contains(j.modes, mode) {
			j.modes = append(j.modes, mode)
		}
		if !slices.Contains(j.prompts, p.ID) {
			j.prompts = append(j.prompts, p.ID)
		}
		pl.cfg[[2]string{p.ID, mode}] = j
	}
	return nil
}

// finishJobs gives each job the actions its cases need, orders the jobs
// and writes their session configurations.
func (pl *plan) finishJobs(jobs map[string]*job, opts Options) error {
	// A job runs the actions some case needs from it: every applicable
	// action for a reference, otherwise those a gate allows.
	for _, j := range jobs {
		ref := slices.Contains(j.modes, ModeGateOnly)
		for _, a := range pl.actions[j.family] {
			need := false
			for _, pid := range j.prompts {
				if !applies(a, pid) {
					continue
				}
				if ref {
					need = true
				}
				for _, g := range opts.Gates {
					if pl.decisions[[3]string{g.Name(), pid, a.ID}] == eval.Allow {
						need = true
					}
				}
			}
			if need {
				j.actions = append(j.actions, a)
			}
		}
		if len(j.actions) > 0 {
			pl.jobs = append(pl.jobs, j)
		}
	}
	// Longest first, so that the workers finish together.
	sort.Slice(pl.jobs, func(a, b int) bool {
		ca, cb := pl.jobs[a].cost(), pl.jobs[b].cost()
		if ca != cb {
			return ca > cb
		}
		return pl.jobs[a].key < pl.jobs[b].key
	})
	return writeConfigs(opts.Out, pl.jobs)
}

// cost estimates a job's duration: overlay jobs end a session per action
// that changes the workspace, which is most of them for branches.
func (j *job) cost() int {
	c := len(j.actions)
	if j.overlay {
		c *= 4
	}
	return c
}

// applies reports whether action a belongs to the cases of prompt pid.
func applies(a catalog.Action, pid string) bool { return a.PromptID == "" || a.PromptID == pid }

// execute runs jobs on opts.Workers workers; ak decides the requests
// their sessions hold.
func execute(ctx context.Context, st *Stack, scratch string, pl *plan, jobs []*job, opts Options, ak *asker, agents *agentLog) ([]*RunRecord, error) {
	total := 0
	for _, j := range jobs {
		total += len(j.actions)
	}
	var done atomic.Int64
	tick := func() {
		n := done.Add(1)
		if opts.Progress != nil {
			opts.Progress(int(n), total)
		}
	}
	if opts.Progress != nil {
		opts.Progress(0, total)
	}
	var (
		mu      sync.Mutex
		out     []*RunRecord
		workers []*worker
	)
	for i := range opts.Workers {
		w := &worker{id: i, client: st.Client, worlds: st.Worlds, spaces: pl.spaces, dirs: map[string][]string{},
			naive: opts.Naive, timeout: opts.Timeout, done: tick, asker: ak,
			agent: opts.Agent, models: st.Models, agentRuns: agents, ext: newExternals(pl.suite)}
		for _, f := range pl.families {
			w.dirs[f] = []string{filepath.Join(scratch, "ws", fmt.Sprint(i), f, "a"), filepath.Join(scratch, "ws", fmt.Sprint(i), f, "b")}
		}
		workers = append(workers, w)
	}
	err := runPool(ctx, workers, jobs, func(ctx context.Context, w *worker, j *job) error {
		recs, err := w.runJob(ctx, j)
		mu.Lock()
		out = append(out, recs...)
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: %w", j.label(), err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

// runPool runs each of jobs on one of workers, each worker one job at a
// time; the first error cancels the jobs not started yet and the context
// of those running. It returns every job's error, or the context's.
func runPool[J any](ctx context.Context, workers []*worker, jobs []J, run func(context.Context, *worker, J) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan J)
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if err := run(ctx, w, j); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case queue <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(queue)
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return ctx.Err()
}

// cases builds every case: each action under each prompt and gate, with
// its reference effects and, per mode, the run the gate let happen.
func (pl *plan) cases(opts Options, runs map[string]*RunRecord) ([]eval.Case, error) {
	var out []eval.Case
	for _, f := range pl.families {
		for _, p := range pl.prompts[f] {
			ref := pl.cfg[[2]string{p.ID, ModeGateOnly}]
			for _, g := range opts.Gates {
				for _, a := range pl.actions[f] {
					if !applies(a, p.ID) {
						continue
					}
					r, ok := runs[ref.key+"/"+a.ID]
					if !ok {
						return nil, fmt.Errorf("no reference run of %s for %s", a.ID, p.ID)
					}
					c := eval.Case{
						Family: f, PromptID: p.ID, S: p.S, B: p.B, R: p.R,
						ActionID: a.ID, ActionKind: string(a.Kind), Command: a.Command,
						Gate: g.Name(), Decision: pl.decisions[[3]string{g.Name(), p.ID, a.ID}],
						Reference: r.Effects, Runs: map[string]eval.Run{}, Oracle: pl.oracles[p.ID],
						Deterministic: true,
					}
					for _, mode := range pl.modes {
						keys := []string{mode}
						if mode == ModePerimeter {
							// The first run had nobody answering; one that
							// held a request ran again under each other
							// approver.
							keys = nil
							for _, ap := range eval.Approvers {
								keys = append(keys, eval.ApproverMode(mode, ap))
							}
						}
						for _, k := range keys {
							if c.Decision != eval.Allow {
								c.Runs[k] = eval.Run{Effects: []effect.Effect{}}
								continue
							}
							mr := pl.runFor(runs, p.ID, k, a.ID)
							if mr == nil {
								return nil, fmt.Errorf("no %s run of %s for %s", k, a.ID, p.ID)
							}
							c.Runs[k] = eval.Run{Effects: mr.Effects, Evidence: mr.Evidence}
						}
					}
					out = append(out, c)
				}
			}
		}
	}
	return out, nil
}

// runFor returns the record of action under prompt in mode: for the
// perimeter under an approver (eval.ApproverMode), the run again under
// that approver when the first one held a request.
func (pl *plan) runFor(runs map[string]*RunRecord, promptID, mode, actionID string) *RunRecord {
	base, ap, ok := strings.Cut(mode, "@")
	if !ok {
		ap = eval.ApproverInformed
	}
	j := pl.cfg[[2]string{promptID, base}]
	if j == nil {
		return nil
	}
	r := runs[j.key+"/"+actionID]
	if r == nil || base != ModePerimeter || !r.Evidence.Asked || ap == eval.ApproverAbsent {
		return r
	}
	if rj := pl.rerun[[2]string{promptID, ap}]; rj != nil {
		return runs[rj.key+"/"+actionID]
	}
	return r
}
