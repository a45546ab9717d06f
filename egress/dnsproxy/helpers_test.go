package dnsproxy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// withExchange replaces the upstream transport.
func withExchange(f exchangeFunc) Option {
	return func(c *config) error {
		c.exchange = f
		return nil
	}
}

// upstreamQuery is one query an upstream received.
type upstreamQuery struct {
	net   string
	name  string
	qtype uint16
	id    uint16
	rd    bool
	opt   *dns.OPT
}

// testUpstream is a recursive-resolver stand-in: a real dns.Server on
// 127.0.0.1 (UDP and TCP on one port) answering from a zone and recording
// every query. A query for a forbidden name fails the test at once.
type testUpstream struct {
	t    *testing.T
	addr string

	mu        sync.Mutex
	zone      map[string][]dns.RR // by lower-case owner
	forbidden map[string]bool
	truncUDP  map[string]bool // answer over UDP with TC set and no records
	rcode     map[string]int
	extra     []dns.RR // added to every answer's additional section
	wrongName bool     // answer for another name
	queries   []upstreamQuery
}

func newUpstream(t *testing.T, zone ...string) *testUpstream {
	t.Helper()
	u := &testUpstream{
		t:         t,
		zone:      map[string][]dns.RR{},
		forbidden: map[string]bool{},
		truncUDP:  map[string]bool{},
		rcode:     map[string]int{},
	}
	u.add(zone...)
	var pc net.PacketConn
	var l net.Listener
	// Find a port free for both UDP and TCP.
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both UDP and TCP")
	}
	u.addr = pc.LocalAddr().String()
	for _, s := range []*dns.Server{
		{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { u.serve("udp", w, r) })},
		{Listener: l, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { u.serve("tcp", w, r) })},
	} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		go func() { errc <- s.ActivateAndServe() }()
		select {
		case <-started:
		case err := <-errc:
			t.Fatalf("upstream: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Shutdown(); err != nil {
				t.Errorf("upstream shutdown: %v", err)
			}
		})
	}
	return u
}

func (u *testUpstream) add(zone ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, z := range zone {
		rr, err := dns.NewRR(z)
		if err != nil {
			u.t.Fatalf("bad zone record %q: %v", z, err)
		}
		owner := strings.ToLower(rr.Header().Name)
		u.zone[owner] = append(u.zone[owner], rr)
	}
}

// set changes the upstream's behaviour under its lock.
func (u *testUpstream) set(f func(u *testUpstream)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

// forbid makes any query for name fail the test.
func (u *testUpstream) forbid(names ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range names {
		u.forbidden[strings.ToLower(dns.Fqdn(n))] = true
	}
}

func (u *testUpstream) serve(network string, w dns.ResponseWriter, r *dns.Msg) {
	u.mu.Lock()
	defer u.mu.Unlock()
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	u.queries = append(u.queries, upstreamQuery{net: network, name: q.Name, qtype: q.Qtype, id: r.Id, rd: r.RecursionDesired, opt: r.IsEdns0()})
	if u.forbidden[name] {
		u.t.Errorf("upstream received forbidden query %s %s over %s", q.Name, dns.Type(q.Qtype), network)
	}
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	if rc, ok := u.rcode[name]; ok {
		m.Rcode = rc
		_ = w.WriteMsg(m)
		return
	}
	if network == "udp" && u.truncUDP[name] {
		m.Truncated = true
		_ = w.WriteMsg(m)
		return
	}
	// Follow CNAMEs inside the zone, as a recursive resolver would, with
	// a bound of its own so that loop tests terminate.
	cur := name
	for range 20 {
		rrs := u.zone[cur]
		var next string
		for _, rr := range rrs {
			if c, ok := rr.(*dns.CNAME); ok && q.Qtype != dns.TypeCNAME {
				m.Answer = append(m.Answer, dns.Copy(rr))
				next = strings.ToLower(c.Target)
			} else if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
		}
		if next == "" {
			break
		}
		cur = next
	}
	final := 0
	for _, rr := range m.Answer {
		if rr.Header().Rrtype == q.Qtype && strings.EqualFold(rr.Header().Name, cur) {
			final++
		}
	}
	if final == 0 {
		soa, _ := dns.NewRR("test. 3600 IN SOA ns.test. admin.test. 1 7200 900 1209600 60")
		m.Ns = append(m.Ns, soa)
		if _, exists := u.zone[cur]; !exists {
			m.Rcode = dns.RcodeNameError
		}
	}
	for _, rr := range u.extra {
		m.Extra = append(m.Extra, dns.Copy(rr))
	}
	if u.wrongName {
		m.Question[0].Name = "other.test."
	}
	if network == "udp" {
		// As real servers do: fit the requester's buffer, set TC if not.
		size := dns.MinMsgSize
		if opt := r.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	_ = w.WriteMsg(m)
}

func (u *testUpstream) received() []upstreamQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.queries)
}

// count returns how many queries for name (any type, any transport) arrived.
func (u *testUpstream) count(name string) int {
	n := 0
	for _, q := range u.received() {
		if strings.EqualFold(q.name, dns.Fqdn(name)) {
			n++
		}
	}
	return n
}

// pinCall is one Pin call.
type pinCall struct {
	addrs []netip.Addr
	ports []uint16
	ttl   time.Duration
}

// fakePinner records calls, optionally into a shared order log, and fails
// when err is set.
type fakePinner struct {
	mu    sync.Mutex
	calls []pinCall
	order *orderLog
	err   error
	block chan struct{} // when set, Pin waits for it to close
}

func (p *fakePinner) Pin(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
	p.mu.Lock()
	block, order := p.block, p.order
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, pinCall{addrs: slices.Clone(addrs), ports: slices.Clone(ports), ttl: ttl})
	if order != nil {
		order.add("pin")
	}
	return p.err
}

func (p *fakePinner) set(f func(p *fakePinner)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *fakePinner) get() []pinCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// pinned returns every address pinned so far.
func (p *fakePinner) pinned() []netip.Addr {
	var out []netip.Addr
	for _, c := range p.get() {
		out = append(out, c.addrs...)
	}
	return out
}

type orderLog struct {
	mu  sync.Mutex
	ops []string
}

func (o *orderLog) add(op string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, op)
}

func (o *orderLog) get() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ops)
}

// auditLog collects events.
type auditLog struct {
	mu     sync.Mutex
	events []Event
}

func (a *auditLog) add(ev Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, ev)
}

func (a *auditLog) get() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

func (a *auditLog) last(t *testing.T) Event {
	t.Helper()
	ev := a.get()
	if len(ev) == 0 {
		t.Fatal("no audit event")
	}
	return ev[len(ev)-1]
}

// recorder is an in-memory dns.ResponseWriter (CoreDNS dnstest.Recorder).
// It packs every message, as the real writer would.
type recorder struct {
	remote net.Addr
	order  *orderLog
	msgs   []*dns.Msg
	packed [][]byte
	err    error // first pack error
}

func newRecorder(remote string, tcp bool) *recorder {
	ap := netip.MustParseAddrPort(remote)
	var a net.Addr = net.UDPAddrFromAddrPort(ap)
	if tcp {
		a = net.TCPAddrFromAddrPort(ap)
	}
	return &recorder{remote: a}
}

func (r *recorder) LocalAddr() net.Addr  { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 53), Port: 53} }
func (r *recorder) RemoteAddr() net.Addr { return r.remote }
func (r *recorder) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		if r.err == nil {
			r.err = err
		}
		return err
	}
	if r.order != nil {
		r.order.add("write")
	}
	r.msgs = append(r.msgs, m)
	r.packed = append(r.packed, b)
	return nil
}
func (r *recorder) Write(b []byte) (int, error) { return 0, fmt.Errorf("raw write not supported") }
func (r *recorder) Close() error                { return nil }
func (r *recorder) TsigStatus() error           { return nil }
func (r *recorder) TsigTimersOnly(bool)         {}
func (r *recorder) Hijack()                     {}

func (r *recorder) msg(t *testing.T) *dns.Msg {
	t.Helper()
	if len(r.msgs) != 1 {
		t.Fatalf("recorder has %d messages, want 1", len(r.msgs))
	}
	return r.msgs[0]
}

// testCtx carries a logger that writes to the test's output.
func testCtx(t *testing.T) context.Context {
	return log.WithLogger(t.Context(), slog.New(slog.NewTextHandler(t.Output(), nil)))
}

// testSession builds a SessionPolicy with its own pinner and audit log.
type testSession struct {
	policy *SessionPolicy
	pinner *fakePinner
	audit  *auditLog
}

func newSession(t *testing.T, id string, ipv6 bool, allow, deny []string) *testSession {
	t.Helper()
	l, err := allowlist.Compile(allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testSession{pinner: &fakePinner{}, audit: &auditLog{}}
	ts.policy = &SessionPolicy{ID: id, Allowlist: l, IPv6: ipv6, Pinner: ts.pinner, Audit: ts.audit.add}
	return ts
}

// testProxy is a Server serving UDP and TCP on 127.0.0.1.
type testProxy struct {
	*Server
	udpAddr, tcpAddr string
}

func startProxy(t *testing.T, sessions Sessions, opts ...Option) *testProxy {
	t.Helper()
	s, err := New(sessions, opts...)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(t.Output(), nil))))
	var wg sync.WaitGroup
	for _, serve := range []func() error{
		func() error { return s.ServePacketConn(ctx, pc) },
		func() error { return s.ServeListener(ctx, l) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(); err != nil {
				t.Errorf("serve: %v", err)
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return &testProxy{Server: s, udpAddr: pc.LocalAddr().String(), tcpAddr: l.Addr().String()}
}

// query sends one question from 127.0.0.1 (or from, if set) and returns
// the reply.
func (p *testProxy) query(t *testing.T, network, from, name string, qtype uint16, edns bool) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(ednsUDPSize, false)
	}
	return p.exchange(t, network, from, m)
}

func (p *testProxy) exchange(t *testing.T, network, from string, m *dns.Msg) *dns.Msg {
	t.Helper()
	resp, err := p.tryExchange(t.Context(), network, from, m)
	if err != nil {
		t.Fatalf("exchange %s over %s: %v", m.Question[0].Name, network, err)
	}
	return resp
}

func (p *testProxy) tryExchange(ctx context.Context, network, from string, m *dns.Msg) (*dns.Msg, error) {
	addr := p.udpAddr
	if network == "tcp" {
		addr = p.tcpAddr
	}
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 4096}
	if from != "" {
		ip := net.ParseIP(from)
		if network == "tcp" {
			c.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		} else {
			c.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: ip}}
		}
	}
	resp, _, err := c.ExchangeContext(ctx, m, addr)
	return resp, err
}

// addrsOf returns the A/AAAA addresses in an answer section.
func addrsOf(m *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		switch v := rr.(type) {
		case *dns.A:
			a, _ := netip.AddrFromSlice(v.A.To4())
			out = append(out, a)
		case *dns.AAAA:
			a, _ := netip.AddrFromSlice(v.AAAA.To16())
			out = append(out, a)
		}
	}
	return out
}

// edeOf returns the extended DNS error of m, if any.
func edeOf(m *dns.Msg) (*dns.EDNS0_EDE, bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return nil, false
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok {
			return e, true
		}
	}
	return nil, false
}

func mustAddrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}
