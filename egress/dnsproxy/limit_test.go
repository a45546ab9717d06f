package dnsproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestLimiterTokenBucket(t *testing.T) {
	l, err := NewLimiter(Limits{Rate: 10, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		n    int // queries at that instant
		want int // allowed
	}{
		{0, 8, 5},                     // the burst, then nothing
		{50 * time.Millisecond, 1, 0}, // half a token
		{100 * time.Millisecond, 1, 1},
		{100 * time.Millisecond, 1, 0},
		{10 * time.Second, 9, 5}, // refills to the burst, not beyond
		{9 * time.Second, 3, 0},  // a clock going back adds nothing
	}
	for i, st := range steps {
		got := 0
		for range st.n {
			if l.allow(t0.Add(st.at)) {
				got++
			}
		}
		if got != st.want {
			t.Errorf("step %d (+%v, %d queries): %d allowed, want %d", i, st.at, st.n, got, st.want)
		}
	}
	if _, err := NewLimiter(Limits{Rate: -1}); err == nil {
		t.Error("negative rate accepted")
	}
	d, _ := NewLimiter(Limits{})
	if d.rate != DefaultRate || d.burst != 2*DefaultRate || d.inFlight != DefaultInFlight {
		t.Errorf("defaults: rate %v burst %v in flight %v", d.rate, d.burst, d.inFlight)
	}
}

func TestLimiterInFlight(t *testing.T) {
	l, _ := NewLimiter(Limits{InFlight: 2})
	if !l.acquire() || !l.acquire() {
		t.Fatal("first two refused")
	}
	if l.acquire() {
		t.Fatal("third query in flight admitted")
	}
	l.release()
	if !l.acquire() {
		t.Fatal("a released slot is not reusable")
	}
}

// TestRateLimitedSession floods one session's resolver: queries beyond its
// limit are never forwarded, get no answer over UDP and REFUSED over TCP,
// and are audited as identical events (no name, one reason) so that the
// audit log can merge them. Another session is served meanwhile.
func TestRateLimitedSession(t *testing.T) {
	up := newUpstream(t, testZone...)
	flooder := newSession(t, "flooder", false, []string{"*.corp.test"}, nil)
	lim, err := NewLimiter(Limits{Rate: 1, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	flooder.policy.Limit = lim
	quiet := newSession(t, "quiet", false, []string{"*.corp.test"}, nil)
	quietLim, _ := NewLimiter(Limits{Rate: 1, Burst: 3})
	quiet.policy.Limit = quietLim
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), flooder.policy)
	sessions.Set(netip.MustParseAddr("127.0.0.2"), quiet.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr), WithCacheSize(0))

	rcodes := map[int]int{}
	for range 10 {
		resp := p.query(t, "tcp", "127.0.0.1", "api.corp.test.", dns.TypeA, true)
		rcodes[resp.Rcode]++
		if resp.Rcode == dns.RcodeRefused {
			if ede, ok := edeOf(resp); !ok || ede.InfoCode != dns.ExtendedErrorCodeOther {
				t.Errorf("limited query: EDE %v, want Other with the reason", ede)
			}
		}
	}
	if rcodes[dns.RcodeSuccess] != 3 || rcodes[dns.RcodeRefused] != 7 {
		t.Errorf("rcodes %v, want 3 NOERROR (the burst) and 7 REFUSED", rcodes)
	}
	if n := up.count("api.corp.test."); n != 3 {
		t.Errorf("upstream saw %d queries, want 3", n)
	}
	// Over UDP, a limited query gets no answer at all.
	m := new(dns.Msg)
	m.SetQuestion("api.corp.test.", dns.TypeA)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if resp, err := p.tryExchange(ctx, "udp", "127.0.0.1", m); err == nil {
		t.Errorf("limited UDP query answered: %v", resp)
	}
	// The other session is not limited by the first one's flood.
	for range 3 {
		if resp := p.query(t, "udp", "127.0.0.2", "web.corp.test.", dns.TypeA, false); resp.Rcode != dns.RcodeSuccess {
			t.Errorf("other session: rcode %s", dns.RcodeToString[resp.Rcode])
		}
	}

	var limited []Event
	for _, ev := range flooder.audit.get() {
		if ev.Action == ActionRefused {
			limited = append(limited, ev)
		}
	}
	if len(limited) != 8 {
		t.Fatalf("%d limited queries audited, want 8", len(limited))
	}
	for _, ev := range limited {
		if ev.Name != "" || ev.Type != "" || ev.Reason != limited[0].Reason || ev.Session != "flooder" {
			t.Errorf("limited event %+v differs from %+v beyond time, proto and rcode", ev, limited[0])
		}
	}
	if st := p.Stats(); st.RateLimited != 8 || lim.Limited() != 8 {
		t.Errorf("stats: %d rate limited, limiter %d; want 8", st.RateLimited, lim.Limited())
	}
}

// TestUDPGoroutinesBounded stalls every upstream exchange and floods the
// proxy: the goroutines serving queries stay under maxUDPWorkers, and the
// rest are dropped.
func TestUDPGoroutinesBounded(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	stall := func(ctx context.Context, _, _ string, _ *dns.Msg) (*dns.Msg, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("stalled upstream")
	}
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams("192.0.2.53"), withExchange(stall), WithCacheSize(0),
		WithTimeouts(20*time.Second, 20*time.Second))
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	before := goruntime.NumGoroutine()
	c, err := net.Dial("udp", p.udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Send until the proxy has dropped some, in batches the socket buffer
	// can take: under load the kernel drops part of a burst before the
	// proxy reads it, so a fixed count may never fill every worker.
	// Bounded: at most 20000 packets, 20 seconds.
	sent := 0
	m := new(dns.Msg)
	deadline := time.Now().Add(20 * time.Second)
	for sent < 20000 && time.Now().Before(deadline) && p.Stats().Overloaded == 0 {
		for range 100 {
			m.SetQuestion(dns.Fqdn("n"+itoa(sent)+".corp.test"), dns.TypeA)
			b, _ := m.Pack()
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		time.Sleep(2 * time.Millisecond) // let the socket buffer drain
	}
	st := p.Stats()
	grown := goruntime.NumGoroutine() - before
	if grown > maxUDPWorkers+16 {
		t.Errorf("%d goroutines for %d stalled queries; bound %d", grown, sent, maxUDPWorkers)
	}
	if n := p.stats.udpWorkersStarted.Load(); n > maxUDPWorkers {
		t.Errorf("%d goroutines started for %d stalled queries; bound %d", n, sent, maxUDPWorkers)
	}
	if st.Overloaded == 0 {
		t.Errorf("no query dropped with every goroutine busy: %+v", st)
	}
	t.Logf("%d queries in, %d dropped, %d goroutines", st.Queries, st.Overloaded, grown)
	once.Do(func() { close(release) })
}

// TestUDPWorkersReused sends rounds of queries that stall upstream, more
// at once than the core workers: the workers started for the first round
// serve the later ones (no goroutine per query), and those beyond the
// core end once idle.
func TestUDPWorkersReused(t *testing.T) {
	idle := udpWorkerIdle
	t.Cleanup(func() { udpWorkerIdle = idle }) // after the proxy's cleanup
	udpWorkerIdle = 200 * time.Millisecond
	const perRound, rounds = 150, 3

	var (
		mu       sync.Mutex
		inFlight int
		release  = make(chan struct{})
	)
	arrived := make(chan struct{}, perRound)
	stall := func(ctx context.Context, _, _ string, _ *dns.Msg) (*dns.Msg, error) {
		mu.Lock()
		inFlight++
		rel := release
		mu.Unlock()
		arrived <- struct{}{}
		select {
		case <-rel:
		case <-ctx.Done():
		}
		return nil, errors.New("stalled upstream")
	}
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams("192.0.2.53"), withExchange(stall), WithCacheSize(0),
		WithTimeouts(10*time.Second, 10*time.Second))
	before := goruntime.NumGoroutine()

	c, err := net.Dial("udp", p.udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	for round := range rounds {
		for i := range perRound {
			m.SetQuestion(dns.Fqdn("r"+itoa(round)+"n"+itoa(i)+".corp.test"), dns.TypeA)
			m.Id = uint16(i)
			b, _ := m.Pack()
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		// Every query of the round waits upstream at once.
		timeout := time.After(10 * time.Second)
		for range perRound {
			select {
			case <-arrived:
			case <-timeout:
				t.Fatalf("round %d: %d queries reached upstream, want %d (stats %+v)", round, inFlight, perRound, p.Stats())
			}
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		buf := make([]byte, 512)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for i := range perRound {
			if _, err := c.Read(buf); err != nil {
				t.Fatalf("round %d: answer %d: %v", round, i, err)
			}
		}
	}
	// A goroutine per query would have started rounds*perRound minus
	// the core workers' share; the pool starts about one round's worth
	// (a few more when an answer reaches the client before its worker is
	// back waiting for work).
	if n := p.stats.udpWorkersStarted.Load(); n < perRound || n > perRound+perRound/3 {
		t.Errorf("%d goroutines started for %d rounds of %d stalled queries; want about %d", n, rounds, perRound, perRound)
	}
	// The workers beyond the core ones end once idle.
	deadline := time.Now().Add(10 * time.Second)
	for goruntime.NumGoroutine()-before > coreUDPWorkers+8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines more than before the rounds, after the idle timeout; want at most %d", goruntime.NumGoroutine()-before, coreUDPWorkers+8)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTCPConnectionsBounded opens more connections from one address than
// it may hold: the extra ones are closed at once, and another address is
// still served.
func TestTCPConnectionsBounded(t *testing.T) {
	_, p, _ := oneSession(t, false, []string{"*.corp.test"}, nil)
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range maxTCPConnsPerClient {
		c, err := net.Dial("tcp", p.tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	extra, err := net.DialTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(p.tcpAddr)))
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("connection over the per-client bound: read error %v, want EOF (closed by the proxy)", err)
	}
	if resp := p.query(t, "tcp", "127.0.0.2", "api.corp.test.", dns.TypeA, false); resp.Rcode != dns.RcodeRefused {
		// 127.0.0.2 has no session: REFUSED, but served.
		t.Errorf("other address: rcode %s", dns.RcodeToString[resp.Rcode])
	}
	// Closing one frees its slot.
	conns[0].Close()
	conns = conns[1:]
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := p.tryExchange(t.Context(), "tcp", "127.0.0.1", func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion("api.corp.test.", dns.TypeA)
			return m
		}())
		if err == nil && resp.Rcode == dns.RcodeSuccess {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no TCP query served after a connection closed: %v %v", resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p.Stats().ConnsRefused == 0 {
		t.Error("ConnsRefused not counted")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestLineBudget(t *testing.T) {
	b := newLineBudget(time.Minute, 3)
	t0 := time.Unix(1000, 0)
	got := 0
	for i := range 10 {
		if _, ok := b.allow("s1", t0.Add(time.Duration(i)*time.Second)); ok {
			got++
		}
	}
	if got != 3 {
		t.Errorf("%d lines in a window, want 3", got)
	}
	if _, ok := b.allow("s2", t0); !ok {
		t.Error("another session shares the first one's budget")
	}
	suppressed, ok := b.allow("s1", t0.Add(time.Minute))
	if !ok || suppressed != 7 {
		t.Errorf("next window: ok %v, suppressed %d; want a line reporting 7", ok, suppressed)
	}
}
