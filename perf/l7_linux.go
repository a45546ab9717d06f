package perf

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/sessionca"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/perf/load"
	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
)

// L7Host is the world host of the L7 section: the load server (perfload
// serve) on its ports 80 and 443.
var (
	L7Host     = "files.l7.perf.test"
	l7HostAddr = netip.MustParseAddr("10.214.0.40")
)

// L7Config bounds the L7 section.
type L7Config struct {
	// Perfload is the static load generator; Repo the checkout (the
	// report shows paths in it relative to it).
	Perfload, Repo string
	// Rounds: in each, every path runs each load once.
	Rounds int
	// Requests is the timed requests of a latency run (after 20 untimed).
	Requests int
	// DownloadBytes is the body of each download.
	DownloadBytes int64
	// HandshakeTime bounds each handshake run, HandshakeConc requests at
	// once.
	HandshakeTime time.Duration
	HandshakeConc int
	// IdleConns is the connections of each idle run (a session takes at
	// most l7.DefaultMaxSessionConns through the gateway at once).
	IdleConns int
	// ProfileDir, if set, receives CPU profiles of this process (the
	// gateway) during one more run of some loads.
	ProfileDir string
	Logf       func(format string, args ...any)
}

// DefaultL7Config is what `make perf` measures.
func DefaultL7Config() L7Config {
	return L7Config{Rounds: 3, Requests: 1000, DownloadBytes: 1 << 30, HandshakeTime: 2 * time.Second, HandshakeConc: 4, IdleConns: 200}
}

// l7Session is one of the section's sessions.
type l7Session struct {
	L7Session
	netns string
	dns   string // its DNS proxy, ADDR:PORT
}

// MeasureL7 runs the L7 section: a world namespace of its own with the
// load server (perfload serve, its own process, HTTP on 80 and HTTPS with
// a certificate of the world's CA on 443), the perimeter (egress.Open, the
// gateway and DNS proxy airlockd runs) in this process with the world as
// uplink, and three sessions behind it: L3 (no l7), l7 = "check" (HTTPS
// passed through after the SNI check, plain HTTP served), and l7 =
// "check" with inspect = "all" (TLS terminated with a session CA). The
// clients (perfload, their own processes) run in the sessions' network
// namespaces. Everything it creates is removed before it returns.
func MeasureL7(ctx context.Context, cfg L7Config) (*L7, error) {
	start := time.Now()
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.IdleConns <= 0 || cfg.Rounds <= 0 || cfg.Requests <= 0 || cfg.DownloadBytes <= 0 || cfg.HandshakeConc <= 0 || cfg.HandshakeTime <= 0 {
		return nil, fmt.Errorf("l7: every bound must be positive: %+v", cfg)
	}
	root, err := os.MkdirTemp("/tmp", "alperf-l7-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	h := &l7Harness{cfg: cfg, logf: logf, root: root, prefix: "pl" + tag, worldPrefix: "pm" + tag}
	// The perimeter logs as airlockd does under `make perf` (--log-level
	// warn): not every DNS answer.
	ctx = log.WithLogger(ctx, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	res, err := h.run(ctx)
	cerr := h.close(context.WithoutCancel(ctx))
	if res != nil {
		res.Leftovers = h.leftovers()
		res.Seconds = time.Since(start).Seconds()
	}
	return res, errors.Join(err, cerr)
}

type l7Harness struct {
	cfg                 L7Config
	logf                func(string, ...any)
	root                string
	prefix, worldPrefix string

	world    *world.World
	server   *exec.Cmd
	perim    *egress.Perimeter
	audit    *audit.Log
	sessions []*l7Session
	bundle   string // the clients' roots: the world's CA and the session CA
}

func (h *l7Harness) run(ctx context.Context) (*L7, error) {
	for _, n := range []string{h.prefix + "-gw", h.worldPrefix + "-world"} {
		if _, err := os.Stat(filepath.Join(netns.DefaultDir, n)); err == nil {
			return nil, fmt.Errorf("l7: namespace %s exists; run again", n)
		}
	}
	var err error
	if h.world, err = world.Start(ctx, world.Config{Prefix: h.worldPrefix}); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	// The name, and the address on the world's loopback (with only an
	// echo on port 7): the load server listens on its ports 80 and 443.
	if err := h.world.AddRecord(L7Host, l7HostAddr); err != nil {
		return nil, err
	}
	if err := h.world.AddTCPEcho(netip.AddrPortFrom(l7HostAddr, 7)); err != nil {
		return nil, err
	}
	ca, err := sessionca.New(l7TermID)
	if err != nil {
		return nil, err
	}
	if err := h.startServer(ctx, ca); err != nil {
		return nil, fmt.Errorf("load server: %w", err)
	}
	h.audit = audit.Open(filepath.Join(h.root, audit.File))
	h.perim, err = egress.Open(ctx, h.prefix, egress.Config{
		Uplink:        "netns:" + h.world.NetnsName(),
		DNSUpstreams:  []string{h.world.DNSAddr().String()},
		AllowPrivate:  []netip.Prefix{h.world.Net()},
		UpstreamRoots: h.world.CertPool(),
		FastPath:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("perimeter: %w", err)
	}
	allow := []string{L7Host + ":80", L7Host + ":443"}
	allowHCL := fmt.Sprintf(`allow = ["%s", "%s"]`, allow[0], allow[1])
	for _, s := range []struct {
		name, id string
		eg       *policies.Egress
		hcl      string
		ca       egress.Issuer
		raw      bool
	}{
		{L7PathL3, "perf-l3", &policies.Egress{Allow: allow}, allowHCL, nil, false},
		// A sandbox that may write its own packets (CAP_NET_RAW) never
		// takes the fast path: perf-pass's HTTPS to the load server goes
		// through the gateway's listener, spliced.
		{L7PathPassThrough, "perf-pass", &policies.Egress{Allow: allow, L7: policies.L7Check},
			allowHCL + `, l7 = "check" (the sandbox granted CAP_NET_RAW: off the fast path)`, nil, true},
		{L7PathFast, "perf-fast", &policies.Egress{Allow: allow, L7: policies.L7Check}, allowHCL + `, l7 = "check"` + ` (airlockd --l7-fast-path)`, nil, false},
		{L7PathTerminated, l7TermID, &policies.Egress{Allow: allow, L7: policies.L7Check, Inspect: policies.InspectAll}, allowHCL + `, l7 = "check", inspect = "all"`, ca, false},
	} {
		dir := filepath.Join(h.root, s.id)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		es, err := h.perim.AddSession(ctx, s.id, egress.SessionConfig{Egress: s.eg, Dir: dir, Audit: h.audit.EmitDecision, CA: s.ca, RawPackets: s.raw})
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", s.id, err)
		}
		resolver, err := load.ResolvConfServer(es.ResolvConf())
		if err != nil {
			return nil, err
		}
		h.sessions = append(h.sessions, &l7Session{L7Session: L7Session{Name: s.name, ID: s.id, Egress: "egress { " + s.hcl + " }"}, netns: es.NetnsPath(), dns: resolver})
	}
	l3, pass, fast, term := h.sessions[0], h.sessions[1], h.sessions[2], h.sessions[3]

	res := &L7{Rounds: h.cfg.Rounds, Host: L7Host, Audit: map[string]map[string]int{}}
	res.Setup = fmt.Sprintf("the perimeter (egress.Open, as airlockd opens it: the gateway namespace with its nftables rules, the DNS proxy and the L7 gateway) runs in the harness's own process, with a world namespace of its own as uplink; "+
		"its sessions are network namespaces behind the gateway as airlockd makes them, without a container: each client is `perfload` run in one with nsenter, outside any cgroup limit. "+
		"The server is `perfload serve`, its own process in the world namespace, on %s:80 (HTTP) and :443 (HTTPS, HTTP/1.1 and HTTP/2, a certificate of the world's CA, which the gateway's upstream roots hold). "+
		"The terminated session's CA is a session CA as airlockd makes one (egress/sessionca: ECDSA P-256, one leaf per name, minted on first use and cached). Every event the gateway audits is written to an audit log as airlockd writes a session's.", L7Host)
	for _, s := range h.sessions {
		res.Sessions = append(res.Sessions, s.L7Session)
	}

	worldCA := "airlock test world CA " + h.worldPrefix
	httpURL := fmt.Sprintf("http://%s%s", L7Host, load.SmallPath)
	httpsURL := fmt.Sprintf("https://%s%s", L7Host, load.SmallPath)
	bytesURL := fmt.Sprintf("https://%s%s?n=%d", L7Host, load.BytesPath, h.cfg.DownloadBytes)
	issuerFor := func(s *l7Session, url string) string {
		switch {
		case strings.HasPrefix(url, "http:"):
			return ""
		case s == term:
			return sessionCAName
		}
		return worldCA
	}

	// Latency.
	type latCell struct {
		row     L7Latency
		s       *l7Session
		url     string
		h2      bool
		samples []float64
	}
	var cells []*latCell
	for _, c := range []struct {
		proto, path string
		s           *l7Session
		url         string
		h2          bool
	}{
		{L7ProtoHTTP, L7PathL3, l3, httpURL, false},
		{L7ProtoHTTP, L7PathPlain, pass, httpURL, false},
		{L7ProtoHTTPS, L7PathL3, l3, httpsURL, false},
		{L7ProtoHTTPS, L7PathPassThrough, pass, httpsURL, false},
		{L7ProtoHTTPS, L7PathFast, fast, httpsURL, false},
		{L7ProtoHTTPS, L7PathTerminated, term, httpsURL, false},
		{L7ProtoH2, L7PathL3, l3, httpsURL, true},
		{L7ProtoH2, L7PathPassThrough, pass, httpsURL, true},
		{L7ProtoH2, L7PathFast, fast, httpsURL, true},
		{L7ProtoH2, L7PathTerminated, term, httpsURL, true},
	} {
		cells = append(cells, &latCell{row: L7Latency{Protocol: c.proto, Path: c.path}, s: c.s, url: c.url, h2: c.h2})
	}
	h.logf("l7: latency, %d rounds of %d requests per path and protocol", h.cfg.Rounds, h.cfg.Requests)
	for range h.cfg.Rounds {
		for _, c := range cells {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			args := []string{"-url", c.url, "-n", fmt.Sprint(h.cfg.Requests)}
			if c.h2 {
				args = append(args, "-h2")
			}
			argv := h.client(c.s, "requests", args...)
			c.row.Command = h.display(argv, c.s)
			var r load.RequestsResult
			if _, err := h.runClient(ctx, argv, &r); err != nil {
				c.row.Error = err.Error()
				continue
			}
			if want := issuerFor(c.s, c.url); r.Issuer != want {
				c.row.Error = fmt.Sprintf("server certificate from %q, want %q", r.Issuer, want)
				continue
			}
			c.samples = append(c.samples, r.LatencyUS...)
			c.row.Conns, c.row.Proto, c.row.Issuer = r.Conns, r.Proto, r.Issuer
		}
	}
	for _, c := range cells {
		c.row.LatencyUS = stats.Summarize(c.samples)
	}
	for _, c := range cells {
		for _, b := range cells {
			if b.row.Protocol == c.row.Protocol && b.row.Path == L7PathL3 && b.row.LatencyUS.N > 0 && c.row.LatencyUS.N > 0 {
				c.row.AddedP50US = c.row.LatencyUS.Median - b.row.LatencyUS.Median
				c.row.AddedP99US = c.row.LatencyUS.P99 - b.row.LatencyUS.P99
			}
		}
		res.Latency = append(res.Latency, c.row)
	}

	// Download.
	type dlPath struct {
		row                      L7Download
		s                        *l7Session
		gbps, gw, cl, sv, firstB []float64
	}
	dls := []*dlPath{
		{row: L7Download{Path: L7PathL3}, s: l3},
		{row: L7Download{Path: L7PathPassThrough, Target: L7TargetPassThrough}, s: pass},
		{row: L7Download{Path: L7PathFast, Target: L7TargetPassThrough}, s: fast},
		{row: L7Download{Path: L7PathTerminated, Target: L7TargetTerminated}, s: term},
	}
	h.logf("l7: download of %s, %d rounds per path", size(h.cfg.DownloadBytes), h.cfg.Rounds)
	for range h.cfg.Rounds {
		for _, d := range dls {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			argv := h.client(d.s, "download", "-url", bytesURL, "-want", fmt.Sprint(h.cfg.DownloadBytes))
			d.row.Command = h.display(argv, d.s)
			var r load.DownloadResult
			g0, s0 := selfCPU(), cpuTime(h.server.Process.Pid)
			ccpu, err := h.runClient(ctx, argv, &r)
			g1, s1 := selfCPU(), cpuTime(h.server.Process.Pid)
			if err != nil {
				d.row.Error = err.Error()
				continue
			}
			if want := issuerFor(d.s, bytesURL); r.Issuer != want {
				d.row.Error = fmt.Sprintf("server certificate from %q, want %q", r.Issuer, want)
				continue
			}
			gib := float64(r.Bytes) / (1 << 30)
			d.gbps = append(d.gbps, r.Gbps)
			d.gw = append(d.gw, (g1-g0).Seconds()/gib)
			d.cl = append(d.cl, ccpu.Seconds()/gib)
			d.sv = append(d.sv, (s1-s0).Seconds()/gib)
			d.firstB = append(d.firstB, r.FirstByteMS)
			d.row.Bytes, d.row.Issuer = r.Bytes, r.Issuer
		}
	}
	for _, d := range dls {
		d.row.Gbps, d.row.GatewayCPU, d.row.ClientCPU, d.row.ServerCPU, d.row.FirstByteMS =
			stats.Summarize(d.gbps), stats.Summarize(d.gw), stats.Summarize(d.cl), stats.Summarize(d.sv), stats.Summarize(d.firstB)
		if base := dls[0].row.Gbps.Median; base > 0 {
			d.row.Ratio = d.row.Gbps.Median / base
		}
		res.Download = append(res.Download, d.row)
	}

	// Handshakes.
	type hsPath struct {
		row      L7Handshakes
		s        *l7Session
		rate, gw []float64
		p50, p99 []float64
	}
	hss := []*hsPath{{row: L7Handshakes{Path: L7PathL3}, s: l3}, {row: L7Handshakes{Path: L7PathPassThrough}, s: pass}, {row: L7Handshakes{Path: L7PathFast}, s: fast}, {row: L7Handshakes{Path: L7PathTerminated}, s: term}}
	h.logf("l7: handshakes, %d rounds of %v per path", h.cfg.Rounds, h.cfg.HandshakeTime)
	for range h.cfg.Rounds {
		for _, hp := range hss {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			argv := h.client(hp.s, "handshakes", "-url", httpsURL, "-c", fmt.Sprint(h.cfg.HandshakeConc), "-n", "100000", "-d", h.cfg.HandshakeTime.String())
			hp.row.Command, hp.row.Concurrency = h.display(argv, hp.s), h.cfg.HandshakeConc
			var r load.HandshakeResult
			g0 := selfCPU()
			_, err := h.runClient(ctx, argv, &r)
			g1 := selfCPU()
			if err != nil {
				hp.row.Error = err.Error()
				continue
			}
			if want := issuerFor(hp.s, httpsURL); r.Issuer != want || r.Requests == 0 || r.Conns < int64(r.Requests) {
				hp.row.Error = fmt.Sprintf("%d requests on %d connections, server certificate from %q (want a connection each, from %q)", r.Requests, r.Conns, r.Issuer, want)
				continue
			}
			hp.rate = append(hp.rate, r.PerSecond)
			hp.p50, hp.p99 = append(hp.p50, r.LatencyUS.Median), append(hp.p99, r.LatencyUS.P99)
			hp.gw = append(hp.gw, float64(g1-g0)/float64(time.Microsecond)/float64(r.Requests))
			hp.row.Issuer = r.Issuer
		}
	}
	for _, hp := range hss {
		hp.row.PerSecond, hp.row.GatewayCPUUS = stats.Summarize(hp.rate), stats.Summarize(hp.gw)
		hp.row.P50US, hp.row.P99US = stats.Summarize(hp.p50).Median, stats.Summarize(hp.p99).Median
		res.Handshakes = append(res.Handshakes, hp.row)
	}

	// Where the gateway's CPU goes: one more run of some loads, profiled.
	if h.cfg.ProfileDir != "" {
		h.logf("l7: profiling the gateway")
		for _, pr := range []struct {
			name string
			s    *l7Session
			argv []string
		}{
			{"l7-terminated-download", term, h.client(term, "download", "-url", bytesURL, "-want", fmt.Sprint(h.cfg.DownloadBytes))},
			{"l7-terminated-requests", term, h.client(term, "requests", "-url", httpsURL, "-n", fmt.Sprint(h.cfg.Requests))},
			{"l7-passthrough-handshakes", pass, h.client(pass, "handshakes", "-url", httpsURL, "-c", fmt.Sprint(h.cfg.HandshakeConc), "-n", "100000", "-d", h.cfg.HandshakeTime.String())},
		} {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res.Profiles = append(res.Profiles, h.profile(ctx, pr.name, h.display(pr.argv, pr.s), func() error {
				var out json.RawMessage
				_, err := h.runClient(ctx, pr.argv, &out)
				return err
			}))
		}
	}

	// Memory per idle connection.
	h.logf("l7: %d idle connections per path", h.cfg.IdleConns)
	for _, c := range []struct {
		path string
		s    *l7Session
		url  string
		h2   bool
	}{
		{L7PathPlain, pass, httpURL, false},
		{L7PathPassThrough, pass, httpsURL, false},
		{L7PathTerminated, term, httpsURL, false},
		{L7PathTerminated, term, httpsURL, true},
	} {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res.Idle = append(res.Idle, h.idle(ctx, c.path, c.s, c.url, c.h2))
	}

	// The audit: removing the sessions ends what the gateway still holds
	// and waits for its events.
	for _, s := range h.sessions {
		res.Audit[s.ID] = map[string]int{}
		if err := h.perim.Remove(ctx, s.ID, h.audit.EmitDecision); err != nil {
			return nil, err
		}
	}
	h.sessions = nil
	h.audit.Flush(ctx)
	if err := audit.Each(ctx, filepath.Join(h.root, audit.File), func(raw json.RawMessage) error {
		var ev api.AuditEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		if ev.Layer != "l7" || res.Audit[ev.Session] == nil {
			return nil
		}
		k := fmt.Sprintf("l7 %v %s", ev.Fields["kind"], ev.Action)
		if t, _ := ev.Fields["terminated"].(bool); t {
			k += ", terminated"
		}
		if kn, _ := ev.Fields["kernel"].(bool); kn {
			k += ", kernel fast path"
		}
		// A line may stand for identical events merged into it.
		n, _ := ev.Fields["repeated"].(float64)
		res.Audit[ev.Session][k] += 1 + int(n)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return res, nil
}

// idle measures what n idle kept-alive connections of session s to url
// cost this process.
func (h *l7Harness) idle(ctx context.Context, path string, s *l7Session, url string, h2 bool) L7Idle {
	proto := "HTTP/1.1"
	if h2 {
		proto = "HTTP/2"
	}
	if strings.HasPrefix(url, "http:") {
		proto = "plain HTTP/1.1"
	}
	row := L7Idle{Path: path, Proto: proto}
	args := []string{"-url", url, "-n", fmt.Sprint(h.cfg.IdleConns), "-hold", "2m"}
	if h2 {
		args = append(args, "-h2")
	}
	argv := h.client(s, "idle", args...)
	row.Command = h.display(argv, s)
	before := memSnapshot()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		row.Error = err.Error()
		return row
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		row.Error = err.Error()
		return row
	}
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		row.Error = err.Error()
		return row
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
		// Back to where it started before the next run measures.
		for deadline := time.Now().Add(15 * time.Second); runtime.NumGoroutine() > before.goroutines+8 && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
	}()
	line := make(chan []byte, 1)
	go func() {
		b, _ := bufio.NewReader(stdout).ReadBytes('\n')
		line <- b
	}()
	var r load.IdleResult
	select {
	case b := <-line:
		if err := json.Unmarshal(b, &r); err != nil {
			_ = cmd.Process.Kill()
			row.Error = fmt.Sprintf("%q: %v %s", b, err, lastLine(stderr.String()))
			return row
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		row.Error = "no connections within 2m"
		return row
	}
	if r.Open != h.cfg.IdleConns {
		row.Error = fmt.Sprintf("%d connections open, want %d", r.Open, h.cfg.IdleConns)
		return row
	}
	// Let the gateway's goroutines settle: the count stable for 300 ms.
	last, stable := runtime.NumGoroutine(), time.Now()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && time.Since(stable) < 300*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if n := runtime.NumGoroutine(); n != last {
			last, stable = n, time.Now()
		}
	}
	after := memSnapshot()
	n := float64(r.Open)
	row.Conns = r.Open
	row.HeapKiB = float64(int64(after.heap)-int64(before.heap)) / 1024 / n
	row.StackKiB = float64(int64(after.stack)-int64(before.stack)) / 1024 / n
	row.Goroutines = float64(after.goroutines-before.goroutines) / n
	row.RSSKiB = float64(after.rssKiB-before.rssKiB) / n
	return row
}

// profile records this process's CPU profile while run runs and saves
// pprof's views as ProfileDir/name.txt.
func (h *l7Harness) profile(ctx context.Context, name, command string, run func() error) Profile {
	p := Profile{Name: name, File: filepath.Join("profiles", name+".txt"),
		Command: "runtime/pprof in airlock-perf during `" + command + "`, then go tool pprof -top -cum cpu.pprof"}
	if err := os.MkdirAll(h.cfg.ProfileDir, 0o755); err != nil {
		p.Error = err.Error()
		return p
	}
	prof := filepath.Join(h.root, name+".pprof")
	f, err := os.Create(prof)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		p.Error = err.Error()
		return p
	}
	err = run()
	pprof.StopCPUProfile()
	f.Close()
	if err != nil {
		p.Error = err.Error()
		return p
	}
	text := "# CPU profile of airlock-perf's process (the L7 gateway, the DNS proxy, the world's DNS server, the idle harness) during\n# " + command + "\n"
	var rendered []string
	for _, v := range [][]string{
		{"go", "tool", "pprof", "-top", "-cum", "-nodecount=50", prof},
		{"go", "tool", "pprof", "-top", "-nodecount=25", prof},
	} {
		out, err := exec.CommandContext(ctx, v[0], v[1:]...).Output()
		if err != nil {
			p.Error = fmt.Sprintf("pprof: %v: %s", err, exitStderr(err))
			return p
		}
		rendered = append(rendered, string(out))
		text += "\n# " + shellQuote(v[:len(v)-1]) + " cpu.pprof\n" + string(out)
	}
	if err := os.WriteFile(filepath.Join(h.cfg.ProfileDir, name+".txt"), []byte(text), 0o644); err != nil {
		p.Error = err.Error()
		return p
	}
	p.Inclusive = pprofRows(rendered[0], 50)
	p.Top = pprofRows(rendered[1], 15)
	return p
}

type memSnap struct {
	heap, stack uint64
	goroutines  int
	rssKiB      int64
}

// memSnapshot collects garbage, returns freed memory to the OS and reads
// this process's live heap, goroutine stacks, goroutines and RSS.
func memSnapshot() memSnap {
	// The first collection empties sync.Pools into their victim caches,
	// the second drops those; FreeOSMemory collects once more and returns
	// the free pages.
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnap{heap: ms.HeapAlloc, stack: ms.StackInuse, goroutines: runtime.NumGoroutine(), rssKiB: statusKiB(os.Getpid(), "VmRSS")}
}

// selfCPU is this process's user and system CPU time so far, all threads.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return rusageCPU(&ru)
}

func rusageCPU(ru *syscall.Rusage) time.Duration {
	tv := func(t syscall.Timeval) time.Duration {
		return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

// client is the argv of perfload SUB ARGS in session s's namespace,
// resolving through its DNS proxy and trusting the bundle.
func (h *l7Harness) client(s *l7Session, sub string, args ...string) []string {
	argv := append([]string{"nsenter", "--net=" + s.netns, h.cfg.Perfload, sub}, args...)
	return append(argv, "-dns", s.dns, "-ca", h.bundle)
}

// display renders a client's argv for the report.
func (h *l7Harness) display(argv []string, s *l7Session) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case a == h.bundle:
			a = "$CA"
		case a == s.dns:
			a = "$DNS"
		}
		a = strings.ReplaceAll(a, h.root, "$ROOT")
		if rel, ok := strings.CutPrefix(a, h.cfg.Repo+"/"); ok && h.cfg.Repo != "" {
			a = rel
		}
		out[i] = a
	}
	return shellQuote(out)
}

// runClient runs a client, decodes its JSON into v and returns its CPU
// time.
func (h *l7Harness) runClient(ctx context.Context, argv []string, v any) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	err := runJSON(ctx, cmd, v)
	var cpu time.Duration
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			cpu = rusageCPU(ru)
		}
	}
	return cpu, err
}

// startServer writes the world's certificate for L7Host and the clients'
// roots, and starts perfload serve in the world's namespace.
func (h *l7Harness) startServer(ctx context.Context, ca *sessionca.CA) error {
	cert, err := h.world.Certificate(L7Host)
	if err != nil {
		return err
	}
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return err
	}
	certFile, keyFile := filepath.Join(h.root, "server.pem"), filepath.Join(h.root, "server-key.pem")
	if err := os.WriteFile(certFile, chain, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		return err
	}
	worldCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[len(cert.Certificate)-1]})
	h.bundle = filepath.Join(h.root, "ca.pem")
	if err := os.WriteFile(h.bundle, append(worldCA, ca.CertPEM()...), 0o644); err != nil {
		return err
	}
	h.server = exec.Command("nsenter", "--net="+h.world.NetnsPath(), h.cfg.Perfload, "serve",
		"-http", netip.AddrPortFrom(l7HostAddr, 80).String(), "-https", netip.AddrPortFrom(l7HostAddr, 443).String(),
		"-cert", certFile, "-key", keyFile, "-d", "20m")
	stdout, err := h.server.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr limitedBuffer
	h.server.Stderr = &stderr
	if err := h.server.Start(); err != nil {
		h.server = nil
		return err
	}
	ready := make(chan error, 1)
	go func() {
		b, err := bufio.NewReader(stdout).ReadBytes('\n')
		if err == nil {
			var m map[string]string
			err = json.Unmarshal(b, &m)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("not listening within 30s: %s", lastLine(stderr.String()))
	}
}

// close removes what run made: sessions, the perimeter and its gateway,
// the load server, the world.
func (h *l7Harness) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var errs []error
	if h.perim != nil {
		for _, s := range h.sessions {
			if err := h.perim.Remove(ctx, s.ID, nil); err != nil {
				errs = append(errs, err)
			}
		}
		if err := h.perim.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("perimeter: %w", err))
		}
	}
	if err := netns.CleanupDir(ctx, netns.DefaultDir, h.prefix); err != nil {
		errs = append(errs, err)
	}
	if h.audit != nil {
		_ = h.audit.Close()
	}
	if h.server != nil {
		_ = h.server.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = h.server.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = h.server.Process.Kill()
			<-done
		}
	}
	if h.world != nil {
		if err := h.world.Close(); err != nil {
			errs = append(errs, fmt.Errorf("world: %w", err))
		}
	}
	return errors.Join(errs...)
}

// leftovers lists the section's kernel objects still present.
func (h *l7Harness) leftovers() []string {
	out, err := netns.Leftovers(netns.DefaultDir, h.prefix, "")
	if err != nil {
		out = append(out, "netns check failed: "+err.Error())
	}
	if _, err := os.Stat(filepath.Join(netns.DefaultDir, h.worldPrefix+"-world")); err == nil {
		out = append(out, "netns "+h.worldPrefix+"-world")
	}
	if out == nil {
		out = []string{}
	}
	return out
}
