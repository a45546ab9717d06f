// Package load holds the traffic generators of airlock's performance
// harness: a DNS query loop and a TCP stream, each run with the same code
// inside a sandbox and from a baseline namespace, so that the two figures
// differ only by the path between client and server.
package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// DNSConfig describes a DNS load.
type DNSConfig struct {
	// Server is ADDR:PORT of the resolver.
	Server string
	// Names are asked for round-robin (A records).
	Names []string
	// Unique, if set, replaces Names with a new name under this suffix per
	// query ("<n>.<Unique>"), so that no answer can come from a cache.
	Unique string
	// Count stops the load after this many queries in all (0: no limit).
	Count int
	// Duration stops the load after this long (0: no limit).
	Duration time.Duration
	// Concurrency is the number of clients, each with its own socket and
	// one query in flight (default 1).
	Concurrency int
	// Timeout bounds one query (default 1s); a timeout counts as an error.
	Timeout time.Duration
	// Dial opens each client's socket (default net.Dial), say in another
	// network namespace.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DNSResult is what a DNS load saw.
type DNSResult struct {
	Sent     int            `json:"sent"`
	Answered int            `json:"answered"`
	Timeouts int            `json:"timeouts"`
	Errors   int            `json:"errors"`
	Rcodes   map[string]int `json:"rcodes"`
	Seconds  float64        `json:"seconds"`
	QPS      float64        `json:"qps"` // answered per second
	// LatencyUS summarises the round trips of answered queries (µs).
	LatencyUS stats.Summary `json:"latency_us"`
	// CPUUS is the client's own CPU time (user+system, this process)
	// per answered query (µs): the share of the machine the load itself
	// takes, so that a harness can tell it from the server's.
	CPUUS float64 `json:"cpu_us"`
}

// RunDNS runs the load until Count queries were sent, Duration passed or
// ctx ended, whichever comes first.
func RunDNS(ctx context.Context, cfg DNSConfig) (*DNSResult, error) {
	if cfg.Server == "" {
		return nil, errors.New("dns load: no server")
	}
	if len(cfg.Names) == 0 && cfg.Unique == "" {
		return nil, errors.New("dns load: no names")
	}
	if cfg.Count <= 0 && cfg.Duration <= 0 {
		return nil, errors.New("dns load: unbounded: set a count or a duration")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	conns := make([]net.Conn, cfg.Concurrency)
	for i := range conns {
		var c net.Conn
		var err error
		if cfg.Dial != nil {
			c, err = cfg.Dial(ctx, "udp", cfg.Server)
		} else {
			c, err = net.Dial("udp", cfg.Server)
		}
		if err != nil {
			for _, c := range conns[:i] {
				c.Close()
			}
			return nil, fmt.Errorf("dns load: %w", err)
		}
		conns[i] = c
	}

	var (
		mu     sync.Mutex
		ticket int // queries handed out
		res    = &DNSResult{Rcodes: map[string]int{}}
		lat    []float64
	)
	next := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || (cfg.Count > 0 && ticket >= cfg.Count) {
			return 0, false
		}
		ticket++
		return ticket, true
	}
	name := func(n int) string {
		if cfg.Unique != "" {
			return dns.Fqdn(strconv.Itoa(n) + "." + strings.TrimPrefix(cfg.Unique, "."))
		}
		return dns.Fqdn(cfg.Names[n%len(cfg.Names)])
	}
	start, cpu0 := time.Now(), processCPU()
	var wg sync.WaitGroup
	for w, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			var local []float64
			lres := DNSResult{Rcodes: map[string]int{}}
			buf := make([]byte, 4096)
			id := uint16(w << 12)
			for {
				n, ok := next()
				if !ok {
					break
				}
				id++
				rtt, rcode, err := exchange(c, buf, id, name(n), cfg.Timeout)
				lres.Sent++
				switch {
				case errors.Is(err, os.ErrDeadlineExceeded):
					lres.Timeouts++
				case err != nil:
					lres.Errors++
				default:
					lres.Answered++
					lres.Rcodes[dns.RcodeToString[rcode]]++
					local = append(local, float64(rtt)/float64(time.Microsecond))
				}
			}
			mu.Lock()
			res.Sent += lres.Sent
			res.Answered += lres.Answered
			res.Timeouts += lres.Timeouts
			res.Errors += lres.Errors
			for k, v := range lres.Rcodes {
				res.Rcodes[k] += v
			}
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.QPS = float64(res.Answered) / res.Seconds
	}
	if res.Answered > 0 {
		res.CPUUS = float64(processCPU()-cpu0) / float64(time.Microsecond) / float64(res.Answered)
	}
	res.LatencyUS = stats.Summarize(lat)
	return res, nil
}

// exchange sends one A query on a connected UDP socket and waits for the
// reply with the same id; stale replies (of earlier, timed-out queries) are
// skipped.
func exchange(c net.Conn, buf []byte, id uint16, name string, timeout time.Duration) (time.Duration, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = id
	out, err := m.Pack()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := c.SetDeadline(t0.Add(timeout)); err != nil {
		return 0, 0, err
	}
	if _, err := c.Write(out); err != nil {
		return 0, 0, err
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			return 0, 0, err
		}
		rtt := time.Since(t0)
		var r dns.Msg
		if err := r.Unpack(buf[:n]); err != nil {
			return 0, 0, fmt.Errorf("bad reply: %w", err)
		}
		if r.Id != id || !r.Response {
			continue
		}
		return rtt, r.Rcode, nil
	}
}

// ExpandNames turns one name pattern holding a single %d into n names,
// with 0..n-1 in its place.
func ExpandNames(names []string, n int) ([]string, error) {
	if len(names) != 1 || strings.Count(names[0], "%d") != 1 || strings.Count(names[0], "%") != 1 {
		return nil, fmt.Errorf("want one name with one %%d to expand, got %q", names)
	}
	if n <= 0 || n > 100_000 {
		return nil, fmt.Errorf("expand to %d names: want 1..100000", n)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(names[0], i)
	}
	return out, nil
}

// ResolvConfServer returns ADDR:53 of the first nameserver in a
// resolv.conf.
func ResolvConfServer(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			return net.JoinHostPort(f[1], "53"), nil
		}
	}
	return "", fmt.Errorf("%s: no nameserver", path)
}
