package perf

import (
	"fmt"
	"math"
	"strings"
)

// Symbols the findings look up in profiles.
const (
	symNewstack  = "runtime.newstack"
	symAuditEmit = "github.com/airlock-sandbox/airlock/internal/audit.(*Log).Emit"
	symJSON      = "encoding/json.Marshal"
	symPin       = "github.com/airlock-sandbox/airlock/egress/netns.(*Session).Pin"
	symGC        = "runtime.gcBgMarkWorker"
)

// Findings derives the report's observations from the numbers, so that
// they always describe the run they are printed with.
func (r *Report) Findings() []string {
	var out []string
	if cs := r.ColdStart; cs != nil && len(cs.Variants) >= 3 && cs.Variants[2].ExitMS.N > 0 {
		h, f, c := cs.Variants[0].ExitMS.Median, cs.Variants[1].ExitMS.Median, cs.Variants[2].ExitMS.Median
		if h > 0 && f > 0 {
			out = append(out, fmt.Sprintf("Cold start: `airlock run --rm` of a no-layer session takes %s than `ctr run --rm` of the same image on the same containerd. airlock adds the CLI, API round trips, manifest decoding and validation, the hardened spec (its seccomp filter limited to the native system call ABI, which runc builds in a third of the time of containerd's multi-ABI default) and the binary log writer; it saves the start and shutdown of a shim process per session, which ctr pays, since its sessions share one shim kept alive by an anchor container. The full perimeter (overlay workspace on a quota image, network namespace with nftables rules and DNS registration, one minted credential on a tmpfs) takes %s than no layers.", moreLess(h-c), moreLess(f-h)))
		}
	}
	if ws := r.WarmStart; ws != nil {
		out = append(out, ws.findings(r.ColdStart)...)
	}
	if td := r.Teardown; td != nil {
		for _, v := range td.Variants {
			if n := td.LastGone[v.Name]["none (all gone when rm returned)"]; n > 0 && v.GoneMS.N > 0 {
				out = append(out, fmt.Sprintf("Teardown, %s: in %d of %d runs every one of the %d tracked resources was already gone when `rm` returned; nothing leaked in %d runs.", v.Name, n, v.GoneMS.N, v.Resources, v.GoneMS.N))
			}
		}
	}
	if d := r.DNS; d != nil {
		var hit *DNSWorkload
		for i := range d.Workloads {
			if strings.HasPrefix(d.Workloads[i].Name, "throughput, cache hit") {
				hit = &d.Workloads[i]
			}
		}
		var prof *Profile
		for i := range d.Profiles {
			if strings.HasSuffix(d.Profiles[i].Name, "qps-hit") && d.Profiles[i].Error == "" {
				prof = &d.Profiles[i]
			}
		}
		if hit != nil && hit.Sandbox != nil && hit.Direct != nil {
			s := fmt.Sprintf("DNS proxy: under the cache-hit load it answers %.0f q/s against %.0f q/s for the world's server queried directly, and airlockd spends %.0f µs of CPU per query (the harness's DNS server: %.0f µs).",
				hit.Sandbox.QPS, hit.Direct.QPS, hit.SandboxServerCPUUS, hit.DirectServerCPUUS)
			if prof != nil {
				s += " In airlockd's profile (perf record, inclusive): " + shares(prof, []share{
					{"the session audit log (audit.Log.Emit: one encoded line a query, queued lines written together)", symAuditEmit},
					{"nftables pinning (Session.Pin)", symPin},
					{"goroutine stack growth (runtime.newstack)", symNewstack},
					{"encoding/json", symJSON},
					{"GC", symGC},
				}) + "."
				if prof.Share(symNewstack) >= 10 {
					s += " Goroutine stacks still grow on the query path: most queries pay for one or more stack copies."
				}
			}
			out = append(out, s)
		}
		if f := dnsMissFinding(d); f != "" {
			out = append(out, f)
		}
		if a := d.AuditRead; a.Events > 0 && a.DaemonPeakRSSKiB > 2*a.DaemonRSSBeforeKiB {
			out = append(out, fmt.Sprintf("Audit reads: `GET /v1/sessions/ID/audit` loads every event of the session into memory and encodes them at once: for %d events one read took %.2f s and airlockd's RSS from %.0f MiB to %.0f MiB; it was %.0f MiB before the DNS loads and peaked at %.0f MiB. A session that resolves names all day makes this grow without bound; a streamed (or paged) read would keep it flat.",
				a.Events, a.Seconds, mib(a.DaemonRSSBeforeReadKiB), mib(a.DaemonRSSAfterReadKiB), mib(a.DaemonRSSBeforeKiB), mib(a.DaemonPeakRSSKiB)))
		}
	}
	if g := r.GoBench; g != nil {
		on, off := benchMedian(g, "BenchmarkProxyAudited/audit=jsonl", "qps"), benchMedian(g, "BenchmarkProxyAudited/audit=off", "qps")
		var jsonl, bare *Profile
		for i := range g.Profiles {
			switch g.Profiles[i].Name {
			case "proxy-audited-jsonl":
				jsonl = &g.Profiles[i]
			case "proxy-audited-off":
				bare = &g.Profiles[i]
			}
		}
		if on > 0 && off > 0 {
			s := fmt.Sprintf("In-process proxy harness (perf.BenchmarkProxyAudited, real UDP sockets, cache hits): %.0f q/s with the daemon's audit encoding, %.0f q/s without (×%.2f).", on, off, on/off)
			if jsonl != nil && bare != nil && jsonl.Error == "" && bare.Error == "" {
				s += " pprof, with audit: " + shares(jsonl, []share{{"runtime.newstack", symNewstack}, {"json.Marshal", symJSON}, {"audit.Log.Emit", symAuditEmit}}) +
					"; without: " + shares(bare, []share{{"runtime.newstack", symNewstack}}) + "."
				if c := callerShares(jsonl.Callers); len(c) > 0 && jsonl.Share(symNewstack) >= 5 {
					s += " With audit on, the stack overflowed in " + strings.Join(c, ", ") + " (share of runtime.newstack's time)."
				}
			}
			out = append(out, s)
		}
	}
	if d := r.Density; d != nil && len(d.Levels) > 0 {
		first, last := d.Levels[0], d.Levels[len(d.Levels)-1]
		if last.TotalPSSKiB > 0 {
			shim := "the runc shim"
			if last.Shims == 1 && last.N > 1 {
				shim = fmt.Sprintf("its 1/%d share of the one runc shim all sessions share and of the anchor that keeps it alive", last.N)
			}
			s := fmt.Sprintf("Memory: at N=%d an idle session costs %.1f MiB PSS: %s %.1f MiB, the log writer (airlock-logger, containerd's binary logger, one small static process per session) %.1f MiB, the session's own processes %.1f MiB.",
				last.N, last.TotalPSSKiB/1024, shim, last.ShimPSSKiB/1024, last.LoggerPSSKiB/1024, last.PayloadPSSKiB/1024)
			if slope, ok := daemonRSSSlope(d.Levels); ok {
				s += fmt.Sprintf(" airlockd's RSS with N sessions running grows by %.0f KiB per session (least-squares slope over the levels; single differences move with its garbage collector).", slope)
			}
			out = append(out, s)
		}
		if first.SequentialMS.N > 0 && last.SequentialMS.N > 0 && last.StartMS.N > 0 {
			out = append(out, fmt.Sprintf("Start under load: one start while %d sessions idle takes %.0f ms (%.0f ms while %d idle), so live sessions do not slow a start; starting %d at once, each request waits in line (median %.0f ms, p90 %.0f ms) while the amortised cost stays at %.0f ms per session (%.0f ms at N=%d).",
				last.N, last.SequentialMS.Median, first.SequentialMS.Median, first.N, last.N, last.StartMS.Median, last.StartMS.P90, last.WallMS/float64(last.N), first.WallMS/float64(first.N), first.N))
		}
		if last.RunCPUMS > 0 {
			s := fmt.Sprintf("Start cost: in the burst of %d each start used %.0f ms of CPU across the run's processes: airlockd %.0f ms, containerd %.0f ms plus %.0f ms in the processes it starts and reaps (the shim's start-up process), the shim with its runc invocations %.0f ms, the log writer %.0f ms, the session's process (runc init before the exec) %.0f ms.",
				last.N, last.RunCPUMS, last.DaemonCPUMS, last.ContainerdCPUMS, last.ContainerdChildrenCPUMS, last.ShimCPUMS, last.LoggerCPUMS, last.SandboxCPUMS)
			if last.DaemonCPUMS < 0.2*last.RunCPUMS {
				s += fmt.Sprintf(" airlockd's own share is %.0f%%: the cost is the container runtime's.", 100*last.DaemonCPUMS/last.RunCPUMS)
			}
			s += fmt.Sprintf(" With %d cores, that bounds the rate at about %.0f starts/s.", r.Machine.NProc, 1000*float64(max(r.Machine.NProc, 1))/last.RunCPUMS)
			out = append(out, s)
		}
	}
	if t := r.TCP; t != nil && len(t.Paths) == 3 && t.Paths[2].Gbps.Median > 0 {
		out = append(out, fmt.Sprintf("TCP: bulk throughput through the perimeter is ×%.2f (by name) and ×%.2f (by CIDR) of the plain veth path; a new connection's connect time differs by %s µs at p50 (the perimeter adds conntrack, nftables lookups and masquerade).",
			t.Paths[0].Gbps.Median/t.Paths[2].Gbps.Median, t.Paths[1].Gbps.Median/t.Paths[2].Gbps.Median, signed(t.Paths[0].ConnectUS.Median-t.Paths[2].ConnectUS.Median)))
	}
	if l := r.L7; l != nil {
		out = append(out, l.findings()...)
	}
	if a := r.AgentStart; a != nil {
		out = append(out, a.findings()...)
	}
	return out
}

// findings are the L7 section's observations.
func (l *L7) findings() []string {
	var out []string
	base, pass, term := l.download(L7PathL3), l.download(L7PathPassThrough), l.download(L7PathTerminated)
	if base != nil && pass != nil && term != nil && base.Gbps.N > 0 && pass.Gbps.N > 0 && term.Gbps.N > 0 {
		s := fmt.Sprintf("L7 gateway, %s HTTPS download: passed through (SNI peeked, then spliced in user space) it runs at ×%.2f of the L3 path (target ≥ ×%.2f: %s), terminated at ×%.2f (target ≥ ×%.2f: %s). Per GiB, the gateway's process spends %.2f s of CPU on the terminated path and %.2f s passing through, against %.2f s for the client and %.2f s for the server on the terminated path.",
			size(term.Bytes), pass.Ratio, pass.Target, metText(pass.Met()), term.Ratio, term.Target, metText(term.Met()),
			term.GatewayCPU.Median, pass.GatewayCPU.Median, term.ClientCPU.Median, term.ServerCPU.Median)
		// Where client, server and gateway share the cores and the rate
		// is bound by CPU, the L3 path's rate scales by the share of the
		// CPU per GiB that is not the gateway's.
		if l3 := base.ClientCPU.Median + base.ServerCPU.Median; l3 > 0 {
			s += fmt.Sprintf(" If the transfer is bound by CPU (client, server and gateway on the same cores), that alone predicts ×%.2f passed through and ×%.2f terminated (the L3 path's client and server CPU per GiB, %.2f s, over the same plus the gateway's).",
				l3/(l3+pass.GatewayCPU.Median), l3/(l3+term.GatewayCPU.Median), l3)
			// The ends' own CPU per GiB differs by path too (the
			// kernel charges them their sockets' and the forwarding's
			// work): the whole of it on each path.
			all := func(d *L7Download) float64 { return d.ClientCPU.Median + d.ServerCPU.Median + d.GatewayCPU.Median }
			if all(pass) > 0 && all(term) > 0 {
				s += fmt.Sprintf(" Counting all three processes' CPU per GiB on each path (passed through %.2f s, terminated %.2f s), it predicts ×%.2f and ×%.2f.",
					all(pass), all(term), l3/all(pass), l3/all(term))
			}
		}
		if base.GatewayCPU.Median > 0.05*term.GatewayCPU.Median {
			s += fmt.Sprintf(" The L3 path, which the gateway never sees, still shows %.2f s per GiB in that process: the part of the figures that is not the gateway's.", base.GatewayCPU.Median)
		}
		out = append(out, s)
	}
	if fast := l.download(L7PathFast); base != nil && fast != nil && base.Gbps.N > 0 && fast.Gbps.N > 0 {
		s := fmt.Sprintf("L7 gateway, %s HTTPS download on the kernel fast path (airlockd --l7-fast-path: the ClientHello held in the gateway's netfilter queue and checked, the connection then forwarded by the kernel as on the L3 path): ×%.2f of the L3 path (target ≥ ×%.2f: %s), %.2f s of the gateway's CPU per GiB.",
			size(fast.Bytes), fast.Ratio, fast.Target, metText(fast.Met()), fast.GatewayCPU.Median)
		// The same CPU-bound model as above: here the gateway is off the
		// path, so what differs is the client's and the server's CPU per
		// GiB (their sockets' and the kernel's forwarding work, which
		// the kernel charges to them).
		l3 := base.ClientCPU.Median + base.ServerCPU.Median
		if f := fast.ClientCPU.Median + fast.ServerCPU.Median + fast.GatewayCPU.Median; l3 > 0 && f > 0 {
			s += fmt.Sprintf(" The client and the server spent %.2f s of CPU per GiB on it (gateway included) against %.2f s on the L3 path: if the transfer is bound by CPU, that alone predicts ×%.2f.", f, l3, l3/f)
			if fast.Ratio < fast.Target && l3/f < fast.Target {
				s += " The shortfall is the CPU the transfer's own ends spent, not the gateway's"
				if lo, hi := base.Gbps.Min, fast.Gbps.Max; fast.Gbps.N > 0 && base.Gbps.N > 0 && hi >= lo {
					s += fmt.Sprintf("; the two paths' rates overlap (L3 %.2f–%.2f Gbit/s, fast path %.2f–%.2f)", base.Gbps.Min, base.Gbps.Max, fast.Gbps.Min, fast.Gbps.Max)
				}
				s += "."
			}
		}
		if fl := l.latency(L7ProtoHTTPS, L7PathFast); fl != nil && fl.LatencyUS.N > 0 {
			s += fmt.Sprintf(" A request on a kept-alive connection adds %s µs at p50 (the gateway is not on its path).", signed(fl.AddedP50US))
		}
		if hf, hb := l.handshakes(L7PathFast), l.handshakes(L7PathL3); hf != nil && hb != nil && hf.PerSecond.N > 0 && hb.PerSecond.N > 0 {
			s += fmt.Sprintf(" New connections: %.0f TLS handshakes a second against %.0f on the L3 path (×%.2f): each connection's SYN and first packets take a round trip through the gateway.",
				hf.PerSecond.Median, hb.PerSecond.Median, hf.PerSecond.Median/hb.PerSecond.Median)
		}
		out = append(out, s)
	}
	pl, tl := l.latency(L7ProtoHTTPS, L7PathPassThrough), l.latency(L7ProtoHTTPS, L7PathTerminated)
	hs, hb := l.handshakes(L7PathTerminated), l.handshakes(L7PathL3)
	if pl != nil && tl != nil && pl.LatencyUS.N > 0 && tl.LatencyUS.N > 0 {
		s := fmt.Sprintf("L7 gateway, per request: on a kept-alive HTTPS connection, passing through adds %s µs at p50 and terminating %s µs (each request read, checked, audited and sent on over the gateway's own connection).",
			signed(pl.AddedP50US), signed(tl.AddedP50US))
		if hs != nil && hb != nil && hs.PerSecond.N > 0 && hb.PerSecond.N > 0 {
			s += fmt.Sprintf(" New connections: %.0f TLS handshakes a second through the terminating gateway against %.0f on the L3 path (×%.2f), %.0f µs of the gateway's CPU each.",
				hs.PerSecond.Median, hb.PerSecond.Median, hs.PerSecond.Median/hb.PerSecond.Median, hs.GatewayCPUUS.Median)
		}
		out = append(out, s)
	}
	var idle []string
	for _, id := range l.Idle {
		if id.Conns > 0 && id.Error == "" {
			idle = append(idle, fmt.Sprintf("%s %s %.0f KiB (%.0f goroutines)", shortPath(id.Path), id.Proto, id.HeapKiB+id.StackKiB, id.Goroutines))
		}
	}
	if len(idle) > 0 {
		out = append(out, "L7 gateway, memory per idle connection (live heap and goroutine stacks): "+strings.Join(idle, "; ")+".")
	}
	return out
}

func benchMedian(g *GoBench, name, unit string) float64 {
	for _, r := range g.Rows {
		if r.Name == name {
			return r.Metrics[unit].Median
		}
	}
	return 0
}

// share names a symbol for shares.
type share struct{ label, sym string }

// shares lists the labelled symbols' shares of a profile's samples, and
// says which did not appear at all.
func shares(p *Profile, list []share) string {
	var have, absent []string
	for _, sh := range list {
		if v := p.Share(sh.sym); v > 0 {
			have = append(have, sh.label+" "+pct(v))
		} else {
			absent = append(absent, sh.label)
		}
	}
	out := strings.Join(have, ", ")
	if len(absent) > 0 {
		if out != "" {
			out += "; "
		}
		out += "not in the samples: " + strings.Join(absent, ", ")
	}
	return out
}

func pct(x float64) string {
	if x < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", x)
}

// callerShares turns pprof -peek caller lines ("1.30s 58.56% | fn") into
// "fn (58.6%)", leaving out runtime.morestack itself.
func callerShares(lines []string) []string {
	var out []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) < 4 || f[2] != "|" || f[3] == "runtime.morestack" {
			continue
		}
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSuffix(f[1], "%"), "%g", &v); err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%.1f%%)", f[3], v))
	}
	return out
}

// daemonRSSSlope fits airlockd's RSS with N sessions running against N
// (least squares) and returns KiB per session; it needs two levels.
func daemonRSSSlope(levels []DensityLevel) (float64, bool) {
	var n, sx, sy, sxx, sxy float64
	for _, l := range levels {
		if l.DaemonRSSAfterKiB <= 0 {
			continue
		}
		x, y := float64(l.N), float64(l.DaemonRSSAfterKiB)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if n < 2 || den == 0 {
		return 0, false
	}
	return (n*sxy - sx*sy) / den, true
}

// moreLess says "N ms more" or "N ms less".
func moreLess(ms float64) string {
	ms = math.Round(ms)
	if ms < 0 {
		return fmt.Sprintf("%.0f ms less", -ms)
	}
	return fmt.Sprintf("%.0f ms more", ms)
}

// dnsMissFinding reads the cache-miss throughput load's CPU budgets: how
// much of the machine a query costs through the proxy and direct, and the
// rate a proxy that cost nothing would reach, against the target of half
// the direct rate.
func dnsMissFinding(d *DNS) string {
	miss := dnsWorkload(d, "throughput, cache miss")
	if miss == nil || miss.Sandbox == nil || miss.Direct == nil || miss.SandboxBudget == nil || miss.DirectBudget == nil ||
		miss.Direct.QPS == 0 || miss.SandboxBudget.TotalUS == 0 || miss.DirectBudget.TotalUS == 0 {
		return ""
	}
	s, x := miss.SandboxBudget, miss.DirectBudget
	outside := s.TotalUS - s.ProxyUS
	out := fmt.Sprintf("DNS cache misses: through the proxy the machine spends %.0f µs of CPU per answered query, direct %.0f µs (client %.0f / %.0f, world server %.0f / %.0f, irq+softirq %.0f / %.0f, rest %.0f / %.0f; airlockd %.0f), with %.0f%% and %.0f%% of the cores busy: the rates are ×%.2f (measured) and the budgets give ×%.2f.",
		s.TotalUS, x.TotalUS, s.ClientUS, x.ClientUS, s.ServerUS, x.ServerUS, s.IRQUS, x.IRQUS, s.RestUS, x.RestUS, s.ProxyUS,
		100*s.Busy, 100*x.Busy, miss.Sandbox.QPS/miss.Direct.QPS, x.TotalUS/s.TotalUS)
	if outside > 0 {
		out += fmt.Sprintf(" A proxy that cost nothing, the other parts unchanged, would leave %.0f µs a query: a ceiling of ×%.2f of the direct rate.", outside, x.TotalUS/outside)
	}
	if room := 2*x.TotalUS - outside; room > 0 {
		out += fmt.Sprintf(" Half the direct rate (the target ×0.5) needs at most %.0f µs a query in all: at most %.0f µs in airlockd with the other parts unchanged (now %.0f).", 2*x.TotalUS, room, s.ProxyUS)
	} else {
		out += fmt.Sprintf(" Half the direct rate (the target ×0.5) needs at most %.0f µs a query in all, which the other parts alone reach: no cut in airlockd's own CPU meets it unless theirs shrinks too.", 2*x.TotalUS)
	}
	if hit := dnsWorkload(d, "throughput, cache hit"); hit != nil && hit.SandboxBudget != nil && hit.DirectBudget != nil {
		hs, hx := hit.SandboxBudget, hit.DirectBudget
		out += fmt.Sprintf(" The client costs %.0f µs a query in the sandbox against %.0f µs direct here, %.0f against %.0f under the cache-hit load, and the world server %.0f against %.0f",
			s.ClientUS, x.ClientUS, hs.ClientUS, hx.ClientUS, s.ServerUS, x.ServerUS)
		if hs.ClientUS <= 1.2*hx.ClientUS {
			out += ": what the sandbox path adds to them is not the sandbox itself (its seccomp filter, cgroup, veth hop and rules are the same for hits) but the longer round trip, for which every client and the server sleep and are woken again once a query."
		} else {
			out += "."
		}
	}
	return out
}

// dnsWorkload returns the DNS load whose name starts with prefix.
func dnsWorkload(d *DNS, prefix string) *DNSWorkload {
	for i := range d.Workloads {
		if strings.HasPrefix(d.Workloads[i].Name, prefix) {
			return &d.Workloads[i]
		}
	}
	return nil
}
