package dnsproxy

import (
	"context"
	"fmt"
	"strings"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// refuse records the event, then writes a REFUSED (or other rcode) response
// with an extended DNS error, and returns the code that tells the caller the
// response is written. Every handler records before it writes, so that the
// audit trail is never behind what a client has seen.
func (s *Server) refuse(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, req *request, rcode int, ede uint16, reason, rule string) (int, error) {
	s.record(ctx, req, r, Event{Action: ActionRefused, Rcode: dns.RcodeToString[rcode], Reason: reason, Rule: rule})
	m := newReply(r, rcode)
	addEDE(m, ede, reason)
	return dns.RcodeSuccess, writeReply(w, req, m)
}

// sessionHandler finds the session of the source address.
type sessionHandler struct {
	s    *Server
	next handler
}

func (h *sessionHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	sess, ok := h.s.sessions.Lookup(req.client)
	if !ok || sess == nil {
		h.s.stats.unknownSource.Add(1)
		return h.s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeProhibited,
			"airlock: no session for source address "+req.client.String(), "")
	}
	req.sess = sess
	if ok, rc, err := h.s.admit(ctx, w, r, req); !ok {
		return rc, err
	}
	if sess.Limit != nil {
		defer sess.Limit.release()
	}
	return h.next.ServeDNS(ctx, w, r)
}

// validateHandler admits ordinary queries only: opcode QUERY, one question
// of class IN, empty answer and authority sections, at most one OPT of
// version 0, and a name that is a valid hostname.
type validateHandler struct {
	s    *Server
	next handler
}

func (h *validateHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	malformed := func(rcode int, reason string) (int, error) {
		h.s.stats.malformed.Add(1)
		h.s.record(ctx, req, r, Event{Action: ActionRefused, Rcode: dns.RcodeToString[rcode], Reason: reason})
		return rcode, nil
	}
	if r.Opcode != dns.OpcodeQuery {
		return malformed(dns.RcodeNotImplemented, "opcode "+dns.OpcodeToString[r.Opcode]+" is not served")
	}
	if len(r.Question) != 1 {
		return malformed(dns.RcodeFormatError, fmt.Sprintf("%d questions, want 1", len(r.Question)))
	}
	if len(r.Answer) > 0 || len(r.Ns) > 0 {
		return malformed(dns.RcodeFormatError, "query carries answer or authority records")
	}
	var opt *dns.OPT
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			if opt != nil {
				return malformed(dns.RcodeFormatError, "more than one OPT record")
			}
			opt = o
		}
	}
	if opt != nil {
		req.edns = true
		req.udpSize = min(max(opt.UDPSize(), dns.MinMsgSize), ednsUDPSize)
		if opt.Version() != 0 {
			h.s.stats.malformed.Add(1)
			h.s.record(ctx, req, r, Event{Action: ActionRefused, Rcode: "BADVERS", Reason: "EDNS version is not 0"})
			m := new(dns.Msg)
			m.SetRcode(r, dns.RcodeBadVers)
			m.SetEdns0(ednsUDPSize, false)
			return dns.RcodeSuccess, writeReply(w, req, m)
		}
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		h.s.stats.malformed.Add(1)
		return h.s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeNotSupported,
			"airlock: query class "+dns.Class(q.Qclass).String()+" is not served", "")
	}
	name, err := allowlist.ToFQDN(q.Name)
	if err != nil {
		h.s.stats.malformed.Add(1)
		reason := "airlock: query name is not a valid hostname: " + err.Error()
		if strings.IndexByte(q.Name, '\\') >= 0 {
			// miekg/dns escapes bytes it cannot print, and dots or
			// spaces inside a label.
			reason = "airlock: query name is not a valid hostname: control, space, dot or non-ASCII byte inside a label"
		}
		return h.s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, reason, "")
	}
	req.name, req.qtype = name, q.Qtype
	return h.next.ServeDNS(ctx, w, r)
}

// allowHandler refuses names the session's allowlist does not allow. They
// are never forwarded (CoreDNS plugin/acl).
type allowHandler struct {
	s    *Server
	next handler
}

func (h *allowHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	d := req.sess.Allowlist.MatchName(req.name)
	if !d.Allowed {
		h.s.stats.blocked.Add(1)
		reason := "airlock: " + display(req.name) + " is not in the egress allowlist"
		if d.Rule != "" {
			reason = "airlock: " + display(req.name) + " is denied by egress rule " + d.Rule
		}
		return h.s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked, reason, d.Rule)
	}
	req.decision = d
	return h.next.ServeDNS(ctx, w, r)
}

// typeHandler passes the record types a client needs to reach a host.
type typeHandler struct {
	s    *Server
	next handler
}

func (h *typeHandler) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	req := requestFrom(ctx)
	switch req.qtype {
	case dns.TypeA, dns.TypeCNAME:
		return h.next.ServeDNS(ctx, w, r)
	case dns.TypeAAAA:
		if req.sess.IPv6 {
			return h.next.ServeDNS(ctx, w, r)
		}
		return h.empty(ctx, w, r, req, "airlock: IPv6 egress is not enabled for this session")
	case dns.TypeHTTPS, dns.TypeSVCB:
		// Their address hints would bypass pinning; an empty answer makes
		// clients fall back to A/AAAA without the retries REFUSED causes.
		return h.empty(ctx, w, r, req, "airlock: "+dns.Type(req.qtype).String()+" records are not forwarded")
	}
	h.s.stats.typeRefused.Add(1)
	return h.s.refuse(ctx, w, r, req, dns.RcodeRefused, dns.ExtendedErrorCodeBlocked,
		"airlock: record type "+dns.Type(req.qtype).String()+" is not forwarded", req.decision.Rule)
}

// empty answers NOERROR with no records, without forwarding.
func (h *typeHandler) empty(ctx context.Context, w dns.ResponseWriter, r *dns.Msg, req *request, reason string) (int, error) {
	h.s.stats.empty.Add(1)
	h.s.record(ctx, req, r, Event{Action: ActionRefused, Rcode: "NOERROR", Reason: reason, Rule: req.decision.Rule})
	m := newReply(r, dns.RcodeSuccess)
	addEDE(m, dns.ExtendedErrorCodeSynthesized, reason)
	return dns.RcodeSuccess, writeReply(w, req, m)
}

// display renders a name for messages: without the trailing dot, and the
// root as ".".
func display(name allowlist.FQDN) string {
	if name.IsRoot() {
		return "."
	}
	return name.WithoutTrailingDot()
}
