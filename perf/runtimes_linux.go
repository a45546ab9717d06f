package perf

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
)

// OCIRuntimes are the runtimes the runtimes section compares, as airlockd
// --runtime names them.
var OCIRuntimes = []string{"runc", "crun"}

// RuntimeConfig is one way airlockd runs sessions in the runtimes
// section.
type RuntimeConfig struct {
	Name           string `json:"name"`
	Runtime        string `json:"runtime"`
	ShimPerSession bool   `json:"shim_per_session"`
}

// RuntimeConfigs are the section's configurations: each runtime on the
// shared shim (the default), and runc with a shim per session, the
// baseline of the burst target.
var RuntimeConfigs = []RuntimeConfig{
	{"runc", "runc", false},
	{"crun", "crun", false},
	{"runc, shim per session", "runc", true},
}

// Runtimes compares the OCI runtimes airlockd can run sessions on
// (--runtime), each beside containerd's own client on the same runtime.
// airlockd runs one runtime at a time, so the section alternates: in each
// block it restarts airlockd on one runtime, measures, then on the other
// (the order flips from block to block), so that both see the same
// machine over the run.
type Runtimes struct {
	Blocks       int `json:"blocks"`
	RunsPerBlock int `json:"runs_per_block"`
	BurstN       int `json:"burst_n"`
	// Results are in OCIRuntimes' order.
	Results []RuntimeResult `json:"results"`
	// Commands are the timed commands, with RUNTIME for the runtime.
	Commands map[string]string `json:"commands"`
	Seconds  float64           `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// RuntimeResult is one configuration's measurements over all blocks.
type RuntimeResult struct {
	// Config names the configuration (RuntimeConfigs).
	Config         string `json:"config"`
	Runtime        string `json:"runtime"`
	ShimPerSession bool   `json:"shim_per_session"`
	Version        string `json:"version"`
	// ColdMS is `airlock run --rm` of the full perimeter running `true`,
	// to its exit; CtrColdMS `ctr run --rm` of the same image on the same
	// containerd and runtime.
	ColdMS    stats.Summary `json:"cold_ms"`
	CtrColdMS stats.Summary `json:"ctr_cold_ms"`
	// TeardownMS is stop and rm of a running full-perimeter session until
	// every tracked resource is gone; CtrTeardownMS ctr task rm -f and
	// container rm.
	TeardownMS    stats.Summary `json:"teardown_ms"`
	CtrTeardownMS stats.Summary `json:"ctr_teardown_ms"`
	// Burst is BurstN starts at once (examples/hello.hcl, `sleep 3600`),
	// one per block: starts a second from the first request to the last
	// session running, and CPU per start across the run's processes.
	BurstPerSec   stats.Summary `json:"burst_per_sec"`
	CPUPerStartMS stats.Summary `json:"cpu_per_start_ms"`
	// ShimCPUMS is the shim with the runtime invocations it reaped, and
	// SandboxCPUMS the sessions' processes (the runtime's init stage
	// before the exec), per start, medians over the blocks.
	ShimCPUMS    float64 `json:"shim_cpu_ms"`
	SandboxCPUMS float64 `json:"sandbox_cpu_ms"`
	Leaked       int     `json:"leaked"`
	Failures     int     `json:"failures"`
	Error        string  `json:"error,omitempty"`
}

// Result returns the result of configuration name, or nil.
func (r *Runtimes) Result(name string) *RuntimeResult {
	for i := range r.Results {
		if r.Results[i].Config == name {
			return &r.Results[i]
		}
	}
	return nil
}

// MeasureRuntimes measures blocks × runs cold starts and teardowns, and
// one burst of burstN per block, on each runtime. airlockd is left on
// the runtime it started with.
func MeasureRuntimes(ctx context.Context, e *Env, blocks, runs, burstN int) (res *Runtimes, retErr error) {
	start := time.Now()
	hello, full, err := e.startManifests()
	if err != nil {
		return nil, err
	}
	burst, err := policies.LoadFile(hello, nil)
	if err != nil {
		return nil, err
	}
	burst.Command, burst.Label = []string{"sleep", "3600"}, "perf-burst"
	initial, initialPerSession := e.Runtime(), e.shimPerSession
	defer func() {
		if err := e.SetRuntime(context.WithoutCancel(ctx), initial, initialPerSession); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("back to %s: %w", initial, err))
		}
	}()

	res = &Runtimes{Blocks: blocks, RunsPerBlock: runs, BurstN: burstN, Commands: map[string]string{
		"cold":         e.display(e.CLIArgs("run", "--rm", "-f", full, "--", "true")),
		"ctr cold":     e.display(e.CtrArgs("run", "--rm", "--runc-binary", "RUNTIME", e.CtrRef, "ID", "true")),
		"teardown":     e.display(e.CLIArgs("stop", "--time", "0", "ID")) + " && " + e.display(e.CLIArgs("rm", "-f", "ID")),
		"ctr teardown": e.display(e.CtrArgs("task", "rm", "-f", "ID")) + "; " + e.display(e.CtrArgs("container", "rm", "ID")),
		"burst":        fmt.Sprintf("%d concurrent POST /v1/sessions {start: true} of examples/hello.hcl running sleep 3600", burstN),
		"airlockd":     e.display(append([]string{e.Bin("airlockd")}, withRuntimeArg(e.DaemonArgs(), "RUNTIME")...)) + " (and --shim-per-session where the configuration says so)",
	}}
	type acc struct {
		cold, ctrCold, td, ctrTd []time.Duration
		rate, cpu, shim, sandbox []float64
		leaked, failures         int
		err                      string
	}
	accs := map[string]*acc{}
	for _, c := range RuntimeConfigs {
		accs[c.Name] = &acc{}
	}
	fail := func(a *acc, err error) {
		a.failures++
		a.err = err.Error()
	}
	for b := range blocks {
		order := slices.Clone(RuntimeConfigs)
		if b%2 == 1 {
			slices.Reverse(order)
		}
		for _, cfg := range order {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			rt := cfg.Runtime
			a := accs[cfg.Name]
			if err := e.SetRuntime(ctx, rt, cfg.ShimPerSession); err != nil {
				return nil, fmt.Errorf("airlockd on %s: %w", cfg.Name, err)
			}
			ctrBin := e.ctrRuntimeBinary(rt)
			// One unrecorded start each: the image's page cache, the shim
			// anchor of the restarted daemon.
			_ = runTimed(ctx, e.cfg.Repo, e.CLIArgs("run", "--rm", "-f", full, "--", "true"))
			_ = runTimed(ctx, e.cfg.Repo, e.CtrArgs("run", "--rm", "--runc-binary", ctrBin, e.CtrRef, fmt.Sprintf("perf-rt-w%d-%s-%t", b, rt, cfg.ShimPerSession), "true"))
			for i := range runs {
				tag := fmt.Sprintf("%d-%d-%s-%t", b, i, rt, cfg.ShimPerSession)
				if r := runTimed(ctx, e.cfg.Repo, e.CLIArgs("run", "--rm", "-f", full, "--", "true")); r.check("") != nil {
					fail(a, fmt.Errorf("airlock run: %w", r.check("")))
				} else {
					a.cold = append(a.cold, r.Exit)
				}
				if r := runTimed(ctx, e.cfg.Repo, e.CtrArgs("run", "--rm", "--runc-binary", ctrBin, e.CtrRef, "perf-rt-"+tag, "true")); r.check("") != nil {
					fail(a, fmt.Errorf("ctr run: %w", r.check("")))
				} else {
					a.ctrCold = append(a.ctrCold, r.Exit)
				}
				if r, err := e.teardownOnce(ctx, full); err != nil {
					fail(a, fmt.Errorf("teardown: %w", err))
				} else if len(r.leaked) > 0 {
					a.leaked++
					a.err = fmt.Sprintf("teardown left %v", r.leaked)
				} else {
					a.td = append(a.td, r.gone)
				}
				if d, err := e.ctrTeardownOnceWith(ctx, "perf-rt-td-"+tag, ctrBin); err != nil {
					fail(a, fmt.Errorf("ctr teardown: %w", err))
				} else {
					a.ctrTd = append(a.ctrTd, d)
				}
			}
			lv := e.densityLevel(ctx, *burst, burstN)
			if lv.Error != "" {
				fail(a, fmt.Errorf("burst: %s", lv.Error))
			} else if lv.WallMS > 0 {
				a.rate = append(a.rate, float64(burstN)/(lv.WallMS/1000))
				a.cpu = append(a.cpu, lv.RunCPUMS)
				a.shim = append(a.shim, lv.ShimCPUMS)
				a.sandbox = append(a.sandbox, lv.SandboxCPUMS)
			}
			if len(lv.Leftovers) > 0 {
				a.leaked++
				a.err = fmt.Sprintf("burst left %v", lv.Leftovers)
			}
			e.cfg.Logf("runtimes: block %d on %s: cold median %.0f ms, burst %.1f starts/s", b, cfg.Name,
				stats.Summarize(stats.Millis(a.cold)).Median, last(a.rate))
		}
	}
	versions := runtimeVersions(e)
	for _, c := range RuntimeConfigs {
		a := accs[c.Name]
		res.Results = append(res.Results, RuntimeResult{
			Config: c.Name, Runtime: c.Runtime, ShimPerSession: c.ShimPerSession, Version: versions[c.Runtime],
			ColdMS: stats.Summarize(stats.Millis(a.cold)), CtrColdMS: stats.Summarize(stats.Millis(a.ctrCold)),
			TeardownMS: stats.Summarize(stats.Millis(a.td)), CtrTeardownMS: stats.Summarize(stats.Millis(a.ctrTd)),
			BurstPerSec: stats.Summarize(a.rate), CPUPerStartMS: stats.Summarize(a.cpu),
			ShimCPUMS: stats.Summarize(a.shim).Median, SandboxCPUMS: stats.Summarize(a.sandbox).Median,
			Leaked: a.leaked, Failures: a.failures, Error: a.err,
		})
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// withRuntimeArg is args with --runtime's value replaced by rt.
func withRuntimeArg(args []string, rt string) []string {
	out := slices.Clone(args)
	for i := range out {
		if out[i] == "--runtime" && i+1 < len(out) {
			out[i+1] = rt
		}
	}
	return out
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

// ctrRuntimeBinary is what ctr's --runc-binary names for runtime rt:
// runc itself, and for crun the ocilabel wrapper beside it (see
// perf/cmd/ocilabel: ctr's specs are labelled 1.3.0, which crun 1.8
// refuses).
func (e *Env) ctrRuntimeBinary(rt string) string {
	if rt == "crun" {
		return e.Bin("ocilabel")
	}
	return e.Bin(rt)
}

// runtimeVersions is each runtime's first line of --version.
func runtimeVersions(e *Env) map[string]string {
	out := map[string]string{}
	for _, rt := range OCIRuntimes {
		r := runTimed(context.Background(), e.cfg.Repo, []string{e.Bin(rt), "--version"})
		out[rt] = lastLine(firstLineOf(r.Stdout))
	}
	return out
}

func firstLineOf(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}

// summary adds the runtimes' headline rows: crun against runc for
// airlock, and each against ctr on the same runtime.
func (r *Runtimes) summary(p printer) {
	rc, cr := r.Result("runc"), r.Result("crun")
	if rc == nil || cr == nil {
		return
	}
	p("| cold start to exit, full perimeter, on crun vs on runc (ms) | %s | on runc: %s | ×%s |\n", cr.ColdMS.Spread("%.0f"), rc.ColdMS.Spread("%.0f"), ratio(cr.ColdMS.Median, rc.ColdMS.Median))
	for _, x := range []*RuntimeResult{rc, cr} {
		p("| cold start to exit, full perimeter on %s vs ctr run --rm on %s (ms; target ≤ ×1.0: %s) | %s | %s | ×%s |\n", x.Runtime, x.Runtime,
			met(x.ColdMS.Median <= x.CtrColdMS.Median), x.ColdMS.Spread("%.0f"), x.CtrColdMS.Spread("%.0f"), ratio(x.ColdMS.Median, x.CtrColdMS.Median))
		p("| teardown to all gone, full perimeter on %s vs ctr task rm -f + container rm on %s (ms; target ≤ ×1.0: %s) | %s | %s | ×%s |\n", x.Runtime, x.Runtime,
			met(x.TeardownMS.Median <= x.CtrTeardownMS.Median), x.TeardownMS.Spread("%.0f"), x.CtrTeardownMS.Spread("%.0f"), ratio(x.TeardownMS.Median, x.CtrTeardownMS.Median))
	}
	p("| teardown, full perimeter, on crun vs on runc (ms) | %s | on runc: %s | ×%s |\n", cr.TeardownMS.Spread("%.0f"), rc.TeardownMS.Spread("%.0f"), ratio(cr.TeardownMS.Median, rc.TeardownMS.Median))
	p("| burst of %d, starts a second, on crun vs on runc | %.1f | on runc: %.1f | ×%s |\n", r.BurstN, cr.BurstPerSec.Median, rc.BurstPerSec.Median, ratio(cr.BurstPerSec.Median, rc.BurstPerSec.Median))
	p("| CPU per start in a burst of %d, on crun vs on runc (ms) | %.0f | on runc: %.0f | ×%s |\n", r.BurstN, cr.CPUPerStartMS.Median, rc.CPUPerStartMS.Median, ratio(cr.CPUPerStartMS.Median, rc.CPUPerStartMS.Median))
	if ps := r.Result("runc, shim per session"); ps != nil {
		for _, x := range []*RuntimeResult{rc, cr} {
			p("| burst of %d, starts a second, shared shim on %s vs runc with a shim per session (target ≥ ×2: %s) | %.1f | %.1f | ×%s |\n", r.BurstN, x.Runtime,
				met(x.BurstPerSec.Median >= 2*ps.BurstPerSec.Median), x.BurstPerSec.Median, ps.BurstPerSec.Median, ratio(x.BurstPerSec.Median, ps.BurstPerSec.Median))
		}
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func (r *Runtimes) markdown(p printer) {
	p("## 3b. OCI runtimes: runc and crun\n\nReproduce: `%s`. airlockd runs one OCI runtime (`--runtime`), so the section alternates: %d blocks, each restarting airlockd on runc, on crun, and on runc with a shim per session (`--shim-per-session`; the order reverses every block) and measuring, on each, %d cold starts and %d teardowns of the full perimeter beside `ctr run --rm` and ctr's teardown on the same runtime and containerd, then one burst of %d starts at once. ctr runs crun through perf/cmd/ocilabel, which labels the bundle's spec 1.0.2 before it execs crun (crun 1.8 refuses containerd 2.x's 1.3.0 label, as it would airlock's; airlockd labels its specs itself).\n\n",
		r.Reproduce, r.Blocks, r.RunsPerBlock, r.RunsPerBlock, r.BurstN)
	p("| configuration | version | airlock cold start (ms) | ctr run --rm (ms) | airlock teardown to all gone (ms) | ctr teardown (ms) | burst starts/s | CPU per start (ms) | of which shim + runtime | of which the session's (runtime init) | leaked | failures |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range r.Results {
		p("| %s | %s | %s | %s | %s | %s | %.1f (%.1f–%.1f) | %.0f | %.0f | %.0f | %d | %d |\n", x.Config, x.Version,
			x.ColdMS.Spread("%.0f"), x.CtrColdMS.Spread("%.0f"), x.TeardownMS.Spread("%.0f"), x.CtrTeardownMS.Spread("%.0f"),
			x.BurstPerSec.Median, x.BurstPerSec.P10, x.BurstPerSec.P90, x.CPUPerStartMS.Median, x.ShimCPUMS, x.SandboxCPUMS, x.Leaked, x.Failures)
	}
	p("\n")
	r.burstBudget(p)
	for _, x := range r.Results {
		if x.Error != "" {
			p("- %s: last error: %s\n", x.Config, x.Error)
		}
	}
	p("Commands (RUNTIME: runc or crun for airlockd; `$ROOT/bin/runc`, or `$ROOT/bin/ocilabel` for crun, for ctr):\n\n")
	for _, k := range sortedKeys(r.Commands) {
		p("- %s: `%s`\n", k, r.Commands[k])
	}
	p("\n")
}

// burstBudget explains the burst target on runc from the CPU per start:
// a burst keeps the cores as busy on one configuration as on another, so
// its rate is the cores in use over the CPU a start takes, and the runtime's
// own share of that CPU bounds what any cut in airlock's processes gives.
func (r *Runtimes) burstBudget(p printer) {
	rc, cr, ps := r.Result("runc"), r.Result("crun"), r.Result("runc, shim per session")
	if rc == nil || cr == nil || ps == nil || rc.CPUPerStartMS.Median <= 0 || ps.BurstPerSec.Median <= 0 || rc.BurstPerSec.Median <= 0 {
		return
	}
	cores := rc.BurstPerSec.Median * rc.CPUPerStartMS.Median / 1000
	target := 2 * ps.BurstPerSec.Median
	budget := cores / target * 1000
	own := rc.ShimCPUMS + rc.SandboxCPUMS
	p("- Burst target on runc (≥ ×2 of runc with a shim per session, %.1f starts/s): ", target)
	if rc.BurstPerSec.Median >= target {
		p("met.\n")
		return
	}
	p("the burst on runc kept %.2f cores busy at %.0f ms of CPU a start (%.1f starts/s). At that use, ×2 needs at most %.0f ms a start: "+
		"the shim and runc take %.0f of them (the shim with the runc invocations it reaps, %.0f; `runc init` before the exec, %.0f), "+
		"the daemons the other %.0f (airlockd, containerd, the log writer): ", cores, rc.CPUPerStartMS.Median, rc.BurstPerSec.Median, budget,
		own, rc.ShimCPUMS, rc.SandboxCPUMS, rc.CPUPerStartMS.Median-own)
	if own >= budget {
		p("with the daemons' part at nothing the rate would be %.1f starts/s (×%s), still short: only a cheaper shim or runtime reaches it. ", cores/own*1000, ratio(cores/own*1000, ps.BurstPerSec.Median))
	} else {
		p("the daemons' part would have to shrink by %.0f ms a start. ", rc.CPUPerStartMS.Median-budget)
	}
	p("With crun the shim and runtime take %.0f ms a start (%.0f in all): on crun the burst runs at ×%s.\n\n", cr.ShimCPUMS+cr.SandboxCPUMS, cr.CPUPerStartMS.Median, ratio(cr.BurstPerSec.Median, ps.BurstPerSec.Median))
}
