package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Sections, in the order they run.
// Density runs before the DNS loads, whose audit reads inflate airlockd's
// heap, so that its RSS measures the sessions. The L7 section runs its own
// perimeter and world, before airlockd starts.
var Sections = []string{"gobench", "l7", "coldstart", "warmstart", "teardown", "runtimes", "density", "dns", "tcp", "agentstart"}

// envSections need the private airlockd and containerd.
var envSections = []string{"coldstart", "warmstart", "teardown", "runtimes", "density", "dns", "tcp", "agentstart"}

// KnownSection reports whether s names a section.
func KnownSection(s string) bool { return slices.Contains(Sections, s) }

// Options configure a run.
type Options struct {
	Env EnvConfig
	// Out receives report.md, report.json, bench.txt, density.png and
	// profiles/.
	Out string
	// Runs per variant for cold start, warm start and teardown.
	Runs int
	// Density lists the idle-session counts.
	Density []int
	// Only limits the run to these sections (nil: all).
	Only map[string]bool
	// SrtDir is the npm prefix holding sandbox-runtime.
	SrtDir string
	// BenchTime and BenchCount are go test's -benchtime and -count.
	BenchTime  string
	BenchCount int
	// Profile records airlockd's CPU profile during the DNS loads.
	Profile bool
	// L7 bounds the L7 section (its Perfload, Repo and Logf come from
	// Env).
	L7 L7Config
	// RuntimeBlocks, RuntimeRuns and BurstN bound the runtimes section:
	// blocks of runs cold starts and teardowns and one burst of BurstN
	// starts on each OCI runtime.
	RuntimeBlocks, RuntimeRuns, BurstN int
	// AgentStart bounds the agent start section.
	AgentStart AgentStartConfig
	// Budget is when the measurements should be done: sections are not
	// started in its last minute, density levels (measured last) not when
	// their estimated end is less than half a minute before it.
	Budget time.Duration
	// Argv is the command line, for the report.
	Argv []string
	// Load is how many busy loops (perfload spin, one core each) run
	// through the whole measurement: every ratio is then taken under
	// that load (make perf-load).
	Load int
}

func (o *Options) want(s string) bool { return o.Only == nil || o.Only[s] }

// NeedEnv reports whether a selected section needs the private airlockd,
// containerd and agent image.
func (o *Options) NeedEnv() bool {
	return slices.ContainsFunc(envSections, o.want)
}

// Run measures the selected sections and returns the report, also when a
// section failed (its error is recorded in the report and returned).
func Run(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	logf := o.Env.Logf
	if logf == nil {
		logf = func(string, ...any) {}
		o.Env.Logf = logf
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	r := &Report{
		Started: start.UTC(), Machine: DescribeMachine(), Runs: o.Runs,
		Reproduce: reproduceRun(o), Errors: map[string]string{}, Skipped: map[string]string{},
		Versions: versions(o),
	}
	if o.Load > 0 {
		limit := time.Hour
		if o.Budget > 0 {
			limit = o.Budget + 5*time.Minute
		}
		b, err := StartBusy(o.Env.Perfload, o.Load, limit)
		if err != nil {
			return nil, err
		}
		r.Busy = b
		defer b.Stop()
		logf("under load: %d busy loops (pids %v)", o.Load, b.Pids())
	}
	var errs []error
	fail := func(section string, err error) {
		logf("%s: %v", section, err)
		r.Errors[section] = err.Error()
		errs = append(errs, fmt.Errorf("%s: %w", section, err))
	}
	overBudget := func(section string) bool {
		if o.Budget > 0 && time.Since(start) > o.Budget-time.Minute {
			r.Skipped[section] = fmt.Sprintf("time budget of %v used up", o.Budget)
			return true
		}
		return false
	}
	finish := func() (*Report, error) {
		r.Seconds = time.Since(start).Seconds()
		r.LoadEnd = load1()
		if r.Busy != nil {
			if err := r.Busy.Stop(); err != nil {
				errs = append(errs, err)
			}
		}
		return r, errors.Join(errs...)
	}

	if o.want("gobench") {
		logf("go benchmarks (-count %d)", o.BenchCount)
		r.GoBench = RunGoBench(ctx, o.Env.Repo, DefaultBenchSets(o.BenchTime), o.BenchCount, filepath.Join(o.Out, "bench.txt"))
		r.GoBench.Reproduce = reproduce(o, "gobench")
		if r.GoBench.Error != "" {
			fail("gobench", errors.New(r.GoBench.Error))
		}
	}
	if o.want("l7") && !overBudget("l7") && ctx.Err() == nil {
		logf("l7: the gateway's paths side by side with the L3 path")
		c := o.L7
		c.Perfload, c.Repo, c.Logf = o.Env.Perfload, o.Env.Repo, logf
		if o.Profile {
			c.ProfileDir = filepath.Join(o.Out, "profiles")
		}
		l, err := MeasureL7(ctx, c)
		if l != nil {
			l.Reproduce = reproduce(o, "l7")
			r.L7 = l
		}
		if err != nil {
			fail("l7", err)
		}
	}
	if !o.NeedEnv() || ctx.Err() != nil {
		return finish()
	}

	logf("starting a private airlockd, containerd and test world")
	e, err := StartEnv(ctx, o.Env)
	if err != nil {
		fail("environment", err)
		return finish()
	}
	r.Daemon = e.display(append([]string{e.Bin("airlockd")}, e.DaemonArgs()...))
	if r.Busy != nil {
		e.busyPids = r.Busy.Pids()
	}
	r.Root = e.Root
	defer func() {
		logf("removing sessions, stopping airlockd and containerd, removing namespaces")
		c, err := e.Close(context.WithoutCancel(ctx))
		r.Cleanup = c
		if err != nil {
			fail("cleanup", err)
		}
		r.Seconds = time.Since(start).Seconds()
		r.LoadEnd = load1()
	}()

	if o.want("coldstart") && !overBudget("coldstart") && ctx.Err() == nil {
		logf("cold start: %d runs per variant", o.Runs)
		srt := FindSrt(ctx, o.SrtDir)
		if cs, err := MeasureColdStart(ctx, e, o.Runs, srt); err != nil {
			fail("coldstart", err)
		} else {
			cs.Reproduce = reproduce(o, "coldstart")
			r.ColdStart = cs
		}
	}
	if o.want("warmstart") && !overBudget("warmstart") && ctx.Err() == nil {
		logf("warm start: %d rounds, pool of %d", o.Runs, WarmPoolSize)
		ws, err := MeasureWarmStart(ctx, e, o.Runs)
		if ws != nil {
			ws.Reproduce = reproduce(o, "warmstart")
			r.WarmStart = ws
		}
		if err != nil {
			fail("warmstart", err)
		}
	}
	if o.want("teardown") && !overBudget("teardown") && ctx.Err() == nil {
		logf("teardown: %d runs per variant", o.Runs)
		if td, err := MeasureTeardown(ctx, e, o.Runs); err != nil {
			fail("teardown", err)
		} else {
			td.Reproduce = reproduce(o, "teardown")
			r.Teardown = td
		}
	}
	if o.want("runtimes") && !overBudget("runtimes") && ctx.Err() == nil {
		logf("runtimes: %d blocks of %d runs and a burst of %d on each of %v", o.RuntimeBlocks, o.RuntimeRuns, o.BurstN, OCIRuntimes)
		rt, err := MeasureRuntimes(ctx, e, o.RuntimeBlocks, o.RuntimeRuns, o.BurstN)
		if rt != nil {
			rt.Reproduce = reproduce(o, "runtimes")
			r.Runtimes = rt
		}
		if err != nil {
			fail("runtimes", err)
		}
	}
	if o.want("dns") && !overBudget("dns") && ctx.Err() == nil {
		logf("dns: latency and throughput through the proxy and direct")
		prof := ""
		if o.Profile {
			prof = filepath.Join(o.Out, "profiles")
		}
		if d, err := MeasureDNS(ctx, e, 5*time.Second, prof); err != nil {
			fail("dns", err)
		} else {
			d.Reproduce = reproduce(o, "dns")
			r.DNS = d
		}
	}
	if o.want("tcp") && !overBudget("tcp") && ctx.Err() == nil {
		logf("tcp: throughput through the perimeter and a plain veth path")
		if t, err := MeasureTCP(ctx, e, 5, 2*time.Second); err != nil {
			fail("tcp", err)
		} else {
			t.Reproduce = reproduce(o, "tcp")
			r.TCP = t
		}
	}
	if o.want("agentstart") && !overBudget("agentstart") && ctx.Err() == nil {
		logf("agent start: %v, %d runs per side", o.AgentStart.Agents, o.AgentStart.Runs)
		a, err := MeasureAgentStart(ctx, e, o.AgentStart)
		if a != nil {
			a.Reproduce = reproduce(o, "agentstart")
			r.AgentStart = a
		}
		if err != nil {
			fail("agentstart", err)
		}
	}
	if o.want("density") && !overBudget("density") && ctx.Err() == nil {
		logf("density: %v idle sessions", o.Density)
		// Last, so that its largest levels get what is left of the
		// budget (with half a minute for removing the sessions).
		var deadline time.Time
		if o.Budget > 0 {
			deadline = start.Add(o.Budget - 30*time.Second)
		}
		d, err := MeasureDensity(ctx, e, o.Density, filepath.Join(o.Out, "density.png"), deadline)
		if d != nil {
			d.Reproduce = reproduce(o, "density")
			r.Density = d
		}
		if err != nil {
			fail("density", err)
		}
	}
	return finish()
}

// reproduce is the command that reruns one section (all with "").
func reproduce(o Options, section string) string {
	args := []string{"hack/perf.sh"}
	if o.Load > 0 {
		args = append(args, "-load", fmt.Sprint(o.Load))
	}
	if section != "" {
		args = append(args, "-only", section)
	}
	switch section {
	case "coldstart", "warmstart", "teardown":
		args = append(args, "-runs", fmt.Sprint(o.Runs))
	case "density":
		d := make([]string, len(o.Density))
		for i, n := range o.Density {
			d[i] = fmt.Sprint(n)
		}
		args = append(args, "-density", strings.Join(d, ","))
	case "gobench":
		args = append(args, "-benchtime", o.BenchTime, "-benchcount", fmt.Sprint(o.BenchCount))
	case "agentstart":
		args = append(args, "-agent-runs", fmt.Sprint(o.AgentStart.Runs), "-agents", strings.Join(o.AgentStart.Agents, ","))
	case "l7":
		args = append(args, "-l7-rounds", fmt.Sprint(o.L7.Rounds), "-l7-download", sizeFlag(o.L7.DownloadBytes))
	case "runtimes":
		args = append(args, "-runtime-runs", fmt.Sprint(o.RuntimeRuns), "-runtime-blocks", fmt.Sprint(o.RuntimeBlocks), "-burst", fmt.Sprint(o.BurstN))
	}
	return shellQuote(args)
}

// reproduceRun is the whole run's command: the harness with the arguments
// it was given (a partial run says which sections and sizes it measured).
func reproduceRun(o Options) string {
	if len(o.Argv) < 2 {
		return reproduce(o, "")
	}
	return shellQuote(append([]string{"hack/perf.sh"}, o.Argv[1:]...))
}

// versions reads the versions of what is measured.
func versions(o Options) map[string]string {
	v := map[string]string{}
	run := func(key string, argv ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// `airlock version` prints the client's line, then fails without
		// a daemon: keep whatever came first.
		out, _ := exec.CommandContext(ctx, argv[0], argv[1:]...).Output()
		if line := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]); line != "" {
			v[key] = line
		}
	}
	run("containerd", filepath.Join(o.Env.BinDir, "containerd"), "--version")
	run("runc", filepath.Join(o.Env.BinDir, "runc"), "--version")
	run("airlock", filepath.Join(o.Env.BinDir, "airlock"), "version")
	run("go", "go", "version")
	if srt := filepath.Join(o.SrtDir, "node_modules", ".bin", "srt"); fileExists(srt) {
		run("sandbox-runtime", srt, "--version")
	}
	run("node", "node", "--version")
	run("bubblewrap", "bwrap", "--version")
	return v
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// sizeFlag formats n as a size flag (policies.ParseSize reads it back).
func sizeFlag(n int64) string {
	for _, u := range []struct {
		unit  string
		bytes int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return fmt.Sprintf("%d%s", n/u.bytes, u.unit)
		}
	}
	return fmt.Sprintf("%dB", n)
}
