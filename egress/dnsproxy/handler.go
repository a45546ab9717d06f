package dnsproxy

import (
	"context"
	"net"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// handler is one step of the query pipeline, with CoreDNS's contract: a
// handler either writes a response to w and returns a code for which
// clientWrote is true (usually dns.RcodeSuccess), or writes nothing and
// returns SERVFAIL, REFUSED, FORMERR or NOTIMP for the caller to write.
type handler interface {
	ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error)
}

// clientWrote reports whether a handler returning rcode has written the
// response itself (CoreDNS plugin.ClientWrite).
func clientWrote(rcode int) bool {
	switch rcode {
	case dns.RcodeServerFailure, dns.RcodeRefused, dns.RcodeFormatError, dns.RcodeNotImplemented:
		return false
	}
	return true
}

// request is the per-query state the handlers share through the context
// (a queryContext).
type request struct {
	client netip.Addr
	proto  string // "udp" or "tcp"
	sess   *SessionPolicy

	// Set by validate.
	name    allowlist.FQDN
	qtype   uint16
	edns    bool   // the client sent an OPT record
	udpSize uint16 // the most the client accepts over UDP

	// Set by the allowlist step.
	decision allowlist.Decision

	// Set by the cache on a hit.
	cached bool

	// The answer and cache handlers' capture writers, kept here so that
	// a query allocates one object for its state.
	answerW, cacheW captureWriter
}

type requestKey struct{}

func requestFrom(ctx context.Context) *request {
	req, _ := ctx.Value(requestKey{}).(*request)
	if req == nil {
		// Only reachable if a handler is called outside Server.serve.
		panic("dnsproxy: handler called without request state")
	}
	return req
}

// init sets up a zero request with the client's address and transport,
// read from w.
func (req *request) init(w dns.ResponseWriter) {
	req.proto, req.udpSize = "udp", dns.MinMsgSize
	if u, ok := w.(*udpWriter); ok && u.src.IsValid() {
		req.client = u.src.Addr().Unmap()
		return
	}
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		req.client = a.AddrPort().Addr().Unmap()
	case *net.TCPAddr:
		req.client = a.AddrPort().Addr().Unmap()
		req.proto = "tcp"
	case nil:
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			req.client = ap.Addr().Unmap()
		}
		if a.Network() == "tcp" {
			req.proto = "tcp"
		}
	}
}

// captureWriter records the message a later handler writes, instead of
// sending it (CoreDNS plugin/pkg/nonwriter).
type captureWriter struct {
	dns.ResponseWriter
	msg *dns.Msg
}

func (c *captureWriter) WriteMsg(m *dns.Msg) error {
	c.msg = m
	return nil
}

// ednsUDPSize is the largest UDP payload advertised upstream and sent to
// clients (the DNS flag day 2020 recommendation, which avoids IP
// fragmentation); maxUDPRead is the buffer for reading UDP messages, with
// room for peers that ignore the advertised size.
const (
	ednsUDPSize   = 1232
	maxUDPRead    = 4096
	maxCNAMEHops  = 8
	maxAuditNameB = 300
)

// newReply returns a response to r with rcode, carrying an OPT record
// exactly when r had one (RFC 6891 section 7).
func newReply(r *dns.Msg, rcode int) *dns.Msg {
	m := new(dns.Msg)
	m.SetRcode(r, rcode)
	m.RecursionAvailable = true
	if r.IsEdns0() != nil {
		m.SetEdns0(ednsUDPSize, false)
	}
	return m
}

// addEDE adds an extended DNS error (RFC 8914) if m carries an OPT record.
func addEDE(m *dns.Msg, code uint16, text string) {
	if opt := m.IsEdns0(); opt != nil {
		opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
	}
}

// writeReply writes m, truncating it to what a UDP client accepts.
func writeReply(w dns.ResponseWriter, req *request, m *dns.Msg) error {
	if req.proto == "udp" {
		m.Truncate(int(req.udpSize))
	} else {
		m.Compress = true
	}
	return w.WriteMsg(m)
}
