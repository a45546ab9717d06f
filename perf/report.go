package perf

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// Report is everything one run measured.
type Report struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Machine Machine   `json:"machine"`
	// LoadEnd is the 1-minute load average when the run ended.
	LoadEnd  float64           `json:"load1_end"`
	Versions map[string]string `json:"versions"`
	Runs     int               `json:"runs"`
	// Reproduce reruns everything.
	Reproduce string `json:"reproduce"`
	// Daemon is airlockd's command line; Root the temporary directory
	// that $ROOT stands for in commands (removed at the end).
	Daemon string `json:"daemon"`
	Root   string `json:"root"`

	ColdStart *ColdStart `json:"cold_start,omitempty"`
	WarmStart *WarmStart `json:"warm_start,omitempty"`
	Teardown  *Teardown  `json:"teardown,omitempty"`
	Runtimes  *Runtimes  `json:"runtimes,omitempty"`
	DNS       *DNS       `json:"dns,omitempty"`
	TCP       *TCP       `json:"tcp,omitempty"`
	Density   *Density   `json:"density,omitempty"`
	GoBench   *GoBench   `json:"go_bench,omitempty"`
	L7        *L7        `json:"l7,omitempty"`
	// AgentStart is the time to an agent's first model request.
	AgentStart *AgentStart `json:"agent_start,omitempty"`
	Cleanup    *Cleanup    `json:"cleanup,omitempty"`
	// Busy is the load the run was measured under (-load), if any.
	Busy *Busy `json:"busy,omitempty"`

	Errors  map[string]string `json:"errors"`
	Skipped map[string]string `json:"skipped"`
}

// Write saves report.json and report.md in dir.
func (r *Report) Write(dir string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644)
}

// Render reads dir's report.json and writes its report.md again with this
// code's rendering (the tables and findings of the same measurements).
func Render(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		return err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "report.json"), err)
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.Markdown()), 0o644)
}

// Markdown renders the report for people.
func (r *Report) Markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("# airlock performance report\n\n")
	switch {
	case r.Reproduce == "hack/perf.sh":
		p("Measured by `make perf` (`%s`)", r.Reproduce)
	case r.Busy != nil && !strings.Contains(r.Reproduce, " -only "):
		p("Measured by `make perf-load` (`%s`)", r.Reproduce)
	default:
		p("Measured by `%s`", r.Reproduce)
	}
	p(" on %s in %.0f s. Each section names the command that reruns it alone; ", r.Started.Format("2006-01-02 15:04 UTC"), r.Seconds)
	p("times are medians with the p10–p90 spread in parentheses, all variants of a section interleaved in one run. ")
	p("Raw numbers: [report.json](report.json).\n\n")
	if r.Busy != nil {
		p("**Under load:** %d busy loops (`perfload spin`, one core each, at the priority of what is measured) ran through every measurement, %.0f CPU-seconds in all: each ratio below compares airlock and its baseline under the same load. `make perf` measures the same without it.\n\n", r.Busy.Loops, r.Busy.CPUSeconds)
	}

	m := r.Machine
	p("## Machine\n\n")
	p("| nproc | memory | kernel | CPU | cgroup | load (1 min) at start / end |\n|---|---|---|---|---|---|\n")
	p("| %d | %.1f GiB | %s | %s | %s | %.2f / %.2f |\n\n", m.NProc, float64(m.MemoryMiB)/1024, m.Kernel, m.CPUModel, m.CgroupVersion, m.Load1, r.LoadEnd)
	if len(r.Versions) > 0 {
		keys := make([]string, 0, len(r.Versions))
		for k := range r.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		p("Versions: ")
		for i, k := range keys {
			if i > 0 {
				p("; ")
			}
			p("%s `%s`", k, r.Versions[k])
		}
		p(".\n\n")
	}
	if r.Daemon != "" {
		p("Daemon under test (`$ROOT` is a fresh directory under /tmp, removed at the end; `$ROOT/bin` holds copies of `_output/bin` taken at the start, so a rebuild during the run changes nothing):\n\n```\n%s\n```\n\n", r.Daemon)
	}
	p("The machine is shared: other work running at the same time (see the load average; the run itself adds to it) adds noise to every figure; the side-by-side variants of a section share it.\n\n")

	r.summary(p)
	if fs := r.Findings(); len(fs) > 0 {
		p("## Findings\n\n")
		for _, f := range fs {
			p("- %s\n", f)
		}
		p("\n")
	}
	if r.ColdStart != nil {
		r.ColdStart.markdown(p)
	}
	if r.WarmStart != nil {
		r.WarmStart.markdown(p)
	}
	if r.Teardown != nil {
		r.Teardown.markdown(p)
	}
	if r.Runtimes != nil {
		r.Runtimes.markdown(p)
	}
	if r.DNS != nil {
		r.DNS.markdown(p)
	}
	if r.TCP != nil {
		r.TCP.markdown(p)
	}
	if r.Density != nil {
		r.Density.markdown(p)
	}
	if r.GoBench != nil {
		r.GoBench.markdown(p)
	}
	if r.L7 != nil {
		r.L7.markdown(p)
	}
	if r.AgentStart != nil {
		r.AgentStart.markdown(p)
	}
	p("## Cleanup\n\n")
	switch c := r.Cleanup; {
	case c == nil:
		p("No environment was started.\n\n")
	case len(c.Leftovers) == 0 && len(c.Remaining) == 0:
		p("After the daemon stopped, nothing of the run was left: no namespace, link or nftables table with its prefix, no cgroup, no mount under the root, no process started from it; the world namespace and the root were removed.\n\n")
	default:
		p("Left after the daemon stopped (then removed by the harness): %s.\n\nStill present: %s.\n\n", list(c.Leftovers), list(c.Remaining))
	}
	if len(r.Errors) > 0 || len(r.Skipped) > 0 {
		p("## Errors\n\n")
		for _, k := range sortedKeys(r.Errors) {
			p("- %s: %s\n", k, r.Errors[k])
		}
		for _, k := range sortedKeys(r.Skipped) {
			p("- %s skipped: %s\n", k, r.Skipped[k])
		}
		p("\n")
	}
	return b.String()
}

type printer func(format string, args ...any)

// summary is the one table with the headline numbers.
func (r *Report) summary(p printer) {
	p("## Summary\n\n| measurement | airlock | baseline | airlock vs baseline |\n|---|---|---|---|\n")
	if cs := r.ColdStart; cs != nil && len(cs.Variants) >= 3 {
		ctr := cs.Variants[2]
		for i, label := range []string{"cold start to exit, no layers (ms)", "cold start to exit, full perimeter (ms)"} {
			v := cs.Variants[i]
			p("| %s | %s | ctr run --rm: %s | ×%s |\n", label, v.ExitMS.Spread("%.0f"), ctr.ExitMS.Spread("%.0f"), ratio(v.ExitMS.Median, ctr.ExitMS.Median))
		}
		p("| first output of `echo x`, no layers (ms) | %s | ctr run --rm: %s | ×%s |\n",
			cs.Variants[0].FirstOutputMS.Spread("%.0f"), ctr.FirstOutputMS.Spread("%.0f"), ratio(cs.Variants[0].FirstOutputMS.Median, ctr.FirstOutputMS.Median))
		if len(cs.Variants) > 3 {
			s := cs.Variants[3]
			if s.ExitMS.N > 0 {
				p("| cold start to exit, full perimeter vs srt (ms) | %s | srt -c: %s | ×%s |\n", cs.Variants[1].ExitMS.Spread("%.0f"), s.ExitMS.Spread("%.0f"), ratio(cs.Variants[1].ExitMS.Median, s.ExitMS.Median))
			} else {
				p("| srt -c true | – | not measured: %s | – |\n", s.Error)
			}
		}
	}
	if ws := r.WarmStart; ws != nil {
		ws.summary(p)
	}
	if td := r.Teardown; td != nil {
		for _, v := range td.Variants {
			base := "–"
			if td.CtrMS.N > 0 {
				base = "ctr task rm -f + ctr container rm: " + td.CtrMS.Spread("%.0f")
			}
			p("| teardown to all resources verified gone, %s (ms) | %s | %s | %d resources, %d leaked |\n", v.Name, v.GoneMS.Spread("%.0f"), base, v.Resources, v.Leaked)
		}
	}
	if r.Runtimes != nil {
		r.Runtimes.summary(p)
	}
	if d := r.DNS; d != nil {
		for _, w := range d.Workloads {
			if w.Sandbox == nil || w.Direct == nil {
				continue
			}
			if strings.HasPrefix(w.Name, "latency") {
				p("| DNS %s: p50 / p99 (µs) | %.0f / %.0f | direct: %.0f / %.0f | %s / %s µs |\n", short(w.Name),
					w.Sandbox.LatencyUS.Median, w.Sandbox.LatencyUS.P99, w.Direct.LatencyUS.Median, w.Direct.LatencyUS.P99, signed(w.AddedP50US), signed(w.AddedP99US))
			} else {
				p("| DNS %s (queries/s; cache hit ratio %.1f%%) | %.0f | direct: %.0f | ×%s |\n", short(w.Name), 100*w.CacheHitRatio,
					w.Sandbox.QPS, w.Direct.QPS, ratio(w.Sandbox.QPS, w.Direct.QPS))
			}
		}
	}
	if t := r.TCP; t != nil && len(t.Paths) == 3 {
		base := t.Paths[2]
		for _, pa := range t.Paths[:2] {
			p("| TCP throughput, %s (Gbit/s) | %.2f | plain veth: %.2f | ×%s |\n", pa.Name, pa.Gbps.Median, base.Gbps.Median, ratio(pa.Gbps.Median, base.Gbps.Median))
		}
		p("| TCP connect, %s (µs, p50) | %.0f | plain veth: %.0f | %s µs |\n", t.Paths[0].Name, t.Paths[0].ConnectUS.Median, base.ConnectUS.Median, signed(t.Paths[0].ConnectUS.Median-base.ConnectUS.Median))
	}
	if d := r.Density; d != nil && len(d.Levels) > 0 {
		first, last := d.Levels[0], d.Levels[len(d.Levels)-1]
		p("| session start with %d started at once vs %d (ms, median) | %.0f | %.0f | ×%s |\n", last.N, first.N, last.StartMS.Median, first.StartMS.Median, ratio(last.StartMS.Median, first.StartMS.Median))
		p("| one session start while %d sessions run vs while %d run (ms, median) | %.0f | %.0f | ×%s |\n", last.N, first.N, last.SequentialMS.Median, first.SequentialMS.Median, ratio(last.SequentialMS.Median, first.SequentialMS.Median))
		p("| memory per idle session at N=%d (MiB: shim + logger + sandbox PSS, + airlockd/containerd growth) | %.1f | – | %.1f incl. daemons |\n", last.N, last.TotalPSSKiB/1024, last.TotalWithDaemonKiB/1024)
	}
	if r.L7 != nil {
		r.L7.summary(p)
	}
	if r.AgentStart != nil {
		r.AgentStart.summary(p)
	}
	p("\n")
}

func (cs *ColdStart) markdown(p printer) {
	p("## 1. Cold start\n\nReproduce: `%s` (%d runs per variant after one warm-up each, interleaved).\n\n", cs.Reproduce, cs.Runs)
	p("| variant | to exit, `true` (ms) | first output byte, `echo x` (ms) | `echo x` to exit (ms) | failures |\n|---|---|---|---|---|\n")
	for _, v := range cs.Variants {
		if v.ExitMS.N == 0 {
			p("| %s | – | – | – | not measured: %s |\n", v.Name, v.Error)
			continue
		}
		p("| %s | %s | %s | %s | %d |\n", v.Name, v.ExitMS.Spread("%.0f"), v.FirstOutputMS.Spread("%.0f"), v.EchoExitMS.Spread("%.0f"), v.Failures)
	}
	p("\nRatio of medians to `ctr run --rm`: no layers ×%.2f, full perimeter ×%.2f. Times run from the fork of the client to its exit (or to the first byte on its stdout).\n\n", cs.RatioHelloCtr, cs.RatioFullCtr)
	p("Commands (timed exactly as shown; the `echo x` runs replace `true`):\n\n")
	for _, v := range cs.Variants {
		p("- %s: `%s`\n", v.Name, v.Command)
	}
	p("\nThe full perimeter: an overlay workspace of a 12-file temp dir, egress to %s:80 (a world host), one credential; same limits as examples/hello.hcl. srt gets the same scope (one allowed domain, writes to the workspace only).\n\n", EgressHost)
	if len(cs.Timelines) > 0 {
		p("Where the time goes: one more run of each, under `perf record -a -e sched:sched_process_exec -e sched:sched_process_exit` (the tracer adds a little to every exec). Each row is a program run on the machine between the client's exec and its exit; the gaps are the long-lived daemons (airlockd, containerd) at work.\n\n")
		for _, tl := range cs.Timelines {
			tl.markdown(p)
		}
	}
}

func (td *Teardown) markdown(p printer) {
	p("## 3. Teardown\n\nReproduce: `%s`. Per session: create (`sleep 3600`), then time `stop --time 0`, `rm -f`, and poll until every tracked resource is gone.\n\n", td.Reproduce)
	p("| manifest | stop (ms) | rm (ms) | stop start → all gone (ms) | resources tracked | leaked | failures |\n|---|---|---|---|---|---|---|\n")
	for _, v := range td.Variants {
		p("| %s | %s | %s | %s | %d | %d | %d |\n", v.Name, v.StopMS.Spread("%.0f"), v.RmMS.Spread("%.0f"), v.GoneMS.Spread("%.0f"), v.Resources, v.Leaked, v.Failures)
		if v.Error != "" {
			p("\n%s: %s\n\n", v.Name, v.Error)
		}
		if len(v.LeakedAs) > 0 {
			p("\n%s leaked: %s\n\n", v.Name, list(v.LeakedAs))
		}
	}
	p("\nChecked: %s. ", strings.Join(td.Checked, ", "))
	p("Last resource seen before everything was gone: ")
	for i, k := range sortedKeys(td.LastGone) {
		if i > 0 {
			p("; ")
		}
		p("%s: ", k)
		for j, kind := range sortedKeys(td.LastGone[k]) {
			if j > 0 {
				p(", ")
			}
			p("%s ×%d", kind, td.LastGone[k][kind])
		}
	}
	p(".\n\nCommands: `%s`; `%s`; `%s`.\n\n", td.Commands["create"], td.Commands["stop"], td.Commands["rm"])
	switch {
	case td.CtrMS.N > 0:
		p("Baseline, bare containerd in the same rounds: a `ctr run -d` container of the same image (`sleep 3600`) removed with `%s` in %s ms (task, container and snapshot checked gone; %d runs).\n\n", td.CtrCommand, td.CtrMS.Spread("%.0f"), td.CtrMS.N)
	case td.CtrError != "":
		p("Baseline, bare containerd: not measured: %s\n\n", td.CtrError)
	}
	if td.Timeline != nil {
		p("Where the time goes (see the cold start section for how it is recorded):\n\n")
		td.Timeline.markdown(p)
	}
}

func (d *DNS) markdown(p printer) {
	p("## 4. DNS proxy through a real session\n\nReproduce: `%s`. Audit stays on (every query is an audit event).\n\n", d.Reproduce)
	p("Baseline: %s\n\n", d.Baseline)
	p("| load | sandbox p50 / p90 / p99 (µs) | direct p50 / p90 / p99 (µs) | added p50 / p99 (µs) | sandbox q/s | direct q/s | server CPU per query, proxy / direct (µs) | cache hit ratio (audit) | upstream queries | timeouts+errors (sandbox/direct) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range d.Workloads {
		if w.Sandbox == nil || w.Direct == nil {
			p("| %s | – | – | – | – | – | – | – | – | %s |\n", w.Name, w.Error)
			continue
		}
		s, x := w.Sandbox, w.Direct
		p("| %s | %.0f / %.0f / %.0f | %.0f / %.0f / %.0f | %s / %s | %.0f | %.0f | %.1f / %.1f | %.1f%% (%d of %d) | %d | %d / %d |\n", w.Name,
			s.LatencyUS.Median, s.LatencyUS.P90, s.LatencyUS.P99, x.LatencyUS.Median, x.LatencyUS.P90, x.LatencyUS.P99,
			signed(w.AddedP50US), signed(w.AddedP99US), s.QPS, x.QPS, w.SandboxServerCPUUS, w.DirectServerCPUUS,
			100*w.CacheHitRatio, w.AuditCached, w.AuditEvents, w.UpstreamQueries,
			s.Timeouts+s.Errors, x.Timeouts+x.Errors)
	}
	p("\nClient, proxy (airlockd), world DNS server and, for the sandbox, the session's cgroup (cpus = 2) share the machine's 2 cores.\n\n")
	budgetRows := false
	for _, w := range d.Workloads {
		if w.SandboxBudget != nil && w.DirectBudget != nil {
			budgetRows = true
		}
	}
	if budgetRows {
		p("Where the machine's CPU went during each load, per answered query (µs): the client (perfload's own rusage), airlockd, the world's DNS server (the harness's process), interrupts and softirqs machine-wide (/proc/stat), the rest of the machine's busy time (kernel threads, the exec starting the load), and the total, the busy loops of a loaded run left out. When the cores are all busy a load's rate is the cores divided by its total, so a part's share of the total is its share of the rate.\n\n")
		p("| load | path | client | airlockd | world server | irq+softirq | rest | total | cores busy |\n|---|---|---|---|---|---|---|---|---|\n")
		for _, w := range d.Workloads {
			for _, b := range []struct {
				path string
				b    *DNSBudget
			}{{"sandbox", w.SandboxBudget}, {"direct", w.DirectBudget}} {
				if b.b == nil {
					continue
				}
				p("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n", w.Name, b.path,
					b.b.ClientUS, b.b.ProxyUS, b.b.ServerUS, b.b.IRQUS, b.b.RestUS, b.b.TotalUS, 100*b.b.Busy)
			}
		}
		p("\n")
	}
	p("What the session's audit log holds for each load (its DNS events written during the load; the log merges identical decisions within a window into one event and a count, written when the window ends, so the counts of one load may arrive during the next; the cache-miss loads ask a new name per query, which no window merges):\n\n")
	for _, w := range d.Workloads {
		if w.Sandbox == nil || w.Sandbox.Answered == 0 {
			continue
		}
		p("- %s: %d events, %.1f KiB, for %d answered queries (%.1f bytes a query); %d queries counted in merged events\n", w.Name,
			w.AuditEvents, float64(w.AuditBytes)/1024, w.Sandbox.Answered, float64(w.AuditBytes)/float64(w.Sandbox.Answered), w.AuditRepeated)
	}
	p("\n")
	if a := d.AuditRead; a.Events > 0 {
		p("Reading the session's audit log after the last load (`GET /v1/sessions/ID/audit`, %d events, all at once) took %.2f s and took airlockd's RSS from %.0f MiB to %.0f MiB (%.0f MiB before the loads; peak %.0f MiB).\n\n",
			a.Events, a.Seconds, mib(a.DaemonRSSBeforeReadKiB), mib(a.DaemonRSSAfterReadKiB), mib(a.DaemonRSSBeforeKiB), mib(a.DaemonPeakRSSKiB))
	}
	p("Commands:\n\n")
	for _, w := range d.Workloads {
		p("- %s: sandbox `%s`; direct `%s`\n", w.Name, w.SandboxCommand, w.DirectCommand)
	}
	p("\nSession manifest:\n\n```hcl\n%s```\n\n", d.Manifest)
	for _, pr := range d.Profiles {
		p("Profile of airlockd during \"%s\" (`%s`, full report in [%s](%s)):\n\n", pr.Name, pr.Command, pr.File, pr.File)
		if pr.Error != "" {
			p("not taken: %s\n\n", pr.Error)
			continue
		}
		p("Self time:\n\n```\n%s\n```\n\nInclusive (children%%, self%%), the top %d:\n\n```\n%s\n```\n\n", strings.Join(pr.Top, "\n"), min(len(pr.Inclusive), 30), strings.Join(pr.Inclusive[:min(len(pr.Inclusive), 30)], "\n"))
	}
}

func (t *TCP) markdown(p printer) {
	p("## 5. TCP throughput through the perimeter\n\nReproduce: `%s`. %d rounds of %.0f s bulk transfer per path, interleaved; rate measured at the sink (first byte to end of stream); then 300 sequential connects.\n\n", t.Reproduce, t.Rounds, t.StreamSec)
	p("Baseline: %s\n\n", t.Baseline)
	p("| path | Gbit/s median (min–max) | connect p50 / p99 (µs) | error |\n|---|---|---|---|\n")
	for _, pa := range t.Paths {
		p("| %s | %.2f (%.2f–%.2f) | %.0f / %.0f | %s |\n", pa.Name, pa.Gbps.Median, pa.Gbps.Min, pa.Gbps.Max, pa.ConnectUS.Median, pa.ConnectUS.P99, pa.Error)
	}
	p("\nCommands:\n\n")
	for _, pa := range t.Paths {
		p("- %s: `%s`; `%s`\n", pa.Name, pa.StreamCommand, pa.ConnectCommand)
	}
	p("\n")
}

func (d *Density) markdown(p printer) {
	p("## 6. Density: idle sessions\n\nReproduce: `%s`. Each level starts N sessions (%s) at once, measures memory once all run, removes them (8 at a time) and checks that nothing is left. Command: %s.\n\n", d.Reproduce, d.Manifest, d.Command)
	p("Time:\n\n| N | start per session, N at once (ms) | p99 (ms) | wall (ms) | wall / N (ms) | one start while N run (ms) | remove all (ms) | CPU per start (ms): airlockd / containerd / its reaped children / shim+runc / log writer / sandbox (runc init) / all of the run |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	for _, l := range d.Levels {
		p("| %d | %s | %.0f | %.0f | %.0f | %s | %.0f | %.0f / %.0f / %.0f / %.0f / %.0f / %.0f / %.0f |\n", l.N, l.StartMS.Spread("%.0f"), l.StartMS.P99, l.WallMS, l.WallMS/float64(l.N),
			l.SequentialMS.Spread("%.0f"), l.RemoveWallMS,
			l.DaemonCPUMS, l.ContainerdCPUMS, l.ContainerdChildrenCPUMS, l.ShimCPUMS, l.LoggerCPUMS, l.SandboxCPUMS, l.RunCPUMS)
	}
	p("\nMemory per session:\n\n| N | shim PSS (KiB) | log writer PSS (KiB) | sandbox PSS (KiB) | total PSS (MiB) | airlockd RSS Δ (KiB) | containerd RSS Δ (KiB) | total with daemons (MiB) | cgroup memory (KiB) | processes | leftovers after removal |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, l := range d.Levels {
		p("| %d | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f | %.1f | %.0f | %.1f | %s |\n", l.N,
			l.ShimPSSKiB, l.LoggerPSSKiB, l.PayloadPSSKiB, l.TotalPSSKiB/1024,
			l.DaemonRSSPerSessionKiB, float64(l.ContainerdRSSAfterKiB-l.ContainerdRSSBeforeKiB)/float64(l.N),
			l.TotalWithDaemonKiB/1024, l.CgroupKiB, l.ProcessesPerSession, list(l.Leftovers))
	}
	for _, l := range d.Levels {
		if l.Error != "" {
			p("\nN=%d: %s\n", l.N, l.Error)
		}
	}
	if len(d.Skipped) > 0 {
		p("\nNot run (time budget used up): N = %v.\n", d.Skipped)
	}
	if d.Chart != "" {
		p("\n![start time vs live sessions](%s)\n", d.Chart)
	}
	p("\nPSS splits shared pages between the processes sharing them (the shim and logger binaries are shared by all sessions), so it is the fair per-session share; the RSS figures are in report.json. airlockd's RSS Δ is the difference across one burst and moves with its garbage collector (a negative value: the heap shrank meanwhile); the findings give the slope over all levels. \"One start while N run\" times %d single starts made one after another while the burst's N sessions are idle: flat means a live session does not slow the next start.\n\n", densityProbes)
}

func (g *GoBench) markdown(p printer) {
	p("## 7. Go benchmarks of the hot paths\n\nReproduce: `%s`. Raw output for benchstat: [%s](%s). Commands: ", g.Reproduce, g.File, g.File)
	for i, c := range g.Commands {
		if i > 0 {
			p("; ")
		}
		p("`%s`", c)
	}
	p(".\n\n| package | benchmark | time/op median (p10–p90) | B/op | allocs/op | other (median) |\n|---|---|---|---|---|---|\n")
	for _, r := range g.Rows {
		var other []string
		for _, u := range r.Units {
			if u == "ns/op" || u == "B/op" || u == "allocs/op" {
				continue
			}
			other = append(other, fmt.Sprintf("%s %s", num(r.Metrics[u].Median), u))
		}
		name := r.Name
		if len(name) > 64 {
			name = name[:61] + "..."
		}
		p("| %s | %s | %s | %s | %s | %s |\n", strings.TrimPrefix(r.Pkg, "github.com/airlock-sandbox/airlock/"), name,
			spreadDuration(r.Metrics["ns/op"]), num(r.Metrics["B/op"].Median), num(r.Metrics["allocs/op"].Median), strings.Join(other, ", "))
	}
	if g.Error != "" {
		p("\nErrors: %s\n", g.Error)
	}
	p("\n")
	for _, pr := range g.Profiles {
		p("CPU profile of `%s` (`%s`; full output in [%s](%s)):\n\n", pr.Name, pr.Command, pr.File, pr.File)
		if pr.Error != "" {
			p("not taken: %s\n\n", pr.Error)
			continue
		}
		p("```\n   flat%%    cum%%\n%s\n```\n\n", strings.Join(pr.Inclusive[:min(len(pr.Inclusive), 25)], "\n"))
		if len(pr.Callers) > 0 {
			p("Where goroutine stacks had to grow (callers of runtime.newstack, time under it):\n\n```\n%s\n```\n\n", strings.Join(pr.Callers, "\n"))
		}
	}
}

// num formats a metric compactly.
func num(x float64) string {
	switch {
	case x == 0:
		return "0"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

// spreadDuration formats a ns/op summary in one fitting unit.
func spreadDuration(s stats.Summary) string {
	if s.N == 0 {
		return "–"
	}
	unit, div := "ns", 1.0
	switch {
	case s.Median >= 1e9:
		unit, div = "s", 1e9
	case s.Median >= 1e6:
		unit, div = "ms", 1e6
	case s.Median >= 1e3:
		unit, div = "µs", 1e3
	}
	return fmt.Sprintf("%s (%s–%s) %s", num(s.Median/div), num(s.P10/div), num(s.P90/div), unit)
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// short drops a load name's parenthesised detail.
func short(name string) string {
	if i := strings.Index(name, " ("); i > 0 {
		return name[:i]
	}
	return name
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// signed formats a difference with its sign, rounded ("+12", "-3", "+0").
func signed(x float64) string {
	x = math.Round(x)
	if x == 0 {
		x = 0 // no "-0"
	}
	return fmt.Sprintf("%+.0f", x)
}

func mib(kib int64) float64 { return float64(kib) / 1024 }
