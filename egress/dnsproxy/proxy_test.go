package dnsproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/internal/log"
)

var testZone = []string{
	"api.corp.test. 60 IN A 192.0.2.10",
	"api.corp.test. 60 IN A 192.0.2.11",
	"api.corp.test. 60 IN AAAA 2001:db8::10",
	"www.corp.test. 120 IN CNAME edge.cdn.test.",
	"edge.cdn.test. 30 IN A 198.51.100.7",
	"edge.cdn.test. 30 IN AAAA 2001:db8::7",
	"alias.corp.test. 60 IN CNAME secret.evil.test.",
	"secret.evil.test. 60 IN A 203.0.113.66",
	"corp.test. 60 IN A 192.0.2.1",
	"evilcorp.test. 60 IN A 203.0.113.1",
	"short.corp.test. 1 IN A 192.0.2.20",
	"long.corp.test. 86400 IN A 192.0.2.21",
	"web.corp.test. 60 IN HTTPS 1 . alpn=h2 ipv4hint=203.0.113.9",
	"web.corp.test. 60 IN TXT \"v=spf1\"",
	"web.corp.test. 60 IN A 192.0.2.30",
}

// oneSession starts an upstream with testZone and a proxy with one session
// for 127.0.0.1.
func oneSession(t *testing.T, ipv6 bool, allow, deny []string, opts ...Option) (*testUpstream, *testProxy, *testSession) {
	t.Helper()
	up := newUpstream(t, testZone...)
	sess := newSession(t, "s1", ipv6, allow, deny)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, append([]Option{WithUpstreams(up.addr)}, opts...)...)
	return up, p, sess
}

func TestAllowedNameIsForwardedAndPinned(t *testing.T) {
	up, p, sess := oneSession(t, false, []string{"*.corp.test:443"}, nil)

	// The client sends EDNS options that must not leave the proxy.
	m := new(dns.Msg)
	m.SetQuestion("API.Corp.Test.", dns.TypeA)
	m.Id = 4242
	m.SetEdns0(4096, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option,
		&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.IPv4(10, 213, 0, 0)},
		&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"},
	)
	resp := p.exchange(t, "udp", "", m)

	if resp.Rcode != dns.RcodeSuccess || resp.Id != 4242 || !resp.RecursionAvailable {
		t.Fatalf("response: %v", resp)
	}
	if got, want := addrsOf(resp), mustAddrs("192.0.2.10", "192.0.2.11"); !slices.Equal(got, want) {
		t.Errorf("answer addresses %v, want %v", got, want)
	}
	if resp.Question[0].Name != "API.Corp.Test." {
		t.Errorf("question not echoed as asked: %v", resp.Question[0])
	}
	calls := sess.pinner.get()
	if len(calls) != 1 {
		t.Fatalf("pin calls: %+v", calls)
	}
	if c := calls[0]; !slices.Equal(c.addrs, mustAddrs("192.0.2.10", "192.0.2.11")) || !slices.Equal(c.ports, []uint16{443}) || c.ttl != 60*time.Second {
		t.Errorf("pin call %+v", c)
	}
	for _, rr := range resp.Answer {
		if rr.Header().Ttl > 60 {
			t.Errorf("TTL %d above pin", rr.Header().Ttl)
		}
	}

	qs := up.received()
	if len(qs) != 1 {
		t.Fatalf("upstream queries: %+v", qs)
	}
	q := qs[0]
	if q.name != "api.corp.test." || q.qtype != dns.TypeA || !q.rd || q.net != "udp" {
		t.Errorf("upstream query %+v", q)
	}
	if q.opt == nil || q.opt.UDPSize() != ednsUDPSize || q.opt.Do() || len(q.opt.Option) != 0 {
		t.Errorf("upstream EDNS: %v", q.opt)
	}

	ev := sess.audit.last(t)
	if ev.Action != ActionAllowed || ev.Session != "s1" || ev.Name != "api.corp.test." || ev.Type != "A" ||
		ev.Rcode != "NOERROR" || ev.Rule != "*.corp.test:443" || len(ev.Answers) != 2 || ev.PinTTL != 60 ||
		ev.Client != netip.MustParseAddr("127.0.0.1") || ev.Proto != "udp" {
		t.Errorf("audit event %+v", ev)
	}
	if st := p.Stats(); st.Allowed != 1 || st.Queries != 1 || st.Forwarded != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestRefusedNamesAreNeverForwarded(t *testing.T) {
	up, p, sess := oneSession(t, true, []string{"*.corp.test", "api.example.test"}, []string{"*.internal.corp.test"})
	refused := []string{
		"c2VjcmV0.evil.test.",
		"secret.evil.test.",
		"corp.test.",
		"evilcorp.test.",
		"corp.test.evil.test.",
		"a.corp.test.evil.test.",
		"example.test.",
		"x.api.example.test.",
		"db.internal.corp.test.",
	}
	up.forbid(refused...)
	for _, name := range refused {
		for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeHTTPS} {
			for _, network := range []string{"udp", "tcp"} {
				t.Run(network+"/"+dns.Type(qtype).String()+"/"+name, func(t *testing.T) {
					resp := p.query(t, network, "", name, qtype, true)
					if resp.Rcode != dns.RcodeRefused {
						t.Fatalf("rcode %s, want REFUSED", dns.RcodeToString[resp.Rcode])
					}
					ede, ok := edeOf(resp)
					if !ok || ede.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(ede.ExtraText, strings.ToLower(strings.TrimSuffix(name, "."))) {
						t.Errorf("EDE %v", ede)
					}
					if len(resp.Answer) != 0 {
						t.Errorf("answer records: %v", resp.Answer)
					}
					ev := sess.audit.last(t)
					if ev.Action != ActionRefused || ev.Name != strings.ToLower(name) || ev.Rcode != "REFUSED" {
						t.Errorf("audit %+v", ev)
					}
				})
			}
		}
	}
	for _, name := range refused {
		if n := up.count(name); n != 0 {
			t.Errorf("upstream received %d queries for %s", n, name)
		}
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("upstream received %d queries in all", n)
	}
	if len(sess.pinner.get()) != 0 {
		t.Errorf("pinned for refused names: %v", sess.pinner.get())
	}
	// The deny entry is named in the refusal.
	resp := p.query(t, "udp", "", "db.internal.corp.test.", dns.TypeA, true)
	if ede, _ := edeOf(resp); ede == nil || !strings.Contains(ede.ExtraText, "*.internal.corp.test") {
		t.Errorf("deny refusal EDE %v", ede)
	}
	if ev := sess.audit.last(t); ev.Rule != "*.internal.corp.test" {
		t.Errorf("deny audit rule %q", ev.Rule)
	}
	if st := p.Stats(); st.Blocked == 0 || st.Forwarded != 0 || st.Refused != st.Queries {
		t.Errorf("stats %+v", st)
	}
}

func TestRefusalWithoutEDNSHasNoOPT(t *testing.T) {
	_, p, _ := oneSession(t, false, []string{"*.corp.test"}, nil)
	resp := p.query(t, "udp", "", "secret.evil.test.", dns.TypeA, false)
	if resp.Rcode != dns.RcodeRefused {
		t.Fatalf("rcode %s", dns.RcodeToString[resp.Rcode])
	}
	if resp.IsEdns0() != nil {
		t.Errorf("OPT in reply to a query without EDNS: %v", resp)
	}
}

func TestCNAMEChain(t *testing.T) {
	tests := []struct {
		name      string
		zone      []string
		allow     []string
		query     string
		wantRcode int
		wantEDE   string
		wantAddrs []netip.Addr
		wantChain []string
		wantPorts []uint16
	}{
		{
			name:      "allowed target",
			allow:     []string{"www.corp.test", "*.cdn.test"},
			query:     "www.corp.test.",
			wantRcode: dns.RcodeSuccess,
			wantAddrs: mustAddrs("198.51.100.7"),
			wantChain: []string{"edge.cdn.test."},
		},
		{
			name:      "target not allowed",
			allow:     []string{"www.corp.test"},
			query:     "www.corp.test.",
			wantRcode: dns.RcodeRefused,
			wantEDE:   "edge.cdn.test, which is not in the egress allowlist",
		},
		{
			name:      "target to an evil name",
			allow:     []string{"*.corp.test"},
			query:     "alias.corp.test.",
			wantRcode: dns.RcodeRefused,
			wantEDE:   "secret.evil.test",
		},
		{
			name:      "ports narrow along the chain",
			allow:     []string{"www.corp.test:443", "www.corp.test:80", "*.cdn.test:443"},
			query:     "www.corp.test.",
			wantRcode: dns.RcodeSuccess,
			wantAddrs: mustAddrs("198.51.100.7"),
			wantChain: []string{"edge.cdn.test."},
			wantPorts: []uint16{443},
		},
		{
			name:      "no common port",
			allow:     []string{"www.corp.test:80", "*.cdn.test:443"},
			query:     "www.corp.test.",
			wantRcode: dns.RcodeRefused,
			wantEDE:   "no port is allowed",
		},
		{
			name: "eight hops are fine",
			zone: []string{
				"h0.chain.test. 60 IN CNAME h1.chain.test.", "h1.chain.test. 60 IN CNAME h2.chain.test.",
				"h2.chain.test. 60 IN CNAME h3.chain.test.", "h3.chain.test. 60 IN CNAME h4.chain.test.",
				"h4.chain.test. 60 IN CNAME h5.chain.test.", "h5.chain.test. 60 IN CNAME h6.chain.test.",
				"h6.chain.test. 60 IN CNAME h7.chain.test.", "h7.chain.test. 60 IN CNAME h8.chain.test.",
				"h8.chain.test. 60 IN A 192.0.2.88",
			},
			allow:     []string{"*.chain.test"},
			query:     "h0.chain.test.",
			wantRcode: dns.RcodeSuccess,
			wantAddrs: mustAddrs("192.0.2.88"),
			wantChain: []string{"h1.chain.test.", "h2.chain.test.", "h3.chain.test.", "h4.chain.test.",
				"h5.chain.test.", "h6.chain.test.", "h7.chain.test.", "h8.chain.test."},
		},
		{
			name: "nine hops are too many",
			zone: []string{
				"h0.chain.test. 60 IN CNAME h1.chain.test.", "h1.chain.test. 60 IN CNAME h2.chain.test.",
				"h2.chain.test. 60 IN CNAME h3.chain.test.", "h3.chain.test. 60 IN CNAME h4.chain.test.",
				"h4.chain.test. 60 IN CNAME h5.chain.test.", "h5.chain.test. 60 IN CNAME h6.chain.test.",
				"h6.chain.test. 60 IN CNAME h7.chain.test.", "h7.chain.test. 60 IN CNAME h8.chain.test.",
				"h8.chain.test. 60 IN CNAME h9.chain.test.", "h9.chain.test. 60 IN A 192.0.2.99",
			},
			allow:     []string{"*.chain.test"},
			query:     "h0.chain.test.",
			wantRcode: dns.RcodeServerFailure,
		},
		{
			name:      "loop",
			zone:      []string{"a.loop.test. 60 IN CNAME b.loop.test.", "b.loop.test. 60 IN CNAME a.loop.test."},
			allow:     []string{"*.loop.test"},
			query:     "a.loop.test.",
			wantRcode: dns.RcodeServerFailure,
		},
		{
			name:      "NXDOMAIN at the end of an allowed chain",
			zone:      []string{"gone.corp.test. 60 IN CNAME missing.cdn.test."},
			allow:     []string{"*.corp.test", "*.cdn.test"},
			query:     "gone.corp.test.",
			wantRcode: dns.RcodeNameError,
			wantChain: []string{"missing.cdn.test."},
		},
		{
			name:      "NXDOMAIN at the end of a disallowed chain",
			zone:      []string{"gone.corp.test. 60 IN CNAME missing.evil.test."},
			allow:     []string{"*.corp.test"},
			query:     "gone.corp.test.",
			wantRcode: dns.RcodeRefused,
			wantEDE:   "missing.evil.test",
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			up := newUpstream(t, append(slices.Clone(testZone), test.zone...)...)
			sess := newSession(t, "s1", false, test.allow, nil)
			var sessions SessionMap
			sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
			p := startProxy(t, &sessions, WithUpstreams(up.addr))
			resp := p.query(t, "udp", "", test.query, dns.TypeA, true)
			if resp.Rcode != test.wantRcode {
				t.Fatalf("rcode %s, want %s: %v", dns.RcodeToString[resp.Rcode], dns.RcodeToString[test.wantRcode], resp)
			}
			if test.wantEDE != "" {
				ede, ok := edeOf(resp)
				if !ok || ede.InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(ede.ExtraText, test.wantEDE) {
					t.Errorf("EDE %v, want Blocked containing %q", ede, test.wantEDE)
				}
			}
			if got := addrsOf(resp); !slices.Equal(got, test.wantAddrs) {
				t.Errorf("answer addresses %v, want %v", got, test.wantAddrs)
			}
			if got := sess.pinner.pinned(); !slices.Equal(got, test.wantAddrs) {
				t.Errorf("pinned %v, want %v", got, test.wantAddrs)
			}
			if len(test.wantAddrs) > 0 {
				if c := sess.pinner.get()[0]; !slices.Equal(c.ports, test.wantPorts) {
					t.Errorf("pinned ports %v, want %v", c.ports, test.wantPorts)
				}
			}
			ev := sess.audit.last(t)
			if test.wantRcode == dns.RcodeSuccess || test.wantRcode == dns.RcodeNameError {
				if ev.Action != ActionAllowed || !slices.Equal(ev.CNAMEs, test.wantChain) {
					t.Errorf("audit %+v, want chain %v", ev, test.wantChain)
				}
				var chain []string
				for _, rr := range resp.Answer {
					if c, ok := rr.(*dns.CNAME); ok {
						chain = append(chain, strings.ToLower(c.Target))
					}
				}
				if !slices.Equal(chain, test.wantChain) {
					t.Errorf("answer chain %v, want %v", chain, test.wantChain)
				}
			} else if ev.Action == ActionAllowed {
				t.Errorf("audit %+v for a refused chain", ev)
			}
		})
	}
}

func TestAnswerKeepsOnlyTheChain(t *testing.T) {
	up := newUpstream(t, testZone...)
	// A resolver (or an attacker on its path) adds records for other names,
	// glue in the additional section, and an AAAA in an A answer.
	up.add(
		"api.corp.test. 60 IN AAAA 2001:db8::66",
		"api.corp.test. 60 IN MX 10 mail.evil.test.",
	)
	up.set(func(u *testUpstream) {
		u.zone["api.corp.test."] = append(u.zone["api.corp.test."], mustRR(t, "api.corp.test. 60 CH A 203.0.113.5"))
		u.extra = []dns.RR{mustRR(t, "ns.evil.test. 60 IN A 203.0.113.77"), mustRR(t, "other.corp.test. 60 IN A 203.0.113.78")}
	})
	sess := newSession(t, "s1", true, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr))

	resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true)
	if got, want := addrsOf(resp), mustAddrs("192.0.2.10", "192.0.2.11"); !slices.Equal(got, want) {
		t.Errorf("answer %v, want %v", resp.Answer, want)
	}
	if len(resp.Answer) != 2 {
		t.Errorf("extra answer records: %v", resp.Answer)
	}
	for _, rr := range resp.Extra {
		if _, ok := rr.(*dns.OPT); !ok {
			t.Errorf("additional record passed through: %v", rr)
		}
	}
	if got := sess.pinner.pinned(); !slices.Equal(got, mustAddrs("192.0.2.10", "192.0.2.11")) {
		t.Errorf("pinned %v", got)
	}
}

func mustRR(t *testing.T, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return rr
}

func TestAAAA(t *testing.T) {
	t.Run("without ipv6", func(t *testing.T) {
		up, p, sess := oneSession(t, false, []string{"*.corp.test", "*.cdn.test"}, nil)
		for _, name := range []string{"api.corp.test.", "www.corp.test."} {
			resp := p.query(t, "udp", "", name, dns.TypeAAAA, true)
			if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 0 {
				t.Errorf("AAAA %s without ipv6: %v", name, resp)
			}
			if ede, ok := edeOf(resp); !ok || ede.InfoCode != dns.ExtendedErrorCodeSynthesized || !strings.Contains(ede.ExtraText, "IPv6") {
				t.Errorf("EDE %v", ede)
			}
			if ev := sess.audit.last(t); ev.Action != ActionRefused || ev.Rcode != "NOERROR" || ev.Type != "AAAA" {
				t.Errorf("audit %+v", ev)
			}
		}
		for _, q := range up.received() {
			if q.qtype == dns.TypeAAAA {
				t.Errorf("AAAA forwarded: %+v", q)
			}
		}
		if n := len(sess.pinner.get()); n != 0 {
			t.Errorf("%d pin calls", n)
		}
		// A still works, and an A answer never carries AAAA records.
		resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true)
		for _, a := range addrsOf(resp) {
			if a.Is6() {
				t.Errorf("IPv6 address in A answer: %v", a)
			}
		}
	})
	t.Run("with ipv6", func(t *testing.T) {
		_, p, sess := oneSession(t, true, []string{"*.corp.test", "*.cdn.test"}, nil)
		resp := p.query(t, "udp", "", "www.corp.test.", dns.TypeAAAA, true)
		if got, want := addrsOf(resp), mustAddrs("2001:db8::7"); !slices.Equal(got, want) {
			t.Fatalf("answer %v, want %v", resp.Answer, want)
		}
		if got := sess.pinner.pinned(); !slices.Equal(got, mustAddrs("2001:db8::7")) {
			t.Errorf("pinned %v", got)
		}
		// Negative AAAA answer for an allowed name: empty, nothing pinned.
		resp = p.query(t, "udp", "", "short.corp.test.", dns.TypeAAAA, true)
		if resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 0 || len(sess.pinner.get()) != 1 {
			t.Errorf("no-data AAAA: %v, pins %v", resp, sess.pinner.get())
		}
	})
}

func TestRecordTypes(t *testing.T) {
	up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
	tests := []struct {
		qtype     uint16
		rcode     int
		ede       uint16
		forwarded bool
	}{
		{dns.TypeA, dns.RcodeSuccess, 0, true},
		{dns.TypeCNAME, dns.RcodeSuccess, 0, true},
		{dns.TypeHTTPS, dns.RcodeSuccess, dns.ExtendedErrorCodeSynthesized, false},
		{dns.TypeSVCB, dns.RcodeSuccess, dns.ExtendedErrorCodeSynthesized, false},
		{dns.TypeTXT, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeMX, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeSRV, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeNS, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeSOA, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypePTR, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeANY, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeAXFR, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
		{dns.TypeNULL, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, false},
	}
	for _, test := range tests {
		t.Run(dns.Type(test.qtype).String(), func(t *testing.T) {
			before := len(up.received())
			resp := p.query(t, "tcp", "", "web.corp.test.", test.qtype, true)
			if resp.Rcode != test.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[test.rcode])
			}
			if test.ede != 0 {
				if ede, ok := edeOf(resp); !ok || ede.InfoCode != test.ede {
					t.Errorf("EDE %v, want %d", ede, test.ede)
				}
			}
			if forwarded := len(up.received()) > before; forwarded != test.forwarded {
				t.Errorf("forwarded = %v, want %v", forwarded, test.forwarded)
			}
			if test.qtype != dns.TypeA {
				for _, rr := range resp.Answer {
					t.Errorf("record returned for %s: %v", dns.Type(test.qtype), rr)
				}
			}
		})
	}
	// Only the A query pinned anything; the HTTPS ipv4hint never did.
	if got := sess.pinner.pinned(); !slices.Equal(got, mustAddrs("192.0.2.30")) {
		t.Errorf("pinned %v", got)
	}
}

func TestPinBeforeAnswer(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		up := newUpstream(t, testZone...)
		order := &orderLog{}
		sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
		sess.pinner.order = order
		var sessions SessionMap
		sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
		s, err := New(&sessions, WithUpstreams(up.addr))
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // miss, then cache hit
			w := newRecorder("127.0.0.1:5353", false)
			w.order = order
			m := new(dns.Msg)
			m.SetQuestion("api.corp.test.", dns.TypeA)
			s.serve(testCtx(t), w, m)
			if len(addrsOf(w.msg(t))) != 2 {
				t.Fatalf("answer %v", w.msg(t))
			}
		}
		if got, want := order.get(), []string{"pin", "write", "pin", "write"}; !slices.Equal(got, want) {
			t.Errorf("order %v, want %v", got, want)
		}
	})
	t.Run("answer waits for the pin", func(t *testing.T) {
		_, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		release := make(chan struct{})
		sess.pinner.set(func(p *fakePinner) { p.block = release })
		got := make(chan *dns.Msg, 1)
		go func() {
			m := new(dns.Msg)
			m.SetQuestion("api.corp.test.", dns.TypeA)
			resp, err := p.tryExchange(context.Background(), "udp", "", m)
			if err != nil {
				t.Errorf("exchange: %v", err)
			}
			got <- resp
		}()
		// The query is held by the pinner; until the pin is released
		// nothing may come back.
		select {
		case resp := <-got:
			t.Fatalf("answer before pin: %v", resp)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		resp := <-got
		if resp == nil || len(addrsOf(resp)) != 2 || len(sess.pinner.get()) != 1 {
			t.Fatalf("answer after pin: %v", resp)
		}
	})
	t.Run("pin failure withholds the answer", func(t *testing.T) {
		_, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		sess.pinner.set(func(p *fakePinner) { p.err = errors.New("nft: set full") })
		for _, network := range []string{"udp", "tcp"} {
			resp := p.query(t, network, "", "api.corp.test.", dns.TypeA, true)
			if resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
				t.Fatalf("%s: %v", network, resp)
			}
			ev := sess.audit.last(t)
			if ev.Action != ActionFailed || !strings.Contains(ev.Reason, "nft: set full") || len(ev.Answers) != 0 {
				t.Errorf("audit %+v", ev)
			}
		}
		if st := p.Stats(); st.PinErrors != 2 || st.ServFail != 2 || st.Failed != 2 || st.Allowed != 0 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("no pinner", func(t *testing.T) {
		up := newUpstream(t, testZone...)
		sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
		sess.policy.Pinner = nil
		var sessions SessionMap
		sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
		p := startProxy(t, &sessions, WithUpstreams(up.addr))
		if resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true); resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
			t.Fatalf("%v", resp)
		}
	})
}

func TestTruncation(t *testing.T) {
	var big []string
	for i := range 60 {
		big = append(big, "big.corp.test. 60 IN A 192.0.2."+strconv.Itoa(i+1))
	}
	t.Run("truncated UDP answer returned as-is to a UDP client", func(t *testing.T) {
		up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		up.add(big...)
		up.set(func(u *testUpstream) { u.truncUDP["big.corp.test."] = true })
		resp := p.query(t, "udp", "", "big.corp.test.", dns.TypeA, true)
		if resp.Rcode != dns.RcodeSuccess || !resp.Truncated || len(resp.Answer) != 0 {
			t.Fatalf("%v", resp)
		}
		for _, q := range up.received() {
			if q.net != "udp" {
				t.Errorf("proxy retried over %s for a UDP client", q.net)
			}
		}
		if ev := sess.audit.last(t); ev.Action != ActionAllowed || !strings.Contains(ev.Reason, "truncated") {
			t.Errorf("audit %+v", ev)
		}
		// Truncated answers are not cached: the TCP retry is forwarded.
		resp = p.query(t, "tcp", "", "big.corp.test.", dns.TypeA, true)
		if resp.Truncated || len(resp.Answer) != 60 {
			t.Fatalf("TCP retry: truncated=%v, %d records", resp.Truncated, len(resp.Answer))
		}
		var nets []string
		for _, q := range up.received() {
			nets = append(nets, q.net)
		}
		if !slices.Equal(nets, []string{"udp", "udp", "tcp"}) {
			t.Errorf("upstream transports %v, want udp, udp, tcp", nets)
		}
		if got := len(sess.pinner.pinned()); got != 60 {
			t.Errorf("pinned %d addresses, want 60", got)
		}
		if st := p.Stats(); st.TCPRetries != 1 || st.Truncated != 1 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("large answer truncated to the client's UDP size", func(t *testing.T) {
		up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		up.add(big...)
		resp := p.query(t, "udp", "", "big.corp.test.", dns.TypeA, false) // 512 bytes
		if !resp.Truncated || len(resp.Answer) == 0 || len(resp.Answer) >= 60 {
			t.Fatalf("truncated=%v, %d records", resp.Truncated, len(resp.Answer))
		}
		// Everything upstream returned was pinned, a superset of the answer.
		pinned := sess.pinner.pinned()
		for _, a := range addrsOf(resp) {
			if !slices.Contains(pinned, a) {
				t.Errorf("returned %v without pinning it", a)
			}
		}
	})
}

func TestMalformedQueries(t *testing.T) {
	up := newUpstream(t, testZone...)
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	s, err := New(&sessions, WithUpstreams(up.addr))
	if err != nil {
		t.Fatal(err)
	}
	q := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.SetEdns0(1232, false)
		return m
	}
	tests := []struct {
		name  string
		msg   func() *dns.Msg
		rcode int
		ede   uint16
	}{
		{"no question", func() *dns.Msg { m := q("api.corp.test.", dns.TypeA); m.Question = nil; return m }, dns.RcodeFormatError, 0},
		{"two questions", func() *dns.Msg {
			m := q("api.corp.test.", dns.TypeA)
			m.Question = append(m.Question, dns.Question{Name: "secret.evil.test.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
			return m
		}, dns.RcodeFormatError, 0},
		{"update", func() *dns.Msg { m := q("api.corp.test.", dns.TypeA); m.Opcode = dns.OpcodeUpdate; return m }, dns.RcodeNotImplemented, 0},
		{"notify", func() *dns.Msg { m := q("api.corp.test.", dns.TypeSOA); m.Opcode = dns.OpcodeNotify; return m }, dns.RcodeNotImplemented, 0},
		{"answer section", func() *dns.Msg {
			m := q("api.corp.test.", dns.TypeA)
			m.Answer = []dns.RR{mustRR(t, "api.corp.test. 60 IN A 192.0.2.1")}
			return m
		}, dns.RcodeFormatError, 0},
		{"two OPT", func() *dns.Msg { m := q("api.corp.test.", dns.TypeA); m.Extra = append(m.Extra, m.Extra[0]); return m }, dns.RcodeFormatError, 0},
		{"EDNS version 1", func() *dns.Msg { m := q("api.corp.test.", dns.TypeA); m.IsEdns0().SetVersion(1); return m }, dns.RcodeBadVers, 0},
		{"class CH", func() *dns.Msg { m := q("version.bind.", dns.TypeTXT); m.Question[0].Qclass = dns.ClassCHAOS; return m }, dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported},
		{"class ANY", func() *dns.Msg { m := q("api.corp.test.", dns.TypeA); m.Question[0].Qclass = dns.ClassANY; return m }, dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported},
		{"control character", func() *dns.Msg { return q("a\x00b.corp.test.", dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"newline", func() *dns.Msg { return q("x\ny.corp.test.", dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"escaped dot", func() *dns.Msg { return q(`a\.b.corp.test.`, dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"wildcard label", func() *dns.Msg { return q("*.corp.test.", dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"space", func() *dns.Msg { return q("a b.corp.test.", dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"non-ASCII", func() *dns.Msg { return q("bücher.corp.test.", dns.TypeA) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
		{"root", func() *dns.Msg { return q(".", dns.TypeNS) }, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			w := newRecorder("127.0.0.1:5353", false)
			m := test.msg()
			// Round-trip through the wire format, as the server would.
			b, err := m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			in := new(dns.Msg)
			if err := in.Unpack(b); err != nil {
				t.Fatal(err)
			}
			s.serve(testCtx(t), w, in)
			resp := w.msg(t)
			if resp.Rcode != test.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[resp.Rcode], dns.RcodeToString[test.rcode])
			}
			if test.ede != 0 {
				if ede, ok := edeOf(resp); !ok || ede.InfoCode != test.ede {
					t.Errorf("EDE %v, want %d", ede, test.ede)
				}
			}
			if len(resp.Answer) != 0 {
				t.Errorf("answer %v", resp.Answer)
			}
			if ev := sess.audit.last(t); ev.Action != ActionRefused {
				t.Errorf("audit %+v", ev)
			}
		})
	}
	if n := len(up.received()); n != 0 {
		t.Errorf("%d malformed queries forwarded: %+v", n, up.received())
	}
	if st := s.Stats(); st.Malformed != uint64(len(tests)-1) { // root is well-formed, just not allowed
		t.Errorf("stats %+v", st)
	}
}

func TestMalformedOverTheWire(t *testing.T) {
	up, p, _ := oneSession(t, false, []string{"*.corp.test"}, nil)
	conn, err := net.Dial("udp", p.udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A header claiming one question, then garbage: miekg/dns answers
	// FORMERR before the handlers see it.
	junk := []byte{0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff}
	if _, err := conn.Write(junk); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	resp := new(dns.Msg)
	if err := resp.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	if resp.Id != 0x1234 || resp.Rcode != dns.RcodeFormatError {
		t.Errorf("reply %v", resp)
	}
	// A response (QR set) is dropped: answering could start a loop.
	resp.Response = true
	resp.Rcode = 0
	b, _ := resp.Pack()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	// A valid query afterwards is answered, and is the only thing read.
	m := new(dns.Msg)
	m.SetQuestion("api.corp.test.", dns.TypeA)
	m.Id = 0x5678
	b, _ = m.Pack()
	if _, err := conn.Write(b); err != nil {
		t.Fatal(err)
	}
	n, err = conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Unpack(buf[:n]); err != nil || resp.Id != 0x5678 || len(resp.Answer) != 2 {
		t.Errorf("reply %v, %v", resp, err)
	}
	if len(up.received()) != 1 {
		t.Errorf("upstream queries %+v", up.received())
	}
	// Packets are served concurrently: the dropped response may be counted
	// after the valid query was answered.
	deadline := time.Now().Add(2 * time.Second)
	for p.Stats().Malformed != 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if st := p.Stats(); st.Malformed != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestUnknownSource(t *testing.T) {
	up := newUpstream(t, testZone...)
	up.forbid("api.corp.test.")
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.3"), sess.policy)
	audit := &auditLog{}
	p := startProxy(t, &sessions, WithUpstreams(up.addr), WithAudit(audit.add))
	for _, network := range []string{"udp", "tcp"} {
		resp := p.query(t, network, "127.0.0.2", "api.corp.test.", dns.TypeA, true)
		if resp.Rcode != dns.RcodeRefused {
			t.Fatalf("%s: rcode %s", network, dns.RcodeToString[resp.Rcode])
		}
		if ede, ok := edeOf(resp); !ok || ede.InfoCode != dns.ExtendedErrorCodeProhibited || !strings.Contains(ede.ExtraText, "127.0.0.2") {
			t.Errorf("EDE %v", ede)
		}
		ev := audit.last(t)
		if ev.Action != ActionRefused || ev.Session != "" || ev.Client != netip.MustParseAddr("127.0.0.2") || ev.Name != "api.corp.test." || ev.Proto != network {
			t.Errorf("audit %+v", ev)
		}
	}
	if len(sess.audit.get()) != 0 || len(sess.pinner.get()) != 0 {
		t.Error("another session's policy was used")
	}
	if st := p.Stats(); st.UnknownSource != 2 {
		t.Errorf("stats %+v", st)
	}
	// Removing a session takes effect at once.
	resp := p.query(t, "udp", "127.0.0.3", "short.corp.test.", dns.TypeA, true)
	if resp.Rcode != dns.RcodeSuccess {
		t.Fatalf("known session: %v", resp)
	}
	sessions.Delete(netip.MustParseAddr("127.0.0.3"))
	if resp := p.query(t, "udp", "127.0.0.3", "short.corp.test.", dns.TypeA, true); resp.Rcode != dns.RcodeRefused {
		t.Fatalf("deleted session: %v", resp)
	}
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestCacheIsSharedButPinsPerSession(t *testing.T) {
	up := newUpstream(t, testZone...)
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	a := newSession(t, "a", false, []string{"*.corp.test", "*.cdn.test"}, nil)
	b := newSession(t, "b", false, []string{"*.corp.test:443", "*.cdn.test"}, nil)
	c := newSession(t, "c", false, []string{"www.corp.test"}, nil) // not the CDN
	d := newSession(t, "d", false, []string{"*.cdn.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), a.policy)
	sessions.Set(netip.MustParseAddr("127.0.0.2"), b.policy)
	sessions.Set(netip.MustParseAddr("127.0.0.3"), c.policy)
	sessions.Set(netip.MustParseAddr("127.0.0.4"), d.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr), WithClock(clock.Now))

	ask := func(from string) *dns.Msg {
		t.Helper()
		return p.query(t, "udp", from, "www.corp.test.", dns.TypeA, true)
	}
	if resp := ask("127.0.0.1"); len(addrsOf(resp)) != 1 {
		t.Fatalf("miss: %v", resp)
	}
	clock.Advance(10 * time.Second)
	resp := ask("127.0.0.2")
	if len(addrsOf(resp)) != 1 {
		t.Fatalf("hit from b: %v", resp)
	}
	// Aged by 10s: CNAME 120 → 110 capped at the pin (30 - 10 = 20).
	for _, rr := range resp.Answer {
		if rr.Header().Ttl != 20 {
			t.Errorf("aged TTL %d, want 20: %v", rr.Header().Ttl, rr)
		}
	}
	if calls := b.pinner.get(); len(calls) != 1 || calls[0].ttl != 20*time.Second || !slices.Equal(calls[0].ports, []uint16{443}) {
		t.Errorf("b pins %+v", calls)
	}
	if ev := b.audit.last(t); !ev.Cached || ev.Action != ActionAllowed {
		t.Errorf("b audit %+v", ev)
	}
	ask("127.0.0.1")
	if n := len(a.pinner.get()); n != 2 {
		t.Errorf("a pinned %d times, want 2 (miss and hit)", n)
	}
	// c may resolve www.corp.test but not its CDN target, cached or not.
	if resp := ask("127.0.0.3"); resp.Rcode != dns.RcodeRefused {
		t.Errorf("c got %v", resp)
	}
	if len(c.pinner.get()) != 0 {
		t.Error("c pinned a refused chain")
	}
	// d may resolve the CDN but not www.corp.test, though it is cached.
	if resp := ask("127.0.0.4"); resp.Rcode != dns.RcodeRefused {
		t.Errorf("d got %v", resp)
	}
	if n := up.count("www.corp.test."); n != 1 {
		t.Errorf("upstream saw www.corp.test %d times, want 1", n)
	}
	if st := p.Stats(); st.CacheHits != 3 || st.CacheMisses != 1 {
		t.Errorf("stats %+v", st)
	}
	// After the shortest TTL (30s), the entry expires.
	clock.Advance(21 * time.Second)
	ask("127.0.0.1")
	if n := up.count("www.corp.test."); n != 2 {
		t.Errorf("upstream saw www.corp.test %d times after expiry, want 2", n)
	}
}

func TestNegativeAnswersAreCached(t *testing.T) {
	up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
	for range 3 {
		resp := p.query(t, "udp", "", "nope.corp.test.", dns.TypeA, true)
		if resp.Rcode != dns.RcodeNameError || len(resp.Ns) != 1 {
			t.Fatalf("%v", resp)
		}
		if soa := resp.Ns[0].(*dns.SOA); soa.Minttl > 60 {
			t.Errorf("SOA %v", soa)
		}
	}
	if n := up.count("nope.corp.test."); n != 1 {
		t.Errorf("upstream saw %d queries", n)
	}
	if len(sess.pinner.get()) != 0 {
		t.Errorf("pinned for NXDOMAIN")
	}
	if ev := sess.audit.last(t); ev.Action != ActionAllowed || ev.Rcode != "NXDOMAIN" {
		t.Errorf("audit %+v", ev)
	}
}

func TestTTLClamp(t *testing.T) {
	tests := []struct {
		name       string
		opts       []Option
		query      string
		wantPin    time.Duration
		wantClient uint32
	}{
		{"floor", nil, "short.corp.test.", DefaultTTLFloor, 1},
		{"cap", nil, "long.corp.test.", DefaultTTLCap, 300},
		{"within", nil, "api.corp.test.", 60 * time.Second, 60},
		{"custom floor", []Option{WithTTLBounds(30*time.Second, time.Hour)}, "short.corp.test.", 30 * time.Second, 1},
		{"custom cap", []Option{WithTTLBounds(time.Second, 10*time.Second)}, "api.corp.test.", 10 * time.Second, 10},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			_, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil, test.opts...)
			resp := p.query(t, "udp", "", test.query, dns.TypeA, true)
			if len(resp.Answer) == 0 {
				t.Fatalf("%v", resp)
			}
			for _, rr := range resp.Answer {
				if rr.Header().Ttl != test.wantClient {
					t.Errorf("client TTL %d, want %d", rr.Header().Ttl, test.wantClient)
				}
				if time.Duration(rr.Header().Ttl)*time.Second > test.wantPin {
					t.Errorf("client TTL %d outlives the pin %v", rr.Header().Ttl, test.wantPin)
				}
			}
			if c := sess.pinner.get(); len(c) != 1 || c[0].ttl != test.wantPin {
				t.Errorf("pins %+v, want ttl %v", c, test.wantPin)
			}
		})
	}
}

func TestDeniedAddressesAreDropped(t *testing.T) {
	up := newUpstream(t, testZone...)
	up.add("mixed.corp.test. 60 IN A 10.1.2.3", "mixed.corp.test. 60 IN A 192.0.2.50", "internal.corp.test. 60 IN A 10.9.9.9")
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, []string{"10.0.0.0/8"})
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr))

	resp := p.query(t, "udp", "", "mixed.corp.test.", dns.TypeA, true)
	if got := addrsOf(resp); !slices.Equal(got, mustAddrs("192.0.2.50")) {
		t.Errorf("answer %v", got)
	}
	resp = p.query(t, "udp", "", "internal.corp.test.", dns.TypeA, true)
	if resp.Rcode != dns.RcodeRefused {
		t.Fatalf("all denied: %v", resp)
	}
	if ede, _ := edeOf(resp); ede == nil || !strings.Contains(ede.ExtraText, "10.0.0.0/8") {
		t.Errorf("EDE %v", ede)
	}
	if got := sess.pinner.pinned(); !slices.Equal(got, mustAddrs("192.0.2.50")) {
		t.Errorf("pinned %v", got)
	}
	if st := p.Stats(); st.AddrDenied != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestUpstreamFailures(t *testing.T) {
	t.Run("fail over to the next upstream", func(t *testing.T) {
		dead, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		deadAddr := dead.LocalAddr().String()
		dead.Close() // nothing listens: ICMP port unreachable
		up := newUpstream(t, testZone...)
		sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
		var sessions SessionMap
		sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
		p := startProxy(t, &sessions, WithUpstreams(deadAddr, up.addr))
		resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true)
		if len(addrsOf(resp)) != 2 {
			t.Fatalf("%v", resp)
		}
		if st := p.Stats(); st.UpstreamErrors != 1 || st.Forwarded != 2 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("SERVFAIL upstream", func(t *testing.T) {
		up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		up.set(func(u *testUpstream) { u.rcode["api.corp.test."] = dns.RcodeServerFailure })
		resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true)
		if resp.Rcode != dns.RcodeServerFailure {
			t.Fatalf("%v", resp)
		}
		if ev := sess.audit.last(t); ev.Action != ActionFailed || !strings.Contains(ev.Reason, "SERVFAIL") {
			t.Errorf("audit %+v", ev)
		}
		// Failures are not cached.
		up.set(func(u *testUpstream) { delete(u.rcode, "api.corp.test.") })
		if resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true); len(resp.Answer) != 2 {
			t.Errorf("after recovery: %v", resp)
		}
	})
	t.Run("reply for another question", func(t *testing.T) {
		up, p, sess := oneSession(t, false, []string{"*.corp.test"}, nil)
		up.set(func(u *testUpstream) { u.wrongName = true })
		if resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true); resp.Rcode != dns.RcodeServerFailure || len(resp.Answer) != 0 {
			t.Fatalf("%v", resp)
		}
		if len(sess.pinner.get()) != 0 {
			t.Error("pinned a mismatched reply")
		}
	})
	t.Run("timeout", func(t *testing.T) {
		// An upstream that reads and never answers.
		silent, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { silent.Close() })
		sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
		var sessions SessionMap
		sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
		p := startProxy(t, &sessions, WithUpstreams(silent.LocalAddr().String()), WithTimeouts(time.Second, 100*time.Millisecond))
		start := time.Now()
		resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true)
		if resp.Rcode != dns.RcodeServerFailure {
			t.Fatalf("%v", resp)
		}
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Errorf("took %v with a 100ms upstream timeout", d)
		}
	})
}

// A fresh id goes upstream; a late reply carrying an old id is ignored.
func TestUpstreamIDs(t *testing.T) {
	var (
		mu  sync.Mutex
		ids []uint16
	)
	s, err := New(&SessionMap{}, WithUpstreams("192.0.2.53"), withExchange(func(ctx context.Context, network, addr string, q *dns.Msg) (*dns.Msg, error) {
		mu.Lock()
		ids = append(ids, q.Id)
		mu.Unlock()
		resp := new(dns.Msg)
		resp.SetReply(q)
		resp.Answer = []dns.RR{mustRR(t, "api.corp.test. 60 IN A 192.0.2.10")}
		return resp, nil
	}), WithCacheSize(0))
	if err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	s.sessions.(*SessionMap).Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	seen := map[uint16]bool{}
	for range 20 {
		w := newRecorder("127.0.0.1:5353", false)
		m := new(dns.Msg)
		m.SetQuestion("api.corp.test.", dns.TypeA)
		m.Id = 7
		s.serve(testCtx(t), w, m)
		if w.msg(t).Id != 7 {
			t.Fatalf("client id not restored: %d", w.msg(t).Id)
		}
	}
	for _, id := range ids {
		seen[id] = true
	}
	if len(seen) < 15 { // 20 random ids; a handful of collisions at most
		t.Errorf("upstream ids not fresh: %v", ids)
	}

	// The exchange drops a reply whose id does not match.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil {
			return
		}
		late := new(dns.Msg)
		late.SetReply(q)
		late.Id = q.Id + 1
		late.Answer = []dns.RR{mustRR(t, "api.corp.test. 60 IN A 203.0.113.1")}
		b, _ := late.Pack()
		_, _ = pc.WriteTo(b, from)
		good := new(dns.Msg)
		good.SetReply(q)
		good.Answer = []dns.RR{mustRR(t, "api.corp.test. 60 IN A 192.0.2.10")}
		b, _ = good.Pack()
		_, _ = pc.WriteTo(b, from)
	}()
	q := new(dns.Msg)
	q.SetQuestion("api.corp.test.", dns.TypeA)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := newUpstreamPool((&net.Dialer{}).DialContext, nil).exchange(ctx, "udp", pc.LocalAddr().String(), q)
	if err != nil {
		t.Fatal(err)
	}
	if got := addrsOf(resp); !slices.Equal(got, mustAddrs("192.0.2.10")) {
		t.Errorf("took the out-of-order reply: %v", got)
	}
}

func TestRefusalsAreLoggedOncePerWindow(t *testing.T) {
	up := newUpstream(t, testZone...)
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s, err := New(&sessions, WithUpstreams(up.addr), WithClock(clock.Now), WithLogWindow(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	var bufMu sync.Mutex
	ctx := log.WithLogger(t.Context(), slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &bufMu}, nil)))
	ask := func(name string) {
		w := newRecorder("127.0.0.1:5353", false)
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		s.serve(ctx, w, m)
	}
	for range 50 {
		ask("secret.evil.test.")
	}
	ask("other.evil.test.")
	ask("api.corp.test.") // allowed: not logged
	clock.Advance(61 * time.Second)
	ask("secret.evil.test.")

	bufMu.Lock()
	out := buf.String()
	bufMu.Unlock()
	if n := strings.Count(out, "name=secret.evil.test."); n != 2 {
		t.Errorf("secret.evil.test logged %d times, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "suppressed=49") {
		t.Errorf("suppressed count missing:\n%s", out)
	}
	if n := strings.Count(out, "name=other.evil.test."); n != 1 {
		t.Errorf("other.evil.test logged %d times", n)
	}
	if strings.Contains(out, "api.corp.test") {
		t.Errorf("allowed query logged:\n%s", out)
	}
	if n := len(sess.audit.get()); n != 53 {
		t.Errorf("%d audit events, want one per query (53)", n)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func TestLimiterBounded(t *testing.T) {
	l := newLimiter(time.Hour)
	now := time.Unix(0, 0)
	for i := range maxLimiterKeys * 3 {
		if _, ok := l.allow(logKey{session: "s", name: strconv.Itoa(i % 1000)}, now); !ok && i < 1000 {
			t.Fatalf("first sighting %d suppressed", i)
		}
		l.allow(logKey{session: "s", name: strings.Repeat("x", i%97) + strconv.Itoa(i)}, now)
	}
	l.mu.Lock()
	n := len(l.seen)
	l.mu.Unlock()
	if n > maxLimiterKeys {
		t.Errorf("limiter holds %d keys", n)
	}
}

// TestLimiterForgetsExpired: keys whose window ended are dropped as new
// ones come, so a daemon that has seen thousands of sessions' keys holds
// about as many as one window saw, not every key ever seen.
func TestLimiterForgetsExpired(t *testing.T) {
	l := newLimiter(time.Minute)
	b := newLineBudget(time.Minute, 3)
	now := time.Unix(0, 0)
	for i := range 5000 {
		now = now.Add(100 * time.Millisecond) // 600 keys a window
		key := "session-" + strconv.Itoa(i)
		if _, ok := l.allow(logKey{session: key, name: "x.test"}, now); !ok {
			t.Fatalf("first sighting of %s suppressed", key)
		}
		if _, ok := b.allow(key, now); !ok {
			t.Fatalf("first line of %s suppressed", key)
		}
	}
	l.mu.Lock()
	n := len(l.seen)
	l.mu.Unlock()
	b.mu.Lock()
	m := len(b.keys)
	b.mu.Unlock()
	if n > 2*600+1 || m > 2*600+1 {
		t.Errorf("after 5000 keys, 600 a window: the limiter holds %d, the line budget %d", n, m)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newCache(100)
	now := time.Unix(0, 0)
	m := new(dns.Msg)
	for i := range 1000 {
		c.put(cacheKey{name: "x.test.", qtype: uint16(i)}, m, now, time.Minute)
		if c.len() > 100 {
			t.Fatalf("cache holds %d entries", c.len())
		}
	}
	if _, ok := c.get(cacheKey{name: "x.test.", qtype: 999}, now); !ok {
		t.Error("latest entry missing")
	}
	if _, ok := c.get(cacheKey{name: "x.test.", qtype: 999}, now.Add(time.Minute)); ok {
		t.Error("expired entry returned")
	}
}

// TestCacheConcurrent reads and writes the cache from many goroutines at
// once (run it with -race: the hit path takes no lock): every hit is the
// entry of the name and type asked for, never another key's of the same
// set, and the table never holds more than its size.
func TestCacheConcurrent(t *testing.T) {
	c := newCache(64)
	now := time.Unix(0, 0)
	msg := func(name string, qtype uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}}
		return m
	}
	var wg sync.WaitGroup
	var hits atomic.Int64
	for g := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				n := (i*7 + g) % 300
				name := fmt.Sprintf("n%d.test.", n/2)
				qtype := []uint16{dns.TypeA, dns.TypeAAAA}[n%2]
				key := cacheKey{name: allowlist.FQDN(name), qtype: qtype}
				if g%2 == 0 {
					c.put(key, msg(name, qtype), now, time.Minute)
					continue
				}
				m, ok := c.get(key, now.Add(time.Second))
				if !ok {
					continue
				}
				hits.Add(1)
				if q := m.Question[0]; q.Name != name || q.Qtype != qtype {
					t.Errorf("get(%s %s) returned the entry of %s %s", name, dns.Type(qtype), q.Name, dns.Type(q.Qtype))
					return
				}
				if ttl := m.Answer[0].Header().Ttl; ttl != 59 {
					t.Errorf("get(%s) TTL %d, want 59 (aged one second)", name, ttl)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := c.len(); n > 64 {
		t.Errorf("cache holds %d entries, size 64", n)
	}
	if hits.Load() == 0 {
		t.Error("no hit at all")
	}
}

// BenchmarkCacheHitParallel reads one hot entry from every P at once: the
// hit path's cost without contention on a lock.
func BenchmarkCacheHitParallel(b *testing.B) {
	c := newCache(DefaultCacheSize)
	now := time.Now()
	key := cacheKey{name: "api.bench.test.", qtype: dns.TypeA}
	m := new(dns.Msg)
	m.SetQuestion(string(key.name), dns.TypeA)
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: string(key.name), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}}
	c.put(key, m, now, time.Minute)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := c.get(key, now); !ok {
				b.Fatal("miss")
			}
		}
	})
}

func TestNewValidates(t *testing.T) {
	for _, test := range []struct {
		name string
		opts []Option
	}{
		{"no upstream", nil},
		{"upstream name", []Option{WithUpstreams("dns.example.test:53")}},
		{"upstream port 0", []Option{WithUpstreams("192.0.2.1:0")}},
		{"ttl floor zero", []Option{WithUpstreams("192.0.2.1"), WithTTLBounds(0, time.Minute)}},
		{"ttl cap below floor", []Option{WithUpstreams("192.0.2.1"), WithTTLBounds(time.Minute, time.Second)}},
		{"negative cache", []Option{WithUpstreams("192.0.2.1"), WithCacheSize(-1)}},
		{"zero timeout", []Option{WithUpstreams("192.0.2.1"), WithTimeouts(0, time.Second)}},
		{"nil dialer", []Option{WithUpstreams("192.0.2.1"), WithDialer(nil)}},
	} {
		t.Run(test.name, func(t *testing.T) {
			if _, err := New(&SessionMap{}, test.opts...); !errdefs.IsInvalidArgument(err) {
				t.Errorf("New: %v, want invalid argument", err)
			}
		})
	}
	if _, err := New(nil, WithUpstreams("192.0.2.1")); !errdefs.IsInvalidArgument(err) {
		t.Errorf("nil sessions: %v", err)
	}
	s, err := New(&SessionMap{}, WithUpstreams("192.0.2.1", "[2001:db8::53]:5353"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.cfg.upstreams, []string{"192.0.2.1:53", "[2001:db8::53]:5353"}; !slices.Equal(got, want) {
		t.Errorf("upstreams %v, want %v", got, want)
	}
}

func TestShutdown(t *testing.T) {
	s, err := New(&SessionMap{}, WithUpstreams("192.0.2.1"))
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
	errc := make(chan error, 2)
	go func() { errc <- s.ServePacketConn(testCtx(t), pc) }()
	go func() { errc <- s.ServeListener(testCtx(t), l) }()
	// Wait until both serve: an unknown source is refused on each.
	p := &testProxy{Server: s, udpAddr: pc.LocalAddr().String(), tcpAddr: l.Addr().String()}
	for _, network := range []string{"udp", "tcp"} {
		if resp := p.query(t, network, "", "a.test.", dns.TypeA, false); resp.Rcode != dns.RcodeRefused {
			t.Fatalf("%v", resp)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Errorf("serve returned %v", err)
		}
	}
	if err := s.ServePacketConn(t.Context(), pc); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("serve after shutdown: %v", err)
	}
	// The sockets were closed.
	if _, err := pc.WriteTo([]byte{0}, pc.LocalAddr()); err == nil {
		t.Error("packet conn still open")
	}
}

func TestUpstreamSocketsAreReused(t *testing.T) {
	up := newUpstream(t, testZone...)
	var (
		mu    sync.Mutex
		dials []string
		conns []net.Conn
	)
	dialer := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		mu.Lock()
		defer mu.Unlock()
		dials = append(dials, network)
		conns = append(conns, c)
		return c, err
	}
	sess := newSession(t, "s1", false, []string{"*.corp.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, WithUpstreams(up.addr), WithDialer(dialer), WithCacheSize(0))
	for range 5 {
		if resp := p.query(t, "udp", "", "api.corp.test.", dns.TypeA, true); len(resp.Answer) != 2 {
			t.Fatalf("%v", resp)
		}
	}
	// A TCP client's query goes upstream over UDP too, on the same socket.
	for range 2 {
		if resp := p.query(t, "tcp", "", "api.corp.test.", dns.TypeA, true); len(resp.Answer) != 2 {
			t.Fatalf("%v", resp)
		}
	}
	if got := len(up.received()); got != 7 {
		t.Errorf("upstream got %d queries, want 7", got)
	}
	mu.Lock()
	got := slices.Clone(dials)
	mu.Unlock()
	if !slices.Equal(got, []string{"udp"}) {
		t.Errorf("dials %v, want one UDP socket reused", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if _, err := conns[0].Write([]byte{0}); err == nil {
		t.Error("idle upstream socket left open after Shutdown")
	}
}
