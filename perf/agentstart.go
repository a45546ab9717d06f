package perf

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/perf/stats"
)

// AgentStart compares the time from `airlock run` of a shipped agent
// example to the agent's first model request with the time the same agent
// binary takes, started bare, to make the same request.
type AgentStart struct {
	Runs int `json:"runs"`
	// Setup says how both sides were run.
	Setup  string     `json:"setup"`
	Agents []AgentRow `json:"agents"`
	// Seconds is the section's wall time, image imports included.
	Seconds float64 `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// AgentRow is one agent's runs, in the sandbox and bare.
type AgentRow struct {
	// Agent is the image recipe (claude-code, codex); Example the
	// manifest run, Image its image.
	Agent   string `json:"agent"`
	Example string `json:"example"`
	Image   string `json:"image"`
	// Binary is the bare side's agent binary; Version what it printed for
	// --version.
	Binary  string `json:"binary"`
	Version string `json:"version,omitempty"`
	// ImportSeconds is the `airlock image import` of the agent image.
	ImportSeconds float64 `json:"import_seconds"`
	// Airlock and Bare are the two sides.
	Airlock AgentSide `json:"airlock"`
	Bare    AgentSide `json:"bare"`
	// Ratio is Airlock.FirstRequestMS's median over Bare's (0 when either
	// has no run).
	Ratio float64 `json:"ratio"`
	// AddedMS is the difference of the medians.
	AddedMS float64 `json:"added_ms"`
	Error   string  `json:"error,omitempty"`
}

// AgentSide is one side's timed runs.
type AgentSide struct {
	// Command is what was timed (the manifest's variables and the bare
	// side's environment shown as given).
	Command string `json:"command"`
	// FirstRequestMS runs from the fork of the command to the model
	// server's receipt of the agent's first main-loop request (a request
	// offering the agent's tools, modelsrv.KindMain; probes and side calls
	// before it do not count).
	FirstRequestMS stats.Summary `json:"first_request_ms"`
	// ExitMS runs to the command's exit: the agent done (its one turn
	// answered with the final message) and, for airlock run --rm, the
	// session removed.
	ExitMS stats.Summary `json:"exit_ms"`
	// LaunchMS runs, on the airlock side, from the fork of `airlock run`
	// to the session's start as the daemon records it (sandbox prepared,
	// the command launched); InSandboxMS from there to the first main
	// request: the agent's own start inside the sandbox, through the
	// gateway. A run whose session the harness could not read in time
	// (it lists sessions when the first request arrives) is missing from
	// both.
	LaunchMS    stats.Summary `json:"launch_ms,omitzero"`
	InSandboxMS stats.Summary `json:"in_sandbox_ms,omitzero"`
	// WarmupMS is the warm-up run's time to the first main request (the
	// first after the image import: it unpacks the image; -1 when it
	// failed).
	WarmupMS float64 `json:"warmup_ms"`
	// CallsBefore is, per run, the model server's calls before the first
	// main one (the agent's probes and side calls).
	CallsBefore stats.Summary `json:"calls_before"`
	Failures    int           `json:"failures"`
	// Errors are the failed runs' reasons (at most a few).
	Errors []string `json:"errors,omitempty"`
}

// AgentStartConfig bounds the agent start section.
type AgentStartConfig struct {
	// Runs per side and agent (after one warm-up each).
	Runs int
	// Agents are image recipes with a shipped example
	// (examples/RECIPE.hcl): claude-code, codex.
	Agents []string
	// Images are the agent images' archives by recipe (`make images`).
	Images map[string]string
	// Timeout bounds each run.
	Timeout time.Duration
}

// AgentRecipes are the agents the section knows.
var AgentRecipes = []string{"claude-code", "codex"}

// agentRun is what one run yielded.
type agentRun struct {
	first, exit time.Duration
	before      int
	// launched is the time to the session's start (0: unknown).
	launched time.Duration
}

// firstModelRequest finds, among the calls a model server recorded, the
// agent's first main-loop request, and returns the time from start to it
// and the number of calls before it. It is an error when there is none,
// when it came before start (a stale server), or when it did not carry
// key: the measured request must be one the model API would have served.
func firstModelRequest(calls []modelsrv.Call, start time.Time, key string) (time.Duration, int, error) {
	for i, c := range calls {
		if c.Kind != modelsrv.KindMain {
			continue
		}
		if c.Time.Before(start) {
			return 0, 0, fmt.Errorf("first main request at %s, before the run started at %s", c.Time.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))
		}
		if got := c.APIKey(); got != key {
			return 0, 0, fmt.Errorf("first main request carried the key %q, want the operator's", redact(got))
		}
		return c.Time.Sub(start), i, nil
	}
	kinds := make([]string, len(calls))
	for i, c := range calls {
		kinds[i] = c.Kind + " " + c.Method + " " + c.Path
	}
	if len(kinds) == 0 {
		return 0, 0, errors.New("the model server received no request")
	}
	return 0, 0, fmt.Errorf("no main request among the model server's %d: %s", len(calls), strings.Join(kinds, ", "))
}

// redact shortens a secret-looking value for an error message.
func redact(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// side summarizes a side's runs.
func side(command string, runs []agentRun, errs []string) AgentSide {
	var first, exit, before, launch, inside []float64
	for _, r := range runs {
		first = append(first, ms(r.first))
		exit = append(exit, ms(r.exit))
		before = append(before, float64(r.before))
		if r.launched > 0 {
			launch = append(launch, ms(r.launched))
			inside = append(inside, ms(r.first-r.launched))
		}
	}
	s := AgentSide{
		Command: command, FirstRequestMS: stats.Summarize(first), ExitMS: stats.Summarize(exit),
		LaunchMS: stats.Summarize(launch), InSandboxMS: stats.Summarize(inside),
		CallsBefore: stats.Summarize(before), Failures: len(errs),
	}
	if len(errs) > 3 {
		errs = errs[:3]
	}
	s.Errors = errs
	return s
}

// compare fills the row's ratio and difference of medians.
func (r *AgentRow) compare() {
	a, b := r.Airlock.FirstRequestMS, r.Bare.FirstRequestMS
	r.Ratio, r.AddedMS = 0, 0
	if a.N == 0 || b.N == 0 || b.Median <= 0 {
		return
	}
	r.Ratio = a.Median / b.Median
	r.AddedMS = a.Median - b.Median
}

func (a *AgentStart) summary(p printer) {
	for _, r := range a.Agents {
		if r.Airlock.FirstRequestMS.N == 0 || r.Bare.FirstRequestMS.N == 0 {
			continue
		}
		p("| %s: `airlock run` of %s to the agent's first model request (ms) | %s | bare on the host: %s | ×%s (%s ms) |\n", r.Agent, r.Example,
			r.Airlock.FirstRequestMS.Spread("%.0f"), r.Bare.FirstRequestMS.Spread("%.0f"), ratio(r.Airlock.FirstRequestMS.Median, r.Bare.FirstRequestMS.Median), signed(r.AddedMS))
	}
}

func (a *AgentStart) markdown(p printer) {
	p("## 9. Agent start: time to the first model request\n\nReproduce: `%s` (%d runs per side after one warm-up each, interleaved: in each round the sandboxed run, then the bare one).\n\n", a.Reproduce, a.Runs)
	p("Setup: %s\n\n", a.Setup)
	p("| agent | side | to first model request, median (p10–p90) (ms) | p90 (ms) | of which: to the session's start / the agent in the sandbox (ms) | warm-up run (ms) | to exit (ms) | calls before it | failures |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range a.Agents {
		for _, s := range []struct {
			name string
			side AgentSide
		}{{"airlock run --rm " + r.Example, r.Airlock}, {"bare", r.Bare}} {
			warm := "–"
			if s.side.WarmupMS > 0 {
				warm = fmt.Sprintf("%.0f", s.side.WarmupMS)
			}
			if s.side.FirstRequestMS.N == 0 {
				p("| %s | %s | – | – | – | %s | – | – | %d |\n", r.Agent, s.name, warm, s.side.Failures)
				continue
			}
			split := "–"
			if s.side.LaunchMS.N > 0 {
				split = fmt.Sprintf("%.0f / %.0f", s.side.LaunchMS.Median, s.side.InSandboxMS.Median)
			}
			p("| %s | %s | %s | %.0f | %s | %s | %s | %.0f | %d |\n", r.Agent, s.name, s.side.FirstRequestMS.Spread("%.0f"), s.side.FirstRequestMS.P90,
				split, warm, s.side.ExitMS.Spread("%.0f"), s.side.CallsBefore.Median, s.side.Failures)
		}
	}
	p("\nThe session's start is the time the daemon records when it has launched the command in the prepared sandbox (`started` in `airlock inspect`), read by the harness when the first request arrives; the split's parts are medians of their own and need not add up. The warm-up run is each side's first, right after the image import (which unpacks the image); it is not in the other columns. The calls before the first main request are the agent's own probes and side calls (Claude Code: `HEAD /api/hello`).\n\n")
	for _, r := range a.Agents {
		p("%s (%s", r.Agent, r.Image)
		if r.Version != "" {
			p(", `%s`", r.Version)
		}
		p("; image import %.1f s): ", r.ImportSeconds)
		if r.Ratio > 0 {
			p("airlock ×%.2f of bare, %s ms. ", r.Ratio, signed(r.AddedMS))
		} else {
			p("no ratio: a side has no successful run. ")
		}
		if r.Error != "" {
			p("Error: %s. ", r.Error)
		}
		for _, s := range []struct {
			name string
			side AgentSide
		}{{"airlock", r.Airlock}, {"bare", r.Bare}} {
			for _, e := range s.side.Errors {
				p("A failed %s run: %s. ", s.name, e)
			}
		}
		p("\n\n- airlock: `%s`\n- bare: `%s`\n\n", r.Airlock.Command, r.Bare.Command)
	}
}

// findings describes each agent's ratio and where the added time goes.
func (a *AgentStart) findings() []string {
	var out []string
	for _, r := range a.Agents {
		al, b := r.Airlock, r.Bare
		if r.Ratio == 0 {
			continue
		}
		f := fmt.Sprintf("Agent start, %s: `airlock run` of %s reaches the agent's first model request in %.0f ms (median of %d), ×%.2f of the same binary started bare against the same model server (%.0f ms, %s ms).",
			r.Agent, r.Example, al.FirstRequestMS.Median, al.FirstRequestMS.N, r.Ratio, b.FirstRequestMS.Median, signed(r.AddedMS))
		if al.LaunchMS.N > 0 {
			f += fmt.Sprintf(" Of it, %.0f ms run to the session's start (the CLI, the manifest, the sandbox with its overlay workspace and perimeter, the command launched) and %.0f ms are the agent's own start in the sandbox, its DNS through the proxy and its TLS terminated by the gateway, which injects the key.",
				al.LaunchMS.Median, al.InSandboxMS.Median)
		}
		out = append(out, f)
	}
	return out
}
