// Command perfload generates the traffic of airlock's performance harness.
// It is built static (CGO_ENABLED=0) so that the same binary runs inside a
// sandbox (bound in with a manifest `mount` block) and in a baseline
// network namespace. Each subcommand prints one JSON object on stdout.
//
//	perfload dns [-server ADDR:PORT] (-names a.test,b.test | -names 'd%d.test' -range N | -unique SUFFIX) (-n N | -d DUR) [-c CONC]
//	perfload stream -addr HOST:PORT -d DUR
//	perfload connect -addr HOST:PORT -n N
//	perfload serve [-http ADDR:PORT] [-https ADDR:PORT -cert FILE -key FILE] [-d DUR]
//	perfload requests -url URL [-dns ADDR:PORT] [-ca FILE] [-h2] [-warmup N] -n N
//	perfload download -url URL [-dns ADDR:PORT] [-ca FILE] [-h2] [-want BYTES]
//	perfload handshakes -url URL [-dns ADDR:PORT] [-ca FILE] [-c CONC] -n N -d DUR
//	perfload idle -url URL [-dns ADDR:PORT] [-ca FILE] [-h2] -n N [-hold DUR]
//	perfload spin -d DUR
//
// serve prints its JSON object once it listens, then serves load.HTTPHandler
// until signalled or -d has passed; idle prints its object once its
// connections are open, then holds them until its stdin ends or -hold has
// passed. spin keeps one core busy until signalled or -d has passed (the
// harness's -load).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/perf/load"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: perfload dns|stream|connect|serve|requests|download|handshakes|idle|spin [flags]")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	var (
		out any
		err error
	)
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "dns":
		out, err = dnsCmd(ctx, args)
	case "stream":
		out, err = streamCmd(ctx, args)
	case "connect":
		out, err = connectCmd(ctx, args)
	case "serve":
		err = serveCmd(ctx, args)
	case "requests":
		out, err = requestsCmd(ctx, args)
	case "download":
		out, err = downloadCmd(ctx, args)
	case "handshakes":
		out, err = handshakesCmd(ctx, args)
	case "idle":
		err = idleCmd(ctx, args)
	case "spin":
		out, err = spinCmd(ctx, args)
	default:
		err = fmt.Errorf("unknown subcommand %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perfload:", err)
		os.Exit(1)
	}
	if out == nil {
		return
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "perfload:", err)
		os.Exit(1)
	}
}

func dnsCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("dns", flag.ContinueOnError)
	var (
		cfg   load.DNSConfig
		names string
	)
	fs.StringVar(&cfg.Server, "server", "", "resolver ADDR:PORT (default: the first nameserver of /etc/resolv.conf)")
	fs.StringVar(&names, "names", "", "comma-separated names, asked round-robin")
	expand := fs.Int("range", 0, "expand the one name of -names, which holds a %d, to N names (0..N-1)")
	fs.StringVar(&cfg.Unique, "unique", "", "ask a new name under this suffix per query instead")
	fs.IntVar(&cfg.Count, "n", 0, "stop after this many queries")
	fs.DurationVar(&cfg.Duration, "d", 0, "stop after this long")
	fs.IntVar(&cfg.Concurrency, "c", 1, "concurrent clients, one query in flight each")
	fs.DurationVar(&cfg.Timeout, "timeout", time.Second, "per-query timeout")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if names != "" {
		cfg.Names = strings.Split(names, ",")
	}
	if *expand > 0 {
		var err error
		if cfg.Names, err = load.ExpandNames(cfg.Names, *expand); err != nil {
			return nil, err
		}
	}
	if cfg.Server == "" {
		s, err := load.ResolvConfServer("/etc/resolv.conf")
		if err != nil {
			return nil, err
		}
		cfg.Server = s
	}
	if cfg.Duration > 5*time.Minute || cfg.Count > 10_000_000 {
		return nil, fmt.Errorf("load too large: at most 5m and 10M queries")
	}
	return load.RunDNS(ctx, cfg)
}

func streamCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("stream", flag.ContinueOnError)
	addr := fs.String("addr", "", "HOST:PORT of the sink")
	d := fs.Duration("d", 3*time.Second, "how long to send (at most 1m)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *d > time.Minute {
		return nil, fmt.Errorf("-d %v: at most 1m", *d)
	}
	a, err := resolve(ctx, *addr)
	if err != nil {
		return nil, err
	}
	return load.Stream(ctx, a, *d, 0)
}

func connectCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	addr := fs.String("addr", "", "HOST:PORT")
	n := fs.Int("n", 100, "connections, one after another (at most 100000)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *n <= 0 || *n > 100_000 {
		return nil, fmt.Errorf("-n %d: want 1..100000", *n)
	}
	a, err := resolve(ctx, *addr)
	if err != nil {
		return nil, err
	}
	s, err := load.Connects(ctx, a, *n)
	if err != nil {
		return nil, err
	}
	return map[string]any{"connect_us": s}, nil
}

// resolve looks the host up once, so that timed loops measure transport,
// not DNS.
func resolve(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-addr %q: %w", addr, err)
	}
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(ips[0], port), nil
}

// spinCmd keeps one core busy until ctx ends or -d has passed: a bounded
// load, never one that outlives its run.
func spinCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("spin", flag.ContinueOnError)
	d := fs.Duration("d", time.Minute, "how long to spin (at most 1h)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if *d <= 0 || *d > time.Hour {
		return nil, fmt.Errorf("-d %v: want up to 1h", *d)
	}
	runtime.GOMAXPROCS(1)
	start := time.Now()
	deadline := start.Add(*d)
	var n uint64
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for range 1 << 20 {
			n++
		}
	}
	return map[string]any{"spun_s": time.Since(start).Seconds(), "iterations": n}, nil
}
