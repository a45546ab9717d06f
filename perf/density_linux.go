package perf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Density measures idle sessions: what each costs in memory and how long
// each takes to start when many are started at once.
type Density struct {
	Manifest string         `json:"manifest"`
	Command  string         `json:"command"`
	Levels   []DensityLevel `json:"levels"`
	// Skipped lists levels not run because the time budget was used up.
	Skipped []int `json:"skipped,omitempty"`
	// Chart is the PNG of start time against live sessions.
	Chart   string  `json:"chart,omitempty"`
	Seconds float64 `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// DensityLevel is one burst of N sessions.
type DensityLevel struct {
	N int `json:"n"`
	// StartMS is each session's create+start request latency, all N sent
	// at once.
	StartMS stats.Summary `json:"start_ms"`
	// WallMS runs from the first request to the last session running.
	WallMS float64 `json:"wall_ms"`
	// RemoveWallMS is removing all N, 8 at a time.
	RemoveWallMS float64 `json:"remove_wall_ms"`
	// Samples are (live sessions when this one was running, its latency).
	Samples [][2]float64 `json:"samples"`
	// SequentialMS is the latency of single starts made one after another
	// while the N sessions run (each probe removed before the next): the
	// cost of one start with N live sessions, without queueing.
	SequentialMS stats.Summary `json:"sequential_ms"`

	DaemonRSSBeforeKiB     int64   `json:"airlockd_rss_before_kib"`
	DaemonRSSAfterKiB      int64   `json:"airlockd_rss_after_kib"`
	DaemonRSSPerSessionKiB float64 `json:"airlockd_rss_per_session_kib"`
	ContainerdRSSBeforeKiB int64   `json:"containerd_rss_before_kib"`
	ContainerdRSSAfterKiB  int64   `json:"containerd_rss_after_kib"`
	// Per session, proportional set size (shared pages split between
	// sharers) and resident set size of: the runc shim, the binary log
	// writer (airlockd run by the shim), the session's own processes.
	// The shim's share includes the shim anchor's process when sessions
	// share one shim; Shims counts the shim processes at the level.
	Shims         int     `json:"shims"`
	ShimPSSKiB    float64 `json:"shim_pss_kib"`
	LoggerPSSKiB  float64 `json:"logger_pss_kib"`
	PayloadPSSKiB float64 `json:"payload_pss_kib"`
	TotalPSSKiB   float64 `json:"total_pss_kib"`
	ShimRSSKiB    float64 `json:"shim_rss_kib"`
	LoggerRSSKiB  float64 `json:"logger_rss_kib"`
	PayloadRSSKiB float64 `json:"payload_rss_kib"`
	// TotalWithDaemonKiB adds the growth of airlockd and containerd (RSS)
	// per session to TotalPSSKiB.
	TotalWithDaemonKiB float64 `json:"total_with_daemons_kib"`
	// CgroupKiB is the session cgroup's memory usage (kernel accounting,
	// including page cache charged to it).
	CgroupKiB float64 `json:"cgroup_kib"`
	// ProcessesPerSession counts shim + logger + session processes.
	ProcessesPerSession float64 `json:"processes_per_session"`
	// CPU time per started session during the burst: airlockd's,
	// containerd's, and that of every process of the run (airlockd,
	// containerd and their reaped children, each shim with the runc
	// invocations it reaped, log writers, the sessions' processes).
	DaemonCPUMS     float64 `json:"airlockd_cpu_ms"`
	ContainerdCPUMS float64 `json:"containerd_cpu_ms"`
	RunCPUMS        float64 `json:"run_cpu_ms"`
	// ShimCPUMS (with the runc invocations it reaped), LoggerCPUMS and
	// ContainerdChildrenCPUMS (processes containerd started and reaped:
	// each shim's short-lived start-up process) are shares of RunCPUMS.
	ShimCPUMS               float64 `json:"shim_cpu_ms"`
	LoggerCPUMS             float64 `json:"logger_cpu_ms"`
	ContainerdChildrenCPUMS float64 `json:"containerd_children_cpu_ms"`
	// SandboxCPUMS is the sessions' own processes, including the runc
	// init stage that runs in the session's process before it execs the
	// command.
	SandboxCPUMS float64 `json:"sandbox_cpu_ms"`
	// Leftovers are resources still present after the removal.
	Leftovers []string `json:"leftovers"`
	Error     string   `json:"error,omitempty"`
}

// MeasureDensity starts each level's N sessions of examples/hello.hcl
// running `sleep 3600` at once through the API, measures memory once all
// run, removes them and checks that nothing is left, level after level.
// Levels not started by deadline (if set) are skipped.
func MeasureDensity(ctx context.Context, e *Env, levels []int, chart string, deadline time.Time) (*Density, error) {
	start := time.Now()
	hello := filepath.Join(e.cfg.Repo, "examples", "hello.hcl")
	p, err := policies.LoadFile(hello, nil)
	if err != nil {
		return nil, err
	}
	p.Command = []string{"sleep", "3600"}
	p.Label = "perf-density"
	res := &Density{
		Manifest: "examples/hello.hcl with command [\"sleep\", \"3600\"]",
		Command:  "N concurrent POST /v1/sessions {start: true} (what `" + e.display(e.CLIArgs("run", "-d", "-f", hello, "--", "sleep", "3600")) + "` sends)",
	}
	for _, n := range levels {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if !deadline.IsZero() && time.Now().Add(estimateLevel(res.Levels, n)).After(deadline) {
			res.Skipped = append(res.Skipped, n)
			continue
		}
		lv := e.densityLevel(ctx, *p, n)
		res.Levels = append(res.Levels, lv)
		e.cfg.Logf("density N=%d: start median %.0f ms, wall %.0f ms, %.0f KiB PSS/session", n, lv.StartMS.Median, lv.WallMS, lv.TotalPSSKiB)
	}
	if chart != "" && len(res.Levels) > 0 {
		if err := DensityChart(res.Levels, chart); err != nil {
			return res, fmt.Errorf("chart: %w", err)
		}
		res.Chart = filepath.Base(chart)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// estimateLevel guesses how long a level of n sessions takes from the
// last level run: its start and removal time per session, scaled, plus
// the probes and the settling pause.
func estimateLevel(done []DensityLevel, n int) time.Duration {
	if len(done) == 0 {
		return 0
	}
	last := done[len(done)-1]
	perSession := (last.WallMS + last.RemoveWallMS) / float64(last.N)
	probes := last.SequentialMS.Median * 2 * densityProbes
	return time.Duration((perSession*float64(n)+probes)*float64(time.Millisecond)) + time.Second
}

// densityProbes is how many single starts are timed at each level.
const densityProbes = 5

func (e *Env) densityLevel(ctx context.Context, p policies.Policy, n int) DensityLevel {
	lv := DensityLevel{N: n, Leftovers: []string{}}
	lv.DaemonRSSBeforeKiB = statusKiB(e.DaemonPID(), "VmRSS")
	lv.ContainerdRSSBeforeKiB = statusKiB(e.ContainerdPID(), "VmRSS")

	type result struct {
		id   string
		lat  time.Duration
		done time.Time
		err  error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	dcpu0, ccpu0, rcpu0 := cpuTime(e.DaemonPID()), cpuTime(e.ContainerdPID()), e.runCPU()
	kids0 := statCPU(e.ContainerdPID(), true) - ccpu0
	t0 := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			s, err := e.Client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
			r := result{lat: time.Since(t), done: time.Now(), err: err}
			if s != nil {
				r.id = s.ID
			}
			results[i] = r
		}()
	}
	wg.Wait()
	lv.WallMS = ms(time.Since(t0))
	dcpu, ccpu, rcpu := cpuTime(e.DaemonPID())-dcpu0, cpuTime(e.ContainerdPID())-ccpu0, e.runCPU()
	kids := statCPU(e.ContainerdPID(), true) - cpuTime(e.ContainerdPID()) - kids0
	rcpu.total -= rcpu0.total
	rcpu.shims -= rcpu0.shims
	rcpu.loggers -= rcpu0.loggers
	rcpu.sandbox -= rcpu0.sandbox
	var ids []string
	var lats []float64
	var errs []error
	var dones []time.Time
	for _, r := range results {
		if r.id != "" {
			ids = append(ids, r.id)
		}
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		lats = append(lats, ms(r.lat))
		dones = append(dones, r.done)
	}
	lv.StartMS = stats.Summarize(lats)
	if k := float64(len(lats)); k > 0 {
		lv.DaemonCPUMS, lv.ContainerdCPUMS, lv.RunCPUMS = ms(dcpu)/k, ms(ccpu)/k, ms(rcpu.total)/k
		lv.ShimCPUMS, lv.LoggerCPUMS, lv.ContainerdChildrenCPUMS = ms(rcpu.shims)/k, ms(rcpu.loggers)/k, ms(kids)/k
		lv.SandboxCPUMS = ms(rcpu.sandbox) / k
	}
	for i, r := range results {
		if r.err != nil {
			continue
		}
		live := 0
		for _, d := range dones {
			if !d.After(results[i].done) {
				live++
			}
		}
		lv.Samples = append(lv.Samples, [2]float64{float64(live), ms(r.lat)})
	}
	if len(errs) > 0 {
		lv.Error = fmt.Sprintf("%d of %d failed to start: %v", len(errs), n, errs[0])
	}

	// Let exec'd processes settle before reading memory.
	time.Sleep(time.Second)
	lv.DaemonRSSAfterKiB = statusKiB(e.DaemonPID(), "VmRSS")
	lv.ContainerdRSSAfterKiB = statusKiB(e.ContainerdPID(), "VmRSS")
	if len(ids) > 0 {
		k := float64(len(ids))
		lv.DaemonRSSPerSessionKiB = float64(lv.DaemonRSSAfterKiB-lv.DaemonRSSBeforeKiB) / k
		var shim, logger, payload memSum
		shimMark := "-address " + e.ContainerdSocket()
		seen := map[int]bool{}
		for _, pr := range allProcesses() {
			switch {
			case strings.Contains(pr.cmd, "containerd-shim-runc-v2") && strings.Contains(pr.cmd, shimMark):
				shim.add(pr.pid)
			case strings.Contains(pr.cmd, runtime.LoggerArg+" "+e.StateRoot+"/"):
				logger.add(pr.pid)
			default:
				continue
			}
			seen[pr.pid] = true
		}
		lv.Shims = shim.n
		for _, pid := range processesInCgroupPrefix("airlock-" + e.Prefix + "-" + runtime.AnchorID) {
			shim.add(pid)
			seen[pid] = true
		}
		for _, pid := range processesInCgroupPrefix("airlock-" + e.Prefix + "/") {
			if !seen[pid] {
				payload.add(pid)
			}
		}
		lv.ShimPSSKiB, lv.ShimRSSKiB = shim.pss/k, shim.rss/k
		lv.LoggerPSSKiB, lv.LoggerRSSKiB = logger.pss/k, logger.rss/k
		lv.PayloadPSSKiB, lv.PayloadRSSKiB = payload.pss/k, payload.rss/k
		lv.TotalPSSKiB = (shim.pss + logger.pss + payload.pss) / k
		lv.TotalWithDaemonKiB = lv.TotalPSSKiB + lv.DaemonRSSPerSessionKiB +
			float64(lv.ContainerdRSSAfterKiB-lv.ContainerdRSSBeforeKiB)/k
		lv.ProcessesPerSession = float64(shim.n+logger.n+payload.n) / k
		var cg float64
		for _, id := range ids {
			cg += float64(cgroupMemoryKiB(e.Prefix, id))
		}
		lv.CgroupKiB = cg / k
	}

	var seq []float64
	for range densityProbes {
		t := time.Now()
		s, err := e.Client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
		if err != nil {
			lv.Error = strings.TrimPrefix(lv.Error+"; probe start: "+err.Error(), "; ")
			break
		}
		seq = append(seq, ms(time.Since(t)))
		if err := e.Client.RemoveSession(context.WithoutCancel(ctx), s.ID, true); err != nil {
			lv.Error = strings.TrimPrefix(lv.Error+"; probe remove: "+err.Error(), "; ")
			break
		}
	}
	lv.SequentialMS = stats.Summarize(seq)

	t1 := time.Now()
	sem := make(chan struct{}, 8)
	var rmErrs []error
	var mu sync.Mutex
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := e.Client.RemoveSession(context.WithoutCancel(ctx), id, true); err != nil {
				mu.Lock()
				rmErrs = append(rmErrs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	lv.RemoveWallMS = ms(time.Since(t1))
	if len(rmErrs) > 0 {
		lv.Error = strings.TrimPrefix(lv.Error+fmt.Sprintf("; %d removals failed: %v", len(rmErrs), errors.Join(rmErrs...)), "; ")
	}
	lv.Leftovers = append(lv.Leftovers, e.sessionLeftovers()...)
	return lv
}

// anchorShimPID is the shim serving the daemon's shim anchor (the parent
// of the anchor's process), or 0.
func (e *Env) anchorShimPID() int {
	ctx := ContainerdCtx(context.Background())
	c, err := e.ctrd.LoadContainer(ctx, runtime.AnchorID)
	if err != nil {
		return 0
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", t.Pid()))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces, so cut at its ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// sessionLeftovers lists session resources of this run that exist while
// the daemon has no session: shims, session processes, session cgroups,
// session mounts and directories, session namespaces.
func (e *Env) sessionLeftovers() []string {
	var out []string
	shimMark := "-address " + e.ContainerdSocket()
	anchorShim := e.anchorShimPID()
	for _, pr := range allProcesses() {
		if pr.pid == anchorShim {
			continue // the shared shim, kept by the daemon's anchor
		}
		if strings.Contains(pr.cmd, "containerd-shim-runc-v2") && strings.Contains(pr.cmd, shimMark) {
			out = append(out, fmt.Sprintf("shim %d", pr.pid))
		}
	}
	for _, pid := range processesInCgroupPrefix("airlock-" + e.Prefix + "/") {
		out = append(out, fmt.Sprintf("process %d", pid))
	}
	for _, m := range mountsUnder(filepath.Join(e.StateRoot, "sessions")) {
		out = append(out, "mount "+m)
	}
	for _, m := range mountsUnder(filepath.Join(e.StateRoot, "containerd", "state")) {
		out = append(out, "mount "+m)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.StateRoot, "sessions")); len(ents) > 0 {
		out = append(out, fmt.Sprintf("%d session directories", len(ents)))
	}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", c.Name(), "airlock-"+e.Prefix))
		for _, en := range ents {
			if en.IsDir() {
				out = append(out, "cgroup "+filepath.Join(c.Name(), "airlock-"+e.Prefix, en.Name()))
			}
		}
	}
	if ents, _ := os.ReadDir("/run/netns"); len(ents) > 0 {
		for _, en := range ents {
			if strings.HasPrefix(en.Name(), e.Prefix+"-s-") {
				out = append(out, "netns "+en.Name())
			}
		}
	}
	return out
}

type memSum struct {
	pss, rss float64
	n        int
}

func (m *memSum) add(pid int) {
	m.pss += float64(smapsRollupKiB(pid, "Pss"))
	m.rss += float64(statusKiB(pid, "VmRSS"))
	m.n++
}

// runCPUTimes is CPU time of the run's processes, in all and by class.
type runCPUTimes struct{ total, shims, loggers, sandbox time.Duration }

// runCPU is the CPU time of every process of the run so far: those
// started from the root (airlockd, containerd, shims, log writers) with
// the children they reaped (runc, shim start-up), and the sessions'.
func (e *Env) runCPU() runCPUTimes {
	var t runCPUTimes
	seen := map[int]bool{}
	shimMark := "-address " + e.ContainerdSocket()
	for _, p := range processesUnder(e.Root) {
		seen[p.pid] = true
		c := statCPU(p.pid, true)
		t.total += c
		switch {
		case strings.Contains(p.cmd, "containerd-shim-runc-v2") && strings.Contains(p.cmd, shimMark):
			t.shims += c
		case strings.Contains(p.cmd, runtime.LoggerArg+" "):
			t.loggers += c
		}
	}
	for _, pid := range processesInCgroupPrefix("airlock-" + e.Prefix + "/") {
		if !seen[pid] {
			c := statCPU(pid, true)
			t.total += c
			t.sandbox += c
		}
	}
	return t
}

// statusKiB reads a kB field of /proc/PID/status.
func statusKiB(pid int, field string) int64 {
	return kbField(fmt.Sprintf("/proc/%d/status", pid), field)
}

// smapsRollupKiB reads a kB field of /proc/PID/smaps_rollup.
func smapsRollupKiB(pid int, field string) int64 {
	return kbField(fmt.Sprintf("/proc/%d/smaps_rollup", pid), field)
}

func kbField(path, field string) int64 {
	if strings.HasPrefix(path, "/proc/0/") {
		return 0
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != field {
			continue
		}
		f := strings.Fields(v)
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	return 0
}

// processesInCgroupPrefix lists processes whose cgroup path (in any
// hierarchy) contains "/"+rel.
func processesInCgroupPrefix(rel string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, en := range entries {
		pid, err := strconv.Atoi(en.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "cgroup"))
		if err == nil && strings.Contains(string(b), "/"+rel) {
			out = append(out, pid)
		}
	}
	return out
}

// cgroupMemoryKiB is a session cgroup's memory usage (v2 memory.current
// or v1 memory.usage_in_bytes).
func cgroupMemoryKiB(prefix, id string) int64 {
	rel := filepath.Join("airlock-"+prefix, id)
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup", rel, "memory.current"),
		filepath.Join("/sys/fs/cgroup/memory", rel, "memory.usage_in_bytes"),
	} {
		if b, err := os.ReadFile(f); err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return n / 1024
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
