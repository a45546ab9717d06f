package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/report"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/policies"
)

// The contrast-pair families (bench/authgate, after AuthGateBench) run
// beside AmPermBench's: each half of each pair, in gate-only and in the
// perimeter, in one session of its own on a freshly loaded world instance
// and a fresh git checkout of the pair's workspace. The session runs the
// trajectory's steps, then the action (the allow-all gate lets every
// action run); it is stopped, which commits an overlay workspace through
// its policy; the action's effects are the world's state diff and the
// changes that reached the host's checkout, its evidence the session's
// audit events from the action on. bench/eval judges each half.

// ContrastModes are the modes the contrast pairs run in.
var ContrastModes = []string{ModeGateOnly, ModePerimeter}

// DefaultContrastAskTimeout is how long a request the perimeter holds in a
// contrast pair's session waits: nobody answers (the absent approver), and
// the runner denies it at once anyway.
const DefaultContrastAskTimeout = 3 * time.Second

// contrastTarget is where a pair's workspace is mounted.
const contrastTarget = "/workspace"

// PerimeterInput is what the perimeter's generator is given for one half.
type PerimeterInput struct {
	// Label names the session (the runner replaces it with its own).
	Label   string
	Family  string
	Request string
	// Pair is the half's pair, only for its read-only environment signals
	// (what the policy's read scopes would list): never its oracle, its
	// action or its trajectory.
	Pair *authgate.Pair
	// The session's image, main command, user and bounds.
	Image      string
	Command    []string
	User       string
	Timeout    policies.Duration
	AskTimeout policies.Duration
	// WorkspaceDir is the host directory of the run's checkout, mounted
	// at Target.
	WorkspaceDir, Target string
	// SecretsDir holds the registry tokens' values on the operator's side:
	// SecretsDir/HOST/NAME.
	SecretsDir string
	Audiences  world.Audiences
}

// PerimeterDecision is one thing the generator granted, asked or
// withheld, and the words that drove it.
type PerimeterDecision struct {
	What    string `json:"what"`
	Verdict string `json:"verdict"`
	Why     string `json:"why"`
}

// Perimeter generates the perimeter's session policy of one half from its
// request, its family's operator policy and the world's read-only signals
// (authgate.Generate).
type Perimeter func(PerimeterInput) (*policies.Policy, []PerimeterDecision, error)

// DefaultPerimeter is the contrast pairs' generator when
// Options.Perimeter is nil; without one, their perimeter mode does not
// run (the report says so).
var DefaultPerimeter Perimeter = GeneratePerimeter

// GeneratePerimeter is authgate.Generate with the family's shipped
// operator policy (bench/policy/authgate.json) and the pair's environment
// signals (Pair.Signals: listings, never the oracle).
func GeneratePerimeter(in PerimeterInput) (*policies.Policy, []PerimeterDecision, error) {
	op, err := authgate.LoadOperatorPolicy(in.Family)
	if err != nil {
		return nil, nil, err
	}
	g, err := authgate.Generate(in.Family, in.Request, op, in.Pair.Signals(), authgate.GenOptions{
		Image: in.Image, Command: in.Command, WorkspaceDir: in.WorkspaceDir, Target: in.Target, User: in.User,
		Timeout: in.Timeout, AskTimeout: in.AskTimeout, SecretsDir: in.SecretsDir, Audiences: in.Audiences,
	})
	if err != nil {
		return nil, nil, err
	}
	p := g.Policy.Clone()
	p.Label = in.Label
	var ds []PerimeterDecision
	for _, d := range g.Decisions {
		ds = append(ds, PerimeterDecision{What: d.What, Verdict: d.Verdict, Why: d.Why})
	}
	return p, ds, nil
}

// IsContrastFamily reports whether name is one of the contrast-pair
// families.
func IsContrastFamily(name string) bool { return slices.Contains(authgate.Families, name) }

// ContrastRecord is one session of a pair in one mode (contrast/runs.jsonl):
// of one half in the perimeter, of both in gate-only.
type ContrastRecord struct {
	// ID is "PAIR/HALVES/MODE", HALVES "base", "inverted" or
	// "base+inverted".
	ID      string   `json:"id"`
	Family  string   `json:"family"`
	Pair    string   `json:"pair"`
	Halves  []string `json:"halves"`
	Mode    string   `json:"mode"`
	Session string   `json:"session"`
	// Config is the session configuration's key; the perimeter's policy
	// is in contrast/manifests/PAIR-HALF.json.
	Config string       `json:"config"`
	Steps  []StepRecord `json:"trajectory"`
	// The action and how it ended.
	Action   string `json:"action"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	Error    string `json:"error,omitempty"`
	// CommitRetried: see RunRecord.
	CommitRetried bool    `json:"commit_retried,omitempty"`
	Millis        float64 `json:"ms"`
	// Effects are the world's state diff and the workspace's changes;
	// Evidence and Audit are the session's from the action on; World the
	// requests the world's services saw from the session then.
	Effects  []effect.Effect  `json:"effects"`
	Evidence eval.Evidence    `json:"evidence"`
	Audit    []api.AuditEvent `json:"audit"`
	World    []world.Event    `json:"world"`
}

// StepRecord is a trajectory step as it ran.
type StepRecord struct {
	Command  string `json:"command"`
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output,omitempty"`
}

// ContrastResult is the contrast pairs' part of a run.
type ContrastResult struct {
	Summary *report.Contrast
	Runs    []*ContrastRecord
	Halves  []eval.HalfResult
	Asks    []AskRecord
}

// Files of the contrast pairs, under ContrastDir.
const (
	ContrastDir       = "contrast"
	ContrastRunsFile  = "runs.jsonl"
	ContrastHalfFile  = "halves.jsonl"
	ContrastAsksFile  = "asks.jsonl"
	ContrastManifests = "manifests"
)

// contrastTask is one session: a half in the perimeter; in gate-only,
// whose session does not depend on the request, both halves of a pair.
type contrastTask struct {
	pair   *authgate.Pair
	halves []*authgate.Half
	mode   string
	// keys must be held by no other task while this one runs.
	keys []string
}

func (t *contrastTask) id() string {
	return t.pair.ID + "/" + strings.Join(t.halfNames(), "+") + "/" + t.mode
}

func (t *contrastTask) halfNames() []string {
	var out []string
	for _, h := range t.halves {
		out = append(out, h.Name)
	}
	return out
}

// unboundKey is held by the runs whose requests carry no session token
// (the paste site's): the world sends those to one instance alone
// (Worlds.RouteUnbound), the running worker's.
const unboundKey = "unbound"

// contrastKeys are the locks a run of p takes: the paste site's route,
// and each registry token's secret (a request carrying one goes to the
// one instance that has it loaded).
func contrastKeys(p *authgate.Pair) []string {
	var keys []string
	cmds := append(slices.Clone(p.Trajectory), p.Action)
	if p.Family == authgate.ExternalSharing || slices.ContainsFunc(cmds, func(c string) bool {
		return strings.Contains(c, "pastebin") || strings.Contains(c, "curl") || strings.Contains(c, world.DefaultAudiences.Paste)
	}) {
		keys = append(keys, unboundKey)
	}
	for _, t := range p.World.RegistryTokens {
		keys = append(keys, "token\x00"+t.Secret)
	}
	return keys
}

// scheduler hands tasks to workers: the first pending task none of whose
// keys another worker holds.
type scheduler struct {
	mu      sync.Mutex
	cond    *sync.Cond
	pending []*contrastTask // +checklocks:mu
	held    map[string]bool // +checklocks:mu
	stopped bool            // +checklocks:mu
}

func newScheduler(tasks []*contrastTask) *scheduler {
	s := &scheduler{pending: tasks, held: map[string]bool{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// next returns a task and holds its keys, or nil when none is left or the
// scheduler stopped.
func (s *scheduler) next() *contrastTask {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.stopped || len(s.pending) == 0 {
			return nil
		}
		for i, t := range s.pending {
			if slices.ContainsFunc(t.keys, func(k string) bool { return s.held[k] }) {
				continue
			}
			for _, k := range t.keys {
				s.held[k] = true
			}
			s.pending = slices.Delete(s.pending, i, i+1)
			return t
		}
		s.cond.Wait()
	}
}

// done releases t's keys.
func (s *scheduler) done(t *contrastTask) {
	s.mu.Lock()
	for _, k := range t.keys {
		delete(s.held, k)
	}
	s.mu.Unlock()
	s.cond.Broadcast()
}

func (s *scheduler) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// contrastPlan is what runContrast runs.
type contrastPlan struct {
	set       *authgate.Set
	instances string
	families  []string
	modes     []string
	tasks     []*contrastTask
	perimeter Perimeter
	notes     []string
}

// splitFamilies separates the selected families into AmPermBench's and
// the contrast pairs', and loads the contrast pairs' instance set (the
// shipped one, or opts.Instances). With no family selected, every
// AmPermBench family (amp nil, runAmp true) and every family of the set
// run; with --instances and no family, the set's families alone.
func splitFamilies(opts Options) (amp []string, runAmp bool, contrast []string, set *authgate.Set, name string, err error) {
	name = "the shipped set (bench/authgate/data)"
	if opts.Instances != "" {
		set, err = authgate.LoadDir(opts.Instances)
		name = opts.Instances
	} else {
		set, err = authgate.Default()
	}
	if err != nil {
		return nil, false, nil, nil, "", fmt.Errorf("contrast pairs: %w", err)
	}
	if len(opts.Families) == 0 {
		return nil, opts.Instances == "", set.FamilyNames(), set, name, nil
	}
	for _, f := range opts.Families {
		if !IsContrastFamily(f) {
			amp = append(amp, f)
			continue
		}
		if len(set.Family(f)) == 0 {
			return nil, false, nil, nil, "", fmt.Errorf("family %s: no pair in %s: %w", f, name, errdefs.ErrInvalidArgument)
		}
		if !slices.Contains(contrast, f) {
			contrast = append(contrast, f)
		}
	}
	return amp, len(amp) > 0, contrast, set, name, nil
}

// newContrastPlan lists the tasks of families in opts' modes.
func newContrastPlan(set *authgate.Set, instances string, families []string, opts Options) (*contrastPlan, error) {
	cp := &contrastPlan{set: set, instances: instances, families: families, perimeter: opts.Perimeter}
	if cp.perimeter == nil {
		cp.perimeter = DefaultPerimeter
	}
	modes := opts.Modes
	if len(modes) == 0 {
		modes = ContrastModes
	}
	for _, m := range ContrastModes {
		if slices.Contains(modes, m) {
			cp.modes = append(cp.modes, m)
		}
	}
	if len(cp.modes) == 0 {
		return nil, fmt.Errorf("the contrast pairs run in %s only: %w", strings.Join(ContrastModes, " and "), errdefs.ErrInvalidArgument)
	}
	if cp.perimeter == nil && slices.Contains(cp.modes, ModePerimeter) {
		cp.modes = slices.DeleteFunc(cp.modes, func(m string) bool { return m == ModePerimeter })
		cp.notes = append(cp.notes, "perimeter mode did not run: this build has no generator of the contrast pairs' perimeter (authgate.Generate)")
		if len(cp.modes) == 0 {
			return nil, fmt.Errorf("contrast pairs: no perimeter generator in this build: %w", errdefs.ErrFailedPrecondition)
		}
	}
	// Runs that must hold a key go first, so that they overlap with the
	// others rather than queue at the end.
	var keyed, free []*contrastTask
	for _, f := range families {
		for _, p := range set.Family(f) {
			if len(opts.Prompts) > 0 && !slices.Contains(opts.Prompts, p.ID) {
				continue
			}
			keys := contrastKeys(p)
			var ts []*contrastTask
			for _, m := range cp.modes {
				if m == ModeGateOnly && !opts.Naive {
					// The request plays no part in gate-only's session.
					ts = append(ts, &contrastTask{pair: p, halves: p.Halves(), mode: m, keys: keys})
					continue
				}
				for _, h := range p.Halves() {
					ts = append(ts, &contrastTask{pair: p, halves: []*authgate.Half{h}, mode: m, keys: keys})
				}
			}
			if len(keys) > 0 {
				keyed = append(keyed, ts...)
			} else {
				free = append(free, ts...)
			}
		}
	}
	cp.tasks = append(keyed, free...)
	if len(cp.tasks) == 0 {
		return nil, fmt.Errorf("contrast pairs: no pair selected: %w", errdefs.ErrInvalidArgument)
	}
	return cp, nil
}

// runContrast runs the plan's tasks on opts.Workers workers and judges
// them.
func runContrast(ctx context.Context, st *Stack, scratch string, cp *contrastPlan, opts Options) (*ContrastResult, error) {
	start := time.Now()
	askTimeout := opts.ContrastAskTimeout
	if askTimeout <= 0 {
		askTimeout = DefaultContrastAskTimeout
	}
	out := filepath.Join(opts.Out, ContrastDir)
	if err := os.MkdirAll(filepath.Join(out, ContrastManifests), 0o755); err != nil {
		return nil, err
	}
	caDir := filepath.Join(scratch, "contrast-ca")
	if err := writeCABundle(caDir, st.Network.CAPEM()); err != nil {
		return nil, err
	}
	// Held requests are denied at once, as their timeout would.
	ak := newAsker(st.Client, st.Worlds, nil, opts.Seed)
	actx, stopAsker := context.WithCancel(ctx)
	askerDone := make(chan struct{})
	go func() {
		defer close(askerDone)
		ak.follow(actx)
	}()
	defer func() {
		stopAsker()
		<-askerDone
	}()

	total := len(cp.tasks)
	var done atomic.Int64
	if opts.Progress != nil {
		opts.Progress(0, total)
	}
	sched := newScheduler(slices.Clone(cp.tasks))
	var (
		mu   sync.Mutex
		recs []*ContrastRecord
		errs []error
		wg   sync.WaitGroup
	)
	for i := range opts.Workers {
		w := &worker{id: i, client: st.Client, worlds: st.Worlds, timeout: opts.Timeout, asker: ak, done: func() {}}
		cw := &contrastWorker{worker: w, st: st, dir: filepath.Join(scratch, "contrast", fmt.Sprint(i)), out: out,
			perimeter: cp.perimeter, askTimeout: askTimeout, caDir: caDir}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t := sched.next()
				if t == nil {
					return
				}
				rec, err := cw.run(ctx, t)
				sched.done(t)
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", t.id(), err))
					sched.stop()
				} else {
					recs = append(recs, rec)
				}
				mu.Unlock()
				if n := done.Add(1); opts.Progress != nil {
					opts.Progress(int(n), total)
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(recs, func(a, b *ContrastRecord) int { return strings.Compare(a.ID, b.ID) })

	res := &ContrastResult{Runs: recs}
	byID := map[string]*ContrastRecord{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	for _, t := range cp.tasks {
		r := byID[t.id()]
		for _, h := range t.halves {
			res.Halves = append(res.Halves, eval.JudgeHalf(eval.HalfCase{
				Family: t.pair.Family, PairID: t.pair.ID, Half: h.Name, Mode: t.mode, Gold: h.Gold,
				Expect: t.pair.Expect, Authorized: h.Authorized, Effects: r.Effects, Evidence: r.Evidence,
			}))
		}
	}
	slices.SortStableFunc(res.Halves, func(a, b eval.HalfResult) int {
		return strings.Compare(a.PairID+"/"+a.Half+"/"+a.Mode, b.PairID+"/"+b.Half+"/"+b.Mode)
	})
	res.Asks = ak.take()
	var misses []report.ContrastMiss
	for _, h := range res.Halves {
		wrong := h.Mode == ModePerimeter && ((h.Gold == eval.GoldAllow && h.Outcome != eval.HalfAllowed) || h.Outcome == eval.HalfHarmful)
		if !wrong && h.Outcome != eval.HalfUnexplained {
			continue
		}
		r := byID[contrastRunID(cp, h)]
		why := strings.Join(h.Evidence.BlockedBy, "; ")
		if h.Evidence.RejectedAtCommit {
			why = strings.TrimPrefix(why+"; changes rejected at commit", "; ")
		}
		if why == "" && r != nil {
			why = firstLine(r.Stderr)
		}
		misses = append(misses, report.ContrastMiss{Pair: h.PairID, Half: h.Half, Mode: h.Mode, Gold: h.Gold, Outcome: h.Outcome, Why: why})
	}
	res.Summary = &report.Contrast{
		Instances: cp.instances, Families: cp.families, Modes: cp.modes, Approver: eval.ApproverAbsent,
		AskTimeout: askTimeout.String(), Runs: len(recs), WallSeconds: time.Since(start).Seconds(), Workers: opts.Workers,
		Rows: eval.SummarizeContrast(res.Halves, cp.families, cp.modes), Published: report.PublishedFigures(),
		Notes: cp.notes, Misses: misses,
	}
	for _, f := range []struct {
		name  string
		write func(string) error
	}{
		{ContrastRunsFile, func(p string) error { return writeJSONLines(p, res.Runs) }},
		{ContrastHalfFile, func(p string) error { return writeJSONLines(p, res.Halves) }},
		{ContrastAsksFile, func(p string) error { return writeJSONLines(p, res.Asks) }},
	} {
		if err := f.write(filepath.Join(out, f.name)); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// contrastWorker runs tasks against its worker's world instance.
type contrastWorker struct {
	*worker
	st         *Stack
	dir        string
	out        string
	perimeter  Perimeter
	askTimeout time.Duration
	caDir      string
	seq        int
}

// contrastGateOnly is gate-only's session policy for a workspace at dir:
// the operator's credentials for every service, open egress to every
// world host, the workspace read-write. caDir holds bundle.pem, the
// system roots and the world's CA, which the session trusts: with no
// gateway in between, a client verifies a world service's certificate
// itself, as it would a real service's.
func contrastGateOnly(image, dir, caDir string) *policies.Policy {
	ca := caMount + "/bundle.pem"
	p := &policies.Policy{
		Image: image, Command: keeperCommand, User: SandboxUser, Workdir: contrastTarget,
		Timeout:     policies.Duration(time.Hour),
		Env:         map[string]string{"SSL_CERT_FILE": ca, "CURL_CA_BUNDLE": ca},
		Workspaces:  []policies.Workspace{{HostPath: dir, Target: contrastTarget, Mode: policies.ModeRW}},
		Mounts:      []policies.Mount{{HostPath: caDir, Target: caMount, ReadOnly: true}},
		Egress:      &policies.Egress{Allow: ContrastWorldHosts()},
		Credentials: ContrastOperatorCredentials(),
	}
	p.ApplyDefaults()
	return p
}

// writeCABundle writes dir/bundle.pem: the host's system roots and the
// world's CA.
func writeCABundle(dir string, worldCA []byte) error {
	sys, _ := os.ReadFile(systemRoots)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "bundle.pem"), append(append(sys, '\n'), worldCA...), 0o644)
}

// run runs one task: the world loaded with the pair's state, its tokens'
// values in the worker's secrets directory, a fresh checkout, one session.
func (cw *contrastWorker) run(ctx context.Context, t *contrastTask) (*ContrastRecord, error) {
	wld := cw.worlds.World(cw.id)
	p := t.pair
	rec := &ContrastRecord{ID: t.id(), Family: p.Family, Pair: p.ID, Halves: t.halfNames(), Mode: t.mode, Action: p.Action}
	half := t.halves[0]
	var prompts []string
	for _, h := range t.halves {
		prompts = append(prompts, h.ID(p))
	}

	b, err := p.State()
	if err != nil {
		return nil, err
	}
	var state worldapi.ExtraState
	if err := json.Unmarshal(b, &state); err != nil {
		return nil, err
	}
	if err := wld.LoadState(state); err != nil {
		return nil, err
	}
	// Nothing of the pair stays loaded: a token's value must lead to one
	// instance alone.
	defer func() { _ = wld.LoadState(worldapi.ExtraState{}) }()
	if slices.Contains(t.keys, unboundKey) {
		cw.worlds.RouteUnbound(cw.id)
		defer cw.worlds.RouteUnbound(-1)
	}

	secrets := cw.st.SecretsDir(cw.id)
	if err := writeRegistrySecrets(secrets, p.World.RegistryTokens); err != nil {
		return nil, err
	}
	cw.seq++
	dir := filepath.Join(cw.dir, fmt.Sprint(cw.seq))
	if err := authgate.BuildWorkspace(dir, p.World.Workspace); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := chownTree(dir); err != nil {
		return nil, err
	}
	beforeTree, err := readTree(dir)
	if err != nil {
		return nil, err
	}

	var pol *policies.Policy
	switch t.mode {
	case ModeGateOnly:
		pol = contrastGateOnly(cw.st.Image, dir, cw.caDir)
	case ModePerimeter:
		var decisions []PerimeterDecision
		pol, decisions, err = cw.perimeter(PerimeterInput{
			Label: labelPrefix + p.ID + "-" + half.Name, Family: p.Family, Request: half.Request, Pair: p,
			Image: cw.st.Image, Command: keeperCommand, User: SandboxUser,
			Timeout: policies.Duration(time.Hour), AskTimeout: policies.Duration(cw.askTimeout),
			WorkspaceDir: dir, Target: contrastTarget, SecretsDir: secrets, Audiences: world.DefaultAudiences,
		})
		if err != nil {
			return nil, fmt.Errorf("perimeter of %s: %w", half.ID(p), err)
		}
		for i := range pol.Workspaces {
			pol.Workspaces[i].HostPath = dir
		}
		name := filepath.Join(cw.out, ContrastManifests, p.ID+"-"+half.Name+".json")
		if err := writeJSONFile(name, struct {
			Request   string              `json:"request"`
			Policy    *policies.Policy    `json:"policy"`
			Decisions []PerimeterDecision `json:"decisions"`
		}{half.Request, pol, decisions}); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("mode %s: %w", t.mode, errdefs.ErrInvalidArgument)
	}
	j := &job{key: configKey(pol), family: p.Family, policy: pol, modes: []string{t.mode}, prompts: prompts,
		overlay: overlay(pol), approver: eval.ApproverAbsent, prompt: half.Request}
	rec.Config = j.key

	before, err := wld.Snapshot()
	if err != nil {
		return nil, err
	}
	l := cw.open(ctx, j, dir)
	<-l.ready
	if l.err != nil {
		_, _, _ = cw.end(context.WithoutCancel(ctx), l, true)
		return nil, l.err
	}
	rec.Session = l.id
	ended := false
	defer func() {
		if !ended {
			_, _, _ = cw.end(context.WithoutCancel(ctx), l, true)
		}
	}()
	for _, step := range p.Trajectory {
		o, err := l.sh.run(step, cw.timeout)
		if err != nil {
			return nil, fmt.Errorf("trajectory step %q: %w", step, err)
		}
		rec.Steps = append(rec.Steps, StepRecord{Command: step, ExitCode: o.ExitCode, Output: truncate(strings.TrimSpace(o.Stdout + "\n" + o.Stderr))})
	}
	// The action's evidence starts here.
	evs, err := cw.client.Audit(ctx, l.id)
	if err != nil {
		return nil, err
	}
	l.cursor.advance(evs)
	wcur := wld.AuditCursor()
	cw.asker.begin(l.id, p.Action)

	start := time.Now()
	o, err := l.sh.run(p.Action, cw.timeout)
	force := false
	switch {
	case errors.Is(err, errTimeout):
		rec.Error, o.ExitCode, force = err.Error(), -1, true
	case err != nil:
		return nil, err
	}
	rec.Millis = float64(time.Since(start).Microseconds()) / 1000
	rec.ExitCode, rec.Stdout, rec.Stderr = o.ExitCode, o.Stdout, o.Stderr
	ended = true
	rec.Audit, rec.CommitRetried, err = cw.end(ctx, l, force)
	if err != nil {
		return nil, err
	}

	after, err := wld.Snapshot()
	if err != nil {
		return nil, err
	}
	afterTree, err := readTree(dir)
	if err != nil {
		return nil, err
	}
	rec.Effects = append(world.Diff(before, after), fileEffects(p.Family, beforeTree, afterTree)...)
	if rec.Effects == nil {
		rec.Effects = []effect.Effect{}
	}
	rec.Evidence = evidence(rec.Audit)
	for _, e := range wld.Audit(wcur) {
		if e.Session == l.id || e.Session == "" {
			rec.World = append(rec.World, e)
		}
	}
	return rec, nil
}

// writeRegistrySecrets makes dir hold exactly the tokens' values, one file
// per token under the package registry's host: what a guarded secret of
// the perimeter's policy reads.
func writeRegistrySecrets(dir string, tokens []authgate.RegistryToken) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	host := filepath.Join(dir, world.DefaultAudiences.Packages)
	if err := os.MkdirAll(host, 0o700); err != nil {
		return err
	}
	for _, t := range tokens {
		if err := os.WriteFile(filepath.Join(host, t.Name), []byte(t.Secret), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// runContrastOnly runs a benchmark of contrast pairs alone and writes its
// report.
func runContrastOnly(ctx context.Context, st *Stack, scratch string, cp *contrastPlan, opts Options, res *Result, start time.Time) (*Result, error) {
	cr, err := runContrast(ctx, st, scratch, cp, opts)
	if err != nil {
		return nil, err
	}
	res.Contrast = cr
	res.Stats.Runs, res.Stats.Cases, res.Stats.Wall = len(cr.Runs), len(cr.Halves), time.Since(start)
	title := opts.Title
	if title == "" {
		title = "airlock bench"
	}
	info := append(slices.Clone(opts.RunInfo),
		fmt.Sprintf("daemon %s (containerd %s); image %s", st.Daemon.Version, st.Daemon.Containerd, st.Image),
		fmt.Sprintf("contrast-pair families %s; modes %s; gate allow-all", strings.Join(cp.families, ", "), strings.Join(cp.modes, ", ")),
		fmt.Sprintf("%d sessions, %d workers; wall time %s", len(cr.Runs), opts.Workers, res.Stats.Wall.Round(time.Second)),
	)
	files, err := report.WriteContrast(opts.Out, title, info, cr.Summary)
	if err != nil {
		return nil, err
	}
	res.Summary = &report.Summary{Title: title, RunInfo: info, Contrast: cr.Summary}
	res.Files = append(files, filepath.Join(opts.Out, ContrastDir))
	return res, nil
}

// contrastRunID returns the id of the session that ran half h.
func contrastRunID(cp *contrastPlan, h eval.HalfResult) string {
	for _, t := range cp.tasks {
		if t.pair.ID == h.PairID && t.mode == h.Mode && slices.Contains(t.halfNames(), h.Half) {
			return t.id()
		}
	}
	return ""
}

// firstLine returns s's first non-blank line.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
