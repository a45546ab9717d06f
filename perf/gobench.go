package perf

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// GoBench is the hot-path benchmarks' summary; the raw output is in File,
// ready for benchstat.
type GoBench struct {
	Commands []string   `json:"commands"`
	File     string     `json:"file"`
	Rows     []BenchRow `json:"rows"`
	// Profiles are CPU profiles (go test -cpuprofile) of in-process
	// harnesses.
	Profiles []Profile `json:"profiles,omitempty"`
	Seconds  float64   `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
	Error     string `json:"error,omitempty"`
}

// BenchRow summarises the samples of one benchmark.
type BenchRow struct {
	Pkg  string `json:"pkg"`
	Name string `json:"name"`
	// Metrics maps a unit ("ns/op", "B/op", "allocs/op", "qps", ...) to
	// the summary of its samples.
	Metrics map[string]stats.Summary `json:"metrics"`
	// Units lists Metrics' keys in the order go test printed them.
	Units []string `json:"units"`
}

// BenchSet is one `go test -bench` invocation.
type BenchSet struct {
	Pkgs      []string
	Bench     string // -bench regexp
	BenchTime string
}

// DefaultBenchSets are the hot paths: name matching, the DNS proxy's
// handler chain, the L7 gateway's paths on loopback (a request, a
// download, a handshake), spec generation, scope checks, glob matching,
// the workspace setup (each fsscope Setup op mounts and unmounts, so it
// runs a fixed number of times), and this package's in-process proxy
// harness with the daemon's audit encoding.
func DefaultBenchSets(benchTime string) []BenchSet {
	return []BenchSet{
		{Pkgs: []string{"./egress/allowlist", "./egress/dnsproxy", "./egress/l7", "./runtime", "./credentials/scope", "./fsscope/glob"}, Bench: ".", BenchTime: benchTime},
		{Pkgs: []string{"./fsscope"}, Bench: "^BenchmarkSetup$", BenchTime: "5x"},
		{Pkgs: []string{"./perf"}, Bench: "^BenchmarkProxyAudited$", BenchTime: "1s"},
	}
}

// ProfiledBenchmarks are profiled once each after the sets run.
var ProfiledBenchmarks = []struct{ Pkg, Bench, Name string }{
	{"./perf", "^BenchmarkProxyAudited$/^audit=jsonl$", "proxy-audited-jsonl"},
	{"./perf", "^BenchmarkProxyAudited$/^audit=off$", "proxy-audited-off"},
}

// RunGoBench runs the sets with -count and -benchmem from repo, appends
// their output to out, and parses it.
func RunGoBench(ctx context.Context, repo string, sets []BenchSet, count int, out string) *GoBench {
	start := time.Now()
	res := &GoBench{File: filepath.Base(out)}
	f, err := os.Create(out)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer f.Close()
	var errs []string
	for _, s := range sets {
		argv := append([]string{"go", "test", "-run", "^$", "-bench", s.Bench, "-benchmem", "-count", strconv.Itoa(count), "-benchtime", s.BenchTime}, s.Pkgs...)
		res.Commands = append(res.Commands, shellQuote(argv))
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = repo
		var stderr limitedBuffer
		cmd.Stdout, cmd.Stderr = f, &stderr
		if err := cmd.Run(); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v %s", strings.Join(s.Pkgs, " "), err, lastLine(stderr.String())))
		}
	}
	for _, pb := range ProfiledBenchmarks {
		res.Profiles = append(res.Profiles, pprofBench(ctx, repo, pb.Pkg, pb.Bench, "3s", filepath.Join(filepath.Dir(out), "profiles"), pb.Name))
	}
	if _, err := f.Seek(0, io.SeekStart); err == nil {
		res.Rows, err = ParseBench(f)
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	res.Error = strings.Join(errs, "; ")
	res.Seconds = time.Since(start).Seconds()
	return res
}

// ParseBench reads `go test -bench` output: benchmark lines grouped by
// package and name (the -GOMAXPROCS suffix dropped), in first-seen order.
func ParseBench(r io.Reader) ([]BenchRow, error) {
	var (
		rows    []BenchRow
		index   = map[string]int{}
		samples = map[string]map[string][]float64{}
		pkg     string
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		// name iterations (value unit)+
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := trimProcs(f[0])
		key := pkg + " " + name
		i, ok := index[key]
		if !ok {
			i = len(rows)
			index[key] = i
			rows = append(rows, BenchRow{Pkg: pkg, Name: name})
			samples[key] = map[string][]float64{}
		}
		for j := 2; j+1 < len(f); j += 2 {
			v, err := strconv.ParseFloat(f[j], 64)
			if err != nil {
				return nil, fmt.Errorf("bench line %q: %w", line, err)
			}
			unit := f[j+1]
			if _, seen := samples[key][unit]; !seen {
				rows[i].Units = append(rows[i].Units, unit)
			}
			samples[key][unit] = append(samples[key][unit], v)
		}
	}
	for i := range rows {
		key := rows[i].Pkg + " " + rows[i].Name
		rows[i].Metrics = map[string]stats.Summary{}
		for unit, xs := range samples[key] {
			rows[i].Metrics[unit] = stats.Summarize(xs)
		}
	}
	return rows, sc.Err()
}

// trimProcs drops the -N GOMAXPROCS suffix go test adds to names.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}
