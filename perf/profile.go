package perf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// recordProfile samples pid's on-CPU stacks with `perf record` for d and
// saves the flat `perf report` (self time per symbol) as dir/name.txt.
func recordProfile(ctx context.Context, pid int, d time.Duration, dir, name string) Profile {
	p := Profile{Name: name, File: filepath.Join("profiles", name+".txt")}
	if _, err := exec.LookPath("perf"); err != nil {
		p.Error = "perf is not installed (apt-get install linux-perf)"
		return p
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.Error = err.Error()
		return p
	}
	data := filepath.Join(dir, name+".data")
	defer os.Remove(data)
	secs := fmt.Sprintf("%.1f", max(d.Seconds(), 0.5))
	rec := []string{"perf", "record", "-F", "999", "-g", "-p", fmt.Sprint(pid), "-o", data, "--", "sleep", secs}
	rep := []string{"perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "symbol", "-g", "none", "--percent-limit", "0.5"}
	p.Command = fmt.Sprintf("perf record -F 999 -g -p $AIRLOCKD_PID -o perf.data -- sleep %s && perf report -i perf.data --stdio --no-children --sort symbol -g none (and --children)", secs)
	if out, err := exec.CommandContext(ctx, rec[0], rec[1:]...).CombinedOutput(); err != nil {
		p.Error = fmt.Sprintf("perf record: %v: %s", err, lastLine(string(out)))
		return p
	}
	out, err := exec.CommandContext(ctx, rep[0], rep[1:]...).Output()
	if err != nil {
		p.Error = fmt.Sprintf("perf report: %v", err)
		return p
	}
	// The inclusive view (a function and everything it calls) attributes
	// the time to airlock's own code paths.
	inc := []string{"perf", "report", "-i", data, "--stdio", "--children", "--sort", "symbol", "-g", "none", "--percent-limit", "1"}
	incOut, err := exec.CommandContext(ctx, inc[0], inc[1:]...).Output()
	if err != nil {
		p.Error = fmt.Sprintf("perf report --children: %v", err)
		return p
	}
	text := "# Self time per symbol\n" + string(out) + "\n# Inclusive time per symbol (with callees)\n" + string(incOut)
	if err := os.WriteFile(filepath.Join(dir, name+".txt"), []byte(text), 0o644); err != nil {
		p.Error = err.Error()
		return p
	}
	p.Top = topSymbols(string(out), 15)
	p.Inclusive = inclusiveSymbols(string(incOut), 200)
	return p
}

// inclusiveSymbols extracts the first n lines of an inclusive (--children)
// perf report as "children% self%  symbol".
func inclusiveSymbols(report string, n int) []string {
	var out []string
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || strings.HasPrefix(line, "#") || !strings.HasSuffix(f[0], "%") || !strings.HasSuffix(f[1], "%") {
			continue
		}
		sym := strings.TrimPrefix(strings.Join(f[2:], " "), "[.] ")
		out = append(out, fmt.Sprintf("%7s %7s  %s", f[0], f[1], strings.TrimSuffix(sym, " - -")))
		if len(out) == n {
			break
		}
	}
	return out
}

// topSymbols extracts the first n "NN.NN%  [.] symbol" lines of a flat
// perf report as "NN.NN%  symbol".
func topSymbols(report string, n int) []string {
	var out []string
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") || strings.HasPrefix(line, "#") {
			continue
		}
		sym := strings.Join(f[1:], " ")
		sym = strings.TrimPrefix(sym, "[.] ")
		out = append(out, fmt.Sprintf("%7s  %s", f[0], strings.TrimSuffix(sym, " - -")))
		if len(out) == n {
			break
		}
	}
	return out
}

// pprofBench runs one Go benchmark with -cpuprofile and saves pprof's
// views (cumulative top, flat top, and the callers of runtime.newstack,
// i.e. where goroutine stacks had to grow) as dir/name.txt.
func pprofBench(ctx context.Context, repo, pkg, bench, benchTime, dir, name string) Profile {
	p := Profile{Name: name, File: filepath.Join("profiles", name+".txt")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.Error = err.Error()
		return p
	}
	tmp, err := os.MkdirTemp("", "perf-pprof-")
	if err != nil {
		p.Error = err.Error()
		return p
	}
	defer os.RemoveAll(tmp)
	prof := filepath.Join(tmp, "cpu.pprof")
	run := []string{"go", "test", pkg, "-run", "^$", "-bench", bench, "-benchtime", benchTime, "-count", "1",
		"-cpuprofile", prof, "-o", filepath.Join(tmp, "bench.test")}
	views := [][]string{
		{"go", "tool", "pprof", "-top", "-cum", "-nodecount=40", prof},
		{"go", "tool", "pprof", "-top", "-nodecount=20", prof},
		{"go", "tool", "pprof", "-peek", "runtime.newstack$", prof},
	}
	shown := append(slices.Clone(run[:len(run)-4]), "-cpuprofile", "cpu.pprof", "-o", "bench.test")
	p.Command = shellQuote(shown) + " && go tool pprof -top -cum cpu.pprof && go tool pprof -peek 'runtime.newstack$' cpu.pprof"
	cmd := exec.CommandContext(ctx, run[0], run[1:]...)
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		p.Error = fmt.Sprintf("go test: %v: %s", err, lastLine(string(out)))
		return p
	}
	text := "# " + shellQuote(shown) + "\n" + string(out)
	var rendered []string
	for _, v := range views {
		o, err := exec.CommandContext(ctx, v[0], v[1:]...).Output()
		if err != nil {
			p.Error = fmt.Sprintf("pprof: %v", err)
			return p
		}
		rendered = append(rendered, string(o))
		text += "\n# " + shellQuote(v[:len(v)-1]) + " cpu.pprof\n" + string(o)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".txt"), []byte(text), 0o644); err != nil {
		p.Error = err.Error()
		return p
	}
	p.Inclusive = pprofRows(rendered[0], 40)
	p.Top = pprofRows(rendered[1], 12)
	p.Callers = pprofCallers(rendered[2], "runtime.newstack")
	return p
}

// pprofRows keeps the first n node rows of a pprof -top listing:
// "flat flat% sum% cum cum% name".
func pprofRows(top string, n int) []string {
	var out []string
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		out = append(out, fmt.Sprintf("%7s %7s  %s", f[1], f[4], strings.Join(f[5:], " ")))
		if len(out) == n {
			break
		}
	}
	return out
}

// pprofCallers returns the caller lines of fn's block in a pprof -peek
// listing ("time share% | caller").
func pprofCallers(peek, fn string) []string {
	var block []string
	for _, line := range strings.Split(peek, "\n") {
		if strings.HasPrefix(line, "---") {
			block = block[:0]
			continue
		}
		if strings.HasSuffix(strings.TrimSpace(line), "| "+fn) {
			out := make([]string, 0, len(block))
			for _, b := range block {
				out = append(out, strings.Join(strings.Fields(b), " "))
			}
			return out
		}
		if strings.Contains(line, "|") {
			block = append(block, line)
		}
	}
	return nil
}

// Share finds sym in a profile listing (Inclusive rows) and returns its
// cumulative percentage, or -1.
func (p Profile) Share(sym string) float64 {
	for _, row := range p.Inclusive {
		f := strings.Fields(row)
		if len(f) < 3 || strings.Join(f[2:], " ") != sym {
			continue
		}
		// perf rows are "children% self%", pprof rows "flat% cum%".
		col := f[0]
		if p.pprof() {
			col = f[1]
		}
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(col, "%"), "%g", &v); err == nil {
			return v
		}
	}
	return -1
}

func (p Profile) pprof() bool {
	return strings.HasPrefix(p.Command, "go test") || strings.HasPrefix(p.Command, "runtime/pprof")
}
