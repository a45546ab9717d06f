package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// ColdStart compares the time from launching a sandboxed `true` to its
// exit, and from launching `echo x` to its first output byte.
type ColdStart struct {
	Runs     int       `json:"runs"`
	Variants []Variant `json:"variants"`
	// Ratios of medians (to exit) against ctr run --rm.
	RatioHelloCtr float64 `json:"ratio_hello_ctr"`
	RatioFullCtr  float64 `json:"ratio_full_ctr"`
	// Timelines follow one more run of the full perimeter and of ctr,
	// program by program.
	Timelines []Timeline `json:"timelines,omitempty"`
	Seconds   float64    `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// Variant is one way of starting a sandbox.
type Variant struct {
	Name string `json:"name"`
	// Command is the exact command timed to exit (`true`); the first-output
	// runs replace `true` with `echo x`.
	Command       string        `json:"command"`
	ExitMS        stats.Summary `json:"exit_ms"`
	FirstOutputMS stats.Summary `json:"first_output_ms"`
	// EchoExitMS is the exit time of the `echo x` runs.
	EchoExitMS stats.Summary `json:"echo_exit_ms"`
	Failures   int           `json:"failures"`
	// Error says why the variant could not be measured.
	Error string `json:"error,omitempty"`
}

type variant struct {
	name string
	// argv returns the command for the run tagged tag (unique per run) with
	// the given command ("true" or "echo x").
	argv func(tag string, cmd []string) []string
}

// SrtConfig locates Anthropic's sandbox-runtime CLI.
type SrtConfig struct {
	// Bin is the srt executable ("" if it could not be installed).
	Bin string
	// Why is the reason srt is missing.
	Why string
}

// MeasureColdStart runs every variant runs times, interleaved (variant
// order within a round is fixed, so all see the same machine state), after
// one unrecorded warm-up each.
func MeasureColdStart(ctx context.Context, e *Env, runs int, srt SrtConfig) (*ColdStart, error) {
	start := time.Now()
	hello, full, err := e.startManifests()
	if err != nil {
		return nil, err
	}
	vs := []variant{
		{"airlock run --rm (examples/hello.hcl: no layers)", func(_ string, c []string) []string {
			return e.CLIArgs(append([]string{"run", "--rm", "-f", hello, "--"}, c...)...)
		}},
		{"airlock run --rm (full perimeter)", func(_ string, c []string) []string {
			return e.CLIArgs(append([]string{"run", "--rm", "-f", full, "--"}, c...)...)
		}},
		{"ctr run --rm (same image, same containerd)", func(tag string, c []string) []string {
			return e.CtrArgs(append([]string{"run", "--rm", "--runc-binary", e.Bin("runc"), e.CtrRef, "perf-ctr-" + tag}, c...)...)
		}},
	}
	var srtVariant *Variant
	if srt.Bin != "" {
		settings := filepath.Join(e.WorkDir, "srt-settings.json")
		if err := writeSrtSettings(settings, filepath.Join(e.WorkDir, "workspace")); err != nil {
			return nil, err
		}
		vs = append(vs, variant{"srt -c (sandbox-runtime, bubblewrap)", func(_ string, c []string) []string {
			return []string{srt.Bin, "-s", settings, "-c", strings.Join(c, " ")}
		}})
	} else {
		srtVariant = &Variant{Name: "srt -c (sandbox-runtime)", Command: "srt -c true", Error: srt.Why}
	}

	res := &ColdStart{Runs: runs}
	exit := make([][]time.Duration, len(vs))
	first := make([][]time.Duration, len(vs))
	echoExit := make([][]time.Duration, len(vs))
	failures := make([]int, len(vs))
	errs := make([]string, len(vs))
	skip := make([]bool, len(vs))
	trueCmd, echoCmd := []string{"true"}, []string{"echo", "x"}
	for i, v := range vs {
		// Warm-up: page cache, image unpack, srt's node modules. A variant
		// that cannot run once is not measured.
		if err := runTimed(ctx, e.cfg.Repo, v.argv(fmt.Sprintf("w%d", i), trueCmd)).check(""); err != nil {
			errs[i], skip[i] = "warm-up failed: "+err.Error(), true
		}
	}
	for round := range runs {
		for i, v := range vs {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if skip[i] {
				continue
			}
			r := runTimed(ctx, e.cfg.Repo, v.argv(fmt.Sprintf("t%d", round), trueCmd))
			if err := r.check(""); err != nil {
				failures[i]++
				errs[i] = err.Error()
			} else {
				exit[i] = append(exit[i], r.Exit)
			}
			r = runTimed(ctx, e.cfg.Repo, v.argv(fmt.Sprintf("e%d", round), echoCmd))
			if err := r.check("x"); err != nil {
				failures[i]++
				errs[i] = err.Error()
			} else {
				first[i] = append(first[i], r.FirstByte)
				echoExit[i] = append(echoExit[i], r.Exit)
			}
		}
	}
	for i, v := range vs {
		vr := Variant{
			Name: v.name, Command: e.display(v.argv("t0", trueCmd)),
			ExitMS: stats.Summarize(stats.Millis(exit[i])), FirstOutputMS: stats.Summarize(stats.Millis(first[i])),
			EchoExitMS: stats.Summarize(stats.Millis(echoExit[i])), Failures: failures[i],
		}
		if failures[i] > 0 || vr.ExitMS.N == 0 {
			vr.Error = errs[i]
		}
		res.Variants = append(res.Variants, vr)
	}
	if srtVariant != nil {
		res.Variants = append(res.Variants, *srtVariant)
	}
	if c := res.Variants[2].ExitMS.Median; c > 0 {
		res.RatioHelloCtr = res.Variants[0].ExitMS.Median / c
		res.RatioFullCtr = res.Variants[1].ExitMS.Median / c
	}
	for _, i := range []int{1, 2} {
		if !skip[i] {
			argv := vs[i].argv("tl", trueCmd)
			res.Timelines = append(res.Timelines, recordTimeline(ctx, e.cfg.Repo, vs[i].name, e.display(argv), argv))
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// writeSrtSettings gives srt the same scope as the full perimeter: one
// allowed domain, writes only to the workspace.
func writeSrtSettings(path, workspace string) error {
	cfg := map[string]any{
		"network": map[string]any{"allowedDomains": []string{EgressHost}, "deniedDomains": []string{}},
		"filesystem": map[string]any{
			"denyRead": []string{}, "allowWrite": []string{workspace}, "denyWrite": []string{},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// FindSrt locates sandbox-runtime's CLI installed under dir
// (`npm install --prefix dir @anthropic-ai/sandbox-runtime`) and checks
// that it can run a command; Why says what is missing otherwise.
func FindSrt(ctx context.Context, dir string) SrtConfig {
	bin := filepath.Join(dir, "node_modules", ".bin", "srt")
	if _, err := os.Stat(bin); err != nil {
		return SrtConfig{Why: fmt.Sprintf("not installed (%s missing; hack/perf.sh installs it with `npm install --prefix perf/.srt @anthropic-ai/sandbox-runtime`)", bin)}
	}
	for _, dep := range []string{"bwrap", "socat"} {
		if _, err := exec.LookPath(dep); err != nil {
			return SrtConfig{Why: dep + " is not installed (apt-get install bubblewrap socat)"}
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(tctx, bin, "-c", "echo ok").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		return SrtConfig{Why: fmt.Sprintf("srt -c 'echo ok' failed: %v: %s", err, lastLine(string(out)))}
	}
	return SrtConfig{Bin: bin}
}

// display renders argv for the report, with the temporary root shown as
// $ROOT and paths in the checkout relative to it.
func (e *Env) display(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		a = strings.ReplaceAll(a, e.Root, "$ROOT")
		if rel, ok := strings.CutPrefix(a, e.cfg.Repo+"/"); ok {
			a = rel
		}
		out[i] = a
	}
	return shellQuote(out)
}
