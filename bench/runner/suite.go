package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/report"
	"github.com/airlock-sandbox/airlock/bench/suite"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/policies"
)

// An operator's own suite (bench/suite, docs/suites.md) runs through the
// same plan as AmPermBench's families: the suite is one family, its world
// the suite's state (StackConfig.Fixture), its prompts' actions the
// catalog, each prompt's perimeter the operator's manifest (the suite's,
// or Options.SuiteManifest for all of them) with the bench's image,
// command and user, and the oracles the suite's labels. Each action is
// judged by its effects, with its gate-only run as the reference, and the
// report is the same report.

// KindSuite is the kind of a suite's own actions.
const KindSuite catalog.Kind = "suite"

// suiteFamily is the suite's world as a family, for the evaluator's flags
// (owners, protected items).
func suiteFamily(s *suite.Suite) *data.Family {
	fx := s.World.Fixture
	f := &data.Family{Name: s.Family, Prefix: s.Name, ActingUser: s.User, Bucket: fx.Bucket}
	if s.World.Repo {
		f.Branches = append(f.Branches, data.Branch{Name: fx.Git.MainBranch, Protected: true}, data.Branch{Name: data.RemotePrefix + fx.Git.MainBranch, Protected: true})
		for _, b := range fx.Git.Branches {
			for _, name := range []string{b.Name, data.RemotePrefix + b.Name} {
				f.Branches = append(f.Branches, data.Branch{Name: name, Owner: b.Owner, Stale: b.Stale, Protected: b.Protected})
			}
		}
	}
	for _, j := range fx.Jobs {
		f.Jobs = append(f.Jobs, data.Job{ID: j.ID, Name: j.Name, Owner: j.Owner, Queue: j.Queue, Status: j.Status, Stale: j.Stale, Protected: j.Protected})
	}
	for _, d := range fx.Deployments {
		f.Services = append(f.Services, data.Service{ID: d.ID, Name: d.Name, Owner: d.Owner, Env: d.Namespace, Protected: d.Protected})
	}
	for _, o := range fx.Objects {
		f.Objects = append(f.Objects, data.Object{ID: o.ID, Key: o.Key, Owner: o.Owner, NS: o.Namespace, Stale: o.Stale, Protected: o.Protected})
	}
	return f
}

// SuitePolicy is prompt p's perimeter as the bench runs it: the operator's
// manifest (manifestPath, loaded with the prompt's variables, or the one
// the suite names) with the bench's image, command and user, a label of
// its own, an hour's timeout (each action has its own) and, when the
// manifest leaves the working directory at /, the workspace as the
// working directory; everything the manifest enforces stays as written.
func SuitePolicy(p *suite.Prompt, manifestPath, image string) (*policies.Policy, error) {
	pol := p.Policy
	if manifestPath != "" {
		var err error
		if pol, err = policies.LoadFile(manifestPath, p.Vars); err != nil {
			return nil, fmt.Errorf("manifest %s for prompt %s: %w", manifestPath, p.ID, err)
		}
	}
	if pol == nil {
		return nil, fmt.Errorf("prompt %s has no manifest: %w", p.ID, errdefs.ErrInvalidArgument)
	}
	if len(pol.Workspaces) != 1 {
		return nil, fmt.Errorf("manifest %s for prompt %s mounts %d workspaces; a suite's session has one, the suite's workspace: %w", orManifest(manifestPath, p.Manifest), p.ID, len(pol.Workspaces), errdefs.ErrInvalidArgument)
	}
	out := pol.Clone()
	out.Label = labelPrefix + p.ID
	out.Image, out.Command, out.User = image, keeperCommand, SandboxUser
	out.Timeout = policies.Duration(time.Hour)
	if out.Workdir == "" || out.Workdir == policies.DefaultWorkdir {
		// Actions run in the workspace unless the manifest says where.
		out.Workdir = out.Workspaces[0].Target
	}
	out.ApplyDefaults()
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("manifest %s for prompt %s, with the bench's image and command: %w", orManifest(manifestPath, p.Manifest), p.ID, err)
	}
	return out, nil
}

func orManifest(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// suiteOneWorker reports whether s's runs must go one at a time: it has
// external services, which every run shares, or the world's services
// that take requests without a session's token (the paste site, the
// package registry with a static registry token), which the world routes
// to one instance; a perimeter that reaches the paste site counts too
// (manifestPath's, when it replaces the prompts' own).
func suiteOneWorker(s *suite.Suite, manifestPath string) bool {
	if len(s.Externals) > 0 || !s.World.Extra.Empty() {
		return true
	}
	paste := world.DefaultAudiences.Paste
	return slices.ContainsFunc(s.Prompts, func(p *suite.Prompt) bool {
		pol := p.Policy
		if manifestPath != "" {
			var err error
			if pol, err = policies.LoadFile(manifestPath, p.Vars); err != nil {
				return true // refused later; one worker meanwhile
			}
		}
		return pol != nil && pol.Egress != nil && slices.ContainsFunc(pol.Egress.Allow, func(a string) bool {
			return a == paste || strings.HasPrefix(a, paste+":")
		})
	})
}

// modePolicy is the session policy of mode made from perimeter (see
// modePolicy): for a suite whose world has the tracker's, the model
// registry's or the package registry's records, gate-only reaches every
// world host, the paste site included, with the operator's token for
// each, as in the contrast pairs.
func (pl *plan) modePolicy(mode string, perimeter *policies.Policy, wsDir string) (*policies.Policy, error) {
	if pl.suite != nil && !pl.suite.World.Extra.Empty() {
		return modePolicyWith(mode, perimeter, wsDir, ContrastWorldHosts(), ContrastOperatorCredentials())
	}
	return modePolicy(mode, perimeter, wsDir)
}

// suiteState is what the world's tracker, registries and paste site load
// for s: its records, and the workspace's files by path.
func suiteState(s *suite.Suite) worldapi.ExtraState {
	files := map[string]string{}
	if s.World.Repo {
		g := s.World.Fixture.Git
		files[g.Initial.RelPath] = g.Initial.Content
	}
	for _, f := range s.World.Workspace {
		files[f.Path] = f.Content
	}
	return s.World.Extra.State(s.Family, files)
}

// suiteActions returns prompt p's actions.
func suiteActions(s *suite.Suite, p *suite.Prompt) []catalog.Action {
	var out []catalog.Action
	for i, c := range p.Actions {
		out = append(out, catalog.Action{ID: fmt.Sprintf("%s:%d", p.ID, i+1), Family: s.Family, Kind: KindSuite,
			Command: c, Source: p.Pos, PromptID: p.ID})
	}
	return out
}

// newSuitePlan is newPlan for an operator's suite.
func newSuitePlan(ctx context.Context, st *Stack, scratch string, opts Options, fs FSSupport) (*plan, error) {
	s := opts.Suite
	if !fs.Workspaces {
		return nil, fmt.Errorf("a suite's sessions mount its workspace, and the daemon has no filesystem layer (%s): %w", fs.Note, errdefs.ErrFailedPrecondition)
	}
	if len(opts.Families) > 0 || opts.Instances != "" || opts.Revised != "" || len(opts.Extra) > 0 {
		return nil, fmt.Errorf("a suite runs alone: --family, --instances, --revised and --actions go with AmPermBench's families: %w", errdefs.ErrInvalidArgument)
	}
	f := s.Family
	pl := &plan{
		fams: data.NewFamilies(s.User, suiteFamily(s)), families: []string{f}, suite: s,
		prompts: map[string][]data.Prompt{}, oracles: map[string]data.Oracle{}, actions: map[string][]catalog.Action{},
		manifests: map[string]*manifest.Manifest{}, genOpts: map[string]manifest.Options{}, cfg: map[[2]string]*job{},
		decisions: map[[3]string]string{}, modes: slices.Clone(opts.Modes),
	}
	var tasks *Tasks
	if opts.Agent != nil {
		tasks = opts.Agent.Tasks
	}
	for _, p := range s.Prompts {
		if len(opts.Prompts) > 0 && !slices.Contains(opts.Prompts, p.ID) {
			continue
		}
		dp := data.Prompt{ID: p.ID, Family: f, Text: p.Text}
		var acts []catalog.Action
		switch {
		case opts.ExecAgent != "":
			acts = []catalog.Action{execAction(f, dp, opts.ExecAgent)}
		case tasks != nil:
			if (st.Models == nil || st.Models.Upstream() == nil) && tasks.Scripts[p.ID] == nil {
				if len(opts.Prompts) > 0 {
					return nil, fmt.Errorf("prompt %s has no task script: %w", p.ID, errdefs.ErrInvalidArgument)
				}
				continue
			}
			acts = []catalog.Action{taskAction(f, dp)}
		case len(p.Actions) == 0:
			if len(opts.Prompts) > 0 {
				return nil, fmt.Errorf("prompt %s (%s) has no actions: run it with an agent that works on its request (--agent exec:CMD, or --agent with --agent-tasks or --model-url): %w", p.ID, p.Pos, errdefs.ErrInvalidArgument)
			}
			continue
		default:
			acts = suiteActions(s, p)
		}
		for _, a := range acts {
			if len(opts.Actions) > 0 && !slices.Contains(opts.Actions, a.ID) {
				continue
			}
			pl.catalog = append(pl.catalog, a)
			pl.actions[f] = append(pl.actions[f], a)
		}
		pl.prompts[f] = append(pl.prompts[f], dp)
		pl.oracles[p.ID] = data.Oracle{PromptID: p.ID, Family: f, Effects: slices.Clone(p.Authorized), Protected: p.Protected}
	}
	if len(pl.prompts[f]) == 0 || len(pl.actions[f]) == 0 {
		return nil, fmt.Errorf("suite %s: no prompt with actions selected: %w", s.Name, errdefs.ErrInvalidArgument)
	}

	// The world's tracker, registries and paste site hold the suite's
	// records, in every instance, from now on (a reset keeps them).
	for i := 0; i <= st.Worlds.Len(); i++ {
		if err := st.Worlds.World(i).LoadState(suiteState(s)); err != nil {
			return nil, fmt.Errorf("suite %s: the world's services: %w", s.Name, err)
		}
	}

	// The workspace: a pristine copy, and the copy the written manifests
	// name.
	ws, err := NewSuiteWorkspace(ctx, s, filepath.Join(scratch, "pristine", f), st.Worlds.World(0))
	if err != nil {
		return nil, err
	}
	pl.spaces = map[string]*Workspace{f: ws}
	wsDir := filepath.Join(opts.Out, "workspaces", f)
	if err := os.RemoveAll(wsDir); err != nil {
		return nil, err
	}
	if err := ws.Restore(wsDir); err != nil {
		return nil, err
	}

	modes := slices.Clone(pl.modes)
	if !slices.Contains(modes, ModeGateOnly) {
		modes = append([]string{ModeGateOnly}, modes...) // the reference
	}
	jobs := map[string]*job{}
	signals := map[*suite.Generator]*manifest.Listing{}
	for _, dp := range pl.prompts[f] {
		p := s.Prompt(dp.ID)
		var m *manifest.Manifest
		if g := p.Generator; g != nil && opts.SuiteManifest == "" {
			// AmPermBench's generator, from the request's words, the
			// operator policy and a listing of the suite's world.
			sig, ok := signals[g]
			if !ok {
				if sig, err = readSignals(ctx, st.Worlds.World(0), g.Operator); err != nil {
					return nil, err
				}
				signals[g] = sig
			}
			genOpts := manifest.Options{
				Label: labelPrefix + p.ID, Image: st.Image, Command: keeperCommand,
				WorkspaceDir: wsDir, User: SandboxUser, Timeout: policies.Duration(time.Hour),
				Signals: sig, AskTimeout: policies.Duration(askTimeout(opts)),
			}
			if m, err = manifest.Generate(g.Family, p.Text, g.Operator, genOpts); err != nil {
				return nil, fmt.Errorf("manifest of %s, generated for %s: %w", p.ID, g.Family, err)
			}
			if len(m.Policy.Workspaces) != 1 {
				return nil, fmt.Errorf("manifest of %s, generated for %s: %d workspaces, want 1: %w", p.ID, g.Family, len(m.Policy.Workspaces), errdefs.ErrInvalidArgument)
			}
			pl.genOpts[p.ID] = genOpts
			if err := writeDecisions(filepath.Join(opts.Out, ManifestsDir), p.ID, m); err != nil {
				return nil, err
			}
		} else {
			pol, err := SuitePolicy(p, opts.SuiteManifest, st.Image)
			if err != nil {
				return nil, err
			}
			m = &manifest.Manifest{Family: f, Policy: pol}
		}
		pol := m.Policy
		pol.Workspaces[0].HostPath = wsDir
		pl.manifests[p.ID] = m
		if _, err := manifest.Write(filepath.Join(opts.Out, ManifestsDir), p.ID, pol); err != nil {
			return nil, err
		}
		if err := pl.addPrompt(ctx, f, dp, pol, wsDir, modes, jobs, opts); err != nil {
			return nil, err
		}
	}
	if err := pl.finishJobs(jobs, opts); err != nil {
		return nil, err
	}
	return pl, nil
}

// NewSuiteWorkspace makes the pristine workspace of a suite at dir: a
// checkout of the world's repository when the suite has one, with the
// suite's workspace files added (untracked); else a directory of those
// files alone.
func NewSuiteWorkspace(ctx context.Context, s *suite.Suite, dir string, w *world.World) (*Workspace, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	ws := &Workspace{Family: s.Family, Pristine: dir, git: s.World.Repo}
	if ws.git {
		if err := w.WorkspaceRepo(ctx, dir, GitRemote); err != nil {
			return nil, err
		}
	} else if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range s.World.Workspace {
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(f.Content), 0o644); err != nil {
			return nil, err
		}
	}
	return ws.pristine()
}

// externals resets and snapshots a suite's external services, around
// each run. The services are shared by every worker, so a suite with any
// runs on one worker.
type externals struct {
	dir  string
	list []*suite.External
}

func newExternals(s *suite.Suite) *externals {
	if s == nil || len(s.Externals) == 0 {
		return nil
	}
	return &externals{dir: s.Dir, list: s.Externals}
}

// externalSnapshot is every external service's items: service -> item ->
// its state as the snapshot command printed it (compact JSON).
type externalSnapshot map[string]map[string]string

// before resets every service and snapshots it, before a run.
func (x *externals) before(ctx context.Context) (externalSnapshot, error) {
	for _, e := range x.list {
		if _, err := x.run(ctx, e, e.Reset); err != nil {
			return nil, fmt.Errorf("external service %s (%s): reset: %w", e.Name, e.Pos, err)
		}
	}
	return x.after(ctx)
}

// after snapshots every service.
func (x *externals) after(ctx context.Context) (externalSnapshot, error) {
	out := externalSnapshot{}
	for _, e := range x.list {
		b, err := x.run(ctx, e, e.Snapshot)
		if err != nil {
			return nil, fmt.Errorf("external service %s (%s): snapshot: %w", e.Name, e.Pos, err)
		}
		var items map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&items); err != nil || dec.More() || items == nil {
			return nil, fmt.Errorf("external service %s (%s): snapshot: want one JSON object of item id -> state on stdout, got %q: %w", e.Name, e.Pos, firstLine(string(b)), errdefs.ErrInvalidArgument)
		}
		m := map[string]string{}
		for id, v := range items {
			var c bytes.Buffer
			if err := json.Compact(&c, v); err != nil {
				return nil, err
			}
			m[id] = c.String()
		}
		out[e.Name] = m
	}
	return out, nil
}

func (x *externals) run(ctx context.Context, e *suite.External, argv []string) ([]byte, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, e.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = x.dir
	// A command that times out is killed with everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	stdout, stderr := &cappedBuffer{max: maxSnapshot}, &cappedBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		switch {
		case parent.Err() != nil:
			return nil, parent.Err()
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%s: timed out after %s", strings.Join(argv, " "), e.Timeout)
		}
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	if stdout.over {
		return nil, fmt.Errorf("%s: more than %d bytes on stdout: %w", strings.Join(argv, " "), maxSnapshot, errdefs.ErrInvalidArgument)
	}
	return stdout.Bytes(), nil
}

// maxSnapshot bounds what an external service's command may print.
const maxSnapshot = 16 << 20

// cappedBuffer keeps the first max bytes written to it and notes that
// more came.
type cappedBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.buf.Len(); len(p) > room {
		b.over = true
		if room > 0 {
			b.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *cappedBuffer) Bytes() []byte  { return b.buf.Bytes() }
func (b *cappedBuffer) String() string { return b.buf.String() }

// diffExternals turns two snapshots into effects: items that appeared,
// disappeared or changed, "SERVICE/ITEM".
func diffExternals(family string, before, after externalSnapshot) []effect.Effect {
	var out []effect.Effect
	for _, svc := range slices.Sorted(mapKeysOf(before)) {
		b, a := before[svc], after[svc]
		ids := map[string]bool{}
		for id := range b {
			ids[id] = true
		}
		for id := range a {
			ids[id] = true
		}
		keys := make([]string, 0, len(ids))
		for id := range ids {
			keys = append(keys, id)
		}
		sort.Strings(keys)
		for _, id := range keys {
			bv, inB := b[id]
			av, inA := a[id]
			op := ""
			switch {
			case inB && !inA:
				op = suite.DeleteItem
			case !inB && inA:
				op = suite.CreateItem
			case bv != av:
				op = suite.ModifyItem
			default:
				continue
			}
			out = append(out, effect.Effect{Family: family, Op: op, Target: svc + "/" + id, Where: effect.World})
		}
	}
	return out
}

func mapKeysOf[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// CompareReport is the comparison's report, in Options.Out.
const CompareReport = report.CompareMD

// CompareResult is a suite run under two perimeters.
type CompareResult struct {
	Summary *report.Comparison
	A, B    *Result
}

// Compare runs opts.Suite twice on st, under the manifest a for every
// prompt and then under b (each loaded with the prompt's variables), into
// Out/A-NAME and Out/B-NAME, and writes the comparison into Out.
func Compare(ctx context.Context, st *Stack, opts Options, a, b string) (*CompareResult, error) {
	if opts.Suite == nil {
		return nil, fmt.Errorf("--compare runs a suite: %w", errdefs.ErrInvalidArgument)
	}
	title := opts.Title
	if title == "" {
		title = "airlock bench: suite " + opts.Suite.Name
	}
	sides := []report.ComparedRun{
		{Name: "A-" + strings.TrimSuffix(filepath.Base(a), filepath.Ext(a)), Manifest: a},
		{Name: "B-" + strings.TrimSuffix(filepath.Base(b), filepath.Ext(b)), Manifest: b},
	}
	var results []*Result
	for i := range sides {
		o := opts
		o.SuiteManifest = sides[i].Manifest
		o.Out = filepath.Join(opts.Out, sides[i].Name)
		o.Title = fmt.Sprintf("%s under %s", title, sides[i].Manifest)
		sides[i].Dir = o.Out
		res, err := Run(ctx, st, o)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", sides[i].Name, sides[i].Manifest, err)
		}
		results = append(results, res)
	}
	gate := results[0].Summary.HeadlineGate
	info := append(slices.Clone(opts.RunInfo),
		fmt.Sprintf("suite %s (%s): %d prompts", opts.Suite.Name, opts.Suite.Dir, len(opts.Suite.Prompts)))
	cmp := report.Compare(title+": "+sides[0].Name+" vs "+sides[1].Name, info, gate, sides[0], sides[1], results[0].Results, results[1].Results)
	if _, err := report.WriteCompare(opts.Out, cmp); err != nil {
		return nil, err
	}
	return &CompareResult{Summary: cmp, A: results[0], B: results[1]}, nil
}

// WriteCompareHeadline prints the comparison's table.
func WriteCompareHeadline(w io.Writer, c *report.Comparison) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "A: %s\nB: %s\n", c.A.Manifest, c.B.Manifest)
	fmt.Fprintln(tw, "MODE\tHARMFUL FN A→B\tHarmlessFNRate A→B\tBROKEN A→B\tPerimeterFPR A→B\tBOUGHT\tLOST\tBROKE\tFIXED")
	for _, r := range c.Rows {
		fmt.Fprintf(tw, "%s\t%d→%d\t%s→%s\t%d→%d\t%s→%s\t%d\t%d\t%d\t%d\n", r.Mode, r.A.Harmful, r.B.Harmful,
			r.A.HarmlessFNRate, r.B.HarmlessFNRate, r.A.Broken, r.B.Broken, r.A.PerimeterFPR, r.B.PerimeterFPR, r.Bought, r.Lost, r.Broke, r.Fixed)
	}
	return tw.Flush()
}

// suiteInput is what the report says of the plan's suite: the prompts
// run, with their labels and perimeters.
func suiteInput(pl *plan, opts Options) *report.SuiteInput {
	s := pl.suite
	in := &report.SuiteInput{Name: s.Name, Description: s.Description, Dir: s.Dir}
	for _, dp := range pl.prompts[s.Family] {
		p := s.Prompt(dp.ID)
		m := p.Manifest
		switch {
		case opts.SuiteManifest != "":
			m = opts.SuiteManifest
		case p.Generator != nil && p.Generator.PolicyPath != "":
			m = fmt.Sprintf("generated by %s's generator with %s", p.Generator.Family, p.Generator.PolicyPath)
		case p.Generator != nil:
			m = fmt.Sprintf("generated by %s's generator with its shipped policy", p.Generator.Family)
		}
		in.Prompts = append(in.Prompts, report.SuitePrompt{ID: p.ID, Pos: p.Pos, Trap: p.Trap, Note: p.Note,
			Authorized: p.Authorized, Manifest: m, Vars: p.Vars})
	}
	return in
}

// EnvPrompt holds the request in an --agent exec:CMD run.
const EnvPrompt = "AIRLOCK_BENCH_PROMPT"

// execAction is prompt p's one action under an operator's agent command:
// cmd run by bash in the session's working directory, with the request in
// $AIRLOCK_BENCH_PROMPT.
func execAction(family string, p data.Prompt, cmd string) catalog.Action {
	return catalog.Action{ID: "exec-" + p.ID, Family: family, Kind: catalog.KindAgentExec,
		Command: "export " + EnvPrompt + "=" + shellQuote(p.Text) + "; " + cmd,
		Target:  "whatever the agent command does", Source: "exec:" + cmd, PromptID: p.ID}
}

// shellQuote quotes s for bash as one word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
