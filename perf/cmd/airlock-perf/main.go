// Command airlock-perf measures airlock side by side with its baselines and
// writes report.md and report.json (see hack/perf.sh and `make perf`).
//
// It starts a private airlockd (with its embedded containerd) under a
// temporary root, with a test world network namespace as its uplink, runs
// the measurements, and removes everything it created: sessions, daemon,
// containerd, namespaces. The L7 section runs the egress perimeter (its
// gateway, DNS proxy and L7 gateway) in this process instead, with a world
// namespace of its own, so that the gateway's CPU and memory are this
// process's. The agent start section imports the agent images (`make
// images`) into the private containerd and runs the agents' real binaries
// (hack/fetch-agents.sh) against a scripted model server on a world host.
// Every load stays on loopback or in namespaces this process creates, and
// is bounded in count and time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/perf"
	"github.com/airlock-sandbox/airlock/perf/load"
	"github.com/airlock-sandbox/airlock/policies"
)

func main() {
	os.Exit(run())
}

func run() int {
	var (
		opts    perf.Options
		only    string
		density string
		image   string
	)
	flag.StringVar(&opts.Env.Repo, "repo", ".", "airlock checkout")
	flag.StringVar(&opts.Env.BinDir, "bin-dir", "_output/bin", "directory with airlock, airlockd, containerd, the shim, ctr and runc")
	flag.StringVar(&image, "image", "", "agent image archive (default: the path in _output/agent-image.path)")
	flag.StringVar(&opts.Env.Perfload, "perfload", "_output/perf/perfload", "static perfload binary")
	flag.StringVar(&opts.Env.Ocilabel, "ocilabel", "_output/perf/ocilabel", "ocilabel binary (perf/cmd/ocilabel), through which the runtimes section's ctr baseline runs crun")
	flag.IntVar(&opts.RuntimeBlocks, "runtime-blocks", 4, "blocks of the runtimes section: each restarts airlockd on runc and on crun (in turn first) and measures both")
	flag.IntVar(&opts.RuntimeRuns, "runtime-runs", 5, "cold starts and teardowns per runtime and block in the runtimes section")
	flag.IntVar(&opts.BurstN, "burst", 50, "sessions started at once, once per runtime and block, in the runtimes section")
	flag.StringVar(&opts.Out, "out", "perf", "directory for report.md, report.json, bench.txt, density.png")
	flag.StringVar(&opts.Env.DaemonLogLevel, "daemon-log-level", "warn", "airlockd's --log-level (debug logs each sandbox's prepare and teardown steps)")
	flag.StringVar(&opts.Env.DaemonLog, "daemon-log", "", "copy airlockd's log to this file at the end")
	flag.IntVar(&opts.Runs, "runs", 20, "runs per variant for cold start, warm start and teardown (at least 20 for the report)")
	flag.StringVar(&density, "density", "1,10,50,100,200", "idle session counts for the density measurement")
	flag.StringVar(&only, "only", "", "comma-separated sections to run ("+strings.Join(perf.Sections, ",")+"); default all")
	flag.StringVar(&opts.SrtDir, "srt-dir", "perf/.srt", "npm prefix where @anthropic-ai/sandbox-runtime is installed")
	flag.StringVar(&opts.BenchTime, "benchtime", "200ms", "go test -benchtime for the hot-path benchmarks")
	flag.IntVar(&opts.BenchCount, "benchcount", 5, "go test -count for the hot-path benchmarks")
	flag.BoolVar(&opts.Profile, "profile", true, "profile airlockd with `perf record` during the DNS load")
	opts.L7 = perf.DefaultL7Config()
	flag.IntVar(&opts.L7.Rounds, "l7-rounds", opts.L7.Rounds, "rounds of the L7 section (each runs every load over every path once)")
	l7Download := flag.String("l7-download", "1GiB", "body of each download of the L7 section")
	flag.IntVar(&opts.AgentStart.Runs, "agent-runs", 5, "runs per side and agent of the agent start section")
	agents := flag.String("agents", strings.Join(perf.AgentRecipes, ","), "agents of the agent start section ("+strings.Join(perf.AgentRecipes, ",")+"); their images are the archives in _output/RECIPE-image.path (`make images`)")
	flag.DurationVar(&opts.AgentStart.Timeout, "agent-timeout", 90*time.Second, "bound of each run of the agent start section")
	flag.DurationVar(&opts.Budget, "budget", 12*time.Minute+30*time.Second, "finish measuring by then: no section starts in its last minute, no density level (measured last) whose estimated end is less than 30 s before it")
	render := flag.String("render", "", "measure nothing: write `DIR`/report.md again from DIR/report.json with this harness's tables and findings")
	flag.IntVar(&opts.Load, "load", 0, "measure everything under `N` busy loops (perfload spin, one core each; make perf-load takes one per core), so that every ratio is taken under load; the report goes to perf/loaded unless -out is given")
	flag.Parse()
	if *render != "" {
		if err := perf.Render(*render); err != nil {
			return fail(err)
		}
		return 0
	}
	outSet := false
	flag.Visit(func(f *flag.Flag) { outSet = outSet || f.Name == "out" })
	if opts.Load < 0 || opts.Load > 64 {
		return fail(fmt.Errorf("-load %d: want 0..64 busy loops", opts.Load))
	}
	if opts.Load > 0 && !outSet {
		opts.Out = filepath.Join("perf", "loaded")
	}

	repo, err := filepath.Abs(opts.Env.Repo)
	if err != nil {
		return fail(err)
	}
	opts.Env.Repo = repo
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(repo, p)
	}
	opts.Env.BinDir, opts.Env.Perfload, opts.Out, opts.SrtDir = abs(opts.Env.BinDir), abs(opts.Env.Perfload), abs(opts.Out), abs(opts.SrtDir)
	opts.Env.Ocilabel = abs(opts.Env.Ocilabel)
	if opts.RuntimeBlocks <= 0 || opts.RuntimeRuns <= 0 || opts.BurstN <= 0 || opts.BurstN > 500 {
		return fail(fmt.Errorf("-runtime-blocks, -runtime-runs and -burst (at most 500) must be positive"))
	}
	if opts.L7.DownloadBytes, err = policies.ParseSize(*l7Download); err != nil || opts.L7.DownloadBytes <= 0 || opts.L7.DownloadBytes > load.MaxBytes {
		return fail(fmt.Errorf("-l7-download %q: want a size up to 8GiB", *l7Download))
	}
	if opts.L7.Rounds <= 0 || opts.L7.Rounds > 20 {
		return fail(fmt.Errorf("-l7-rounds %d: want 1..20", opts.L7.Rounds))
	}
	for _, f := range strings.Split(density, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n > 500 {
			return fail(fmt.Errorf("-density %q: want counts between 1 and 500", density))
		}
		opts.Density = append(opts.Density, n)
	}
	if only != "" {
		opts.Only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			if !perf.KnownSection(s) {
				return fail(fmt.Errorf("-only: unknown section %q", s))
			}
			opts.Only[s] = true
		}
	}
	// The agent image is for the sections with airlockd.
	if image == "" && opts.NeedEnv() {
		b, err := os.ReadFile(filepath.Join(repo, "_output", "agent-image.path"))
		if err != nil {
			return fail(fmt.Errorf("agent image: %w (run `make image` or pass -image)", err))
		}
		image = strings.TrimSpace(string(b))
	}
	if image != "" {
		opts.Env.ImageArchive = abs(image)
	}
	if opts.Only == nil || opts.Only["agentstart"] {
		if opts.AgentStart.Runs <= 0 || opts.AgentStart.Runs > 50 {
			return fail(fmt.Errorf("-agent-runs %d: want 1..50", opts.AgentStart.Runs))
		}
		opts.AgentStart.Images = map[string]string{}
		for _, a := range strings.Split(*agents, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if !slices.Contains(perf.AgentRecipes, a) {
				return fail(fmt.Errorf("-agents: unknown agent %q (want some of %s)", a, strings.Join(perf.AgentRecipes, ",")))
			}
			opts.AgentStart.Agents = append(opts.AgentStart.Agents, a)
			// A missing archive fails that agent's row, not the run.
			if b, err := os.ReadFile(filepath.Join(repo, "_output", a+"-image.path")); err == nil {
				opts.AgentStart.Images[a] = strings.TrimSpace(string(b))
			}
		}
		if len(opts.AgentStart.Agents) == 0 {
			return fail(fmt.Errorf("-agents %q: name at least one agent", *agents))
		}
	}
	opts.Argv = os.Args
	opts.Env.Logf = func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s perf: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	if os.Geteuid() != 0 {
		return fail(fmt.Errorf("must run as root (network namespaces, containerd, cgroups)"))
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	rep, err := perf.Run(ctx, opts)
	if rep != nil {
		if werr := rep.Write(opts.Out); werr != nil {
			return fail(werr)
		}
		opts.Env.Logf("wrote %s and %s", filepath.Join(opts.Out, "report.md"), filepath.Join(opts.Out, "report.json"))
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "airlock-perf:", err)
	return 1
}
