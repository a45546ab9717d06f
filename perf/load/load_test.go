package load

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// testServer answers A queries for names under ok.test. with 192.0.2.1,
// NXDOMAIN for the rest, and never answers names starting with "drop.".
func testServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		seen.Add(1)
		q := r.Question[0]
		if strings.HasPrefix(q.Name, "drop.") {
			return
		}
		m := new(dns.Msg)
		m.SetReply(r)
		if dns.IsSubDomain("ok.test.", q.Name) {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), &seen
}

func TestRunDNSCount(t *testing.T) {
	addr, seen := testServer(t)
	res, err := RunDNS(context.Background(), DNSConfig{Server: addr, Names: []string{"a.ok.test", "b.nx.test"}, Count: 200, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 200 || res.Answered != 200 || res.Timeouts != 0 || res.Errors != 0 {
		t.Fatalf("result %+v", res)
	}
	if res.Rcodes["NOERROR"] != 100 || res.Rcodes["NXDOMAIN"] != 100 {
		t.Errorf("rcodes %v, want 100 each", res.Rcodes)
	}
	if got := seen.Load(); got != 200 {
		t.Errorf("server saw %d queries, want 200", got)
	}
	if res.LatencyUS.N != 200 || res.LatencyUS.Median <= 0 || res.QPS <= 0 {
		t.Errorf("latency %+v qps %v", res.LatencyUS, res.QPS)
	}
}

func TestRunDNSDurationAndUnique(t *testing.T) {
	addr, _ := testServer(t)
	start := time.Now()
	res, err := RunDNS(context.Background(), DNSConfig{Server: addr, Unique: "ok.test", Duration: 200 * time.Millisecond, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("duration-bounded load ran %v", el)
	}
	if res.Answered == 0 || res.Rcodes["NOERROR"] != res.Answered {
		t.Fatalf("result %+v", res)
	}
}

func TestRunDNSTimeouts(t *testing.T) {
	addr, _ := testServer(t)
	res, err := RunDNS(context.Background(), DNSConfig{Server: addr, Names: []string{"drop.ok.test"}, Count: 2, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Timeouts != 2 || res.Answered != 0 || res.LatencyUS.N != 0 {
		t.Fatalf("result %+v", res)
	}
}

func TestRunDNSRefusesUnbounded(t *testing.T) {
	for _, cfg := range []DNSConfig{
		{Names: []string{"x.test"}, Count: 1},
		{Server: "127.0.0.1:53", Count: 1},
		{Server: "127.0.0.1:53", Names: []string{"x.test"}},
	} {
		if _, err := RunDNS(context.Background(), cfg); err == nil {
			t.Errorf("RunDNS(%+v) accepted", cfg)
		}
	}
}

func TestResolvConfServer(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# x\noptions ndots:0\nnameserver 10.213.0.2\nnameserver 10.0.0.1\n"), 0o644)
	got, err := ResolvConfServer(p)
	if err != nil || got != "10.213.0.2:53" {
		t.Fatalf("ResolvConfServer = %q, %v", got, err)
	}
	os.WriteFile(p, []byte("options ndots:0\n"), 0o644)
	if _, err := ResolvConfServer(p); err == nil {
		t.Fatal("no nameserver accepted")
	}
}

func TestStreamIntoSink(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(l)
	defer s.Close()
	res, err := Stream(context.Background(), l.Addr().String(), 5*time.Second, 3<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 3<<20 || res.Gbps <= 0 {
		t.Fatalf("stream %+v", res)
	}
	tr := s.Take()
	if len(tr) != 1 || tr[0].Bytes != 3<<20 || tr[0].Gbps() <= 0 {
		t.Fatalf("sink transfers %+v", tr)
	}
	if len(s.Take()) != 0 {
		t.Fatal("Take returned a transfer twice")
	}
}

func TestConnects(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewSink(l)
	defer s.Close()
	sum, err := Connects(context.Background(), l.Addr().String(), 20)
	if err != nil {
		t.Fatal(err)
	}
	if sum.N != 20 || sum.Median <= 0 {
		t.Fatalf("connects %+v", sum)
	}
	deadline := time.Now().Add(2 * time.Second)
	for s.Accepted() < 20 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Accepted() != 20 {
		t.Errorf("sink accepted %d, want 20", s.Accepted())
	}
	if len(s.Take()) != 0 {
		t.Error("empty connections were recorded as transfers")
	}
}

func TestConnectRefused(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	if _, err := Connects(context.Background(), addr, 1); err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
	if _, err := Stream(context.Background(), addr, time.Second, 0); err == nil {
		t.Fatal("stream to a closed port succeeded")
	}
}

func TestExpandNames(t *testing.T) {
	got, err := ExpandNames([]string{"d%d.x.test"}, 3)
	if err != nil || strings.Join(got, ",") != "d0.x.test,d1.x.test,d2.x.test" {
		t.Fatalf("ExpandNames = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"a.test"}, {"d%d.%d.test"}, {"a%d.test", "b.test"}, {"%s%d.test"}} {
		if _, err := ExpandNames(bad, 3); err == nil {
			t.Errorf("ExpandNames(%q) accepted", bad)
		}
	}
	if _, err := ExpandNames([]string{"d%d.test"}, 0); err == nil {
		t.Error("ExpandNames to 0 names accepted")
	}
}
