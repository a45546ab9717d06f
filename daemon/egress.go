package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// EgressConfig says how sessions reach the network.
type EgressConfig struct {
	// Uplink is "netns:NAME" (a namespace that receives the uplink's peer;
	// tests and benchmarks point it at their world namespace) or "host"
	// (NAT out of the host's routes). Empty: sessions that declare egress
	// are refused, sessions without it get loopback only.
	Uplink string
	// DNSUpstreams are the resolvers allowlisted names are forwarded to
	// (ADDR or ADDR:PORT); default the host's /etc/resolv.conf nameservers.
	DNSUpstreams []string
	// Pool is the session address range; default 10.213.0.0/16.
	Pool netip.Prefix
	// NetnsDir is where namespaces are mounted; default /run/netns.
	NetnsDir string
	// AllowPrivate are private ranges (RFC 1918, 100.64.0.0/10, fc00::/7)
	// whose addresses every session may pin from DNS answers, as if each
	// manifest listed them in egress allow_private: the network the
	// uplink leads to (the tests' and the benchmark's world). Other private
	// addresses in answers are dropped. The pools, the uplink subnets and
	// the host's own addresses are never pinned, whatever this says.
	AllowPrivate []netip.Prefix

	// DNSLimits bound each session's queries to the DNS proxy (zero
	// values: dnsproxy's defaults, 100 queries a second, a burst of 200,
	// 64 at once).
	DNSLimits dnsproxy.Limits
}

// egress is the daemon's network perimeter: the gateway namespace with its
// nftables rules and the DNS allowlist proxy serving every session.
type egress struct {
	gw       *netns.Gateway
	proxy    *dnsproxy.Server
	sessions dnsproxy.SessionMap

	mu     sync.Mutex
	byID   map[string][]netip.Addr // session id -> its addresses in the SessionMap
	cancel context.CancelFunc
}

func (d *Daemon) openEgress(ctx context.Context) error {
	cfg := d.cfg.Egress
	if cfg.Uplink == "" {
		// No perimeter network: remove what an earlier daemon with one left.
		if err := netns.CleanupDir(ctx, cfg.NetnsDir, d.prefix); err != nil {
			log.G(ctx).Warn("cleanup of an earlier gateway", "error", err)
		}
		return nil
	}
	uplink, err := netns.ParseUplink(cfg.Uplink)
	if err != nil {
		return err
	}
	for _, p := range cfg.AllowPrivate {
		if _, reason := policies.ParsePrivateRange(p.String()); reason != "" {
			return fmt.Errorf("allow-private %v: %s: %w", p, reason, errdefs.ErrInvalidArgument)
		}
	}
	upstreams := cfg.DNSUpstreams
	if len(upstreams) == 0 {
		if upstreams, err = hostResolvers("/etc/resolv.conf"); err != nil {
			return fmt.Errorf("dns upstream: %w (set --dns-upstream)", err)
		}
	}
	gcfg := netns.Config{Prefix: d.prefix, NetnsDir: cfg.NetnsDir, Pool: cfg.Pool, Uplink: uplink,
		DNSPacketRate: dnsPacketRate(cfg.DNSLimits)}
	gw, err := netns.AdoptGateway(ctx, gcfg)
	if err != nil {
		log.G(ctx).Info("creating the gateway", "reason", err)
		gw, err = netns.NewGateway(ctx, gcfg)
		if err != nil {
			return fmt.Errorf("gateway: %w", err)
		}
	}
	e := &egress{gw: gw, byID: map[string][]netip.Addr{}}
	proxy, err := dnsproxy.New(&e.sessions,
		dnsproxy.WithUpstreams(upstreams...),
		dnsproxy.WithDialer(dnsproxy.Dialer(gw.Dialer())),
		dnsproxy.WithAudit(func(ev dnsproxy.Event) {
			log.G(ctx).Info("dns query from an unknown address", "client", ev.Client, "name", ev.Name)
		}),
		dnsproxy.WithNeverPin("the daemon's session pool", gw.SessionPools()...),
		dnsproxy.WithNeverPin("the gateway's uplink subnet", gw.UplinkNets()...),
		dnsproxy.WithLocalAddrs(netns.LocalAddrs, 0),
		dnsproxy.WithAllowPrivate(cfg.AllowPrivate...),
	)
	if err != nil {
		_ = gw.Close(ctx)
		return err
	}
	e.proxy = proxy
	var udp net.PacketConn
	var tcp net.Listener
	addr := fmt.Sprintf("0.0.0.0:%d", gw.DNSPort())
	if err := gw.Do(func() error {
		var err error
		if udp, err = net.ListenPacket("udp", addr); err != nil {
			return err
		}
		tcp, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		if udp != nil {
			udp.Close()
		}
		_ = gw.Close(ctx)
		return fmt.Errorf("dns proxy listeners in the gateway: %w", err)
	}
	pctx, cancel := context.WithCancel(d.stopCtx)
	e.cancel = cancel
	d.wg.Add(2)
	go func() { defer d.wg.Done(); _ = proxy.ServePacketConn(pctx, udp) }()
	go func() { defer d.wg.Done(); _ = proxy.ServeListener(pctx, tcp) }()
	d.egress = e
	log.G(ctx).Info("egress perimeter ready", "uplink", uplink.String(), "dns_upstreams", upstreams)
	return nil
}

// closeEgress stops the DNS proxy. The gateway stays while sessions that
// use it live (they are re-adopted by the next daemon); without any, it is
// removed.
func (d *Daemon) closeEgress(ctx context.Context) error {
	e := d.egress
	if e == nil {
		return nil
	}
	e.cancel()
	_ = e.proxy.Shutdown(ctx)
	if len(e.gw.Sessions()) > 0 {
		log.G(ctx).Info("keeping the gateway: sessions still use it")
		return nil
	}
	return e.gw.Close(ctx)
}

// egressPlan is a session's network: its namespace and resolver.
type egressPlan struct {
	netnsPath string
	resolv    string // host path of the session's resolv.conf
}

// setupEgress creates the session's network namespace behind the gateway
// and registers its allowlist with the DNS proxy.
func (d *Daemon) setupEgress(ctx context.Context, s *session, p *policies.Policy) (*egressPlan, error) {
	if p.Egress == nil {
		return nil, nil
	}
	if d.egress == nil {
		return nil, fmt.Errorf("the manifest declares egress but this daemon has no uplink (start airlockd with --uplink): %w", errdefs.ErrFailedPrecondition)
	}
	list, err := allowlist.Compile(p.Egress.Allow, p.Egress.Deny)
	if err != nil {
		return nil, err
	}
	if _, err := allowPrivate(p.Egress); err != nil {
		return nil, err
	}
	cfg := netns.SessionConfig{IPv6: p.Egress.IPv6, Drop: p.Egress.OnBlock == policies.OnBlockDrop}
	for _, r := range list.CIDRs() {
		rule := netns.Rule{Prefix: r.Prefix, Port: r.Port}
		if r.Deny {
			cfg.Deny = append(cfg.Deny, rule)
		} else {
			cfg.Allow = append(cfg.Allow, rule)
		}
	}
	ns, err := d.egress.gw.AddSession(ctx, s.rec.ID, cfg)
	if err != nil {
		return nil, err
	}
	d.registerDNS(ctx, s, ns, list)
	resolv := filepath.Join(s.dir, "resolv.conf")
	content := fmt.Sprintf("# written by airlockd: the sandbox's only resolver is airlock's DNS proxy\nnameserver %s\noptions ndots:0 attempts:2 timeout:2\n", ns.Resolver())
	if err := os.WriteFile(resolv, []byte(content), 0o444); err != nil {
		return nil, err
	}
	return &egressPlan{netnsPath: ns.NetnsPath(), resolv: resolv}, nil
}

// registerDNS points the proxy at a session's allowlist, keyed by the
// session's addresses.
func (d *Daemon) registerDNS(ctx context.Context, s *session, ns *netns.Session, list *allowlist.List) {
	id := s.rec.ID
	private, err := allowPrivate(s.rec.Policy.Egress)
	if err != nil {
		// Checked when the session was created; a record that fails now
		// allows no private range.
		log.G(ctx).Warn("egress allow_private", "session", id, "error", err)
	}
	lim, err := dnsproxy.NewLimiter(d.cfg.Egress.DNSLimits)
	if err != nil {
		log.G(ctx).Error("dns limits", "error", err)
		lim, _ = dnsproxy.NewLimiter(dnsproxy.Limits{})
	}
	pol := &dnsproxy.SessionPolicy{
		ID: id, Allowlist: list, IPv6: s.rec.Policy.Egress.IPv6, Pinner: ns, AllowPrivate: private, Limit: lim,
		Audit: func(ev dnsproxy.Event) { s.audit.EmitDecision(ctx, dnsAuditEvent(id, ev)) },
	}
	addrs := []netip.Addr{ns.Addr()}
	if a6 := ns.Addr6(); a6.IsValid() {
		addrs = append(addrs, a6)
	}
	for _, a := range addrs {
		d.egress.sessions.Set(a, pol)
	}
	d.egress.mu.Lock()
	d.egress.byID[id] = addrs
	d.egress.mu.Unlock()
}

// allowPrivate parses a manifest's egress allow_private entries.
func allowPrivate(e *policies.Egress) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range e.AllowPrivate {
		p, reason := policies.ParsePrivateRange(s)
		if reason != "" {
			return nil, fmt.Errorf("egress allow_private[%d] %q: %s: %w", i, s, reason, errdefs.ErrInvalidArgument)
		}
		out = append(out, p)
	}
	return out, nil
}

func dnsAuditEvent(id string, ev dnsproxy.Event) api.AuditEvent {
	f := map[string]any{"type": ev.Type, "rcode": ev.Rcode, "proto": ev.Proto}
	if len(ev.Answers) > 0 {
		f["answers"] = ev.Answers
	}
	if len(ev.Dropped) > 0 {
		f["dropped"] = ev.Dropped
	}
	if len(ev.CNAMEs) > 0 {
		f["cnames"] = ev.CNAMEs
	}
	if ev.Rule != "" {
		f["rule"] = ev.Rule
	}
	if len(ev.Ports) > 0 {
		f["ports"] = ev.Ports
	}
	if ev.PinTTL > 0 {
		f["pin_ttl"] = ev.PinTTL
	}
	if ev.Cached {
		f["cached"] = true
	}
	return api.AuditEvent{Time: ev.Time, Session: id, Layer: "dns", Action: string(ev.Action), Subject: strings.TrimSuffix(ev.Name, "."), Reason: ev.Reason, Fields: f}
}

func (e *egressPlan) specOpts() []oci.SpecOpts {
	if e == nil {
		return nil
	}
	return []oci.SpecOpts{
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: e.netnsPath}),
		func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: "/etc/resolv.conf", Type: "bind", Source: e.resolv,
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
			})
			return nil
		},
	}
}

// stopEgress records the session's blocked connections in its audit log,
// unregisters it from the proxy and removes its namespace, veth and rules.
// It is safe to repeat.
func (d *Daemon) stopEgress(ctx context.Context, s *session) error {
	e := d.egress
	if e == nil {
		return nil
	}
	id := s.rec.ID
	e.mu.Lock()
	addrs := e.byID[id]
	delete(e.byID, id)
	e.mu.Unlock()
	for _, a := range addrs {
		e.sessions.Delete(a)
	}
	if _, err := e.gw.Session(id); err != nil {
		return nil
	}
	if stats, err := e.gw.DropCounters(ctx, id); err == nil {
		for _, ev := range dropEvents(id, stats) {
			s.audit.EmitDecision(ctx, ev)
		}
	}
	if err := e.gw.RemoveSession(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("session %q: remove network: %w", id, err)
	}
	return nil
}

func dropEvents(id string, st netns.DropStats) []api.AuditEvent {
	var out []api.AuditEvent
	for _, dr := range st.Dests {
		out = append(out, api.AuditEvent{
			Session: id, Layer: "net", Action: "dropped",
			Subject: netip.AddrPortFrom(dr.Dst, dr.Port).String(),
			Fields:  map[string]any{"proto": dr.Proto, "packets": dr.Packets, "bytes": dr.Bytes},
		})
	}
	return out
}

// liveDrops returns drop events for a session whose network still exists.
func (d *Daemon) liveDrops(ctx context.Context, id string) []api.AuditEvent {
	if d.egress == nil {
		return nil
	}
	if _, err := d.egress.gw.Session(id); err != nil {
		return nil
	}
	st, err := d.egress.gw.DropCounters(ctx, id)
	if err != nil {
		return nil
	}
	return dropEvents(id, st)
}

// reconcileEgress re-registers running sessions with the proxy and removes
// networks of sessions that are gone or stopped.
func (d *Daemon) reconcileEgress(ctx context.Context) {
	e := d.egress
	if e == nil {
		return
	}
	for _, ns := range e.gw.Sessions() {
		s, err := d.get(ns.ID())
		if err == nil && s.running() && s.rec.Policy.Egress != nil {
			list, err := allowlist.Compile(s.rec.Policy.Egress.Allow, s.rec.Policy.Egress.Deny)
			if err == nil {
				d.registerDNS(ctx, s, ns, list)
				continue
			}
		}
		log.G(ctx).Info("removing the network of a session that is not running", "session", ns.ID())
		if err := e.gw.RemoveSession(ctx, ns.ID()); err != nil {
			log.G(ctx).Warn("remove session network", "session", ns.ID(), "error", err)
		}
	}
}

// hostResolvers reads nameserver lines from a resolv.conf.
func hostResolvers(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && !a.IsLoopback() {
				out = append(out, a.String())
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no usable nameserver in " + path)
	}
	return out, sc.Err()
}

// removeNetwork removes a session's network without auditing, for teardown
// of sessions that may never have run.
func (d *Daemon) removeNetwork(ctx context.Context, id string) error {
	e := d.egress
	if e == nil {
		return nil
	}
	e.mu.Lock()
	addrs := e.byID[id]
	delete(e.byID, id)
	e.mu.Unlock()
	for _, a := range addrs {
		e.sessions.Delete(a)
	}
	if err := e.gw.RemoveSession(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("session %q: remove network: %w", id, err)
	}
	return nil
}

// dnsPacketRate is the bound on a session's packets to the DNS proxy that
// the gateway's rules enforce: twenty times the proxy's own rate limit,
// and never below nft.DefaultDNSPacketRate.
func dnsPacketRate(l dnsproxy.Limits) uint32 {
	rate := l.Rate
	if rate == 0 {
		rate = dnsproxy.DefaultRate
	}
	return uint32(min(max(20*rate, nft.DefaultDNSPacketRate), math.MaxUint32))
}
