package perf

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/perf/load"
)

// DNS compares queries answered by airlock's DNS proxy through a real
// session with the same queries sent straight to the world's DNS server.
type DNS struct {
	// Manifest is the session's manifest (HCL).
	Manifest string `json:"manifest"`
	// Baseline says where the direct queries come from.
	Baseline  string        `json:"baseline"`
	Workloads []DNSWorkload `json:"workloads"`
	Profiles  []Profile     `json:"profiles,omitempty"`
	AuditRead AuditRead     `json:"audit_read"`
	Seconds   float64       `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// DNSWorkload is one load, through the proxy and direct.
type DNSWorkload struct {
	Name           string          `json:"name"`
	Sandbox        *load.DNSResult `json:"sandbox"`
	Direct         *load.DNSResult `json:"direct"`
	SandboxCommand string          `json:"sandbox_command"`
	DirectCommand  string          `json:"direct_command"`
	// AddedP50US and AddedP99US are sandbox minus direct latency (µs).
	AddedP50US float64 `json:"added_p50_us"`
	AddedP99US float64 `json:"added_p99_us"`
	// From the session's audit log (audit stays on): DNS events recorded
	// for this load and how many were answered from the proxy's cache.
	AuditEvents   int     `json:"audit_events"`
	AuditCached   int     `json:"audit_cached"`
	CacheHitRatio float64 `json:"cache_hit_ratio"`
	// AuditBytes is what those events take in the log (JSON lines);
	// AuditRepeated counts the queries merged into them (identical
	// decisions within the log's aggregation window, written as one
	// event with a count once the window ends, possibly during a later
	// load).
	AuditBytes    int `json:"audit_bytes"`
	AuditRepeated int `json:"audit_repeated"`
	// UpstreamQueries is what the world's DNS server received during the
	// sandbox load (the proxy's cache misses).
	UpstreamQueries int `json:"upstream_queries"`
	// ServerCPUPerQueryUS is the server's CPU time (user+system) per
	// answered query: airlockd's for the sandbox load, this harness's
	// (which runs the world's DNS server and is otherwise idle) for the
	// direct one.
	SandboxServerCPUUS float64 `json:"sandbox_server_cpu_us"`
	DirectServerCPUUS  float64 `json:"direct_server_cpu_us"`
	// SandboxBudget and DirectBudget say where the machine's CPU went
	// during each load, per answered query.
	SandboxBudget *DNSBudget `json:"sandbox_budget,omitempty"`
	DirectBudget  *DNSBudget `json:"direct_budget,omitempty"`
	Error         string     `json:"error,omitempty"`
}

// DNSBudget is where the machine's CPU time went during one load, per
// answered query (µs). When the load keeps every core busy, its rate is
// the cores divided by TotalUS: a part's share of TotalUS is its share of
// the rate.
type DNSBudget struct {
	// ClientUS is the load generator's own (perfload's rusage).
	ClientUS float64 `json:"client_us"`
	// ProxyUS is airlockd's, for the load through the sandbox (0 for the
	// direct one).
	ProxyUS float64 `json:"proxy_us"`
	// ServerUS is the world's DNS server's (the harness's process, which
	// serves the world and is otherwise idle).
	ServerUS float64 `json:"server_us"`
	// IRQUS is interrupt and softirq time, machine-wide (/proc/stat):
	// the network stack's receive work that no process is charged for.
	IRQUS float64 `json:"irq_us"`
	// RestUS is the rest of the machine's busy time: kernel threads
	// (ksoftirqd, kworkers), the exec that starts the load, and any other
	// program running.
	RestUS float64 `json:"rest_us"`
	// TotalUS is the machine's busy time (user, nice, system, irq,
	// softirq, steal), the busy loops of a loaded run excluded.
	TotalUS float64 `json:"total_us"`
	// Busy is the share of the machine's cores busy during the load,
	// busy loops included.
	Busy float64 `json:"busy"`
}

// budgetMeter samples the CPU time of the machine and of the processes a
// DNS load runs through.
type budgetMeter struct {
	proxy, server int   // pids; 0: not part of the load
	busy          []int // busy loops of a loaded run, left out of the total
	t0            time.Time
	m0            machineCPU
	p0, s0, b0    time.Duration
}

func startBudget(proxy, server int, busy []int) *budgetMeter {
	b := &budgetMeter{proxy: proxy, server: server, busy: busy}
	b.t0, b.m0 = time.Now(), readMachineCPU()
	b.p0, b.s0, b.b0 = cpuTime(proxy), cpuTime(server), b.busyCPU()
	return b
}

func (b *budgetMeter) busyCPU() time.Duration {
	var d time.Duration
	for _, pid := range b.busy {
		d += cpuTime(pid)
	}
	return d
}

// stop returns the budget of the load since start, which answered
// answered queries and whose client reported clientUS per query.
func (b *budgetMeter) stop(answered int, clientUS float64) *DNSBudget {
	m, wall := readMachineCPU(), time.Since(b.t0)
	if answered <= 0 || wall <= 0 {
		return nil
	}
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(answered) }
	busyLoops := b.busyCPU() - b.b0
	out := &DNSBudget{
		ClientUS: clientUS,
		ProxyUS:  per(cpuTime(b.proxy) - b.p0),
		ServerUS: per(cpuTime(b.server) - b.s0),
		IRQUS:    per(m.irq - b.m0.irq),
		TotalUS:  per(m.busy - b.m0.busy - busyLoops),
		Busy:     float64(m.busy-b.m0.busy) / float64(wall) / float64(runtime.NumCPU()),
	}
	out.RestUS = max(0, out.TotalUS-out.ClientUS-out.ProxyUS-out.ServerUS-out.IRQUS)
	return out
}

// machineCPU is the machine's CPU time from /proc/stat's first line: busy
// time (user, nice, system, irq, softirq, steal) and, within it,
// interrupts and softirqs.
type machineCPU struct{ busy, irq time.Duration }

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}
	}
	tick := func(i int) time.Duration {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(v) * time.Second / clockTicks
	}
	// user nice system idle iowait irq softirq steal (guest time is in user).
	irq := tick(6) + tick(7)
	return machineCPU{busy: tick(1) + tick(2) + tick(3) + irq + tick(8), irq: irq}
}

// Profile is a CPU profile of airlockd taken during a load.
type Profile struct {
	Name string `json:"name"`
	// File is the saved `perf report` output (relative to the report).
	File    string `json:"file"`
	Command string `json:"command"`
	// Top holds the hottest symbols by self time, "NN.NN%  symbol".
	Top []string `json:"top"`
	// Inclusive holds the hottest symbols with their callees: for perf
	// "children% self%  symbol", for pprof "flat% cum%  symbol".
	Inclusive []string `json:"inclusive"`
	// Callers (pprof only) are the functions whose stack growth led to
	// runtime.newstack, with their share of it.
	Callers []string `json:"callers,omitempty"`
	Error   string   `json:"error,omitempty"`
}

type dnsLoad struct {
	key     string
	name    string
	args    func(tag string) []string
	profile bool
}

// MeasureDNS runs a session whose egress allows *.dns.perf.test and
// *.miss.perf.test, with perfload bound in, and runs each load inside it
// (`airlock exec`) and from the gateway namespace straight at the world's
// DNS server (one veth hop, the path the proxy's own upstream queries
// take). profDir, if set, receives `perf record` profiles of airlockd
// during the throughput loads.
func MeasureDNS(ctx context.Context, e *Env, dur time.Duration, profDir string) (*DNS, error) {
	start := time.Now()
	m := Manifest{Label: "perf-dns", CPUs: 2, Memory: "256MiB", Pids: 128, LoadDir: e.LoadDir,
		Allow: []string{"*." + DNSZone, "*." + MissZone}}
	path, err := m.Write(e.WorkDir)
	if err != nil {
		return nil, err
	}
	src, err := m.HCL()
	if err != nil {
		return nil, err
	}
	out, err := e.CLI("run", "-d", "-f", path, "--", "sleep", "1200").Output()
	if err != nil {
		return nil, fmt.Errorf("dns session: %w: %s", err, exitStderr(err))
	}
	id := strings.TrimSpace(string(out))
	defer func() { _ = e.Client.RemoveSession(context.WithoutCancel(ctx), id, true) }()

	secs := fmt.Sprintf("%ds", int(dur.Seconds()))
	loads := []dnsLoad{
		{"latency-hit", "latency, cache hit (1 client, 2000 queries, one name)", func(string) []string {
			return []string{"-names", "d0." + DNSZone, "-n", "2000", "-c", "1"}
		}, false},
		{"latency-miss", "latency, cache miss (1 client, 1000 queries, NXDOMAIN upstream)", func(tag string) []string {
			return []string{"-unique", tag + "." + MissZone, "-n", "1000", "-c", "1"}
		}, false},
		{"qps-hit", fmt.Sprintf("throughput, cache hit (16 clients, %s, 50 names)", secs), func(string) []string {
			return []string{"-names", "d%d." + DNSZone, "-range", fmt.Sprint(DNSNameCount), "-d", secs, "-c", "16"}
		}, true},
		{"qps-miss", fmt.Sprintf("throughput, cache miss (16 clients, %s, unique names)", secs), func(tag string) []string {
			return []string{"-unique", tag + "." + MissZone, "-d", secs, "-c", "16"}
		}, true},
	}
	gw := filepath.Join(netns.DefaultDir, e.Prefix+"-gw")
	upstream := e.World.DNSAddr().String() + ":53"
	res := &DNS{
		Manifest: strings.ReplaceAll(string(src), e.Root, "$ROOT"),
		Baseline: fmt.Sprintf("the same perfload binary run with `nsenter --net=%s` against the world's DNS server %s directly (no proxy): one veth hop, the path the proxy's upstream queries take. The sandbox itself cannot reach that server: port 53 to anything but its resolver is rejected.", e.display([]string{gw}), upstream),
	}
	initial, err := e.Client.Audit(ctx, id)
	if err != nil {
		return nil, err
	}
	seen := len(initial)
	rss0 := statusKiB(e.DaemonPID(), "VmRSS")
	for i, l := range loads {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		w := DNSWorkload{Name: l.name}
		sbArgs := append([]string{"exec", id, "--", "/opt/perf/perfload", "dns"}, l.args(fmt.Sprintf("s%d", i))...)
		w.SandboxCommand = e.display(e.CLIArgs(sbArgs...))
		directArgv := append([]string{"nsenter", "--net=" + gw, filepath.Join(e.LoadDir, "perfload"), "dns", "-server", upstream}, l.args(fmt.Sprintf("d%d", i))...)
		w.DirectCommand = e.display(directArgv)

		upBefore := len(e.World.DNSLog())
		var prof chan Profile
		if l.profile && profDir != "" {
			prof = make(chan Profile, 1)
			name := "airlockd-dns-" + l.key
			go func() { prof <- recordProfile(ctx, e.DaemonPID(), dur-time.Second, profDir, name) }()
		}
		var sb load.DNSResult
		cpu0 := cpuTime(e.DaemonPID())
		meter := startBudget(e.DaemonPID(), os.Getpid(), e.busyPids)
		if err := runJSON(ctx, e.CLI(sbArgs...), &sb); err != nil {
			w.Error = "sandbox: " + err.Error()
		} else {
			w.Sandbox = &sb
			w.SandboxBudget = meter.stop(sb.Answered, sb.CPUUS)
			if sb.Answered > 0 {
				w.SandboxServerCPUUS = float64(cpuTime(e.DaemonPID())-cpu0) / float64(time.Microsecond) / float64(sb.Answered)
			}
		}
		if prof != nil {
			res.Profiles = append(res.Profiles, <-prof)
		}
		w.UpstreamQueries = len(e.World.DNSLog()) - upBefore
		rssRead := statusKiB(e.DaemonPID(), "VmRSS")
		t0 := time.Now()
		after, err := e.Client.Audit(ctx, id)
		if err != nil {
			return nil, err
		}
		res.AuditRead = AuditRead{Events: len(after), Seconds: time.Since(t0).Seconds(),
			DaemonRSSBeforeReadKiB: rssRead, DaemonRSSAfterReadKiB: statusKiB(e.DaemonPID(), "VmRSS")}
		fresh := after[min(seen, len(after)):]
		seen = len(after)
		for _, ev := range fresh {
			if ev.Layer != "dns" {
				continue
			}
			w.AuditEvents++
			if c, _ := ev.Fields["cached"].(bool); c {
				w.AuditCached++
			}
			if r, ok := ev.Fields["repeated"].(float64); ok {
				w.AuditRepeated += int(r)
			}
			if b, err := json.Marshal(ev); err == nil {
				w.AuditBytes += len(b) + 1
			}
		}
		if w.AuditEvents > 0 {
			w.CacheHitRatio = float64(w.AuditCached) / float64(w.AuditEvents)
		}

		var direct load.DNSResult
		cmd := exec.CommandContext(ctx, directArgv[0], directArgv[1:]...)
		cpu0 = cpuTime(os.Getpid())
		meter = startBudget(0, os.Getpid(), e.busyPids)
		if err := runJSON(ctx, cmd, &direct); err != nil {
			w.Error = strings.TrimPrefix(w.Error+"; direct: "+err.Error(), "; ")
		} else {
			w.Direct = &direct
			w.DirectBudget = meter.stop(direct.Answered, direct.CPUUS)
			if direct.Answered > 0 {
				w.DirectServerCPUUS = float64(cpuTime(os.Getpid())-cpu0) / float64(time.Microsecond) / float64(direct.Answered)
			}
		}
		if w.Sandbox != nil && w.Direct != nil {
			w.AddedP50US = w.Sandbox.LatencyUS.Median - w.Direct.LatencyUS.Median
			w.AddedP99US = w.Sandbox.LatencyUS.P99 - w.Direct.LatencyUS.P99
		}
		res.Workloads = append(res.Workloads, w)
	}
	res.AuditRead.DaemonRSSBeforeKiB = rss0
	res.AuditRead.DaemonPeakRSSKiB = statusKiB(e.DaemonPID(), "VmHWM")
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// AuditRead is the cost of reading a busy session's audit log through the
// API (GET /v1/sessions/ID/audit, all events at once), as the loads above
// left it.
type AuditRead struct {
	Events  int     `json:"events"`
	Seconds float64 `json:"seconds"`
	// airlockd's RSS before the loads, just before and after the last
	// read, and its peak (VmHWM) since it started.
	DaemonRSSBeforeKiB     int64 `json:"airlockd_rss_before_kib"`
	DaemonRSSBeforeReadKiB int64 `json:"airlockd_rss_before_read_kib"`
	DaemonRSSAfterReadKiB  int64 `json:"airlockd_rss_after_read_kib"`
	DaemonPeakRSSKiB       int64 `json:"airlockd_peak_rss_kib"`
}

// cpuTime is a process's user+system CPU time so far (all threads).
func cpuTime(pid int) time.Duration { return statCPU(pid, false) }

// statCPU reads utime+stime from /proc/PID/stat, plus the reaped
// children's cutime+cstime with children.
func statCPU(pid int, children bool) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	// Fields after the command: state is field 3; utime, stime, cutime
	// and cstime are fields 14 to 17, in clock ticks.
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0
	}
	n := 2
	if children {
		n = 4
	}
	var ticks int64
	for _, v := range f[11 : 11+n] {
		t, _ := strconv.ParseInt(v, 10, 64)
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// runJSON runs cmd and decodes its stdout.
func runJSON(ctx context.Context, cmd *exec.Cmd, v any) error {
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("decode %q: %w", lastLine(string(out)), err)
	}
	return nil
}
