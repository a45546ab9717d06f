package perf

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// The L7 section's paths: a session without l7 (its connections are
// forwarded by the kernel), a session with l7 = "check" whose HTTPS the
// gateway peeks and splices, and one with inspect = "all" whose TLS it
// terminates.
const (
	L7PathL3          = "L3 (no l7)"
	L7PathPassThrough = "L7 pass-through"
	// L7PathFast is pass-through on the kernel fast path (airlockd
	// --l7-fast-path): the ClientHello checked from the gateway's queue,
	// the connection then forwarded by the kernel.
	L7PathFast       = "L7 pass-through, kernel fast path"
	L7PathTerminated = "L7 terminated"
	// L7PathPlain is the pass-through session's plain HTTP, which the
	// gateway serves request by request.
	L7PathPlain = "L7 (plain HTTP, served)"
)

// l7TermID is the terminated session's id; sessionCAName names its CA,
// the issuer a client sees when the gateway terminated its TLS.
const (
	l7TermID      = "perf-term"
	sessionCAName = "airlock session " + l7TermID
)

// Targets of the 1 GiB download, as a fraction of the L3 path's rate.
const (
	L7TargetPassThrough = 0.95
	L7TargetTerminated  = 0.5
)

// L7 compares the L7 gateway's paths with the L3 path of the same
// perimeter, on real namespaces.
type L7 struct {
	Rounds int `json:"rounds"`
	// Host is the world host every request goes to.
	Host string `json:"host"`
	// Setup says how the perimeter, the sessions, the server and the
	// clients were run.
	Setup      string         `json:"setup"`
	Sessions   []L7Session    `json:"sessions"`
	Latency    []L7Latency    `json:"latency"`
	Download   []L7Download   `json:"download"`
	Handshakes []L7Handshakes `json:"handshakes"`
	Idle       []L7Idle       `json:"idle"`
	// Audit counts the audit events each session's traffic left, by
	// layer and kind ("l7 request, terminated"): that the paths were
	// what they are called.
	Audit map[string]map[string]int `json:"audit"`
	// Profiles are CPU profiles of the harness process (the gateway)
	// during one more run of some loads.
	Profiles []Profile `json:"profiles,omitempty"`
	// Leftovers are kernel objects of the section still there after its
	// cleanup.
	Leftovers []string `json:"leftovers"`
	Seconds   float64  `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// L7Session is one of the section's sessions.
type L7Session struct {
	Name string `json:"name"`
	ID   string `json:"id"`
	// Egress is its manifest's egress block.
	Egress string `json:"egress"`
}

// L7Latency is the time per request of one protocol over one path.
type L7Latency struct {
	Protocol string `json:"protocol"`
	Path     string `json:"path"`
	// LatencyUS is each request's time (µs), all rounds together.
	LatencyUS stats.Summary `json:"latency_us"`
	// AddedP50US and AddedP99US are the differences to the L3 path of
	// the same protocol.
	AddedP50US float64 `json:"added_p50_us"`
	AddedP99US float64 `json:"added_p99_us"`
	// Conns is the connections opened per run (1: kept alive).
	Conns   int64  `json:"conns"`
	Proto   string `json:"proto"`
	Issuer  string `json:"issuer,omitempty"`
	Command string `json:"command"`
	Error   string `json:"error,omitempty"`
}

// L7Download is the 1 GiB download over one path.
type L7Download struct {
	Path string `json:"path"`
	// Gbps is the client's rate per round, request to last byte.
	Gbps stats.Summary `json:"gbps"`
	// Ratio is Gbps's median over the L3 path's; Target the least it
	// should be (0: none).
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target,omitempty"`
	// CPU seconds per GiB moved: GatewayCPU is the harness process's
	// (which runs the gateway), ClientCPU the client's, ServerCPU the
	// server's.
	GatewayCPU  stats.Summary `json:"gateway_cpu_s_per_gib"`
	ClientCPU   stats.Summary `json:"client_cpu_s_per_gib"`
	ServerCPU   stats.Summary `json:"server_cpu_s_per_gib"`
	FirstByteMS stats.Summary `json:"first_byte_ms"`
	Bytes       int64         `json:"bytes"`
	Issuer      string        `json:"issuer,omitempty"`
	Command     string        `json:"command"`
	Error       string        `json:"error,omitempty"`
}

// Met reports whether the download met its target.
func (d L7Download) Met() bool { return d.Target == 0 || d.Ratio >= d.Target }

// L7Handshakes is requests each on a new connection over one path.
type L7Handshakes struct {
	Path        string `json:"path"`
	Concurrency int    `json:"concurrency"`
	// PerSecond is each round's rate.
	PerSecond stats.Summary `json:"per_second"`
	// P50US and P99US are the median over rounds of each round's
	// request time percentiles.
	P50US float64 `json:"p50_us"`
	P99US float64 `json:"p99_us"`
	// GatewayCPUUS is the harness process's CPU per request (µs).
	GatewayCPUUS stats.Summary `json:"gateway_cpu_us"`
	Issuer       string        `json:"issuer,omitempty"`
	Command      string        `json:"command"`
	Error        string        `json:"error,omitempty"`
}

// L7Idle is what idle kept-alive connections through the gateway cost it.
type L7Idle struct {
	Path  string `json:"path"`
	Proto string `json:"proto"`
	Conns int    `json:"conns"`
	// Per connection: the live heap (after a GC), goroutine stacks and
	// goroutines of the harness process, and its RSS (after returning
	// freed memory to the OS).
	HeapKiB    float64 `json:"heap_kib"`
	StackKiB   float64 `json:"stack_kib"`
	Goroutines float64 `json:"goroutines"`
	RSSKiB     float64 `json:"rss_kib"`
	Command    string  `json:"command"`
	Error      string  `json:"error,omitempty"`
}

// latency returns the row of protocol and path.
func (l *L7) latency(protocol, path string) *L7Latency {
	for i := range l.Latency {
		if l.Latency[i].Protocol == protocol && l.Latency[i].Path == path {
			return &l.Latency[i]
		}
	}
	return nil
}

func (l *L7) download(path string) *L7Download {
	for i := range l.Download {
		if l.Download[i].Path == path {
			return &l.Download[i]
		}
	}
	return nil
}

func (l *L7) handshakes(path string) *L7Handshakes {
	for i := range l.Handshakes {
		if l.Handshakes[i].Path == path {
			return &l.Handshakes[i]
		}
	}
	return nil
}

// Protocols of the latency rows.
const (
	L7ProtoHTTP  = "plain HTTP/1.1"
	L7ProtoHTTPS = "HTTPS, HTTP/1.1"
	L7ProtoH2    = "HTTPS, HTTP/2"
)

func metText(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

// summary adds the section's headline rows to the report's summary.
func (l *L7) summary(p printer) {
	for _, proto := range []string{L7ProtoHTTPS, L7ProtoHTTP} {
		var parts, added []string
		base := l.latency(proto, L7PathL3)
		if base == nil || base.LatencyUS.N == 0 {
			continue
		}
		var names []string
		for _, path := range []string{L7PathPassThrough, L7PathFast, L7PathTerminated, L7PathPlain} {
			if r := l.latency(proto, path); r != nil && r.LatencyUS.N > 0 {
				names = append(names, shortPath(path))
				parts = append(parts, fmt.Sprintf("%.0f / %.0f", r.LatencyUS.Median, r.LatencyUS.P99))
				added = append(added, fmt.Sprintf("%s / %s", signed(r.AddedP50US), signed(r.AddedP99US)))
			}
		}
		if len(parts) == 0 {
			continue
		}
		p("| L7 gateway, %s request on a kept-alive connection, %s: p50 / p99 (µs) | %s | L3: %.0f / %.0f | %s µs |\n", proto, strings.Join(names, "; "),
			strings.Join(parts, "; "), base.LatencyUS.Median, base.LatencyUS.P99, strings.Join(added, "; "))
	}
	if base := l.download(L7PathL3); base != nil && base.Gbps.N > 0 {
		for _, path := range []string{L7PathPassThrough, L7PathFast, L7PathTerminated} {
			d := l.download(path)
			if d == nil || d.Gbps.N == 0 {
				continue
			}
			extra := ""
			if path == L7PathTerminated {
				extra = fmt.Sprintf("; gateway CPU %.2f s per GiB", d.GatewayCPU.Median)
			}
			p("| L7 gateway, %s HTTPS download, %s (Gbit/s; target ≥ ×%.2f: %s%s) | %.2f | L3: %.2f | ×%s |\n", size(d.Bytes), shortPath(path),
				d.Target, metText(d.Met()), extra, d.Gbps.Median, base.Gbps.Median, ratio(d.Gbps.Median, base.Gbps.Median))
		}
	}
	if base, t := l.handshakes(L7PathL3), l.handshakes(L7PathTerminated); base != nil && t != nil && base.PerSecond.N > 0 && t.PerSecond.N > 0 {
		p("| L7 gateway, TLS handshakes a second (a new connection per request, %d at once), terminated | %.0f | L3: %.0f | ×%s |\n", t.Concurrency, t.PerSecond.Median, base.PerSecond.Median, ratio(t.PerSecond.Median, base.PerSecond.Median))
	}
	for _, id := range l.Idle {
		if id.Error == "" && id.Conns > 0 && strings.HasPrefix(id.Path, L7PathTerminated) {
			p("| L7 gateway, memory per idle connection, %s %s (KiB: live heap + goroutine stacks) | %.1f | L3: none in user space | – |\n", shortPath(id.Path), id.Proto, id.HeapKiB+id.StackKiB)
		}
	}
}

// shortPath names an L7 path in the summary's rows.
func shortPath(path string) string {
	if path == L7PathPlain {
		return "served"
	}
	return strings.TrimPrefix(path, "L7 ")
}

// size formats a byte count in binary units.
func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

func (l *L7) markdown(p printer) {
	p("## 8. L7 gateway\n\nReproduce: `%s`. %d rounds; in each, every path runs in turn.\n\n", l.Reproduce, l.Rounds)
	p("Setup: %s\n\n", l.Setup)
	p("| session | id | egress block |\n|---|---|---|\n")
	for _, s := range l.Sessions {
		p("| %s | %s | `%s` |\n", s.Name, s.ID, s.Egress)
	}
	p("\nLatency per request, one after another on one kept-alive connection (time from sending the request to the end of the body):\n\n")
	p("| protocol | path | p50 / p90 / p99 (µs) | added p50 / p99 vs L3 (µs) | requests | connections per run | server certificate from | error |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range l.Latency {
		if r.LatencyUS.N == 0 {
			p("| %s | %s | – | – | 0 | – | – | %s |\n", r.Protocol, r.Path, r.Error)
			continue
		}
		p("| %s | %s | %.0f / %.0f / %.0f | %s / %s | %d | %d | %s | %s |\n", r.Protocol, r.Path, r.LatencyUS.Median, r.LatencyUS.P90, r.LatencyUS.P99,
			signed(r.AddedP50US), signed(r.AddedP99US), r.LatencyUS.N, r.Conns, orDash(r.Issuer), r.Error)
	}
	p("\nDownload of one body over HTTPS (HTTP/1.1, a new connection each round), rate from the request to the last byte; CPU per GiB moved, read around each download: the gateway's is the harness process's own (getrusage: the gateway, the DNS proxy, the world's DNS server and the harness, which is idle meanwhile; kernel work on its sockets is included as far as the kernel charges it to the process), the client's from its rusage, the server's from /proc/PID/stat:\n\n")
	p("| path | Gbit/s median (min–max) | × L3 | target | CPU s per GiB, median: gateway / client / server | first byte (ms) | server certificate from | error |\n|---|---|---|---|---|---|---|---|\n")
	for _, d := range l.Download {
		target := "–"
		if d.Target > 0 {
			target = fmt.Sprintf("≥ ×%.2f: %s", d.Target, metText(d.Met()))
		}
		if d.Gbps.N == 0 {
			p("| %s | – | – | %s | – | – | – | %s |\n", d.Path, target, d.Error)
			continue
		}
		p("| %s | %.2f (%.2f–%.2f) | ×%.2f | %s | %.2f / %.2f / %.2f | %.1f | %s | %s |\n", d.Path, d.Gbps.Median, d.Gbps.Min, d.Gbps.Max, d.Ratio, target,
			d.GatewayCPU.Median, d.ClientCPU.Median, d.ServerCPU.Median, d.FirstByteMS.Median, orDash(d.Issuer), d.Error)
	}
	p("\nClient, gateway and server share the machine's cores; on the terminated path the gateway decrypts and encrypts every byte once more, so the CPU columns say where the time goes.\n\n")
	if len(l.Handshakes) > 0 {
		p("TLS handshakes: requests each on a new connection (HTTP/1.1, full handshakes: the client keeps no session tickets), %d at once, for a bounded time per round:\n\n", l.Handshakes[0].Concurrency)
	}
	p("| path | handshakes/s median (min–max) | request p50 / p99 (µs) | gateway CPU per handshake (µs) | server certificate from | error |\n|---|---|---|---|---|---|\n")
	for _, h := range l.Handshakes {
		if h.PerSecond.N == 0 {
			p("| %s | – | – | – | – | %s |\n", h.Path, h.Error)
			continue
		}
		p("| %s | %.0f (%.0f–%.0f) | %.0f / %.0f | %.0f | %s | %s |\n", h.Path, h.PerSecond.Median, h.PerSecond.Min, h.PerSecond.Max, h.P50US, h.P99US, h.GatewayCPUUS.Median, orDash(h.Issuer), h.Error)
	}
	p("\nOn the terminated path the gateway does the client's handshake with a leaf of the session CA (minted once per name, cached) and reuses its own connection to the server (kept alive; HTTP/2 when the client spoke HTTP/2 and the server offers it, HTTP/1.1 otherwise); on the pass-through path each connection is dialled anew and the handshake is the server's.\n\n")
	p("Memory per idle connection: the client opens N connections, makes one request on each and leaves them open; the gateway's cost is the harness process's growth over N (live heap after a GC, goroutine stacks, goroutines; RSS after freed memory is returned to the OS). On the L3 path the kernel alone holds a connection (conntrack and socket buffers at the ends), nothing in user space.\n\n")
	p("| path | protocol | connections | live heap per connection (KiB) | goroutine stacks (KiB) | goroutines | RSS (KiB) | error |\n|---|---|---|---|---|---|---|---|\n")
	for _, id := range l.Idle {
		if id.Conns == 0 {
			p("| %s | %s | – | – | – | – | – | %s |\n", id.Path, id.Proto, id.Error)
			continue
		}
		p("| %s | %s | %d | %.1f | %.1f | %.1f | %.1f | %s |\n", id.Path, id.Proto, id.Conns, id.HeapKiB, id.StackKiB, id.Goroutines, id.RSSKiB, id.Error)
	}
	if len(l.Audit) > 0 {
		p("\nAudit events the sessions' traffic left (the L3 session's connections never reach the gateway; a pass-through connection is one event when it ends, a served request one event each): ")
		for i, s := range sortedKeys(l.Audit) {
			if i > 0 {
				p("; ")
			}
			p("%s: ", s)
			if len(l.Audit[s]) == 0 {
				p("none")
			}
			for j, k := range sortedKeys(l.Audit[s]) {
				if j > 0 {
					p(", ")
				}
				p("%s ×%d", k, l.Audit[s][k])
			}
		}
		p(".\n")
	}
	p("\nCommands (the harness runs each client in the session's network namespace; `$CA` trusts the world's CA and the session CA, `$DNS` is the session's DNS proxy):\n\n")
	seen := map[string]bool{}
	cmd := func(kind, c string) {
		if c != "" && !seen[c] {
			seen[c] = true
			p("- %s: `%s`\n", kind, c)
		}
	}
	for _, r := range l.Latency {
		cmd("latency, "+r.Protocol+", "+r.Path, r.Command)
	}
	for _, d := range l.Download {
		cmd("download, "+d.Path, d.Command)
	}
	for _, h := range l.Handshakes {
		cmd("handshakes, "+h.Path, h.Command)
	}
	for _, id := range l.Idle {
		cmd("idle, "+id.Path+", "+id.Proto, id.Command)
	}
	if len(l.Leftovers) > 0 {
		p("\nLeft after the section's cleanup: %s.\n", list(l.Leftovers))
	}
	p("\n")
	for _, pr := range l.Profiles {
		p("Where the gateway's CPU goes, `%s`: %s; full output in [%s](%s):\n\n", pr.Name, pr.Command, pr.File, pr.File)
		if pr.Error != "" {
			p("not taken: %s\n\n", pr.Error)
			continue
		}
		p("```\n   flat%%    cum%%\n%s\n```\n\n", strings.Join(pr.Inclusive[:min(len(pr.Inclusive), 30)], "\n"))
	}
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
