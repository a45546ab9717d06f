package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/egress/l7"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nfq"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// l7PinGrace is how long after its pin expired an address still counts as
// pinned for a name when the connection's first message arrives: the
// kernel checked the pin when the connection opened, the gateway checks
// the name a moment later.
const l7PinGrace = 5 * time.Second

// startL7 opens the L7 gateway's listeners in the gateway namespace (IPv4,
// and IPv6 where the namespace has it) and serves them until ctx ends.
func (e *Perimeter) startL7(ctx context.Context) error {
	srv, err := l7.New(l7.Config{
		Sessions:      e.l7Session,
		OriginalDst:   netns.OriginalDst,
		Dial:          e.dial,
		UpstreamRoots: e.cfg.UpstreamRoots,
	})
	if err != nil {
		return err
	}
	port := e.gw.L7Port()
	var ls []net.Listener
	if err := e.gw.Do(func() error {
		l, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			return err
		}
		ls = append(ls, l)
		if l6, err := net.Listen("tcp6", fmt.Sprintf("[::]:%d", port)); err == nil {
			ls = append(ls, l6)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("l7 gateway listener in the gateway: %w", err)
	}
	e.l7 = srv
	for _, l := range ls {
		e.wg.Add(1)
		go func() { defer e.wg.Done(); _ = srv.Serve(ctx, l) }()
	}
	if e.cfg.FastPath {
		var q *nfq.Queue
		if err := e.gw.Do(func() (err error) {
			q, err = nfq.Open(nft.FastQueue, nfq.Config{MaxLen: 4096})
			return err
		}); err != nil {
			return fmt.Errorf("l7 gateway fast path: %w", err)
		}
		e.queue = q
		// The fast path's requests to send an address to the listener,
		// served off its queue's goroutine.
		terminates := make(chan terminateReq, 64)
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case r := <-terminates:
					e.terminateAt(ctx, r.id, r.addr)
				}
			}
		}()
		cut := func(client, server netip.AddrPort) error {
			_, err := e.gw.CutFlow(client, server)
			return err
		}
		e.wg.Add(2)
		go func() {
			defer e.wg.Done()
			stop := context.AfterFunc(ctx, func() { _ = q.Close() })
			defer stop()
			_ = srv.ServeQueue(ctx, q, l7.FastConfig{Pass: nft.MarkPass, Refuse: nft.MarkRefuse, Seen: nft.MarkSeen, Cut: cut, FlowID: e.gw.FlowID,
				Terminate: func(id string, dst netip.AddrPort) {
					select {
					case terminates <- terminateReq{id, dst.Addr()}:
					default: // busy: the client's next refusal asks again
					}
				}})
		}()
		// Passed connections are audited when they end, with the bytes
		// the kernel counted; when the kernel drops events, those it
		// passed and no longer tracks are audited as ended.
		go func() {
			defer e.wg.Done()
			lost := make(chan struct{}, 1)
			go e.reconcileFast(ctx, srv, lost)
			if err := e.gw.WatchFlowEnds(ctx, nft.MarkPass, func(end netns.FlowEnd) {
				srv.FastFlowEnded(end.Client, end.Server, end.ID, end.BytesUp, end.BytesDn)
			}, func() {
				select {
				case lost <- struct{}{}:
				default:
				}
			}); err != nil {
				log.G(ctx).Error("l7 fast path: the ends of passed connections will not be audited", "error", err)
			}
		}()
	}
	return nil
}

// terminateReq asks for addr in session id's terminate sets.
type terminateReq struct {
	id   string
	addr netip.Addr
}

// terminateAt puts dst in session id's terminate sets: the fast path
// refused a connection there whose name's TLS the gateway terminates.
func (e *Perimeter) terminateAt(ctx context.Context, id string, dst netip.Addr) {
	e.mu.Lock()
	st := e.state[id]
	e.mu.Unlock()
	if st == nil {
		return
	}
	if err := st.ns.Terminate(ctx, []netip.Addr{dst}, terminateHold, false); err != nil {
		log.G(ctx).Warn("egress: an address whose TLS the gateway terminates", "session", id, "addr", dst, "error", err)
	}
}

// fastReconcileGrace is how long after a loss of connection tracking
// events the passed connections are listed: the kernel marks one passed
// as its held packets go on, a moment after its decision.
const fastReconcileGrace = time.Second

// fastReconcileEvery is the least time between two reconciliations.
const fastReconcileEvery = 5 * time.Second

// reconcileFast audits, after each time lost is signalled (the kernel
// dropped connection tracking events), the connections passed before it
// that the gateway's conntrack no longer has as passed: their end's event
// may have been among those lost.
func (e *Perimeter) reconcileFast(ctx context.Context, srv *l7.Server, lost <-chan struct{}) {
	var lastDump time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
		}
		cutoff := time.Now()
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-lost:
				cutoff = time.Now() // lost again: wait on
			case <-time.After(fastReconcileGrace):
				waiting = false
			}
		}
		// At most one dump per fastReconcileEvery: a session that makes
		// the events overflow must not have the table dumped all the time.
		if wait := time.Until(lastDump.Add(fastReconcileEvery)); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		lastDump = time.Now()
		flows, err := e.gw.MarkedFlows(nft.MarkPass)
		if err != nil {
			log.G(ctx).Warn("l7 fast path: connection tracking events were lost, and the passed connections could not be listed", "error", err)
			continue
		}
		live := make([]l7.FastFlow, len(flows))
		for i, f := range flows {
			live[i] = l7.FastFlow{Client: f.Client, Server: f.Server, ID: f.ID}
		}
		n := srv.FastReconcile(live, cutoff)
		log.G(ctx).Warn("l7 fast path: connection tracking events were lost; passed connections reconciled", "ended", n, "live", len(live))
	}
}

// l7Session finds the L7 session of a client address.
func (e *Perimeter) l7Session(a netip.Addr) (*l7.Session, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.l7ByAddr[a.Unmap()]
	return s, ok
}

// registerL7 lets session id's connections through the L7 gateway, keyed
// by its addresses.
func (e *Perimeter) registerL7(ctx context.Context, id string, addrs []netip.Addr, sc SessionConfig, list *allowlist.List, names *dnsproxy.Names) *l7.Session {
	s := e.l7Registration(ctx, id, sc, list, names)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range addrs {
		e.l7ByAddr[a] = s
	}
	return s
}

// l7Registration is session id's registration with the L7 gateway under
// sc and list.
func (e *Perimeter) l7Registration(ctx context.Context, id string, sc SessionConfig, list *allowlist.List, names *dnsproxy.Names) *l7.Session {
	audit := sc.Audit
	rules, err := httprule.Compile(sc.Egress.HTTP)
	if err != nil {
		// Checked when the session was created; rules that fail now
		// deny every request to the hosts they name.
		log.G(ctx).Error("egress http rules", "session", id, "error", err)
		rules = denyAll(sc.Egress.HTTP)
	}
	var bound []l7.Secret
	if sc.Secrets != nil {
		bound = sc.Secrets()
	}
	// A secret bound to no host is guarded only: its value must be seen
	// wherever it could go, so every host's TLS is terminated, as with
	// inspect = "all".
	inspectAll := sc.Egress.Inspect == policies.InspectAll || guardedOnly(bound)
	terminate := func(name string) bool {
		if inspectAll || rules.Has(name) {
			return true
		}
		return sc.Secrets != nil && secretBound(sc.Secrets(), name)
	}
	guard := l7Guard{terminated: terminate, inspectAll: inspectAll}
	// The pins of names with rules or a secret are the last a full Names
	// drops, since checkL7 guards their addresses (the hosts secrets go
	// to are the manifest's, read once here).
	names.Keep(func(n allowlist.FQDN) bool {
		name := n.WithoutTrailingDot()
		return rules.Has(name) || secretBound(bound, name)
	})
	s := &l7.Session{
		ID: id,
		Check: func(dst netip.AddrPort, h l7.Hello, at time.Time) l7.Decision {
			return checkL7(list, names, guard, dst, h, at)
		},
		Terminate: terminate,
		Audit: func(ev l7.Event) {
			a := L7AuditEvent(ev)
			a.PolicyVersion = sc.PolicyVersion
			audit(ctx, a)
		},
		Secrets:    sc.Secrets,
		Rules:      rules.For,
		Version:    sc.PolicyVersion,
		AskTimeout: sc.AskTimeout,
	}
	if sc.Ask != nil {
		s.Ask = func(actx context.Context, a l7.Ask) l7.AskDecision { return sc.Ask(actx, a) }
	}
	if sc.CA != nil {
		// Without a CA (a restarted daemon that could not load it), TLS
		// the session's rules or secrets need terminated is refused.
		s.Certificate = sc.CA.Leaf
	}
	return s
}

// secretBound reports whether a secret is injected into requests to name.
func secretBound(secrets []l7.Secret, name string) bool {
	for _, s := range secrets {
		for _, in := range s.Inject {
			if in.Host == name {
				return true
			}
		}
	}
	return false
}

// guardedOnly reports whether a secret is bound to no host.
func guardedOnly(secrets []l7.Secret) bool {
	for _, s := range secrets {
		if len(s.Inject) == 0 {
			return true
		}
	}
	return false
}

// denyAll returns rules that deny every request to the hosts of blocks.
func denyAll(blocks []policies.HTTPHost) *httprule.Set {
	var deny []policies.HTTPHost
	for _, b := range blocks {
		deny = append(deny, policies.HTTPHost{Host: b.Host, Default: policies.HTTPDeny})
	}
	set, err := httprule.Compile(deny)
	if err != nil {
		set, _ = httprule.Compile(nil)
	}
	return set
}

// l7Guard is what checkL7 knows of a session beyond its allowlist and its
// pins.
type l7Guard struct {
	// terminated reports whether the gateway terminates TLS to name
	// (without the trailing dot): it has HTTP rules or a bound secret, or
	// inspect is "all". Nil: no name is.
	terminated func(name string) bool
	// inspectAll is inspect = "all".
	inspectAll bool
}

// checkL7 decides on a session's connection to dst whose first message
// said h: the name it asks for (SNI, Host) must be one the allowlist
// allows, on dst's port, and one whose DNS answers pinned dst's address
// for this session; a destination an egress CIDR entry allows passes
// with any name or none (see byAddress), unless a deny entry names the
// name.
func checkL7(list *allowlist.List, names *dnsproxy.Names, g l7Guard, dst netip.AddrPort, h l7.Hello, at time.Time) l7.Decision {
	label := "Host"
	if h.Proto == l7.ProtoTLS {
		label = "SNI"
	}
	if h.SNI != "" && h.Host != "" {
		// Both are seen only where TLS is terminated (a later slice).
		sni, _, err1 := l7.NameOf(h.SNI)
		host, _, err2 := l7.NameOf(h.Host)
		if err1 != nil || err2 != nil || sni != host {
			return l7.Decision{Reason: fmt.Sprintf("airlock: Host %q differs from SNI %q", h.Host, h.SNI)}
		}
	}
	raw := h.Name()
	name, ip, err := l7.NameOf(raw)
	if err != nil {
		return l7.Decision{Reason: fmt.Sprintf("airlock: %s %q is not a valid hostname", label, raw)}
	}
	cidr, byAddr := cidrAllows(list, dst)
	if name != "" {
		d := list.MatchName(name)
		shown := name.WithoutTrailingDot()
		switch {
		case !d.Allowed && d.Rule != "":
			return l7.Decision{Reason: fmt.Sprintf("airlock: %s %s is denied by egress rule %s", label, shown, d.Rule), Rule: d.Rule}
		case d.Allowed && portAllowed(d.Ports, dst.Port()) && names.Has(name, dst.Addr(), at.Add(-l7PinGrace)):
			return l7.Decision{Allow: true, Rule: d.Rule}
		case byAddr:
			return byAddress(names, g, cidr, dst, h.Proto, label, name, ip)
		case !d.Allowed:
			return l7.Decision{Reason: fmt.Sprintf("airlock: %s %s is not in the egress allowlist", label, shown)}
		case !portAllowed(d.Ports, dst.Port()):
			return l7.Decision{Reason: fmt.Sprintf("airlock: %s %s is not allowed on port %d", label, shown, dst.Port()), Rule: d.Rule}
		}
		return l7.Decision{Reason: fmt.Sprintf("airlock: %s %s did not resolve to %v for this session", label, shown, dst.Addr()), Rule: d.Rule}
	}
	if byAddr {
		return byAddress(names, g, cidr, dst, h.Proto, label, name, ip)
	}
	if ip.IsValid() {
		return l7.Decision{Reason: fmt.Sprintf("airlock: %s is the address %v, not a name; only destinations an egress CIDR entry allows are reached by address", label, ip)}
	}
	return l7.Decision{Reason: fmt.Sprintf("airlock: no %s; only destinations an egress CIDR entry allows are reached without a name", label)}
}

// byAddress decides on a connection that only the egress CIDR entry cidr
// allows: one that asks for no name, for an address, or for a name not
// pinned to dst (or not allowed on its port). It passes, unless
//   - dst's address is one this session's DNS pinned, at any time of the
//     session (an expired pin counts: the CIDR entry keeps the address
//     open, so waiting out the TTL must not reopen it), for a name whose
//     traffic the gateway checks (HTTP rules, a bound secret, or every
//     name under inspect = "all"), and the connection does not ask for
//     that very name: it would reach that host past its rules and secret
//     scrubbing, TLS spliced unterminated;
//   - or inspect is "all" and it is TLS without a name (no SNI, or an
//     address): the gateway terminates TLS under the name asked for, so
//     it could not terminate this one, and inspect = "all" promises that
//     no TLS passes unterminated.
func byAddress(names *dnsproxy.Names, g l7Guard, cidr string, dst netip.AddrPort, proto, label string, name allowlist.FQDN, ip netip.Addr) l7.Decision {
	asked := fmt.Sprintf("%s %s", label, name.WithoutTrailingDot())
	switch {
	case ip.IsValid():
		asked = fmt.Sprintf("%s is the address %v", label, ip)
	case name == "":
		asked = "no " + label
	}
	var guarded []string
	for _, n := range names.NamesOf(dst.Addr(), time.Time{}) {
		shown := n.WithoutTrailingDot()
		if g.terminated == nil || !g.terminated(shown) {
			continue
		}
		if n == name {
			// Asked for by its own name: served under its rules.
			return l7.Decision{Allow: true, Rule: cidr}
		}
		guarded = append(guarded, shown)
	}
	if len(guarded) > 0 {
		return l7.Decision{Reason: fmt.Sprintf("airlock: %s to %v, where this session resolved %s: the gateway checks that host's traffic (HTTP rules, a secret or inspect = \"all\"), so it is reached there by its name only, whatever %s allows",
			asked, dst.Addr(), strings.Join(guarded, ", "), cidr)}
	}
	if g.inspectAll && proto == l7.ProtoTLS && name == "" {
		return l7.Decision{Reason: fmt.Sprintf("airlock: %s to %v: with inspect = \"all\" every TLS connection is terminated, under the name it asks for, and this one asks for none", asked, dst.Addr())}
	}
	return l7.Decision{Allow: true, Rule: cidr}
}

// cidrAllows reports the egress CIDR entry that allows dst, if one does
// and no deny entry covers it.
func cidrAllows(list *allowlist.List, dst netip.AddrPort) (string, bool) {
	a := dst.Addr().Unmap()
	if _, denied := list.AddrDenied(a); denied {
		return "", false
	}
	for _, r := range list.CIDRs() {
		if r.Deny && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == dst.Port()) {
			return "", false
		}
	}
	for _, r := range list.CIDRs() {
		if !r.Deny && r.Prefix.Contains(a) && (r.Port == 0 || r.Port == dst.Port()) {
			return allowlist.Rule{Kind: allowlist.Prefix, Prefix: r.Prefix, Port: r.Port}.String(), true
		}
	}
	return "", false
}

func portAllowed(ports []uint16, p uint16) bool {
	return len(ports) == 0 || slices.Contains(ports, p)
}

// L7AuditEvent is the audit event of one connection through the L7
// gateway: layer "l7", the name asked for as subject.
func L7AuditEvent(ev l7.Event) api.AuditEvent {
	f := map[string]any{
		"kind":        ev.Kind,
		"proto":       ev.Proto,
		"dst":         ev.Dst.String(),
		"bytes_up":    ev.BytesUp,
		"bytes_down":  ev.BytesDn,
		"duration_ms": ev.Duration.Milliseconds(),
	}
	if ev.Kind == l7.KindRequest {
		f["path"] = ev.Path
		f["query"] = ev.Query
		f["terminated"] = ev.Terminated
		if ev.Status != 0 {
			f["status"] = ev.Status
		}
	}
	if ev.Kernel {
		f["kernel"] = true
		if ev.Conntrack != 0 {
			f["conntrack_id"] = ev.Conntrack
		}
	}
	if len(ev.Refs) > 0 {
		f["refs"] = ev.Refs
	}
	if ev.Approval != "" || ev.Held > 0 {
		f["approval"] = ev.Approval
		f["approved_by"] = ev.ApprovedBy
		f["held_ms"] = ev.Held.Milliseconds()
	}
	if ev.SNI != "" {
		f["sni"] = ev.SNI
	}
	if ev.Host != "" {
		f["host"] = ev.Host
	}
	if ev.Method != "" {
		f["method"] = ev.Method
	}
	if ev.Rule != "" {
		f["rule"] = ev.Rule
	}
	subject := ev.SNI
	if ev.Proto == l7.ProtoHTTP || ev.Kind == l7.KindRequest {
		subject = ev.Host
	}
	if subject == "" {
		subject = ev.Dst.String()
	}
	return api.AuditEvent{Time: ev.Time, Session: ev.Session, Layer: "l7", Action: ev.Action,
		Subject: strings.ToLower(strings.TrimSuffix(subject, ".")), Reason: ev.Reason, Fields: f}
}

// FastPackets is how many packets the L7 gateway's fast path has been
// given (Config.FastPath): each connection's SYN and first packets up to
// its ClientHello, none after its decision.
func (e *Perimeter) FastPackets() uint64 {
	if e == nil || e.l7 == nil {
		return 0
	}
	return e.l7.FastPackets()
}
