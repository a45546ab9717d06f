package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// answerHandler turns an upstream response (fresh or cached) into the
// session's answer: it checks the CNAME chain against the allowlist, keeps
// only the chain and the final owner's records of the queried type, drops
// addresses that may not be pinned (addrs.go: never-reachable ranges, the
// host's addresses, denied ranges, private ranges not allowed), pins the
// rest for the session and only then writes the answer, with TTLs no longer
// than the pin.
type answerHandler struct {
	s    *Server
	next handler
}

func (h *answerHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	cw := &req.answerW
	*cw = captureWriter{ResponseWriter: w}
	rc, err := h.next.ServeDNS(ctx, cw, r)
	if clientWrote(rc) && cw.msg == nil {
		rc, err = dns.RcodeServerFailure, errors.Join(err, errors.New("no upstream response"))
	}
	if !clientWrote(rc) {
		reason := "upstream: " + dns.RcodeToString[rc]
		if err != nil {
			reason = err.Error()
		}
		h.s.record(ctx, req, r, Event{Action: ActionFailed, Rcode: dns.RcodeToString[rc], Reason: reason, Rule: req.decision.Rule})
		return rc, err
	}
	return h.s.answer(ctx, w, r, req, cw.msg)
}

// chainRefusal is a CNAME chain the session may not follow.
type chainRefusal struct {
	rcode  int
	reason string
}

func (s *Server) answer(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, req *request, resp *dns.Msg) (int, error) {
	fail := func(rcode int, reason string) (int, error) {
		s.record(ctx, req, r, Event{Action: ActionFailed, Rcode: dns.RcodeToString[rcode], Reason: reason, Rule: req.decision.Rule})
		return rcode, errors.New(reason)
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return fail(dns.RcodeServerFailure, "upstream answered "+dns.RcodeToString[resp.Rcode])
	}
	list := req.sess.Allowlist

	chain, final, ports, cnames, refusal := walkChain(resp.Answer, req.name, req.decision.Ports, list)
	if refusal != nil {
		if refusal.rcode == dns.RcodeRefused {
			s.stats.cnameBlocked.Add(1)
			return s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, refusal.reason, req.decision.Rule)
		}
		return fail(refusal.rcode, refusal.reason)
	}

	var (
		records []dns.RR
		addrs   []netip.Addr
		dropped []Dropped
	)
	now := s.cfg.now()
	for _, rr := range resp.Answer {
		hdr := rr.Header()
		if hdr.Class != dns.ClassINET || hdr.Rrtype != req.qtype || !ownerIs(hdr.Name, final) {
			continue
		}
		var a netip.Addr
		switch v := rr.(type) {
		case *dns.A:
			a, _ = netip.AddrFromSlice(v.A.To4())
		case *dns.AAAA:
			if !req.sess.IPv6 {
				continue
			}
			a, _ = netip.AddrFromSlice(v.AAAA.To16())
		default:
			continue
		}
		if !a.IsValid() {
			continue
		}
		if reason, rule := s.dropReason(req.sess, a, now); reason != "" {
			dropped = append(dropped, Dropped{Addr: a, Reason: reason, Rule: rule})
			continue
		}
		records = append(records, rr)
		addrs = append(addrs, a)
	}
	if len(dropped) > 0 {
		s.stats.addrDenied.Add(uint64(len(dropped)))
		if len(addrs) == 0 {
			// Nothing is left to answer with: say why the first address
			// went.
			d := dropped[0]
			reason := "airlock: every address of " + display(final) + " is refused: " + d.Reason
			if len(dropped) > 1 {
				reason = fmt.Sprintf("%s (and %d more)", reason, len(dropped)-1)
			}
			rule := d.Rule
			if rule == "" {
				rule = req.decision.Rule
			}
			s.record(ctx, req, r, Event{Action: ActionRefused, Rcode: dns.RcodeToString[dns.RcodeRefused], Reason: reason, Rule: rule, Dropped: dropped})
			m := newReply(r, dns.RcodeRefused)
			addEDE(m, dns.ExtendedErrorCodeBlocked, reason)
			return dns.RcodeSuccess, writeReply(w, req, m)
		}
	}

	// The pin lasts the shortest TTL in the chain, within the bounds; no
	// record handed to the client outlives it.
	minTTL := uint32(math.MaxUint32)
	for _, rr := range chain {
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	for _, rr := range records {
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	pinTTL := s.clampTTL(minTTL)
	pinSecs := uint32(pinTTL / time.Second)

	if len(addrs) > 0 {
		if req.sess.Pinner == nil {
			s.stats.pinErrors.Add(1)
			return fail(dns.RcodeServerFailure, "session has no pinner")
		}
		var err error
		if np, ok := req.sess.Pinner.(NamedPinner); ok {
			err = np.PinName(ctx, req.name, addrs, ports, pinTTL)
		} else {
			err = req.sess.Pinner.Pin(ctx, addrs, ports, pinTTL)
		}
		if err != nil {
			s.stats.pinErrors.Add(1)
			return fail(dns.RcodeServerFailure, "pin: "+err.Error())
		}
		// The pins last at least netns.MinPinTTL, and the pin TTL is at
		// least the TTL floor (at least a second).
		req.sess.Names.RecordChain(req.name, cnames, addrs, now.Add(pinTTL), now)
	}

	m := new(dns.Msg)
	m.SetReply(r)
	m.Rcode = resp.Rcode
	m.RecursionAvailable = true
	m.Truncated = resp.Truncated
	m.Answer = append(append(make([]dns.RR, 0, len(chain)+len(records)), chain...), records...)
	for _, rr := range m.Answer {
		rr.Header().Ttl = min(rr.Header().Ttl, pinSecs)
	}
	if len(records) == 0 {
		// Negative or no-data answer: keep the SOA so clients can cache
		// the absence (RFC 2308), within the cap.
		capSecs := uint32(s.cfg.ttlCap / time.Second)
		for _, rr := range resp.Ns {
			if soa, ok := rr.(*dns.SOA); ok && soa.Hdr.Class == dns.ClassINET {
				soa.Hdr.Ttl = min(soa.Hdr.Ttl, capSecs)
				soa.Minttl = min(soa.Minttl, capSecs)
				m.Ns = append(m.Ns, soa)
				break
			}
		}
	}
	if req.edns {
		m.SetEdns0(ednsUDPSize, false)
	}
	if resp.Truncated {
		s.stats.truncated.Add(1)
	}
	ev := Event{
		Action:  ActionAllowed,
		Rcode:   dns.RcodeToString[m.Rcode],
		Rule:    req.decision.Rule,
		Answers: addrs,
		Dropped: dropped,
		Ports:   ports,
	}
	for _, c := range cnames {
		ev.CNAMEs = append(ev.CNAMEs, string(c))
	}
	if len(addrs) > 0 {
		ev.PinTTL = pinSecs
	}
	if resp.Truncated {
		ev.Reason = "truncated upstream answer"
	}
	s.record(ctx, req, r, ev)
	return dns.RcodeSuccess, writeReply(w, req, m)
}

// walkChain follows CNAME records from name through answer, at most
// maxCNAMEHops hops. Every target must be a valid hostname allowed by list;
// the reachable ports narrow to those every name in the chain allows. It
// returns the CNAME records in chain order and the final owner name.
func walkChain(answer []dns.RR, name allowlist.FQDN, ports []uint16, list *allowlist.List) (chain []dns.RR, final allowlist.FQDN, narrowed []uint16, targets []allowlist.FQDN, refusal *chainRefusal) {
	final, narrowed = name, ports
	for {
		var cn *dns.CNAME
		for _, rr := range answer {
			if c, ok := rr.(*dns.CNAME); ok && c.Hdr.Class == dns.ClassINET && ownerIs(c.Hdr.Name, final) {
				cn = c
				break
			}
		}
		if cn == nil {
			return chain, final, narrowed, targets, nil
		}
		if len(chain) == maxCNAMEHops {
			return nil, "", nil, nil, &chainRefusal{dns.RcodeServerFailure,
				fmt.Sprintf("CNAME chain from %s is longer than %d", name, maxCNAMEHops)}
		}
		target, err := allowlist.ToFQDN(cn.Target)
		if err != nil {
			return nil, "", nil, nil, &chainRefusal{dns.RcodeRefused,
				"airlock: CNAME target of " + display(final) + " is not a valid hostname: " + err.Error()}
		}
		if target == name || slices.Contains(targets, target) {
			return nil, "", nil, nil, &chainRefusal{dns.RcodeServerFailure, "CNAME loop at " + string(target)}
		}
		d := list.MatchName(target)
		if !d.Allowed {
			return nil, "", nil, nil, &chainRefusal{dns.RcodeRefused,
				"airlock: " + display(name) + " is an alias of " + display(target) + ", which is not in the egress allowlist"}
		}
		var ok bool
		if narrowed, ok = intersectPorts(narrowed, d.Ports); !ok {
			return nil, "", nil, nil, &chainRefusal{dns.RcodeRefused,
				"airlock: no port is allowed for every name in the CNAME chain of " + display(name)}
		}
		chain = append(chain, cn)
		targets = append(targets, target)
		final = target
	}
}

// intersectPorts intersects two sorted port lists where empty means every
// port; ok is false when nothing is left.
func intersectPorts(a, b []uint16) (_ []uint16, ok bool) {
	switch {
	case len(a) == 0:
		return b, true
	case len(b) == 0:
		return a, true
	}
	var out []uint16
	for _, p := range a {
		if _, found := slices.BinarySearch(b, p); found {
			out = append(out, p)
		}
	}
	return out, len(out) > 0
}

// ownerIs compares an owner name from the wire with a canonical name.
func ownerIs(owner string, name allowlist.FQDN) bool {
	return strings.EqualFold(owner, string(name))
}

// clampTTL converts a record TTL in seconds to a pin timeout within the
// configured bounds.
func (s *Server) clampTTL(secs uint32) time.Duration {
	d := time.Duration(secs) * time.Second
	if secs == math.MaxUint32 || d > s.cfg.ttlCap {
		return s.cfg.ttlCap
	}
	return max(d, s.cfg.ttlFloor)
}
