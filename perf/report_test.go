package perf

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/perf/load"
	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
)

const benchOutput = `goos: linux
goarch: amd64
pkg: github.com/airlock-sandbox/airlock/egress/dnsproxy
cpu: Intel(R) Xeon(R) Processor
BenchmarkServe/cache-hit-2       	  412744	      3000 ns/op	    315804 qps	     1000 B/op	      17 allocs/op
BenchmarkServe/cache-hit-2       	  412744	      2000 ns/op	    300000 qps	     1000 B/op	      17 allocs/op
BenchmarkServe/cache-hit-2       	  412744	      4000 ns/op	    330000 qps	     1000 B/op	      17 allocs/op
BenchmarkServe/miss-2            	   35098	     35573 ns/op	     28111 qps	    7985 B/op	      67 allocs/op
--- FAIL: BenchmarkOther
PASS
ok  	github.com/airlock-sandbox/airlock/egress/dnsproxy	15.507s
pkg: github.com/airlock-sandbox/airlock/runtime
BenchmarkSpec-2   	   31816	     33985 ns/op	   20115 B/op	     122 allocs/op
BenchmarkSpec-2   	   31816	     ns/op
Benchmark-name-with-dash-x 10 5 ns/op
`

func TestParseBench(t *testing.T) {
	rows, err := ParseBench(strings.NewReader(benchOutput))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rows), rows)
	}
	hit := rows[0]
	if hit.Pkg != "github.com/airlock-sandbox/airlock/egress/dnsproxy" || hit.Name != "BenchmarkServe/cache-hit" {
		t.Fatalf("row 0 = %s %s", hit.Pkg, hit.Name)
	}
	if got := strings.Join(hit.Units, ","); got != "ns/op,qps,B/op,allocs/op" {
		t.Errorf("units %s", got)
	}
	if m := hit.Metrics["ns/op"]; m.N != 3 || m.Median != 3000 || m.Min != 2000 || m.Max != 4000 {
		t.Errorf("ns/op %+v", m)
	}
	if rows[2].Pkg != "github.com/airlock-sandbox/airlock/runtime" || rows[2].Name != "BenchmarkSpec" || rows[2].Metrics["ns/op"].N != 1 {
		t.Errorf("row 2 = %+v", rows[2])
	}
	if rows[3].Name != "Benchmark-name-with-dash-x" {
		t.Errorf("a name whose suffix is not a number lost it: %q", rows[3].Name)
	}
}

func TestTrimProcs(t *testing.T) {
	for in, want := range map[string]string{"BenchmarkX-2": "BenchmarkX", "BenchmarkX/a-b-16": "BenchmarkX/a-b", "BenchmarkX": "BenchmarkX", "BenchmarkX/a-b": "BenchmarkX/a-b"} {
		if got := trimProcs(in); got != want {
			t.Errorf("trimProcs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestManifestsDecode(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := makeWorkspace(ws); err != nil {
		t.Fatal(err)
	}
	for _, m := range []Manifest{
		FullPerimeter(ws),
		{Label: "perf-pool", CPUs: 0.5, Memory: "128MiB", Pids: 64, Workspace: ws, Pool: 3},
		{Label: "perf-dns", CPUs: 2, Memory: "256MiB", Pids: 128, LoadDir: dir, Allow: []string{"*." + DNSZone, "*." + MissZone}},
		{Label: "perf-tcp-cidr", CPUs: 2, Memory: "256MiB", Pids: 128, Allow: []string{"10.214.0.20/32:5001"}},
		{Label: "bare", CPUs: 0.5, Memory: "128MiB", Pids: 64},
	} {
		path, err := m.Write(dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policies.LoadFile(path, nil)
		if err != nil {
			src, _ := os.ReadFile(path)
			t.Fatalf("%s: %v\n%s", m.Label, err, src)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", m.Label, err)
		}
		if p.Label != m.Label || p.Resources.CPUs != m.CPUs || p.Resources.Pids != int64(m.Pids) {
			t.Errorf("%s decoded as %+v", m.Label, p)
		}
		if (m.Allow != nil) != (p.Egress != nil) || (m.Workspace != "") != (len(p.Workspaces) == 1) ||
			(m.Credential != "") != (len(p.Credentials) == 1) || (m.LoadDir != "") != (len(p.Mounts) == 1) {
			t.Errorf("%s: blocks lost in %+v", m.Label, p)
		}
		if m.Workspace != "" && (p.Workspaces[0].Mode != policies.ModeOverlay || p.Workspaces[0].HostPath != ws) {
			t.Errorf("%s: workspace %+v", m.Label, p.Workspaces[0])
		}
		if (m.Pool > 0) != (p.Pool != nil) || (p.Pool != nil && p.Pool.Size != m.Pool) {
			t.Errorf("%s: pool %+v, want size %d", m.Label, p.Pool, m.Pool)
		}
		if m.LoadDir != "" && (!p.Mounts[0].ReadOnly || p.Mounts[0].Target != "/opt/perf") {
			t.Errorf("%s: mount %+v", m.Label, p.Mounts[0])
		}
	}
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"airlock", "--socket", "$ROOT/a.sock", "run", "-c", "echo x", "it's", ""})
	want := `airlock --socket $ROOT/a.sock run -c 'echo x' 'it'\''s' ''`
	if got != want {
		t.Fatalf("shellQuote = %s, want %s", got, want)
	}
}

const perfReport = `# Self time
#
    15.02%  [.] runtime.step                      -      -
     7.50%  [k] finish_task_switch.isra.0         -      -

`

const perfChildren = `# Children      Self  Symbol
    67.19%     0.00%  [.] runtime.goexit.abi0                 -      -
    29.22%     0.17%  [.] runtime.newstack                    -      -
    15.61%     0.31%  [.] github.com/airlock-sandbox/airlock/internal/audit.(*Log).Emit   -   -
`

const pprofTop = `File: perf.test
Showing nodes accounting for 8.08s, 78.37% of 10.31s total
      flat  flat%   sum%        cum   cum%
         0     0%     0%      7.94s 77.01%  github.com/miekg/dns.(*Server).serveUDPPacket
     0.01s 0.097% 0.097%      3.88s 37.63%  runtime.newstack
`

const pprofPeek = `Showing nodes accounting for 10.30s, 99.90% of 10.31s total
----------------------------------------------------------+-------------
      flat  flat%   sum%        cum   cum%   calls calls% + context
----------------------------------------------------------+-------------
     0.02s  0.19%  0.19%      0.03s  0.29%                | runtime.morestack
                                             0.01s 33.33% |   runtime.newstack
----------------------------------------------------------+-------------
                                             2.24s 57.73% |   runtime.resolveTypeOff
                                             1.03s 26.55% |   runtime.mapaccess2
     0.01s 0.097%  0.29%      3.88s 37.63%                | runtime.newstack
                                             3.61s 93.04% |   runtime.copystack
----------------------------------------------------------+-------------
`

func TestProfileParsing(t *testing.T) {
	top := topSymbols(perfReport, 5)
	if len(top) != 2 || !strings.HasSuffix(top[0], "15.02%  runtime.step") || !strings.HasSuffix(top[1], "[k] finish_task_switch.isra.0") {
		t.Fatalf("topSymbols = %q", top)
	}
	perfP := Profile{Command: "perf record ...", Inclusive: inclusiveSymbols(perfChildren, 10)}
	if len(perfP.Inclusive) != 3 {
		t.Fatalf("inclusiveSymbols = %q", perfP.Inclusive)
	}
	if got := perfP.Share("runtime.newstack"); got != 29.22 {
		t.Errorf("perf Share(newstack) = %v", got)
	}
	if got := perfP.Share(symAuditEmit); got != 15.61 {
		t.Errorf("perf Share(Emit) = %v", got)
	}
	if got := perfP.Share("runtime.nothing"); got != -1 {
		t.Errorf("Share of a missing symbol = %v", got)
	}
	pp := Profile{Command: "go test ./perf ...", Inclusive: pprofRows(pprofTop, 10)}
	if len(pp.Inclusive) != 2 {
		t.Fatalf("pprofRows = %q", pp.Inclusive)
	}
	if got := pp.Share("runtime.newstack"); got != 37.63 {
		t.Errorf("pprof Share(newstack) = %v", got)
	}
	callers := pprofCallers(pprofPeek, "runtime.newstack")
	if len(callers) != 2 || callers[0] != "2.24s 57.73% | runtime.resolveTypeOff" || callers[1] != "1.03s 26.55% | runtime.mapaccess2" {
		t.Fatalf("pprofCallers = %q", callers)
	}
	if pprofCallers(pprofPeek, "runtime.absent") != nil {
		t.Error("callers of an absent function")
	}
}

func sum(xs ...float64) stats.Summary { return stats.Summarize(xs) }

// sampleReport has every section, with numbers that make each finding
// and table row checkable.
func sampleReport() *Report {
	r := &Report{
		Machine: Machine{NProc: 2, MemoryMiB: 24 << 10, Kernel: "6.1", CPUModel: "Xeon", CgroupVersion: "v1"},
		Runs:    20, Reproduce: "hack/perf.sh", Errors: map[string]string{}, Skipped: map[string]string{"tcp": "time budget of 1m used up"},
		ColdStart: &ColdStart{Runs: 20, Variants: []Variant{
			{Name: "hello", ExitMS: sum(150, 160, 170), FirstOutputMS: sum(110)},
			{Name: "full", ExitMS: sum(210, 215, 220)},
			{Name: "ctr", ExitMS: sum(100, 110, 120), FirstOutputMS: sum(80)},
			{Name: "srt", Error: "bwrap is not installed"},
		}},
		WarmStart: &WarmStart{Runs: 20, PoolSize: 2, TargetMS: 50, TargetMet: true,
			API: []APIStart{
				{Name: "API, warm", Pooled: true, CreateMS: sum(10, 12, 14), FirstOutputMS: sum(30, 32, 34), ExitMS: sum(40), WarmRuns: 3,
					DaemonRunMS: sum(5, 6, 7), DaemonWaitMS: sum(12, 14, 16), ClientWaitMS: sum(2, 3, 4)},
				{Name: "API, cold", CreateMS: sum(200), FirstOutputMS: sum(240, 240), ExitMS: sum(250)},
			},
			CLI: []Variant{
				{Name: "cli warm", ExitMS: sum(90), FirstOutputMS: sum(80), EchoExitMS: sum(95), Failures: 1, Error: "not warm: pool hits 4 → 4, misses 0 → 1"},
				{Name: "cli cold", ExitMS: sum(300), FirstOutputMS: sum(280), EchoExitMS: sum(310)},
			},
			RefillMS: sum(400, 500, 600), Pool: &api.Pool{Hits: 60, Misses: 1, Discarded: 0}, Removed: PoolRemoval{Ready: 2, SettledMS: 310, Left: []string{}},
			Isolation: Isolation{Warm: map[string]int{"netns": 1, "cgroup": 12}, Cold: map[string]int{"netns": 1, "cgroup": 12}, WarmNFT: 6, ColdNFT: 6, Same: true},
		},
		Teardown: &Teardown{Runs: 2, Variants: []TeardownVariant{{Name: "hello", GoneMS: sum(80, 90), Resources: 18}},
			LastGone: map[string]map[string]int{"hello": {"none (all gone when rm returned)": 2}}},
		DNS: &DNS{Workloads: []DNSWorkload{
			{Name: "latency, cache hit (x)", Sandbox: &load.DNSResult{LatencyUS: sum(110)}, Direct: &load.DNSResult{LatencyUS: sum(30)}, AddedP50US: 80},
			{Name: "latency, cache miss (z)", Sandbox: &load.DNSResult{LatencyUS: sum(100)}, Direct: &load.DNSResult{LatencyUS: sum(300)}, AddedP50US: -200, AddedP99US: -200},
			{Name: "throughput, cache hit (y)", Sandbox: &load.DNSResult{QPS: 20000, Answered: 100000}, Direct: &load.DNSResult{QPS: 70000}, SandboxServerCPUUS: 48, DirectServerCPUUS: 12, CacheHitRatio: 0.999,
				AuditEvents: 50, AuditBytes: 12800, AuditRepeated: 99950},
		}, Profiles: []Profile{{Name: "airlockd-dns-qps-hit", Command: "perf record", Inclusive: inclusiveSymbols(perfChildren, 10)}}},
		Density: &Density{Levels: []DensityLevel{
			{N: 1, StartMS: sum(90), WallMS: 90, SequentialMS: sum(100), TotalPSSKiB: 20 << 10, Samples: [][2]float64{{1, 90}}},
			{N: 100, StartMS: sum(2000, 5800, 6400), WallMS: 6400, SequentialMS: sum(107, 100, 120), Samples: [][2]float64{{1, 2000}, {2, 5800}, {3, 6400}}, TotalPSSKiB: 8 << 10, ShimPSSKiB: 4 << 10, LoggerPSSKiB: 3 << 10, PayloadPSSKiB: 1 << 10, Leftovers: []string{}},
		}},
		GoBench: &GoBench{File: "bench.txt", Rows: []BenchRow{
			{Pkg: "github.com/airlock-sandbox/airlock/perf", Name: "BenchmarkProxyAudited/audit=off", Units: []string{"ns/op", "qps"}, Metrics: map[string]stats.Summary{"ns/op": sum(20000), "qps": sum(50000)}},
			{Pkg: "github.com/airlock-sandbox/airlock/perf", Name: "BenchmarkProxyAudited/audit=jsonl", Units: []string{"ns/op", "qps"}, Metrics: map[string]stats.Summary{"ns/op": sum(40000), "qps": sum(25000)}},
		}},
		L7: &L7{Rounds: 3, Reproduce: "hack/perf.sh -only l7 -l7-rounds 3 -l7-download 1GiB",
			Latency: []L7Latency{
				{Protocol: L7ProtoHTTPS, Path: L7PathL3, LatencyUS: sum(200, 210, 900), Conns: 1},
				{Protocol: L7ProtoHTTPS, Path: L7PathPassThrough, LatencyUS: sum(230, 240, 950), AddedP50US: 30, AddedP99US: 49, Conns: 1},
				{Protocol: L7ProtoHTTPS, Path: L7PathTerminated, LatencyUS: sum(600, 650, 2000), AddedP50US: 440, AddedP99US: 1080, Conns: 1, Issuer: sessionCAName},
				{Protocol: L7ProtoHTTP, Path: L7PathL3, LatencyUS: sum(180), Conns: 1},
				{Protocol: L7ProtoHTTP, Path: L7PathPlain, LatencyUS: sum(500), AddedP50US: 320, AddedP99US: 320, Conns: 1},
				{Protocol: L7ProtoH2, Path: L7PathTerminated, Error: "exit status 1: connection refused"},
			},
			Download: []L7Download{
				{Path: L7PathL3, Gbps: sum(8, 10, 12), Ratio: 1, Bytes: 1 << 30, GatewayCPU: sum(0.01), ClientCPU: sum(1), ServerCPU: sum(1)},
				{Path: L7PathPassThrough, Gbps: sum(9.6), Ratio: 0.96, Target: L7TargetPassThrough, Bytes: 1 << 30, GatewayCPU: sum(0.5)},
				{Path: L7PathTerminated, Gbps: sum(4), Ratio: 0.4, Target: L7TargetTerminated, Bytes: 1 << 30, GatewayCPU: sum(4.25), ClientCPU: sum(2), ServerCPU: sum(1.5)},
			},
			Handshakes: []L7Handshakes{
				{Path: L7PathL3, Concurrency: 4, PerSecond: sum(400)},
				{Path: L7PathTerminated, Concurrency: 4, PerSecond: sum(300), GatewayCPUUS: sum(1500)},
			},
			Idle: []L7Idle{
				{Path: L7PathTerminated, Proto: "HTTP/1.1", Conns: 200, HeapKiB: 18.5, StackKiB: 15, Goroutines: 2},
				{Path: L7PathPassThrough, Proto: "HTTP/1.1", Error: "no connections within 2m"},
			},
			Audit: map[string]map[string]int{"perf-l3": {}, "perf-term": {"l7 request allowed, terminated": 12}},
		},
		Cleanup: &Cleanup{Leftovers: []string{}, Remaining: []string{}},
	}
	return r
}

func TestMarkdown(t *testing.T) {
	md := sampleReport().Markdown()
	for _, want := range []string{
		"| 2 | 24.0 GiB | 6.1 | Xeon | v1 |",
		"| cold start to exit, no layers (ms) | 160 (152–168) | ctr run --rm: 110 (102–118) | ×1.45 |",
		"| srt -c true | – | not measured: bwrap is not installed | – |",
		"| DNS latency, cache hit: p50 / p99 (µs) | 110 / 110 | direct: 30 / 30 | +80 / +0 µs |",
		"| DNS latency, cache miss: p50 / p99 (µs) | 100 / 100 | direct: 300 / 300 | -200 / -200 µs |",
		"| DNS throughput, cache hit (queries/s; cache hit ratio 99.9%) | 20000 | direct: 70000 | ×0.29 |",
		"- throughput, cache hit (y): 50 events, 12.5 KiB, for 100000 answered queries (0.1 bytes a query); 99950 queries counted in merged events",
		"| session start with 100 started at once vs 1 (ms, median) | 5800 | 90 | ×64.44 |",
		"takes 50 ms more than `ctr run --rm`",
		"takes 55 ms more than no layers",
		"in 2 of 2 runs every one of the 18 tracked resources was already gone",
		"airlockd spends 48 µs of CPU per query (the harness's DNS server: 12 µs)",
		"goroutine stack growth (runtime.newstack) 29.2%",
		"audit.Log.Emit: one encoded line a query, queued lines written together) 15.6%",
		"25000 q/s with the daemon's audit encoding, 50000 q/s without (×0.50)",
		"the log writer (airlock-logger, containerd's binary logger, one small static process per session) 3.0 MiB",
		"one start while 100 sessions idle takes 107 ms (100 ms while 1 idle)",
		"- tcp skipped: time budget of 1m used up",
		"| warm start: API call to first output of `echo x`, full perimeter, pool of 2 (ms; target ≤ 50: met; ≤ ×0.1 of cold: missed) | 32.0 (30.4–33.6) | cold, same perimeter: 240.0 (240.0–240.0) | ×0.13 |",
		"| warm start to exit, `airlock run --rm`, full perimeter (ms) | 90 (90–90) | cold, same perimeter: 300 (300–300) | ×0.30 |",
		"| warm pool refill, from a take until full again (ms) | 500 (420–580) | – | – |",
		"Measured: **32.0 ms** median (p10–p90 30.4–33.6) over 3 warm runs: met.",
		"| API, warm | 6.0 (5.2–6.8) | 14.0 (12.4–15.6) | 3.0 (2.2–3.8) |",
		"airlockd's threads were on a core for 6.0 ms and waited 14.0 ms for one (the client's: 3.0 ms)",
		"| API, warm | 12.0 (10.4–13.6) | 32.0 (30.4–33.6) | 40.0 (40.0–40.0) | 3 of 3 | 0 |",
		"the ≤ 50 ms target is met with 18.0 ms to spare",
		"The create response alone took 12.0 ms warm",
		"came 8 ms after the first byte warm and 10 ms cold.",
		"48 ms of that first-output time are the CLI's own",
		"the warm full perimeter is ×0.82",
		"one replacement takes that long (about 2.0 a second)",
		"owned the same 13 resources as a cold one of the same perimeter, kind by kind (cgroup ×12, netns ×1)",
		"Warm start failures: 1 of 6 pooled runs",
		"cli warm, last failure: not warm: pool hits 4 → 4",
		"Removing it tore down its 2 ready sandboxes; 310 ms after the request no sandbox of it was left (a refill in flight is finished, then discarded); left afterwards: none.",
		"nothing of the run was left",
		"| L7 gateway, HTTPS, HTTP/1.1 request on a kept-alive connection, pass-through; terminated: p50 / p99 (µs) | 240 / 936; 650 / 1973 | L3: 210 / 886 | +30 / +49; +440 / +1080 µs |",
		"| L7 gateway, 1 GiB HTTPS download, pass-through (Gbit/s; target ≥ ×0.95: met) | 9.60 | L3: 10.00 | ×0.96 |",
		"| L7 gateway, 1 GiB HTTPS download, terminated (Gbit/s; target ≥ ×0.50: missed; gateway CPU 4.25 s per GiB) | 4.00 | L3: 10.00 | ×0.40 |",
		"| L7 gateway, TLS handshakes a second (a new connection per request, 4 at once), terminated | 300 | L3: 400 | ×0.75 |",
		"| L7 gateway, memory per idle connection, terminated HTTP/1.1 (KiB: live heap + goroutine stacks) | 33.5 | L3: none in user space | – |",
		"## 8. L7 gateway",
		"| HTTPS, HTTP/2 | L7 terminated | – | – | 0 | – | – | exit status 1: connection refused |",
		"Reproduce: `hack/perf.sh -only l7 -l7-rounds 3 -l7-download 1GiB`.",
		"| L7 gateway, plain HTTP/1.1 request on a kept-alive connection, served: p50 / p99 (µs) | 500 / 500 | L3: 180 / 180 | +320 / +320 µs |",
		"| L7 terminated | 4.00 (4.00–4.00) | ×0.40 | ≥ ×0.50: missed | 4.25 / 2.00 / 1.50 |",
		"| L7 pass-through | HTTP/1.1 | – | – | – | – | – | no connections within 2m |",
		"perf-l3: none; perf-term: l7 request allowed, terminated ×12.",
		"terminated at ×0.40 (target ≥ ×0.50: missed). Per GiB, the gateway's process spends 4.25 s of CPU on the terminated path and 0.50 s passing through, against 2.00 s for the client and 1.50 s for the server",
		"predicts ×0.80 passed through and ×0.32 terminated (the L3 path's client and server CPU per GiB, 2.00 s,",
		"passing through adds +30 µs at p50 and terminating +440 µs",
		"300 TLS handshakes a second through the terminating gateway against 400 on the L3 path (×0.75), 1500 µs of the gateway's CPU each.",
		"memory per idle connection (live heap and goroutine stacks): terminated HTTP/1.1 34 KiB (2 goroutines).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestDaemonRSSSlope(t *testing.T) {
	levels := []DensityLevel{{N: 1, DaemonRSSAfterKiB: 30100}, {N: 10, DaemonRSSAfterKiB: 31000}, {N: 100, DaemonRSSAfterKiB: 40000}, {N: 5}}
	got, ok := daemonRSSSlope(levels)
	if !ok || got < 99.9 || got > 100.1 {
		t.Fatalf("slope = %v, %v; want 100 KiB per session", got, ok)
	}
	if _, ok := daemonRSSSlope(levels[:1]); ok {
		t.Error("slope from one level")
	}
}

func TestSigned(t *testing.T) {
	for x, want := range map[float64]string{12.4: "+12", -3.6: "-4", -0.2: "+0", 0: "+0"} {
		if got := signed(x); got != want {
			t.Errorf("signed(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestCallerShares(t *testing.T) {
	got := callerShares([]string{"1.30s 58.56% | runtime.resolveTypeOff", "0.01s 0.45% | runtime.morestack", "garbage", "0.3s x% | f"})
	if len(got) != 1 || got[0] != "runtime.resolveTypeOff (58.6%)" {
		t.Fatalf("callerShares = %q", got)
	}
}

func TestSpreadDuration(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want string
	}{
		{nil, "–"},
		{[]float64{80.9}, "80.9 (80.9–80.9) ns"},
		{[]float64{2843, 2900}, "2.87 (2.85–2.89) µs"},
		{[]float64{12479632}, "12.5 (12.5–12.5) ms"},
		{[]float64{2.6e9}, "2.60 (2.60–2.60) s"},
	} {
		if got := spreadDuration(stats.Summarize(tc.in)); got != tc.want {
			t.Errorf("spreadDuration(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	r := sampleReport()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.ColdStart == nil || back.ColdStart.Variants[0].ExitMS.Median != 160 || back.Density.Levels[1].N != 100 {
		t.Fatalf("report.json round trip lost data: %+v", back)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil || !strings.HasPrefix(string(md), "# airlock performance report") {
		t.Fatalf("report.md: %v %q", err, md)
	}
}

func TestReproduce(t *testing.T) {
	o := Options{Runs: 20, Density: []int{1, 10}, BenchTime: "200ms", BenchCount: 5, L7: L7Config{Rounds: 3, DownloadBytes: 64 << 20},
		AgentStart: AgentStartConfig{Runs: 5, Agents: []string{"claude-code", "codex"}}}
	for section, want := range map[string]string{
		"":           "hack/perf.sh",
		"coldstart":  "hack/perf.sh -only coldstart -runs 20",
		"warmstart":  "hack/perf.sh -only warmstart -runs 20",
		"density":    "hack/perf.sh -only density -density 1,10",
		"gobench":    "hack/perf.sh -only gobench -benchtime 200ms -benchcount 5",
		"dns":        "hack/perf.sh -only dns",
		"l7":         "hack/perf.sh -only l7 -l7-rounds 3 -l7-download 64MiB",
		"agentstart": "hack/perf.sh -only agentstart -agent-runs 5 -agents claude-code,codex",
	} {
		if got := reproduce(o, section); got != want {
			t.Errorf("reproduce(%q) = %q, want %q", section, got, want)
		}
	}
	for _, s := range Sections {
		if !KnownSection(s) {
			t.Errorf("section %q unknown", s)
		}
	}
	if KnownSection("bogus") {
		t.Error("bogus section known")
	}
}

func TestDensityChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "density.png")
	if err := DensityChart(sampleReport().Density.Levels, path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("not a PNG: %d bytes", len(b))
	}
}

func TestWarmFindingsMissedTarget(t *testing.T) {
	ws := sampleReport().WarmStart
	ws.API[0].FirstOutputMS = sum(61, 62, 63)
	ws.API[0].ExitMS = sum(250)
	ws.TargetMet = false
	ws.Isolation = Isolation{Warm: map[string]int{"netns": 1}, Cold: map[string]int{"netns": 1, "mount": 2}, WarmNFT: 6, ColdNFT: 6}
	got := strings.Join(ws.findings(nil), "\n")
	for _, want := range []string{"the ≤ 50 ms target is missed by 12.0 ms", "came 188 ms after the first byte warm and 10 ms cold: for a short command that exit path, not the start, is most (75%) of a warm session's time.", "a warm session's resources differ from a cold one's: warm netns ×1, 6 nftables objects; cold mount ×2, netns ×1, 6."} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ctr run --rm") {
		t.Errorf("a ctr comparison without a cold-start section:\n%s", got)
	}
	var md strings.Builder
	ws.markdown(func(f string, a ...any) { fmt.Fprintf(&md, f, a...) })
	if !strings.Contains(md.String(), "over 3 warm runs: not met.") || !strings.Contains(md.String(), "owned NOT the same resources") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

func TestFirstWriter(t *testing.T) {
	var w firstWriter
	if _, err := w.Write(nil); err != nil || !w.first.IsZero() {
		t.Fatalf("an empty write set the first-byte time")
	}
	before := time.Now()
	w.Write([]byte("x"))
	at := w.first
	w.Write([]byte("\n"))
	if at.Before(before) || !w.first.Equal(at) || w.buf.String() != "x\n" {
		t.Fatalf("first %v (written after %v), buf %q", w.first, before, w.buf.String())
	}
}

func TestMoreLess(t *testing.T) {
	for in, want := range map[float64]string{-16.4: "16 ms less", 0: "0 ms more", 54.6: "55 ms more"} {
		if got := moreLess(in); got != want {
			t.Errorf("moreLess(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestSizeFlag(t *testing.T) {
	for n, want := range map[int64]string{1 << 30: "1GiB", 3 << 29: "1536MiB", 64 << 20: "64MiB", 4096: "4KiB", 1000: "1000B"} {
		got := sizeFlag(n)
		if got != want {
			t.Errorf("sizeFlag(%d) = %q, want %q", n, got, want)
		}
		if back, err := policies.ParseSize(got); err != nil || back != n {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", got, back, err, n)
		}
	}
}

func TestNeedEnv(t *testing.T) {
	for only, want := range map[string]bool{"": true, "l7": false, "gobench,l7": false, "l7,tcp": true, "density": true, "agentstart": true} {
		o := Options{}
		if only != "" {
			o.Only = map[string]bool{}
			for _, s := range strings.Split(only, ",") {
				o.Only[s] = true
			}
		}
		if got := o.NeedEnv(); got != want {
			t.Errorf("-only %q: NeedEnv = %v, want %v", only, got, want)
		}
	}
}

// TestRuntimesMarkdown: the runtimes section's ratios are crun's over
// runc's, and each runtime's over ctr on the same runtime.
func TestRuntimesMarkdown(t *testing.T) {
	r := &Report{Runtimes: &Runtimes{Blocks: 2, RunsPerBlock: 3, BurstN: 20, Reproduce: "hack/perf.sh -only runtimes", Results: []RuntimeResult{
		{Config: "runc", Runtime: "runc", Version: "runc version 1.5.3", ColdMS: sum(400), CtrColdMS: sum(300), TeardownMS: sum(200), CtrTeardownMS: sum(100),
			BurstPerSec: sum(8, 8), CPUPerStartMS: sum(100), ShimCPUMS: 40, SandboxCPUMS: 20},
		{Config: "runc, shim per session", Runtime: "runc", ShimPerSession: true, Version: "runc version 1.5.3", ColdMS: sum(450), CtrColdMS: sum(300), TeardownMS: sum(250), CtrTeardownMS: sum(100),
			BurstPerSec: sum(4, 4), CPUPerStartMS: sum(150)},
		{Config: "crun", Runtime: "crun", Version: "crun version 1.8.1", ColdMS: sum(200), CtrColdMS: sum(250), TeardownMS: sum(150), CtrTeardownMS: sum(100),
			BurstPerSec: sum(10, 10), CPUPerStartMS: sum(60), ShimCPUMS: 30, SandboxCPUMS: 1, Leaked: 1, Error: "teardown left [mount x]"},
	}}}
	md := r.Markdown()
	for _, want := range []string{
		"| cold start to exit, full perimeter, on crun vs on runc (ms) | 200 (200–200) | on runc: 400 (400–400) | ×0.50 |",
		"| cold start to exit, full perimeter on runc vs ctr run --rm on runc (ms; target ≤ ×1.0: missed) | 400 (400–400) | 300 (300–300) | ×1.33 |",
		"| cold start to exit, full perimeter on crun vs ctr run --rm on crun (ms; target ≤ ×1.0: met) | 200 (200–200) | 250 (250–250) | ×0.80 |",
		"| teardown to all gone, full perimeter on crun vs ctr task rm -f + container rm on crun (ms; target ≤ ×1.0: missed) | 150 (150–150) | 100 (100–100) | ×1.50 |",
		"| burst of 20, starts a second, shared shim on crun vs runc with a shim per session (target ≥ ×2: met) | 10.0 | 4.0 | ×2.50 |",
		"| burst of 20, starts a second, shared shim on runc vs runc with a shim per session (target ≥ ×2: met) | 8.0 | 4.0 | ×2.00 |",
		"| teardown, full perimeter, on crun vs on runc (ms) | 150 (150–150) | on runc: 200 (200–200) | ×0.75 |",
		"| burst of 20, starts a second, on crun vs on runc | 10.0 | on runc: 8.0 | ×1.25 |",
		"| CPU per start in a burst of 20, on crun vs on runc (ms) | 60 | on runc: 100 | ×0.60 |",
		"| crun | crun version 1.8.1 | 200 (200–200) | 250 (250–250) | 150 (150–150) | 100 (100–100) | 10.0 (10.0–10.0) | 60 | 30 | 1 | 1 | 0 |",
		"- crun: last error: teardown left [mount x]",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

func TestDNSMissFinding(t *testing.T) {
	w := DNSWorkload{
		Name:          "throughput, cache miss (16 clients, 5s, unique names)",
		Sandbox:       &load.DNSResult{QPS: 12000},
		Direct:        &load.DNSResult{QPS: 44000},
		SandboxBudget: &DNSBudget{ClientUS: 30, ProxyUS: 60, ServerUS: 22, IRQUS: 10, RestUS: 48, TotalUS: 170, Busy: 0.98},
		DirectBudget:  &DNSBudget{ClientUS: 20, ServerUS: 22, IRQUS: 2, RestUS: 2, TotalUS: 46, Busy: 0.97},
	}
	hit := DNSWorkload{
		Name:          "throughput, cache hit (16 clients, 5s, 50 names)",
		Sandbox:       &load.DNSResult{QPS: 40000},
		Direct:        &load.DNSResult{QPS: 40000},
		SandboxBudget: &DNSBudget{ClientUS: 17, ProxyUS: 20, TotalUS: 41},
		DirectBudget:  &DNSBudget{ClientUS: 21, ServerUS: 28, TotalUS: 49},
	}
	got := dnsMissFinding(&DNS{Workloads: []DNSWorkload{hit, w}})
	if want := "30 µs a query in the sandbox against 20 µs direct here, 17 against 21 under the cache-hit load, and the world server 22 against 22: what the sandbox path adds"; !strings.Contains(got, want) {
		t.Errorf("finding lacks %q:\n%s", want, got)
	}
	// 170-60 = 110 µs outside airlockd: a ceiling of 46/110 = ×0.42,
	// and the ×0.5 target's 92 µs is already exceeded.
	for _, want := range []string{"170 µs", "direct 46 µs", "×0.27 (measured)", "leave 110 µs", "ceiling of ×0.42", "at most 92 µs a query in all, which the other parts alone reach"} {
		if !strings.Contains(got, want) {
			t.Errorf("finding lacks %q:\n%s", want, got)
		}
	}
	w.SandboxBudget = &DNSBudget{ClientUS: 20, ProxyUS: 40, ServerUS: 22, IRQUS: 4, RestUS: 4, TotalUS: 90, Busy: 0.98}
	got = dnsMissFinding(&DNS{Workloads: []DNSWorkload{w}})
	if want := "at most 42 µs in airlockd with the other parts unchanged (now 40)"; !strings.Contains(got, want) {
		t.Errorf("finding lacks %q:\n%s", want, got)
	}
	hit.SandboxBudget.ClientUS = 40
	if got := dnsMissFinding(&DNS{Workloads: []DNSWorkload{hit, w}}); strings.Contains(got, "not the sandbox itself") {
		t.Errorf("finding blames the round trip although the sandbox's client costs more for hits too:\n%s", got)
	}
	w.DirectBudget = nil
	if got := dnsMissFinding(&DNS{Workloads: []DNSWorkload{w}}); got != "" {
		t.Errorf("finding without a direct budget: %q", got)
	}
}

func TestL7FastPathFindings(t *testing.T) {
	l := &L7{Download: []L7Download{
		{Path: L7PathL3, Gbps: sum(4.35, 5.17, 5.40), Ratio: 1, ClientCPU: sum(0.82), ServerCPU: sum(0.73), GatewayCPU: sum(0.01), Bytes: 1 << 30},
		{Path: L7PathPassThrough, Gbps: sum(3.69), Ratio: 0.71, Target: 0.95, ClientCPU: sum(1.18), ServerCPU: sum(0.85), GatewayCPU: sum(0.39), Bytes: 1 << 30},
		{Path: L7PathTerminated, Gbps: sum(2.75), Ratio: 0.53, Target: 0.5, ClientCPU: sum(0.80), ServerCPU: sum(0.81), GatewayCPU: sum(1.54), Bytes: 1 << 30},
		{Path: L7PathFast, Gbps: sum(4.51, 4.72, 4.96), Ratio: 0.91, Target: 0.95, ClientCPU: sum(0.88), ServerCPU: sum(0.79), GatewayCPU: sum(0.01), Bytes: 1 << 30},
	}}
	got := strings.Join(l.findings(), "\n")
	for _, want := range []string{
		"×0.91 of the L3 path (target ≥ ×0.95: missed)",
		"that alone predicts ×0.80 passed through and ×0.50 terminated",
		"Counting all three processes' CPU per GiB on each path (passed through 2.42 s, terminated 3.15 s), it predicts ×0.64 and ×0.49.",
		"The client and the server spent 1.68 s of CPU per GiB on it (gateway included) against 1.55 s on the L3 path: if the transfer is bound by CPU, that alone predicts ×0.92.",
		"The shortfall is the CPU the transfer's own ends spent, not the gateway's; the two paths' rates overlap (L3 4.35–5.40 Gbit/s, fast path 4.51–4.96).",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("findings lack %q:\n%s", want, got)
		}
	}
	// A fast path that meets its target, or whose model does not
	// predict the miss, gets no such explanation.
	l.Download[3].Ratio, l.Download[3].ClientCPU = 0.99, sum(0.80)
	if got := strings.Join(l.findings(), "\n"); strings.Contains(got, "The shortfall") {
		t.Errorf("a met target explained as a shortfall:\n%s", got)
	}
}

func TestRender(t *testing.T) {
	dir := t.TempDir()
	r := sampleReport()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "report.md")); err != nil {
		t.Fatal(err)
	}
	if err := Render(dir); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The JSON holds everything the markdown is made of.
	if string(got) != string(want) {
		t.Errorf("rendered from report.json:\n%s\nwant, as written from the report:\n%s", got, want)
	}
	if err := Render(t.TempDir()); err == nil {
		t.Error("Render of a directory without report.json succeeded")
	}
}
