package perf

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/perf/load"
)

// upstreamServer answers every A query with one address and a 60s TTL,
// like the world's DNS server.
func upstreamServer(tb testing.TB) string {
	tb.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Authoritative = true
		q := r.Question[0]
		if q.Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(10, 214, 0, 11)}}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	tb.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// jsonlAudit records each event in a file the way the daemon records a
// session's DNS decisions: the perimeter's event (api.AuditEvent, as
// egress.DNSAuditEvent builds it) through the daemon's audit log writer.
type jsonlAudit struct {
	log *audit.Log
}

func (a *jsonlAudit) emit(ev dnsproxy.Event) {
	f := map[string]any{"type": ev.Type, "rcode": ev.Rcode, "proto": ev.Proto}
	if len(ev.Answers) > 0 {
		f["answers"] = ev.Answers
	}
	if ev.Rule != "" {
		f["rule"] = ev.Rule
	}
	if ev.PinTTL > 0 {
		f["pin_ttl"] = ev.PinTTL
	}
	if ev.Cached {
		f["cached"] = true
	}
	a.log.Emit(context.Background(), api.AuditEvent{Time: ev.Time, Session: ev.Session, Layer: "dns", Action: string(ev.Action),
		Subject: strings.TrimSuffix(ev.Name, "."), Reason: ev.Reason, Fields: f})
}

// startProxy serves a dnsproxy on 127.0.0.1 for one session (the loopback
// address) allowed *.dns.perf.test, with audit as given.
func startProxy(tb testing.TB, audit func(dnsproxy.Event)) string {
	tb.Helper()
	list, err := allowlist.Compile([]string{"*." + DNSZone}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	var sessions dnsproxy.SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), &dnsproxy.SessionPolicy{
		ID: "perf", Allowlist: list, Audit: audit,
		Pinner: dnsproxy.PinnerFunc(func(context.Context, []netip.Addr, []uint16, time.Duration) error { return nil }),
	})
	s, err := dnsproxy.New(&sessions, dnsproxy.WithUpstreams(upstreamServer(tb)), dnsproxy.WithLogWindow(time.Hour),
		dnsproxy.WithAllowPrivate(netip.MustParsePrefix("10.214.0.0/24")))
	if err != nil {
		tb.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.ServePacketConn(ctx, pc) }()
	tb.Cleanup(func() { cancel(); <-done })
	return pc.LocalAddr().String()
}

// reportDNS reports a load's throughput and latency percentiles.
func reportDNS(b *testing.B, res *load.DNSResult) {
	b.ReportMetric(res.QPS, "qps")
	b.ReportMetric(res.LatencyUS.Median, "p50-µs")
	b.ReportMetric(res.LatencyUS.P99, "p99-µs")
}

// BenchmarkProxyAudited is the proxy as the daemon runs it, in process:
// real UDP sockets, cache hits over 50 names, 8 concurrent clients, with
// the session's audit off or written as JSON lines to a file; "direct"
// asks the upstream server itself, for comparison (the harness's ratio).
// Profile it (go test -cpuprofile) to see where a query's CPU goes.
func BenchmarkProxyAudited(b *testing.B) {
	for _, mode := range []string{"direct", "off", "jsonl"} {
		name := "audit=" + mode
		if mode == "direct" {
			name = mode
		}
		b.Run(name, func(b *testing.B) {
			emit := func(dnsproxy.Event) {}
			if mode == "jsonl" {
				l := audit.Open(filepath.Join(b.TempDir(), audit.File))
				b.Cleanup(func() { _ = l.Close() })
				emit = (&jsonlAudit{log: l}).emit
			}
			var addr string
			if mode == "direct" {
				addr = upstreamServer(b)
			} else {
				addr = startProxy(b, emit)
			}
			names, _ := load.ExpandNames([]string{"d%d." + DNSZone}, 50)
			warm, err := load.RunDNS(context.Background(), load.DNSConfig{Server: addr, Names: names, Count: 50})
			if err != nil || warm.Answered != 50 {
				b.Fatalf("warm-up: %+v, %v", warm, err)
			}
			b.ResetTimer()
			res, err := load.RunDNS(context.Background(), load.DNSConfig{Server: addr, Names: names, Count: b.N, Concurrency: 8})
			if err != nil {
				b.Fatal(err)
			}
			if res.Answered != res.Sent {
				b.Fatalf("%d of %d answered", res.Answered, res.Sent)
			}
			reportDNS(b, res)
		})
	}
}

// BenchmarkProxyAuditedDistinct is BenchmarkProxyAudited's proxy with a
// new name per query (every query a cache miss, forwarded upstream and
// pinned, and a distinct audit event that no aggregation merges), with
// the session's audit off or as the daemon records it: the perimeter's
// event (egress.DNSAuditEvent) through audit.Log.EmitDecision; "direct"
// asks the upstream server itself, for comparison.
func BenchmarkProxyAuditedDistinct(b *testing.B) {
	for _, mode := range []string{"direct", "off", "daemon"} {
		name := "audit=" + mode
		if mode == "direct" {
			name = mode
		}
		b.Run(name, func(b *testing.B) {
			emit := func(dnsproxy.Event) {}
			if mode == "daemon" {
				l := audit.Open(filepath.Join(b.TempDir(), audit.File))
				b.Cleanup(func() { _ = l.Close() })
				emit = func(ev dnsproxy.Event) { l.EmitDecision(context.Background(), egress.DNSAuditEvent("perf", ev)) }
			}
			var addr string
			if mode == "direct" {
				addr = upstreamServer(b)
			} else {
				addr = startProxy(b, emit)
			}
			b.ResetTimer()
			res, err := load.RunDNS(context.Background(), load.DNSConfig{Server: addr, Unique: "u" + strconv.Itoa(b.N) + "." + DNSZone, Count: b.N, Concurrency: 8})
			if err != nil {
				b.Fatal(err)
			}
			if res.Answered != res.Sent {
				b.Fatalf("%d of %d answered", res.Answered, res.Sent)
			}
			reportDNS(b, res)
		})
	}
}

// TestProxyHarness checks the harness itself: answers through the proxy
// for allowed names, refusals for others, one audit line per query.
func TestProxyHarness(t *testing.T) {
	path := filepath.Join(t.TempDir(), audit.File)
	l := audit.Open(path)
	defer l.Close()
	addr := startProxy(t, (&jsonlAudit{log: l}).emit)
	res, err := load.RunDNS(context.Background(), load.DNSConfig{Server: addr, Names: []string{"d1." + DNSZone, "x.other.test"}, Count: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rcodes["NOERROR"] != 10 || res.Rcodes["REFUSED"] != 10 {
		t.Fatalf("rcodes %v, want 10 NOERROR and 10 REFUSED", res.Rcodes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 20 {
		t.Fatalf("%d audit lines, want 20", len(lines))
	}
	cached := 0
	for _, l := range lines {
		var ev api.AuditEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		if c, _ := ev.Fields["cached"].(bool); c {
			cached++
		}
	}
	if cached != 9 {
		t.Errorf("%d cached answers, want 9 (all but the first allowed query)", cached)
	}
}
