package dnsproxy

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

var (
	fuzzAllow = []string{"*.corp.test", "api.example.test:443", "*.cdn.test:443"}
	fuzzDeny  = []string{"*.secret.corp.test", "10.0.0.0/8"}
)

func packed(t testing.TB, m *dns.Msg) []byte {
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fuzzQuery(t testing.TB, name string, qtype uint16, edns bool) []byte {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if edns {
		m.SetEdns0(4096, true)
	}
	return packed(t, m)
}

func fuzzReply(t testing.TB, rrs ...string) []byte {
	m := new(dns.Msg)
	m.Response = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rr.(*dns.SOA); ok {
			m.Ns = append(m.Ns, rr)
		} else {
			m.Answer = append(m.Answer, rr)
		}
	}
	return packed(t, m)
}

// FuzzServe feeds a fuzzed query through the whole handler chain, with a
// fuzzed upstream reply behind it, twice (the second time may come from the
// cache). Invariants: nothing panics; no query for a name the session may
// not resolve, or of a type it may not ask, is forwarded; every address in
// an answer was pinned first, is not in a denied range, is IPv4 unless IPv6
// is allowed, and outlives its pin in no client's cache.
func FuzzServe(f *testing.F) {
	chain := fuzzReply(f,
		"api.corp.test. 60 IN CNAME edge.cdn.test.",
		"edge.cdn.test. 30 IN A 198.51.100.7",
		"edge.cdn.test. 30 IN AAAA 2001:db8::7",
		"other.evil.test. 30 IN A 203.0.113.1",
	)
	evil := fuzzReply(f, "api.corp.test. 60 IN CNAME secret.evil.test.", "secret.evil.test. 60 IN A 203.0.113.66")
	mixed := fuzzReply(f, "api.corp.test. 1 IN A 10.1.2.3", "api.corp.test. 100000 IN A 192.0.2.1")
	neg := fuzzReply(f, "test. 3600 IN SOA ns.test. admin.test. 1 7200 900 1209600 60")
	for _, q := range [][]byte{
		fuzzQuery(f, "api.corp.test.", dns.TypeA, true),
		fuzzQuery(f, "API.corp.test.", dns.TypeAAAA, false),
		fuzzQuery(f, "api.corp.test.", dns.TypeCNAME, true),
		fuzzQuery(f, "api.example.test.", dns.TypeA, false),
		fuzzQuery(f, "c2VjcmV0.evil.test.", dns.TypeA, true),
		fuzzQuery(f, "x.secret.corp.test.", dns.TypeA, true),
		fuzzQuery(f, "api.corp.test.", dns.TypeTXT, true),
		fuzzQuery(f, "a\x00b.corp.test.", dns.TypeA, true),
	} {
		for _, reply := range [][]byte{chain, evil, mixed, neg} {
			f.Add(q, reply, false)
			f.Add(q, reply, true)
		}
	}
	list := allowlist.MustCompile(fuzzAllow, fuzzDeny)
	f.Fuzz(func(t *testing.T, query, reply []byte, ipv6 bool) {
		r := new(dns.Msg)
		if err := r.Unpack(query); err != nil {
			return // miekg/dns answers FORMERR before any handler runs
		}
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		sess := &SessionPolicy{ID: "fuzz", Allowlist: list, IPv6: ipv6}
		pinner := &fakePinner{}
		sess.Pinner = pinner
		var sessions SessionMap
		sessions.Set(netip.MustParseAddr("127.0.0.1"), sess)
		exchange := func(ctx context.Context, network, addr string, q *dns.Msg) (*dns.Msg, error) {
			if len(q.Question) != 1 {
				t.Fatalf("forwarded %d questions", len(q.Question))
			}
			fq := q.Question[0]
			name, err := allowlist.ToFQDN(fq.Name)
			if err != nil {
				t.Fatalf("forwarded malformed name %q", fq.Name)
			}
			if !list.MatchName(name).Allowed {
				t.Fatalf("forwarded disallowed name %q", fq.Name)
			}
			switch {
			case fq.Qtype == dns.TypeA, fq.Qtype == dns.TypeCNAME, fq.Qtype == dns.TypeAAAA && ipv6:
			default:
				t.Fatalf("forwarded type %s (ipv6 %v)", dns.Type(fq.Qtype), ipv6)
			}
			if fq.Qclass != dns.ClassINET {
				t.Fatalf("forwarded class %d", fq.Qclass)
			}
			resp := new(dns.Msg)
			if err := resp.Unpack(reply); err != nil {
				return nil, err
			}
			// Answer this question so the answer stage sees the fuzzed
			// records; the record sections stay as fuzzed.
			resp.Id, resp.Response, resp.Opcode, resp.Question = q.Id, true, dns.OpcodeQuery, q.Question
			return resp, nil
		}
		s, err := New(&sessions, WithUpstreams("192.0.2.53"), WithClock(clock.Now), withExchange(exchange), WithLogWindow(0))
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		for round := range 2 {
			before := len(pinner.get())
			w := newRecorder("127.0.0.1:5353", round == 1)
			in := r.Copy()
			s.serve(ctx, w, in)
			if r.Response {
				if len(w.msgs) != 0 {
					t.Fatal("answered a response")
				}
				return
			}
			if w.err != nil {
				t.Fatalf("response does not pack: %v", w.err)
			}
			if len(w.msgs) != 1 {
				t.Fatalf("%d responses", len(w.msgs))
			}
			resp := w.msgs[0]
			if resp.Id != r.Id || !resp.Response {
				t.Fatalf("bad response header: %v", resp)
			}
			calls := pinner.get()[before:]
			var pinned []netip.Addr
			for _, c := range calls {
				pinned = append(pinned, c.addrs...)
				for _, a := range c.addrs {
					if _, denied := list.AddrDenied(a); denied {
						t.Fatalf("pinned denied address %v", a)
					}
					if r, never := allowlist.Never(a); never {
						t.Fatalf("pinned %v, which is %s", a, r.Reason)
					}
					if r, private := allowlist.Private(a); private {
						t.Fatalf("pinned %v in %v without allow_private", a, r.Prefix)
					}
					if a.Is6() && !ipv6 {
						t.Fatalf("pinned IPv6 %v without ipv6", a)
					}
				}
			}
			got := addrsOf(resp)
			if len(got) == 0 {
				continue
			}
			if len(calls) != 1 {
				t.Fatalf("answer with %d addresses after %d pin calls", len(got), len(calls))
			}
			for _, a := range got {
				if !slices.Contains(pinned, a) {
					t.Fatalf("answered %v without pinning it (pinned %v)", a, pinned)
				}
			}
			for _, rr := range resp.Answer {
				if time.Duration(rr.Header().Ttl)*time.Second > calls[0].ttl {
					t.Fatalf("TTL %d outlives pin %v", rr.Header().Ttl, calls[0].ttl)
				}
				if c, ok := rr.(*dns.CNAME); ok {
					target, err := allowlist.ToFQDN(c.Target)
					if err != nil || !list.MatchName(target).Allowed {
						t.Fatalf("answered a chain through %q", c.Target)
					}
				}
			}
			qname, err := allowlist.ToFQDN(r.Question[0].Name)
			if err != nil || !list.MatchName(qname).Allowed {
				t.Fatalf("answered addresses for %q", r.Question[0].Name)
			}
			if calls[0].ttl < DefaultTTLFloor || calls[0].ttl > DefaultTTLCap {
				t.Fatalf("pin ttl %v outside bounds", calls[0].ttl)
			}
		}
	})
}
