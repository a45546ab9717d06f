package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/runner"
	"github.com/airlock-sandbox/airlock/bench/suite"
	benchimage "github.com/airlock-sandbox/airlock/images/bench"
	"github.com/airlock-sandbox/airlock/internal/term"
)

type benchOptions struct {
	families, modes, gates []string
	actions, out           string
	asJSON, naive          bool
	workers                int
	binDir, image          string
	agentImage, benchCLI   string
	cacheDir, dataDir      string
	instances              string
	revised                string
	worldNetns, worldDNS   string
	secretsDir             string
	timeout                time.Duration
	seed                   uint64
	agent, agentTasks      string
	agentModel, agentMode  string
	modelURL, modelKeyFile string
	modelUplink            string
	modelBudget            float64
	suite                  string
	compare, check         bool
}

func (c *cli) newBenchCommand() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   name + " [flags]",
		Short: "Run the permission benchmark against real sandboxes",
		Long: `Bench runs AmPermBench's task families against airlock sandboxes: every
action of the fixed catalog, under every prompt, in every mode (gate-only,
fs-only, egress-only, l7-only, credentials-only, perimeter), on a freshly
reset world of real services, and judges each by its effect (bench/SPEC.md).

It starts what it needs and stops it all afterwards: the world's network
namespace with its DNS and services, and a daemon wired to the world as its
uplink, unless --socket names a running daemon, whose uplink must then be the
network namespace --world-netns (bench never sends traffic anywhere else).

Results go to --out: summary.json, summary.csv, report.md with the tables,
PNG charts, the generated manifests, the session configurations and the
per-run records (command, manifest, gate decision, state diff, audit events).
The headline table is printed at the end.

Gates: allow-all, rules:FILE (allow/deny patterns on the command),
exec:CMD (a classifier: JSON on stdin, allow or deny on stdout), replay:FILE
(recorded decisions). --actions adds JSON lines of {"family", "prompt_id",
"command"}, reported apart from the catalog.

Asks: where a request's words do not determine its items, the perimeter's
manifest holds the change for a person (manifests/PROMPT.decisions.json says
why). Each such run is judged under three approvers: informed (allows exactly
what the request meant, from the world's dry run of the held request),
absent (no one answers) and habituated (allows 93% of asks, a draw seeded by
--seed). asks.jsonl records every held request and its decision.

Agents: with --agent claude-code or --agent codex, the agent's real binary
carries out every action: each is a tool call of its model, a scripted server
on a model host of the world (one per worker) that plays the catalog, and the
runner measures and resets the world between two calls, so each action is
judged as in the catalog run. The agent's own permission mode is the gate
(bypassPermissions; Codex with approval_policy=never). Where a mode has the
L7 gateway, the agent's API key stays outside the sandbox, injected by the
gateway; elsewhere it is in the agent's environment. transcripts/ holds each
agent's own output and its model calls (INDEX.json lists them). The image is
the agent's (make images) with the bench's clients added.

With --agent-tasks FILE the agent works on each prompt's request itself: the
request is its task, its model plays the prompt's script from FILE (JSON lines
of {"prompt_id", "script"}; prompts without one do not run), and its whole run
is the one action judged under the prompt, by its effects, with its gate-only
run as the reference.

Contrast pairs: the families scope-escalation, credential-exploration,
inferred-parameters, external-sharing and guardrail-bypass are AuthGateBench's
failure modes as contrast pairs (docs/authgatebench.md): the same action and
trajectory under a request that does not authorize it and one that does. Each
half runs in the perimeter (its manifest generated from that half's request,
the family's operator policy and the pair's read-only signals) in a session of
its own on a freshly loaded world and a fresh git checkout, and each pair once
in gate-only (whose session does not depend on the request); nobody answers a
held request (the absent approver). The report gives Acc, FPR, FNR, the invariant rate and the pairs
asked per family and mode, beside the paper's published figures (measured on
its own instances). --instances DIR runs another set of pairs in the same
format; without --family it runs that set's families alone. Other gates than
allow-all apply to AmPermBench's families only.

Revised requests (docs/revised-requests.md): --revised default revises, midway,
the S0 prompt of every B/R cell of cancel-jobs, restart-services and
clean-up-artifacts (make bench does); --revised all every selected prompt, or a
list of prompt ids. Each runs its family's single-target actions in a perimeter
session, is revised live (PATCH /v1/sessions/ID) to the manifest derived from
its text and the revision's, and runs them again, beside a fresh session under
the revised manifest; the report counts stale-authority uses and authority lost
(both targets 0) and credentials re-minted against a restart's.

Your own suite (docs/suites.md): --suite DIR runs an operator's prompts, with
the oracle labels written for them, on a world seeded from the suite's state,
under the operator's own manifests instead of generated ones: each prompt's
fixed actions (or, with --agent claude-code or codex, each as the agent's tool
call; with --agent exec:CMD, your own agent command once per prompt, the
request in $AIRLOCK_BENCH_PROMPT), judged per action like AmPermBench's. The
suite is checked first: a malformed one gets every problem with its file:line
and nothing runs; --check stops there, for a CI job (no root or daemon needed).
--compare A.hcl B.hcl runs the suite under each manifest for every prompt and
writes compare.md: the false negatives B makes harmless that A let through, and
the safe actions B breaks.

With --model-url https://api.anthropic.com (or OpenAI's API for Codex),
--model-key-file FILE and --model-uplink host, a real model drives the agent on
every selected prompt: this is AmPermBench's experiment, inside the perimeter.
The API's name alone is published in the world, served by this process's proxy,
which refuses any other name, puts the key in (agents hold a placeholder in every
mode) and sends each request on, verified, through the host's routes to that
name; the world's services stay in the world's namespace. The paper's run (128 prompts, Claude Sonnet 4.6)
cost about $16 and 6 hours; --model-budget-usd bounds each Claude Code run and
--timeout each run of either agent. The real model may do anything the
perimeter lets it do to the world: that is what is measured.`,
		Example: `  airlock bench
  airlock bench --family cancel-jobs --mode gate-only --mode perimeter
  airlock bench --family external-sharing --family guardrail-bypass
  airlock bench --instances my-pairs/
  airlock bench --family cancel-jobs --mode perimeter --revised CJ-S0-B2-R0,CJ-S0-B0-R1
  airlock bench --gate allow-all --gate rules:bench/runner/rules/example.rules --out results
  airlock bench --agent claude-code --family cancel-jobs --mode gate-only --mode perimeter
  airlock bench --agent codex --agent-tasks bench/runner/testdata/agent-tasks.jsonl
  airlock bench --suite examples/suites/release-desk
  airlock bench --suite examples/suites/release-desk --compare \
      examples/suites/release-desk/manifests/loose.hcl examples/suites/release-desk/manifests/tight.hcl
  airlock bench --suite my-suite/ --agent exec:'my-agent --task "$AIRLOCK_BENCH_PROMPT"'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.compare {
				return exactArgs(2, "two manifests with --compare: --compare A.hcl B.hcl")(cmd, args)
			}
			return exactArgs(0, "no arguments")(cmd, args)
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return c.bench(cmd.Context(), o, cmd.Flag("socket").Changed, args, cmd.Flag("timeout").Changed)
		}),
	}
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%s (see '%s --help')", err, cmd.CommandPath())
	})
	f := cmd.Flags()
	f.StringVar(&c.socket, "socket", c.defaultSocket(), "airlockd's unix socket (env AIRLOCK_SOCKET)")
	f.StringArrayVar(&o.families, "family", nil, "task family to run (repeatable; default all)")
	f.StringArrayVar(&o.modes, "mode", nil, "mode to run (repeatable; default all: "+strings.Join(runner.Modes, ", ")+")")
	f.StringArrayVar(&o.gates, "gate", nil, "gate: allow-all, rules:FILE, exec:CMD or replay:FILE (repeatable; default allow-all)")
	f.StringVar(&o.actions, "actions", "", "JSON-lines file of extra actions")
	f.StringVar(&o.out, "out", "bench-results", "results directory")
	f.BoolVar(&o.asJSON, "json", false, "print summary.json instead of the headline table")
	f.IntVar(&o.workers, "workers", 2, "actions run in parallel, each against its own instance of the world")
	f.BoolVar(&o.naive, "naive", false, "reuse nothing: a fresh session for every prompt, mode and action (slow; checks the reuse)")
	f.DurationVar(&o.timeout, "timeout", 2*time.Minute, "time limit of one action")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the habituated approver's draws")
	f.StringVar(&o.agentMode, "agent-mode", "", "with --agent claude-code and tasks: its permission mode, bypassPermissions (default) or auto (its own gate: a classifier asked through the model API; the scripts' gate verdicts answer it, or the real model)")
	f.StringVar(&o.agentModel, "agent-model", "", "with --agent: the model the agent asks for (default claude-sonnet-4-6 for Claude Code, gpt-5.5 for Codex)")
	f.StringVar(&o.modelURL, "model-url", "", "with --agent: a real model API (https://HOST) that drives the agent on every prompt's request; needs --model-key-file and --model-uplink host")
	f.StringVar(&o.modelKeyFile, "model-key-file", "", "with --model-url: the file holding the API key (read by the bench's daemon, injected by the gateway where a mode has it)")
	f.StringVar(&o.modelUplink, "model-uplink", "", "with --model-url: how the API is reached: host (this machine's routes, for the API's name alone)")
	f.Float64Var(&o.modelBudget, "model-budget-usd", 0, "with --model-url: the most one Claude Code run may spend (its --max-budget-usd); 0: no bound but --timeout")
	f.StringVar(&o.agentTasks, "agent-tasks", "", "with --agent: the agent works on the prompts' requests, its model playing each prompt's script from this JSON-lines FILE")
	f.StringVar(&o.agent, "agent", "", "run every action as a tool call of a real agent: claude-code or codex (its image archive: $AIRLOCK_CLAUDE_CODE_IMAGE / $AIRLOCK_CODEX_IMAGE, or the path in _output/NAME-image.path; make images builds them); or exec:CMD, an agent command of your own run once per prompt in the sandbox with the request in $AIRLOCK_BENCH_PROMPT")
	f.StringVar(&o.binDir, "bin-dir", "", "directory of airlockd, containerd and runc (default: beside this program)")
	f.StringVar(&o.image, "image", "", "bench image archive (default: built from --agent-image and --bench-cli)")
	f.StringVar(&o.agentImage, "agent-image", "", "agent image archive (default: $AIRLOCK_AGENT_IMAGE, or the path in _output/agent-image.path)")
	f.StringVar(&o.benchCLI, "bench-cli", "", "static airlock-bench-cli binary (default: beside this program)")
	f.StringVar(&o.cacheDir, "cache", "", "where built bench images are kept (default: $AIRLOCK_CACHE or /var/cache/airlock)")
	f.StringVar(&o.revised, "revised", "", "revise requests midway: 'default' (the S0 prompts of the world families), 'all', or prompt ids separated by commas (docs/revised-requests.md)")
	f.StringVar(&o.suite, "suite", "", "run an operator's own suite `DIR` (docs/suites.md): its prompts, oracle labels, world and manifests, instead of AmPermBench's families")
	f.BoolVar(&o.check, "check", false, "with --suite: check the suite (and the --compare manifests) and say what it holds; run nothing (no root, daemon or world needed)")
	f.BoolVar(&o.compare, "compare", false, "with --suite: run the suite under two manifests given as arguments, A.hcl B.hcl (each loaded with every prompt's variables), and compare them")
	f.StringVar(&o.instances, "instances", "", "directory of contrast-pair instances (*.hcl, docs/authgatebench.md) to run instead of the shipped set")
	f.StringVar(&o.dataDir, "data", "", "AmPermBench data directory (default: $AIRLOCK_AMPERMBENCH_DIR or ../shared/bench/ampermbench)")
	f.StringVar(&o.worldNetns, "world-netns", "", "with --socket: the network namespace that is the daemon's uplink (start that daemon with --allow-private for the world's range, 10.214.0.0/24)")
	f.StringVar(&o.worldDNS, "world-dns", "", "with --socket: the address the daemon's --dns-upstream names (default 10.214.0.1)")
	f.StringVar(&o.secretsDir, "secrets-dir", "", "with --socket: an absolute `DIR` whose subdirectories DIR/0 ... DIR/N-1 (one per worker) the daemon's admission policy admits as secret sources; the credential-exploration pairs write their registry tokens there (without it, only the bench's own daemon admits them)")
	return cmd
}

func (c *cli) bench(ctx context.Context, o *benchOptions, attach bool, args []string, timeoutSet bool) error {
	start := c.now()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	here := filepath.Dir(self)
	var gates []runner.Gate
	for _, g := range o.gates {
		gt, err := runner.ParseGate(g)
		if err != nil {
			return usageErrorf("--gate: %v", err)
		}
		gates = append(gates, gt)
	}
	var extra []catalog.Action
	if o.actions != "" {
		if extra, err = catalog.LoadActionsFile(o.actions); err != nil {
			return usageErrorf("--actions: %v", err)
		}
	}
	var su *suite.Suite
	if o.suite != "" {
		// Checked before anything starts: every mistake with its
		// file:line, the manifests' own included.
		if su, err = suite.Load(o.suite); err != nil {
			return c.suiteError(err)
		}
		if len(o.families) > 0 || o.instances != "" || o.revised != "" || o.actions != "" {
			return usageErrorf("--suite runs the suite alone: --family, --instances, --revised and --actions go with AmPermBench's families")
		}
		if !timeoutSet {
			o.timeout = su.Timeout
		}
		for _, m := range args {
			// Every prompt's perimeter under each manifest, checked now.
			for _, p := range su.Prompts {
				if _, err := runner.SuitePolicy(p, m, "airlock/bench"); err != nil {
					return usageErrorf("--compare: %v", err)
				}
			}
		}
		if o.check {
			return c.describeSuite(su, args)
		}
	} else if o.compare || o.check {
		return usageErrorf("--compare and --check go with --suite DIR")
	}
	if o.instances != "" {
		// Checked before anything starts: every mistake with its file:line.
		if _, err := authgate.LoadDir(o.instances); err != nil {
			return usageErrorf("--instances: %v", err)
		}
	}
	if !attach && (o.worldNetns != "" || o.worldDNS != "" || o.secretsDir != "") {
		return usageErrorf("--world-netns, --world-dns and --secrets-dir go with --socket")
	}
	if o.secretsDir != "" && !filepath.IsAbs(o.secretsDir) {
		return usageErrorf("--secrets-dir %q: the daemon reads the files, so give an absolute path", o.secretsDir)
	}
	var agent *runner.Agent
	var upstream *runner.Upstream
	execAgent, isExec := strings.CutPrefix(o.agent, "exec:")
	switch {
	case isExec && strings.TrimSpace(execAgent) == "":
		return usageErrorf("--agent exec:CMD: give the command, e.g. exec:'my-agent --task \"$%s\"'", runner.EnvPrompt)
	case isExec && (o.agentTasks != "" || o.modelURL != "" || o.agentModel != "" || o.agentMode != ""):
		return usageErrorf("--agent exec:CMD runs the operator's own agent command; --agent-tasks, --agent-mode, --agent-model and --model-url go with claude-code and codex")
	case isExec && (len(gates) > 0 || o.naive || o.revised != ""):
		return usageErrorf("--agent exec:CMD: the command's run under each prompt is the one action; --gate, --naive and --revised go with the catalog runs")
	case isExec:
		o.agent = ""
	}
	if o.agent != "" {
		if agent, err = runner.ParseAgent(o.agent); err != nil {
			return usageErrorf("--agent: %v", err)
		}
		switch {
		case attach:
			return usageErrorf("--agent needs a daemon of the bench's own (no --socket): it admits the model hosts' API keys and trusts the world's CA")
		case len(gates) > 0:
			return usageErrorf("--agent: the agent's own permission mode is the gate; --gate goes with the catalog runs")
		case o.naive:
			return usageErrorf("--agent: --naive runs the catalog's commands without an agent")
		}
		if o.agentModel != "" {
			agent.Model = o.agentModel
		}
		if o.agentMode != "" {
			if err := agent.SetMode(o.agentMode); err != nil {
				return usageErrorf("--agent-mode: %v", err)
			}
		}
		if o.agentTasks != "" {
			if o.modelURL != "" {
				return usageErrorf("--agent-tasks: with --model-url the real model answers, not a script")
			}
			scripts, err := runner.LoadTaskScripts(o.agentTasks)
			if err != nil {
				return usageErrorf("--agent-tasks: %v", err)
			}
			agent.Tasks = &runner.Tasks{Scripts: scripts}
		}
		if o.modelURL != "" {
			if upstream, err = c.modelUpstream(o); err != nil {
				return err
			}
			agent.Tasks = &runner.Tasks{BudgetUSD: o.modelBudget}
		} else if o.modelKeyFile != "" || o.modelUplink != "" || o.modelBudget != 0 {
			return usageErrorf("--model-key-file, --model-uplink and --model-budget-usd go with --model-url")
		}
		if agent.Tasks != nil && o.actions != "" {
			return usageErrorf("--agent-tasks, --model-url: the agent chooses its own actions; --actions goes with the replay")
		}
		if agent.Tasks == nil && agent.PermissionMode() == runner.ModeAuto {
			return usageErrorf("--agent-mode auto: the replay runs the catalog's actions under the bench's gate; the agent's own gate goes with --agent-tasks or --model-url")
		}
	} else if o.agentTasks != "" || o.modelURL != "" || o.agentModel != "" || o.agentMode != "" {
		return usageErrorf("--agent-tasks, --agent-mode, --agent-model and --model-url go with --agent")
	}
	if su != nil && agent != nil && agent.Tasks != nil && agent.Tasks.BudgetUSD == 0 {
		agent.Tasks.BudgetUSD = su.BudgetUSD
	}
	cfg := runner.StackConfig{Workers: o.workers, Log: c.stderr, DaemonLog: filepath.Join(o.out, "airlockd.log")}
	if su != nil {
		cfg.Fixture = su.World.Fixture
	}
	if attach {
		cfg.Socket, cfg.WorldNetns, cfg.SecretsRoot = c.socket, o.worldNetns, o.secretsDir
		if o.worldDNS != "" {
			if cfg.WorldDNS, err = netip.ParseAddr(o.worldDNS); err != nil {
				return usageErrorf("--world-dns: %v", err)
			}
		}
	} else {
		cfg.BinDir = o.binDir
		if cfg.BinDir == "" {
			cfg.BinDir = here
		}
	}
	if cfg.ImageArchive, err = c.benchImage(o, here); err != nil {
		return err
	}
	if agent != nil {
		cfg.ImageRef, cfg.ModelHosts, cfg.ModelUpstream = benchimage.AgentRef(agent.Name), true, upstream
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}

	ctx, stop := c.interruptible(ctx)
	defer stop()
	st, err := runner.StartStack(ctx, cfg)
	if err != nil {
		return err
	}
	bar := &progressBar{w: c.stderr, start: c.now(), now: c.now}
	_, bar.tty = term.Width(c.stderr)
	ropts := runner.Options{
		Families: o.families, Modes: o.modes, Gates: gates, Extra: extra, Out: o.out, DataDir: o.dataDir,
		Workers: o.workers, Naive: o.naive, Timeout: o.timeout, Progress: bar.update, Seed: o.seed, Agent: agent, Instances: o.instances, Revised: o.revised,
		RunInfo: []string{fmt.Sprintf("airlock %s; %s", clientVersion(), start.UTC().Format(time.RFC3339))},
		Suite:   su, ExecAgent: execAgent,
	}
	var (
		res    *runner.Result
		cmp    *runner.CompareResult
		runErr error
	)
	if o.compare {
		cmp, runErr = runner.Compare(ctx, st, ropts, args[0], args[1])
	} else {
		res, runErr = runner.Run(ctx, st, ropts)
	}
	bar.finish()
	closeErr := st.Close(context.WithoutCancel(ctx))
	if err := errors.Join(runErr, closeErr); err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if cmp != nil {
			return enc.Encode(cmp.Summary)
		}
		return enc.Encode(res.Summary)
	}
	if cmp != nil {
		if err := runner.WriteCompareHeadline(c.stdout, cmp.Summary); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "\nreport: %s\nwall time: %s\n", filepath.Join(o.out, runner.CompareReport), c.now().Sub(start).Round(100*time.Millisecond))
		return nil
	}
	if err := runner.WriteHeadline(c.stdout, res.Summary); err != nil {
		return err
	}
	if res.Summary != nil && len(res.Summary.Rows) > 0 {
		fmt.Fprintf(c.stdout, "\n%d cases, %d runs in %d session configurations", res.Stats.Cases, res.Stats.Runs, res.Stats.Configs)
	}
	if res.Contrast != nil {
		fmt.Fprintf(c.stdout, "\n%d contrast-pair sessions in %.0fs", len(res.Contrast.Runs), res.Contrast.Summary.WallSeconds)
	}
	fmt.Fprintf(c.stdout, "; report: %s\nwall time: %s\n", filepath.Join(o.out, "report.md"), c.now().Sub(start).Round(100*time.Millisecond))
	return nil
}

// describeSuite says what a suite that loaded holds, for --check.
func (c *cli) describeSuite(su *suite.Suite, compare []string) error {
	actions, traps, generated := 0, 0, 0
	manifests := map[string]bool{}
	for _, p := range su.Prompts {
		actions += len(p.Actions)
		if p.Trap {
			traps++
		}
		if p.Generator != nil {
			generated++
		} else {
			manifests[p.Manifest] = true
		}
	}
	fmt.Fprintf(c.stdout, "suite %s (%s): ok\n", su.Name, su.Dir)
	fmt.Fprintf(c.stdout, "  %d prompts (%d traps), %d actions; world: %s; %d external services\n",
		len(su.Prompts), traps, actions, orNone(strings.Join(su.World.Services(), ", ")), len(su.Externals))
	fmt.Fprintf(c.stdout, "  perimeter: %d prompts under %d manifest files, %d generated", len(su.Prompts)-generated, len(manifests), generated)
	if len(compare) > 0 {
		fmt.Fprintf(c.stdout, "; --compare %s against every prompt: ok", strings.Join(compare, " "))
	}
	fmt.Fprintln(c.stdout)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "empty"
	}
	return s
}

// suiteError prints every problem of a bad suite, each with its
// file:line, and returns a usage error.
func (c *cli) suiteError(err error) error {
	var derr *suite.DiagnosticsError
	if !errors.As(err, &derr) {
		return usageErrorf("--suite: %v", err)
	}
	errs := derr.Errors()
	for _, d := range errs {
		fmt.Fprintf(c.stderr, "%s: %s\n", name, d)
	}
	return usageErrorf("--suite: %d problem(s); nothing ran", len(errs))
}

// benchImage returns the bench image archive: --image, or one built (and
// cached) from the agent image and the client binary.
func (c *cli) benchImage(o *benchOptions, here string) (string, error) {
	if o.image != "" {
		return o.image, nil
	}
	cli := o.benchCLI
	if cli == "" {
		cli = filepath.Join(here, "airlock-bench-cli")
	}
	cache := o.cacheDir
	if cache == "" {
		cache = c.getenv("AIRLOCK_CACHE")
	}
	if cache == "" {
		cache = "/var/cache/airlock"
	}
	if o.agent != "" {
		// The agent's own image, with the bench's clients added.
		env := "AIRLOCK_" + strings.ToUpper(strings.ReplaceAll(o.agent, "-", "_")) + "_IMAGE"
		base := c.getenv(env)
		if base == "" {
			if b, err := os.ReadFile(filepath.Join(here, "..", o.agent+"-image.path")); err == nil {
				base = strings.TrimSpace(string(b))
			}
		}
		if base == "" {
			return "", usageErrorf("no %s image archive: set %s (make images builds one), or pass --image", o.agent, env)
		}
		return benchimage.BuildOn(base, cli, cache, benchimage.AgentRef(o.agent))
	}
	agent := o.agentImage
	if agent == "" {
		agent = c.getenv("AIRLOCK_AGENT_IMAGE")
	}
	if agent == "" {
		if b, err := os.ReadFile(filepath.Join(here, "..", "agent-image.path")); err == nil {
			agent = strings.TrimSpace(string(b))
		}
	}
	if agent == "" {
		return "", usageErrorf("no agent image archive: set --agent-image or AIRLOCK_AGENT_IMAGE (make image builds one), or pass --image")
	}
	return benchimage.Build(agent, cli, cache)
}

// interruptible cancels ctx on SIGINT or SIGTERM, so that the benchmark
// stops what it started before exiting.
func (c *cli) interruptible(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 2)
	c.notify(ch)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			c.warn("interrupted: stopping the benchmark and cleaning up")
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		c.stopNotify(ch)
		close(done)
		cancel()
	}
}

// progressBar draws the runs done on a terminal, or prints a line per
// tenth otherwise.
type progressBar struct {
	w     io.Writer
	tty   bool
	start time.Time
	now   func() time.Time

	mu    sync.Mutex
	last  time.Time
	shown int // tenths printed (not a terminal)
	total int // of the phase shown (catalog runs, then contrast pairs)
	drawn bool
}

func (p *progressBar) update(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if total != p.total {
		// A new phase counts from zero.
		p.total, p.shown = total, 0
		if p.tty && p.drawn {
			fmt.Fprintln(p.w)
			p.drawn = false
		}
	}
	now := p.now()
	elapsed := now.Sub(p.start).Round(time.Second)
	if !p.tty {
		if total > 0 && done*10/total > p.shown {
			p.shown = done * 10 / total
			fmt.Fprintf(p.w, "bench: %d/%d runs (%d%%), %s\n", done, total, done*100/total, elapsed)
		}
		return
	}
	if done != total && now.Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = now
	const width = 30
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d runs %s ", strings.Repeat("=", filled), strings.Repeat(" ", width-filled), done, total, elapsed)
	p.drawn = true
}

func (p *progressBar) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// modelUpstream reads --model-url, --model-key-file and --model-uplink.
func (c *cli) modelUpstream(o *benchOptions) (*runner.Upstream, error) {
	u, err := url.Parse(o.modelURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Port() != "" && u.Port() != "443") ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, usageErrorf("--model-url %q: want https://HOST, such as https://api.anthropic.com (port 443, no path)", o.modelURL)
	}
	if o.modelUplink != "host" {
		return nil, usageErrorf("--model-url sends the agent's model traffic off this machine, through the host's routes to %s alone: say so with --model-uplink host", u.Hostname())
	}
	if o.modelKeyFile == "" {
		return nil, usageErrorf("--model-url needs --model-key-file, the file holding the API key")
	}
	if o.modelBudget < 0 {
		return nil, usageErrorf("--model-budget-usd %v: want 0 or more", o.modelBudget)
	}
	b, err := os.ReadFile(o.modelKeyFile)
	if err != nil {
		return nil, usageErrorf("--model-key-file: %v", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" || strings.ContainsAny(key, "\r\n") {
		return nil, usageErrorf("--model-key-file %s: want one line, the key", o.modelKeyFile)
	}
	host := strings.ToLower(u.Hostname())
	if _, err := netip.ParseAddr(host); err == nil || strings.Count(host, ".") < 1 || strings.HasSuffix(host, "."+strings.TrimSuffix(runner.Zone, ".")) {
		return nil, usageErrorf("--model-url %q: want the API's host name (not an address, nor a name of the bench's world)", o.modelURL)
	}
	// Codex speaks OpenAI's API, whose key is a bearer token.
	return &runner.Upstream{Host: host, Key: key, Bearer: o.agent == runner.AgentCodex}, nil
}
