package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/egress/l7"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nfq"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// Config says how sessions reach the network.
type Config struct {
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

	// UpstreamRoots verify the servers the L7 gateway dials for TLS it
	// terminates; nil means the host's system roots (airlockd
	// --upstream-ca replaces them; the tests' world has its own CA).
	UpstreamRoots *x509.CertPool
	// FastPath has the kernel forward TLS the L7 gateway passes through
	// unseen (port FastPort of sessions whose gateway terminates no TLS:
	// no HTTP rules, no secrets, inspect not "all"), once the gateway has
	// checked its ClientHello, held in a netfilter queue, instead of
	// relaying it through its listener (see egress/nft's fast path). Off:
	// every checked connection goes through the listener.
	FastPath bool
}

// SessionConfig is what the perimeter needs of one session.
type SessionConfig struct {
	// Egress is the manifest's egress block; nil means no network.
	Egress *policies.Egress
	// Dir is a host directory of the session's, for its resolv.conf and
	// hosts file.
	Dir string
	// Hostname is the sandbox's hostname. Its /etc/hosts maps it to a
	// loopback address, so that looking it up (git's default identity
	// for a commit or a reflog entry, Python's socket.getfqdn) is
	// answered in the sandbox instead of being refused, and audited, by
	// the DNS proxy. Empty: the image's /etc/hosts stays.
	Hostname string
	// Audit receives the session's decisions, with the context AddSession
	// (or Reconcile) was given.
	Audit Audit
	// CA issues the certificates the L7 gateway shows the session's
	// clients for TLS it terminates; nil terminates none (HTTP rules and
	// secrets of TLS hosts then refuse every connection to those hosts).
	CA Issuer
	// Secrets returns the session's secrets, substituted for their
	// placeholders by the L7 gateway; called for each request, so values
	// read again (a warm sandbox handed out) take effect. Nil: none.
	Secrets func() []Secret
	// RawPackets says the sandbox can write packets of its own
	// (CAP_NET_RAW or CAP_NET_ADMIN): its TLS never takes the kernel fast
	// path (Config.FastPath), where a crafted packet could show the
	// gateway a ClientHello the server discards (a bad checksum or
	// option, a short TTL) before the bytes the server reads.
	RawPackets bool
	// Ask holds a request an HTTP rule asks about; nil denies asks.
	Ask func(ctx context.Context, a Ask) AskDecision
	// PolicyVersion is the version of the session's policy; the DNS
	// proxy's and the L7 gateway's events name it (zero: they name none
	// of their own).
	PolicyVersion int
	// Resolved are the names the session resolved before (a restarted
	// daemon's record of them): the addresses pinned for a name are
	// known as that name's when a revision (Revise) withdraws or keeps it.
	Resolved []Resolved
	// AskTimeout is how long Ask waits for a decision (the manifest's
	// approval timeout); it also bounds the gateway's wait for the body
	// it shows with a held request (zero: the default approval timeout).
	AskTimeout time.Duration
}

// The L7 gateway's types a session's configuration carries, so that
// callers of the front door need no sub-package.
type (
	// Secret is a value the sandbox holds only as a placeholder.
	Secret = l7.Secret
	// Inject binds a Secret to a host and a header.
	Inject = l7.Inject
	// Ask is a request an HTTP rule holds for a decision.
	Ask = l7.Ask
	// AskDecision is what came of an Ask.
	AskDecision = l7.AskDecision
)

// Issuer issues a TLS certificate for a name, signed by a CA the
// session's sandbox trusts.
type Issuer interface {
	Leaf(name string) (*tls.Certificate, error)
}

// Audit receives a session's egress decisions: each DNS answer or
// refusal of the proxy, each connection or request of the L7 gateway
// (layer "l7"), and the connections the gateway blocked, counted per
// destination, when the session's network is removed. The daemon writes
// them to the session's audit log, merging repeated DNS and network
// decisions but never the L7 gateway's, one record per request.
type Audit func(ctx context.Context, ev api.AuditEvent)

// Perimeter is the network perimeter: the gateway namespace with its
// nftables rules and the DNS allowlist proxy serving every session. A nil
// Perimeter is a daemon without an uplink: its sessions have no network,
// and AddSession refuses a manifest that declares egress.
type Perimeter struct {
	cfg      Config
	gw       *netns.Gateway
	proxy    *dnsproxy.Server
	sessions dnsproxy.SessionMap

	l7 *l7.Server
	// queue holds the fast path's undecided connections' packets
	// (Config.FastPath); nil without it.
	queue *nfq.Queue

	mu   sync.Mutex
	byID map[string][]netip.Addr // session id -> its addresses in the SessionMap
	// state holds what a revision of a session's egress (Revise) needs.
	state map[string]*sessionState
	// l7ByAddr holds the addresses of sessions with an L7 mode.
	l7ByAddr map[netip.Addr]*l7.Session
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the proxy's and the L7 gateway's serving goroutines
	// watched is closed when the uplink's watch (Gateway.WatchUplink)
	// has ended.
	watched chan struct{}
}

// Open adopts the gateway an earlier daemon with the kernel-object prefix
// left (or creates it) and starts the DNS proxy in it. Without an uplink
// it removes what an earlier daemon with one left and returns a nil
// Perimeter. The proxy serves until Close.
func Open(ctx context.Context, prefix string, cfg Config) (*Perimeter, error) {
	if cfg.Uplink == "" {
		// No perimeter network: remove what an earlier daemon with one left.
		if err := netns.CleanupDir(ctx, cfg.NetnsDir, prefix); err != nil {
			log.G(ctx).Warn("cleanup of an earlier gateway", "error", err)
		}
		return nil, nil
	}
	uplink, err := netns.ParseUplink(cfg.Uplink)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.AllowPrivate {
		if _, reason := policies.ParsePrivateRange(p.String()); reason != "" {
			return nil, fmt.Errorf("allow-private %v: %s: %w", p, reason, errdefs.ErrInvalidArgument)
		}
	}
	upstreams := cfg.DNSUpstreams
	if len(upstreams) == 0 {
		if upstreams, err = hostResolvers("/etc/resolv.conf"); err != nil {
			return nil, fmt.Errorf("dns upstream: %w (set --dns-upstream)", err)
		}
	}
	gcfg := netns.Config{Prefix: prefix, NetnsDir: cfg.NetnsDir, Pool: cfg.Pool, Uplink: uplink,
		DNSPacketRate: dnsPacketRate(cfg.DNSLimits)}
	gw, err := netns.AdoptGateway(ctx, gcfg)
	if err != nil {
		log.G(ctx).Info("creating the gateway", "reason", err)
		gw, err = netns.NewGateway(ctx, gcfg)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	e := &Perimeter{cfg: cfg, gw: gw, byID: map[string][]netip.Addr{}, state: map[string]*sessionState{}, l7ByAddr: map[netip.Addr]*l7.Session{}}
	proxy, err := dnsproxy.New(&e.sessions,
		dnsproxy.WithUpstreams(upstreams...),
		dnsproxy.WithDialer(dnsproxy.Dialer(e.dial)),
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
		return nil, err
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
		return nil, fmt.Errorf("dns proxy listeners in the gateway: %w", err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	if err := e.startL7(pctx); err != nil {
		cancel()
		udp.Close()
		tcp.Close()
		_ = gw.Close(ctx)
		return nil, err
	}
	e.watched = make(chan struct{})
	go func() {
		defer close(e.watched)
		gw.WatchUplink(pctx, func(error) {
			// Kept connections went with the old uplink.
			e.l7.CloseIdleUpstreams()
		})
	}()
	e.wg.Add(2)
	go func() { defer e.wg.Done(); _ = proxy.ServePacketConn(pctx, udp) }()
	go func() { defer e.wg.Done(); _ = proxy.ServeListener(pctx, tcp) }()
	log.G(ctx).Info("egress perimeter ready", "uplink", uplink.String(), "dns_upstreams", upstreams)
	return e, nil
}

// Close stops the DNS proxy. The gateway stays while sessions that use it
// live (they are re-adopted by the next daemon); without any, it is
// removed.
func (e *Perimeter) Close(ctx context.Context) error {
	if e == nil {
		return nil
	}
	defer e.wg.Wait()
	e.cancel()
	<-e.watched
	_ = e.proxy.Shutdown(ctx)
	if len(e.gw.Sessions()) > 0 {
		log.G(ctx).Info("keeping the gateway: sessions still use it")
		return nil
	}
	return e.gw.Close(ctx)
}

// UplinkDown says why the gateway's uplink is down, or nil while it is up
// (or without a perimeter). Meanwhile sessions' connections fail: the
// L7 gateway and the DNS proxy say why.
func (e *Perimeter) UplinkDown() error {
	if e == nil {
		return nil
	}
	return e.gw.UplinkDown()
}

// dial dials from the gateway namespace through the uplink; while the
// uplink is down it fails at once, saying so.
func (e *Perimeter) dial(ctx context.Context, network, address string) (net.Conn, error) {
	if err := e.gw.UplinkDown(); err != nil {
		return nil, fmt.Errorf("airlock: %w (the gateway rebuilds it when it returns)", err)
	}
	c, err := e.gw.Dialer()(ctx, network, address)
	if err != nil {
		if down := e.gw.UplinkDown(); down != nil {
			err = fmt.Errorf("airlock: %w (the gateway rebuilds it when it returns): %w", down, err)
		}
	}
	return c, err
}

// Session is a session's network: its namespace behind the gateway and
// its resolver.
type Session struct {
	netnsPath string
	resolv    string // host path of the session's resolv.conf
	hosts     string // host path of its hosts file, or ""
}

// NetnsPath is the session's network namespace.
func (s *Session) NetnsPath() string { return s.netnsPath }

// ResolvConf is the host path of the session's resolv.conf.
func (s *Session) ResolvConf() string { return s.resolv }

// SpecOpts put the container in the session's network namespace and bind
// its resolv.conf read-only on /etc/resolv.conf (and its hosts file on
// /etc/hosts). A nil Session (no egress) contributes none.
func (s *Session) SpecOpts() []oci.SpecOpts {
	if s == nil {
		return nil
	}
	return []oci.SpecOpts{
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: s.netnsPath}),
		func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
			sp.Mounts = append(sp.Mounts, specs.Mount{
				Destination: "/etc/resolv.conf", Type: "bind", Source: s.resolv,
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
			})
			if s.hosts != "" {
				sp.Mounts = append(sp.Mounts, specs.Mount{
					Destination: "/etc/hosts", Type: "bind", Source: s.hosts,
					Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
				})
			}
			return nil
		},
	}
}

// AddSession creates session id's network namespace behind the gateway
// with the rules of its manifest's egress block, registers its allowlist
// with the DNS proxy and the L7 gateway (its decisions go to sc.Audit,
// with ctx) and writes its resolv.conf in sc.Dir. Without an egress block
// it does nothing and returns a nil Session; with one, a nil Perimeter
// refuses it.
func (e *Perimeter) AddSession(ctx context.Context, id string, sc SessionConfig) (*Session, error) {
	eg := sc.Egress
	if eg == nil {
		return nil, nil
	}
	if e == nil {
		return nil, fmt.Errorf("the manifest declares egress but this daemon has no uplink (start airlockd with --uplink): %w", errdefs.ErrFailedPrecondition)
	}
	list, err := allowlist.Compile(eg.Allow, eg.Deny)
	if err != nil {
		return nil, err
	}
	if _, err := allowPrivate(eg); err != nil {
		return nil, err
	}
	if _, err := httprule.Compile(eg.HTTP); err != nil {
		return nil, err
	}
	if sc.Hostname != "" && !validHostname(sc.Hostname) {
		return nil, fmt.Errorf("hostname %q is not a DNS name: %w", sc.Hostname, errdefs.ErrInvalidArgument)
	}
	ns, err := e.gw.AddSession(ctx, id, netConfig(eg, list, e.fastPath(sc)))
	if err != nil {
		return nil, err
	}
	e.registerDNS(ctx, id, sc, ns, list)
	resolv := filepath.Join(sc.Dir, "resolv.conf")
	content := fmt.Sprintf("# written by airlockd: the sandbox's only resolver is airlock's DNS proxy\nnameserver %s\noptions ndots:0 attempts:2 timeout:2\n", ns.Resolver())
	if err := os.WriteFile(resolv, []byte(content), 0o444); err != nil {
		return nil, err
	}
	sess := &Session{netnsPath: ns.NetnsPath(), resolv: resolv}
	if sc.Hostname != "" {
		sess.hosts = filepath.Join(sc.Dir, "hosts")
		content := "# written by airlockd: the sandbox's own names; every other name goes to airlock's DNS proxy\n" +
			"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + sc.Hostname + "\n"
		if err := os.WriteFile(sess.hosts, []byte(content), 0o444); err != nil {
			return nil, err
		}
	}
	return sess, nil
}

// FastPort is the port whose connections the fast path takes
// (Config.FastPath): TLS's.
const FastPort = 443

// fastPath reports whether session sc's connections on FastPort take the
// kernel fast path: the perimeter has it, the session checks L7 and may
// not write packets of its own, and its gateway does not terminate every
// TLS connection (inspect = "all", or a secret bound to no host). Those
// to the addresses of names it terminates (HTTP rules, a secret) go to
// the listener (sessionState.terminate).
func (e *Perimeter) fastPath(sc SessionConfig) bool {
	eg := sc.Egress
	if !e.cfg.FastPath || e.queue == nil || eg == nil || eg.L7 != policies.L7Check || sc.RawPackets || eg.Inspect == policies.InspectAll {
		return false
	}
	return sc.Secrets == nil || !guardedOnly(sc.Secrets())
}

// netConfig is the network configuration of an egress block whose
// entries compiled to list.
func netConfig(eg *policies.Egress, list *allowlist.List, fast bool) netns.SessionConfig {
	cfg := netns.SessionConfig{IPv6: eg.IPv6, Drop: eg.OnBlock == policies.OnBlockDrop}
	cfg.L7Ports = eg.GatewayPorts()
	if fast && slices.Contains(cfg.L7Ports, FastPort) {
		cfg.FastPorts = []uint16{FastPort}
	}
	for _, r := range list.CIDRs() {
		rule := netns.Rule{Prefix: r.Prefix, Port: r.Port}
		if r.Deny {
			cfg.Deny = append(cfg.Deny, rule)
		} else {
			cfg.Allow = append(cfg.Allow, rule)
		}
	}
	return cfg
}

// validHostname reports whether h is a DNS name of letters, digits and
// hyphens, as runtime.Hostname makes them.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// registerDNS points the proxy at a session's allowlist, keyed by the
// session's addresses.
func (e *Perimeter) registerDNS(ctx context.Context, id string, sc SessionConfig, ns *netns.Session, list *allowlist.List) {
	eg := sc.Egress
	private, err := allowPrivate(eg)
	if err != nil {
		// Checked when the session was created; a record that fails now
		// allows no private range.
		log.G(ctx).Warn("egress allow_private", "session", id, "error", err)
	}
	lim, err := dnsproxy.NewLimiter(e.cfg.DNSLimits)
	if err != nil {
		log.G(ctx).Error("dns limits", "error", err)
		lim, _ = dnsproxy.NewLimiter(dnsproxy.Limits{})
	}
	st := &sessionState{ns: ns, names: dnsproxy.NewNames(0), limit: lim, private: private, cfg: sc}
	for _, r := range sc.Resolved {
		if name, err := allowlist.ToFQDN(r.Name); err == nil {
			var chain []allowlist.FQDN
			for _, c := range r.CNAMEs {
				if t, err := allowlist.ToFQDN(c); err == nil {
					chain = append(chain, t)
				}
			}
			st.names.RecordChain(name, chain, r.Addrs, r.Expires, time.Now())
		}
	}
	pol := st.policy(ctx, id, list, 0)
	addrs := []netip.Addr{ns.Addr()}
	if a6 := ns.Addr6(); a6.IsValid() {
		addrs = append(addrs, a6)
	}
	if eg.L7Enabled() {
		reg := e.registerL7(ctx, id, addrs, sc, list, st.names)
		if e.fastPath(sc) {
			// Filled from the names recorded (a session re-registered
			// after a restart), then by each answer.
			st.setTerminate(ctx, reg.Terminate)
		}
	}
	for _, a := range addrs {
		e.sessions.Set(a, pol)
	}
	e.mu.Lock()
	e.byID[id] = addrs
	e.state[id] = st
	e.mu.Unlock()
}

// allowPrivate parses a manifest's egress allow_private entries.
func allowPrivate(eg *policies.Egress) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range eg.AllowPrivate {
		p, reason := policies.ParsePrivateRange(s)
		if reason != "" {
			return nil, fmt.Errorf("egress allow_private[%d] %q: %s: %w", i, s, reason, errdefs.ErrInvalidArgument)
		}
		out = append(out, p)
	}
	return out, nil
}

// DNSAuditEvent is the audit event of one decision of the DNS proxy for
// session id.
func DNSAuditEvent(id string, ev dnsproxy.Event) api.AuditEvent {
	f := map[string]any{"type": ev.Type, "rcode": ev.Rcode, "proto": ev.Proto}
	if len(ev.Answers) > 0 {
		f["answers"] = ev.Answers
	}
	if len(ev.Dropped) > 0 {
		f["dropped"] = droppedList(ev.Dropped)
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

// droppedList is an audit field, the answer addresses a DNS query did
// not pin, encoded without reflection: byte for byte what encoding/json
// gives for []dnsproxy.Dropped.
type droppedList []dnsproxy.Dropped

// AppendJSON implements audit.Appender.
func (l droppedList) AppendJSON(b []byte) []byte {
	if l == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, d := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"addr":`...)
		b = audit.AppendAddr(b, d.Addr)
		b = append(b, `,"reason":`...)
		b = audit.AppendString(b, d.Reason)
		if d.Rule != "" {
			b = append(b, `,"rule":`...)
			b = audit.AppendString(b, d.Rule)
		}
		b = append(b, '}')
	}
	return append(b, ']')
}

// unregister forgets session id's addresses in the proxy and the L7
// gateway, and closes its connections through the gateway (each is
// audited as it ends).
func (e *Perimeter) unregister(id string) {
	// Under e.mu, as a revision registers the session again only while
	// it is still in e.state: none re-adds what this removes.
	e.mu.Lock()
	addrs := e.byID[id]
	delete(e.byID, id)
	delete(e.state, id)
	for _, a := range addrs {
		delete(e.l7ByAddr, a)
		e.sessions.Delete(a)
	}
	e.mu.Unlock()
	if e.l7 != nil {
		e.l7.CloseSession(id)
	}
}

// Remove records session id's blocked connections through audit (if not
// nil), unregisters it from the proxy and removes its namespace, veth and
// rules. It is safe to repeat.
func (e *Perimeter) Remove(ctx context.Context, id string, audit Audit) error {
	if e == nil {
		return nil
	}
	e.unregister(id)
	if _, err := e.gw.Session(id); err != nil {
		return nil
	}
	if stats, err := e.gw.DropCounters(ctx, id); err == nil {
		for _, ev := range dropEvents(id, stats) {
			if audit != nil {
				audit(ctx, ev)
			}
		}
	}
	if err := e.gw.RemoveSession(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("session %q: remove network: %w", id, err)
	}
	return nil
}

// Discard removes session id's network without auditing, for teardown of
// sessions that may never have run.
func (e *Perimeter) Discard(ctx context.Context, id string) error {
	if e == nil {
		return nil
	}
	e.unregister(id)
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

// Drops returns the drop events of session id while its network exists:
// blocked connections are counted in the kernel and reach the audit only
// when Remove removes the network.
func (e *Perimeter) Drops(ctx context.Context, id string) []api.AuditEvent {
	if e == nil {
		return nil
	}
	if _, err := e.gw.Session(id); err != nil {
		return nil
	}
	st, err := e.gw.DropCounters(ctx, id)
	if err != nil {
		return nil
	}
	return dropEvents(id, st)
}

// DropTotals returns the packets and bytes the gateway has blocked for
// session id while its network exists (every destination, also those past
// the itemised ones); ok is false without one.
func (e *Perimeter) DropTotals(ctx context.Context, id string) (packets, bytes uint64, ok bool) {
	if e == nil {
		return 0, 0, false
	}
	if _, err := e.gw.Session(id); err != nil {
		return 0, 0, false
	}
	st, err := e.gw.DropCounters(ctx, id)
	if err != nil {
		return 0, 0, false
	}
	return st.Packets, st.Bytes, true
}

// DNSStats returns the DNS proxy's counters since the perimeter opened;
// ok is false without a perimeter.
func (e *Perimeter) DNSStats() (st dnsproxy.Stats, ok bool) {
	if e == nil || e.proxy == nil {
		return dnsproxy.Stats{}, false
	}
	return e.proxy.Stats(), true
}

// Reconcile goes through the session networks the gateway holds, as a
// restarted daemon finds them: running says, for a session id, the
// configuration of the running session (its egress block, where its
// decisions go), or nil for a session that is gone or not running. Running sessions are
// registered with the proxy again; the others' networks are removed.
func (e *Perimeter) Reconcile(ctx context.Context, running func(id string) *SessionConfig) {
	if e == nil {
		return
	}
	for _, ns := range e.gw.Sessions() {
		if sc := running(ns.ID()); sc != nil && sc.Egress != nil {
			list, err := allowlist.Compile(sc.Egress.Allow, sc.Egress.Deny)
			if err == nil {
				e.registerDNS(ctx, ns.ID(), *sc, ns, list)
				// The network as the record has it: a daemon may have
				// died between recording a revision and applying it. The
				// names of the pins are known from sc.Resolved; a pin of
				// a name not there stays (the policy revised is not
				// known: taking it as withdrawn would unpin every name on
				// every restart whose record lacks it).
				e.mu.Lock()
				st := e.state[ns.ID()]
				e.mu.Unlock()
				rev, err := st.sweep(ctx, ns.ID(), sc.Egress, sc.Egress, list, e.fastPath(*sc), nil)
				if err != nil {
					log.G(ctx).Warn("reinstall session rules", "session", ns.ID(), "error", err)
				}
				// A session made by an airlockd before the terminate sets
				// has them only now (the sweep adds them).
				st.refillTerminated(ctx)
				if err == nil && (len(rev.Unpinned) > 0 || rev.Cut > 0) {
					log.G(ctx).Info("egress re-adopted under the recorded policy", "session", ns.ID(), "version", sc.PolicyVersion,
						"unpinned", len(rev.Unpinned), "cut", rev.Cut)
				}
				continue
			}
		}
		log.G(ctx).Info("removing the network of a session that is not running", "session", ns.ID())
		if err := e.gw.RemoveSession(ctx, ns.ID()); err != nil {
			log.G(ctx).Warn("remove session network", "session", ns.ID(), "error", err)
		}
	}
}

// SessionOfFlow returns the id of the session that opened the connection
// a service saw from client to server (optional: the zero AddrPort
// matches any), with proto "tcp" or "udp", through the gateway's view of
// its sessions' flows (see netns.Gateway.SessionByFlow). Without a
// perimeter no connection is a session's: the error is NotFound.
func (e *Perimeter) SessionOfFlow(ctx context.Context, client, server netip.AddrPort, proto string) (string, error) {
	if e == nil {
		return "", fmt.Errorf("no egress perimeter: %w", errdefs.ErrNotFound)
	}
	if e.l7 != nil && proto == "tcp" {
		// The L7 gateway's own connections, on the session's behalf.
		if id, ok := e.l7.SessionOfFlow(client, server); ok {
			return id, nil
		}
	}
	ns, err := e.gw.SessionByFlow(ctx, client, server, proto)
	if err != nil {
		return "", err
	}
	return ns.ID(), nil
}

// SessionOfConnection is SessionOfFlow for a TCP connection given as a
// service reported it (IP:port each; server may be empty or unparsable,
// then any server matches). It reports false when no session's flow
// matches, or the client is not an address.
func (e *Perimeter) SessionOfConnection(ctx context.Context, client, server string) (string, bool) {
	c, err := netip.ParseAddrPort(client)
	if err != nil || e == nil {
		return "", false
	}
	srv, _ := netip.ParseAddrPort(server)
	id, err := e.SessionOfFlow(ctx, c, srv, "tcp")
	if err != nil {
		log.G(ctx).Debug("a connection of no session", "client", client, "error", err)
		return "", false
	}
	return id, true
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

// dnsPacketRate is the bound on a session's packets to the DNS proxy that
// the gateway's rules enforce: four times the proxy's own rate limit (room
// for its bursts, twice the rate, and their retries), and never below
// nft.DefaultDNSPacketRate.
func dnsPacketRate(l dnsproxy.Limits) uint32 {
	rate := l.Rate
	if rate == 0 {
		rate = dnsproxy.DefaultRate
	}
	return uint32(min(max(4*rate, nft.DefaultDNSPacketRate), math.MaxUint32))
}
