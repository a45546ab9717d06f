package world

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// maxCNAMEHops bounds CNAME chasing, as CoreDNS's file plugin does.
const maxCNAMEHops = 8

// startDNS serves the zone on DNSAddr:53 over UDP and TCP.
func (w *World) startDNS(ctx context.Context) error {
	servers, err := listenDNS(ctx, w.path, netip.AddrPortFrom(w.dnsAddr, 53), dns.HandlerFunc(w.serveDNS), w.goServe)
	w.dns = servers
	return err
}

// listenDNS serves h over UDP and TCP on addr inside the network namespace
// at nsPath, running each server with goServe, and returns once both
// listen. The servers it returns are shut down by the caller.
func listenDNS(ctx context.Context, nsPath string, addr netip.AddrPort, h dns.Handler, goServe func(func())) ([]*dns.Server, error) {
	pc, err := netns.ListenPacket(nsPath, "udp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("world dns: %w", err)
	}
	l, err := netns.Listen(nsPath, "tcp", addr.String())
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("world dns: %w", err)
	}
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	servers := []*dns.Server{
		{PacketConn: pc, Handler: h, NotifyStartedFunc: notify},
		{Listener: l, Handler: h, NotifyStartedFunc: notify},
	}
	for _, s := range servers {
		goServe(func() { _ = s.ActivateAndServe() })
	}
	for range 2 {
		select {
		case <-started:
		case <-ctx.Done():
			return servers, ctx.Err()
		case <-time.After(10 * time.Second):
			return servers, fmt.Errorf("world dns: servers did not start")
		}
	}
	return servers, nil
}

// serveDNS answers authoritatively for the zone and refuses everything else.
// Every question is logged first.
func (w *World) serveDNS(rw dns.ResponseWriter, r *dns.Msg) {
	q := Query{Proto: "udp", Time: time.Now()}
	if rw.LocalAddr().Network() == "tcp" {
		q.Proto = "tcp"
	}
	if ap, err := netip.ParseAddrPort(rw.RemoteAddr().String()); err == nil {
		q.From = ap
	}
	m := new(dns.Msg)
	if len(r.Question) != 1 {
		w.logQuery(q)
		m.SetRcode(r, dns.RcodeFormatError)
		_ = rw.WriteMsg(m)
		return
	}
	question := r.Question[0]
	q.Name = strings.ToLower(dns.Fqdn(question.Name))
	q.Type = dns.TypeToString[question.Qtype]
	w.logQuery(q)

	m.SetReply(r)
	w.mu.Lock()
	foreign := w.foreign[q.Name]
	w.mu.Unlock()
	if question.Qclass != dns.ClassINET || (!dns.IsSubDomain(w.zone, q.Name) && !foreign) {
		m.SetRcode(r, dns.RcodeRefused)
		_ = rw.WriteMsg(m)
		return
	}
	m.Authoritative = true
	if foreign {
		// A name outside the zone the world answers for (AddRelay): its
		// records, nothing under it, no SOA of the zone.
		w.mu.Lock()
		m.Answer, _ = w.resolveLocked(q.Name, question.Qtype)
		w.mu.Unlock()
		_ = rw.WriteMsg(m)
		return
	}
	w.mu.Lock()
	answer, exists := w.resolveLocked(q.Name, question.Qtype)
	soa := w.soaLocked()
	w.mu.Unlock()
	m.Answer = answer
	switch {
	case !exists:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	case len(answer) == 0:
		m.Ns = []dns.RR{soa}
	}
	_ = rw.WriteMsg(m)
}

// resolveLocked follows in-zone CNAMEs from name and returns the chain and
// the records of type qtype at its end, and whether the final name exists.
//
// Preconditions: w.mu is held.
func (w *World) resolveLocked(name string, qtype uint16) ([]dns.RR, bool) {
	var out []dns.RR
	for range maxCNAMEHops {
		rrs, ok := w.records[name]
		if !ok {
			return out, false
		}
		var next string
		for _, rr := range rrs {
			if c, ok := rr.(*dns.CNAME); ok && qtype != dns.TypeCNAME {
				out = append(out, dns.Copy(rr))
				next = c.Target
				break
			}
			if rr.Header().Rrtype == qtype || qtype == dns.TypeANY {
				out = append(out, dns.Copy(rr))
			}
		}
		if next == "" || !dns.IsSubDomain(w.zone, next) {
			return out, true
		}
		name = next
	}
	return out, true
}

func (w *World) soaLocked() dns.RR {
	ttl := uint32(w.cfg.TTL / time.Second)
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: w.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      "ns." + w.zone,
		Mbox:    "hostmaster." + w.zone,
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
}

func (w *World) logQuery(q Query) {
	w.mu.Lock()
	w.queries = append(w.queries, q)
	w.mu.Unlock()
}
