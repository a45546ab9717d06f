package dnsproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// benchUpstream answers every A query with one address, like a warm
// recursive resolver.
func benchUpstream(b *testing.B) string {
	b.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 1)}}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	errc := make(chan error, 1)
	go func() { errc <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-errc:
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// benchCtx carries a logger that drops everything.
func benchCtx() context.Context {
	return log.WithLogger(context.Background(), slog.New(slog.DiscardHandler))
}

func benchSessions(b *testing.B, clients ...string) *SessionMap {
	b.Helper()
	var allow []string
	for i := range 100 {
		allow = append(allow, fmt.Sprintf("*.svc%d.corp.test:443", i), fmt.Sprintf("host%d.example.test", i))
	}
	allow = append(allow, "*.bench.test")
	l, err := allowlist.Compile(allow, []string{"*.secret.bench.test"})
	if err != nil {
		b.Fatal(err)
	}
	pin := PinnerFunc(func(context.Context, []netip.Addr, []uint16, time.Duration) error { return nil })
	var sessions SessionMap
	for i, c := range clients {
		sessions.Set(netip.MustParseAddr(c), &SessionPolicy{
			ID: fmt.Sprint("bench", i), Allowlist: l, Pinner: pin, Audit: func(Event) {},
		})
	}
	return &sessions
}

// BenchmarkServe measures the handler chain in process: no client
// sockets, one query at a time.
func BenchmarkServe(b *testing.B) {
	up := benchUpstream(b)
	ctx := benchCtx()
	run := func(b *testing.B, s *Server, name func(i int) string) {
		b.ReportAllocs()
		w := newRecorder("127.0.0.1:5353", false)
		m := new(dns.Msg)
		m.SetQuestion(name(0), dns.TypeA)
		s.serve(ctx, w, m) // warm the cache
		i := 0
		for b.Loop() {
			i++
			w.msgs, w.packed = w.msgs[:0], w.packed[:0]
			m.Question[0].Name = name(i)
			s.serve(ctx, w, m)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "qps")
	}
	b.Run("refused", func(b *testing.B) {
		s, _ := New(benchSessions(b, "127.0.0.1"), WithUpstreams(up), WithLogWindow(time.Hour))
		run(b, s, func(int) string { return "x.secret.bench.test." })
	})
	b.Run("cache-hit", func(b *testing.B) {
		s, _ := New(benchSessions(b, "127.0.0.1"), WithUpstreams(up))
		run(b, s, func(int) string { return "api.bench.test." })
	})
	b.Run("miss", func(b *testing.B) {
		s, _ := New(benchSessions(b, "127.0.0.1"), WithUpstreams(up), WithCacheSize(0))
		run(b, s, func(int) string { return "api.bench.test." })
	})
}

// BenchmarkLoopback measures queries over real UDP sockets on 127.0.0.1,
// from several concurrent clients, and reports throughput and latency
// percentiles. "direct" asks the upstream itself, for comparison: the
// proxy's added latency is its figure minus direct's.
func BenchmarkLoopback(b *testing.B) {
	up := benchUpstream(b)
	for _, mode := range []string{"direct", "proxy-hit", "proxy-miss", "proxy-refused"} {
		for _, conc := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/clients=%d", mode, conc*2), func(b *testing.B) {
				target := up
				name := "api.bench.test."
				if mode != "direct" {
					opts := []Option{WithUpstreams(up), WithLogWindow(time.Hour)}
					if mode == "proxy-miss" {
						opts = append(opts, WithCacheSize(0))
					}
					s, err := New(benchSessions(b, "127.0.0.1"), opts...)
					if err != nil {
						b.Fatal(err)
					}
					pc, err := net.ListenPacket("udp", "127.0.0.1:0")
					if err != nil {
						b.Fatal(err)
					}
					ctx, cancel := context.WithCancel(benchCtx())
					done := make(chan struct{})
					go func() {
						defer close(done)
						_ = s.ServePacketConn(ctx, pc)
					}()
					b.Cleanup(func() { cancel(); <-done })
					target = pc.LocalAddr().String()
					if mode == "proxy-refused" {
						name = "x.secret.bench.test."
					}
				}
				loopbackLoad(b, target, name, conc)
			})
		}
	}
}

func loopbackLoad(b *testing.B, target, name string, parallelism int) {
	var (
		mu      sync.Mutex
		all     []time.Duration
		failed  atomic.Int64
		ids     atomic.Uint32
		connErr atomic.Value
	)
	// One query to make sure the target answers before timing starts.
	if c, err := net.Dial("udp", target); err == nil {
		if _, err := exchangeRaw(c, packQuery(name, 1), 1); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		c.Close()
	}
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("udp", target)
		if err != nil {
			connErr.Store(err)
			return
		}
		defer c.Close()
		lat := make([]time.Duration, 0, 1024)
		for pb.Next() {
			id := uint16(ids.Add(1))
			q := packQuery(name, id)
			start := time.Now()
			if _, err := exchangeRaw(c, q, id); err != nil {
				failed.Add(1)
				continue
			}
			lat = append(lat, time.Since(start))
		}
		mu.Lock()
		all = append(all, lat...)
		mu.Unlock()
	})
	b.StopTimer()
	cpu := processCPU() - cpu0
	if err, _ := connErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	if n := failed.Load(); n > int64(b.N)/1000 {
		b.Fatalf("%d of %d queries failed", n, b.N)
	}
	slices.Sort(all)
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(float64(len(all))*p))].Microseconds())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "qps")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	// The process's CPU time per query: the clients', the proxy's and the
	// upstream's together, so that a change of the proxy's shows even when
	// other processes take the machine's cores (which lowers qps).
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

func packQuery(name string, id uint16) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Id = id
	b, _ := m.Pack()
	return b
}

// exchangeRaw sends q on c and waits for the reply with id.
func exchangeRaw(c net.Conn, q []byte, id uint16) (int, error) {
	if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := c.Write(q); err != nil {
		return 0, err
	}
	var buf [1232]byte
	for {
		n, err := c.Read(buf[:])
		if err != nil {
			return 0, err
		}
		if n >= 12 && uint16(buf[0])<<8|uint16(buf[1]) == id {
			return int(buf[3] & 0xf), nil // rcode
		}
	}
}
