package perf

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/perf/load"
	"github.com/airlock-sandbox/airlock/perf/stats"
)

// TCP compares bulk TCP throughput and connect time through the perimeter
// with a plain veth path of the same shape.
type TCP struct {
	Rounds    int       `json:"rounds"`
	StreamSec float64   `json:"stream_seconds"`
	Baseline  string    `json:"baseline"`
	Paths     []TCPPath `json:"paths"`
	Seconds   float64   `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
}

// TCPPath is one client-to-sink path.
type TCPPath struct {
	Name string `json:"name"`
	// Gbps is the sink-side receive rate per round.
	Gbps           stats.Summary `json:"gbps"`
	ConnectUS      stats.Summary `json:"connect_us"`
	StreamCommand  string        `json:"stream_command"`
	ConnectCommand string        `json:"connect_command"`
	Error          string        `json:"error,omitempty"`
}

type tcpPath struct {
	name   string
	argv   func(sub string, args ...string) []string
	target string // HOST:PORT as the client sees it
	sink   *load.Sink
	gbps   []float64
	conn   stats.Summary
	err    string
}

// MeasureTCP streams for streamDur, rounds times, over three paths, in
// turn: (1) a session allowed to sink.perf.test:5001 by name (resolved
// through the DNS proxy and pinned), (2) a session allowed to the sink's
// address by CIDR, both through the gateway (session veth, forwarding,
// nftables, masquerade, uplink veth) to a sink in the world namespace, and
// (3) the baseline, a VethPath of the same shape without rules. All three
// run the same perfload binary; sessions get 2 CPUs.
func MeasureTCP(ctx context.Context, e *Env, rounds int, streamDur time.Duration) (*TCP, error) {
	start := time.Now()
	sinkAP := netip.AddrPortFrom(sinkHostAddr, uint16(SinkPort))
	wl, err := netns.Listen(e.World.NetnsPath(), "tcp", sinkAP.String())
	if err != nil {
		return nil, err
	}
	worldSink := load.NewSink(wl)
	defer worldSink.Close()

	vp, err := NewVethPath(netns.DefaultDir, "pv"+e.Prefix[2:])
	if err != nil {
		return nil, fmt.Errorf("baseline namespaces: %w", err)
	}
	defer vp.Close()
	vl, err := netns.Listen(vp.Server, "tcp", netip.AddrPortFrom(vp.ServerAddr, uint16(SinkPort)).String())
	if err != nil {
		return nil, err
	}
	vethSink := load.NewSink(vl)
	defer vethSink.Close()

	session := func(label string, allow string) (string, error) {
		m := Manifest{Label: label, CPUs: 2, Memory: "256MiB", Pids: 128, LoadDir: e.LoadDir, Allow: []string{allow}}
		path, err := m.Write(e.WorkDir)
		if err != nil {
			return "", err
		}
		out, err := e.CLI("run", "-d", "-f", path, "--", "sleep", "1200").Output()
		if err != nil {
			return "", fmt.Errorf("session %s: %w: %s", label, err, exitStderr(err))
		}
		id := strings.TrimSpace(string(out))
		return id, nil
	}
	byName, err := session("perf-tcp-name", fmt.Sprintf("%s:%d", SinkHost, SinkPort))
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.Client.RemoveSession(context.WithoutCancel(ctx), byName, true) }()
	byCIDR, err := session("perf-tcp-cidr", fmt.Sprintf("%s/32:%d", sinkHostAddr, SinkPort))
	if err != nil {
		return nil, err
	}
	defer func() { _ = e.Client.RemoveSession(context.WithoutCancel(ctx), byCIDR, true) }()

	inSession := func(id string) func(string, ...string) []string {
		return func(sub string, args ...string) []string {
			return e.CLIArgs(append([]string{"exec", id, "--", "/opt/perf/perfload", sub}, args...)...)
		}
	}
	paths := []*tcpPath{
		{name: "session, egress allowed by name (DNS pin)", argv: inSession(byName), target: fmt.Sprintf("%s:%d", SinkHost, SinkPort), sink: worldSink},
		{name: "session, egress allowed by CIDR", argv: inSession(byCIDR), target: sinkAP.String(), sink: worldSink},
		{name: "baseline: plain veth path, no rules", argv: func(sub string, args ...string) []string {
			return append([]string{"nsenter", "--net=" + vp.Client, filepath.Join(e.LoadDir, "perfload"), sub}, args...)
		}, target: netip.AddrPortFrom(vp.ServerAddr, uint16(SinkPort)).String(), sink: vethSink},
	}
	secs := fmt.Sprintf("%dms", streamDur.Milliseconds())
	for range rounds {
		for _, p := range paths {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			p.sink.Take()
			argv := p.argv("stream", "-addr", p.target, "-d", secs)
			var sr load.StreamResult
			if err := runJSON(ctx, exec.CommandContext(ctx, argv[0], argv[1:]...), &sr); err != nil {
				p.err = err.Error()
				continue
			}
			got := p.sink.Take()
			if len(got) != 1 {
				p.err = fmt.Sprintf("sink saw %d transfers, want 1", len(got))
				continue
			}
			p.gbps = append(p.gbps, got[0].Gbps())
		}
	}
	for _, p := range paths {
		argv := p.argv("connect", "-addr", p.target, "-n", "300")
		var out struct {
			ConnectUS stats.Summary `json:"connect_us"`
		}
		if err := runJSON(ctx, exec.CommandContext(ctx, argv[0], argv[1:]...), &out); err != nil {
			p.err = strings.TrimPrefix(p.err+"; connect: "+err.Error(), "; ")
		}
		p.conn = out.ConnectUS
	}
	res := &TCP{
		Rounds: rounds, StreamSec: streamDur.Seconds(),
		Baseline: "three namespaces made for this run: client -veth- router (ip_forward, no nftables, no NAT) -veth- server, " +
			"10.216.0.0/30 and 10.216.0.4/30; the same two-hop shape as session -veth- gateway -veth(uplink)- world, without the perimeter's rules, conntrack-based pinning and masquerade. " +
			"The baseline client runs outside any cgroup limit; sessions have cpus = 2 (the whole machine).",
	}
	for _, p := range paths {
		res.Paths = append(res.Paths, TCPPath{
			Name: p.name, Gbps: stats.Summarize(p.gbps), ConnectUS: p.conn, Error: p.err,
			StreamCommand:  e.display(p.argv("stream", "-addr", p.target, "-d", secs)),
			ConnectCommand: e.display(p.argv("connect", "-addr", p.target, "-n", "300")),
		})
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}
