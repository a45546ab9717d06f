package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/containerd/errdefs"
	"github.com/google/nftables"
	mdnetlink "github.com/mdlayher/netlink"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Gateway is airlock's gateway network namespace: every session's veth
// ends in it, it holds the nftables ruleset and the DNS proxy's sockets,
// and one uplink veth connects it to the world. See the package
// documentation for the layout.
type Gateway struct {
	cfg  Config
	path string
	// ns keeps the gateway namespace open for netlink and nftables.
	ns *os.File
	nl *netlink.Handle
	// dialer dials from the gateway namespace (Dialer).
	dialer *NSDialer

	uplinkGW4, uplinkPeer4, uplinkGW6, uplinkPeer6 netip.Addr
	// uplinkDown says why the uplink is down; nil while it is up
	// (WatchUplink).
	uplinkDown atomic.Pointer[uplinkFault]

	ctMu sync.Mutex
	// ct is a connection to conntrack in the gateway namespace (FlowID,
	// CutFlow), made at first use.
	// +checklocks:ctMu
	ct *mdnetlink.Conn

	nftMu sync.Mutex
	// nft is a lasting connection to nftables in the gateway namespace.
	// +checklocks:nftMu
	nft *nftables.Conn

	mu sync.Mutex
	// +checklocks:mu
	alloc *allocator
	// sessions by id, including sessions being created or removed.
	// +checklocks:mu
	sessions map[string]*Session
	// +checklocks:mu
	closed bool
}

// NewGateway creates the gateway namespace of cfg.Prefix, its ruleset and
// its uplink. It fails with errdefs.ErrAlreadyExists if a gateway with that
// prefix exists: a restarted daemon calls AdoptGateway, or Cleanup after a
// crash it does not want to recover from.
func NewGateway(ctx context.Context, cfg Config) (_ *Gateway, retErr error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Uplink.Netns != "" && !IsNetns(cfg.uplinkNetnsPath()) {
		return nil, fmt.Errorf("uplink namespace %s: %w", cfg.uplinkNetnsPath(), errdefs.ErrNotFound)
	}
	path, err := Create(cfg.NetnsDir, gatewayNetnsName(cfg.Prefix))
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", cfg.Prefix, err)
	}
	g := newGateway(cfg, path)
	defer func() {
		if retErr != nil {
			if err := g.destroy(context.WithoutCancel(ctx)); err != nil {
				log.G(ctx).Warn("gateway: rollback failed; run Cleanup", "prefix", cfg.Prefix, "error", err)
			}
		}
	}()
	if err := g.open(); err != nil {
		return nil, err
	}
	lo, err := g.nl.LinkByName("lo")
	if err != nil {
		return nil, fmt.Errorf("gateway lo: %w", err)
	}
	if err := g.nl.LinkSetUp(lo); err != nil {
		return nil, fmt.Errorf("gateway lo up: %w", err)
	}
	if err := doFd(int(g.ns.Fd()), func() error {
		return errors.Join(
			writeSysctl("net/ipv4/ip_forward", "1"),
			writeSysctl("net/ipv6/conf/all/forwarding", "1"),
		)
	}); err != nil {
		return nil, fmt.Errorf("gateway forwarding: %w", err)
	}
	if err := g.withNft(func(c *nftables.Conn) error {
		if err := nft.Install(c, cfg.base()); err != nil {
			return err
		}
		return c.Flush()
	}); err != nil {
		return nil, fmt.Errorf("gateway ruleset: %w", err)
	}
	if err := g.addUplink(ctx); err != nil {
		return nil, fmt.Errorf("gateway uplink %s: %w", cfg.Uplink, err)
	}
	log.G(ctx).Info("gateway created", "prefix", cfg.Prefix, "netns", path, "uplink", cfg.Uplink.String(),
		"uplink_addr", g.uplinkGW4)
	return g, nil
}

func newGateway(cfg Config, path string) *Gateway {
	gw4, peer4, gw6, peer6 := cfg.uplinkAddrs()
	return &Gateway{
		cfg: cfg, path: path,
		uplinkGW4: gw4, uplinkPeer4: peer4, uplinkGW6: gw6, uplinkPeer6: peer6,
		alloc:    newAllocator(cfg.Pool, cfg.Pool6),
		sessions: map[string]*Session{},
	}
}

// open opens the handles on the gateway namespace.
func (g *Gateway) open() error {
	f, err := os.Open(g.path)
	if err != nil {
		return fmt.Errorf("open gateway netns: %w", err)
	}
	g.ns = f
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("netlink in gateway netns: %w", err)
	}
	g.nl = h
	d, err := NewDialer(g.path)
	if err != nil {
		return fmt.Errorf("dialer in gateway netns: %w", err)
	}
	g.dialer = d
	g.nftMu.Lock()
	defer g.nftMu.Unlock()
	return g.resetNftLocked()
}

// resetNftLocked replaces the nftables connection; a connection that saw an
// error is not reused.
//
// Preconditions: g.nftMu is held.
func (g *Gateway) resetNftLocked() error {
	if g.nft != nil {
		_ = g.nft.CloseLasting()
		g.nft = nil
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(g.ns.Fd())), nftables.AsLasting())
	if err != nil {
		return fmt.Errorf("nftables in gateway netns: %w", err)
	}
	g.nft = c
	return nil
}

// withNft runs fn with the gateway's nftables connection, serialised with
// every other user: a Conn buffers one batch at a time.
func (g *Gateway) withNft(fn func(*nftables.Conn) error) error {
	g.nftMu.Lock()
	defer g.nftMu.Unlock()
	if g.nft == nil {
		if g.ns == nil {
			return fmt.Errorf("gateway %s closed: %w", g.cfg.Prefix, errdefs.ErrFailedPrecondition)
		}
		if err := g.resetNftLocked(); err != nil {
			return err
		}
	}
	err := fn(g.nft)
	if err != nil {
		if rerr := g.resetNftLocked(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// AdoptGateway opens the running gateway of cfg.Prefix left by a previous
// daemon, and re-adopts its complete sessions; what a crash left half-made
// is removed. It fails with errdefs.ErrNotFound if there is no gateway, and
// with errdefs.ErrFailedPrecondition if the gateway itself is incomplete
// (then Cleanup and NewGateway).
func AdoptGateway(ctx context.Context, cfg Config) (_ *Gateway, retErr error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.NetnsDir, gatewayNetnsName(cfg.Prefix))
	if !IsNetns(path) {
		return nil, fmt.Errorf("gateway %s: %w", path, errdefs.ErrNotFound)
	}
	g := newGateway(cfg, path)
	defer func() {
		if retErr != nil {
			g.release()
		}
	}()
	if err := g.open(); err != nil {
		return nil, err
	}
	if err := g.withNft(func(c *nftables.Conn) error { return nft.Check(c, cfg.Prefix) }); err != nil {
		return nil, fmt.Errorf("gateway %s ruleset: %v: %w", cfg.Prefix, err, errdefs.ErrFailedPrecondition)
	}
	if err := g.withNft(func(c *nftables.Conn) error {
		if err := nft.EnsureGuard(c, cfg.base()); err != nil {
			return err
		}
		if err := nft.EnsureL7(c, cfg.base()); err != nil {
			return err
		}
		if err := nft.EnsureFast(c, cfg.base()); err != nil {
			return err
		}
		return c.Flush()
	}); err != nil {
		return nil, fmt.Errorf("gateway %s L7 rules: %w", cfg.Prefix, err)
	}
	if err := g.checkUplink(); err != nil {
		// The ruleset is whole: a gateway whose uplink went (its
		// namespace removed while no daemon ran) is adopted with the
		// uplink down, and WatchUplink rebuilds it when it can.
		if rerr := g.repairUplink(ctx, err); rerr != nil {
			log.G(ctx).Warn("gateway adopted with its uplink down", "prefix", cfg.Prefix, "error", rerr)
		}
	}
	if err := g.reconcile(ctx); err != nil {
		return nil, err
	}
	log.G(ctx).Info("gateway adopted", "prefix", cfg.Prefix, "netns", path, "sessions", len(g.sessions))
	return g, nil
}

// reconcile re-adopts complete sessions and removes the rest.
func (g *Gateway) reconcile(ctx context.Context) error {
	links, err := linkList(g.nl)
	if err != nil {
		return fmt.Errorf("list gateway links: %w", err)
	}
	var nftAll []string
	var nftComplete map[string]bool
	if err := g.withNft(func(c *nftables.Conn) error {
		var err error
		nftAll, nftComplete, err = nft.Sessions(c, g.cfg.Prefix)
		return err
	}); err != nil {
		return fmt.Errorf("list session rules: %w", err)
	}

	// Decide about every session before changing anything: a
	// configuration mismatch aborts adoption with nothing torn down.
	type verdict struct {
		key, iface, alias, why string
		s                      *Session
	}
	var verdicts []verdict
	for _, l := range links {
		attrs := l.Attrs()
		key, ok := keyFromIface(attrs.Name)
		if !ok {
			continue
		}
		s, why, err := g.adoptable(l, key, nftComplete[attrs.Name])
		if err != nil {
			return err
		}
		verdicts = append(verdicts, verdict{key: key, iface: attrs.Name, alias: attrs.Alias, why: why, s: s})
	}

	adopted := map[string]bool{} // by key
	var errs []error
	for _, v := range verdicts {
		if v.s == nil {
			log.G(ctx).Warn("gateway: removing incomplete session", "iface", v.iface, "alias", v.alias, "reason", v.why)
			errs = append(errs, g.teardownKey(ctx, v.key, netip.Addr{}, netip.Addr{}))
			continue
		}
		g.mu.Lock()
		err := g.alloc.reserve(v.s.idx, v.key)
		if err == nil {
			g.sessions[v.s.id] = v.s
			v.s.ready = true
		}
		g.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		adopted[v.key] = true
	}
	for _, name := range nftAll {
		if key, ok := keyFromIface(name); ok && !adopted[key] {
			errs = append(errs, g.teardownKey(ctx, key, netip.Addr{}, netip.Addr{}))
		}
	}
	entries, err := os.ReadDir(g.cfg.NetnsDir)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, e := range entries {
		if key, ok := keyFromNetnsName(g.cfg.Prefix, e.Name()); ok && !adopted[key] {
			errs = append(errs, Remove(filepath.Join(g.cfg.NetnsDir, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// adoptable rebuilds the Session behind a gateway-side session link, or
// says why it cannot. It fails outright when the link carries an address
// outside the configured pool: the daemon was restarted with another
// configuration, and tearing the session down would cut a live sandbox off.
func (g *Gateway) adoptable(l netlink.Link, key string, rulesComplete bool) (*Session, string, error) {
	attrs := l.Attrs()
	addrs, err := g.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, "", fmt.Errorf("addresses of %s: %w", attrs.Name, err)
	}
	s := &Session{gw: g, id: attrs.Alias, key: key, iface: attrs.Name, pins: map[pinKey]pinState{}}
	found := false
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case ip.Is4() && g.cfg.Pool.Contains(ip):
			idx, ok := g.alloc.indexOf(ip)
			if !ok {
				return nil, "", fmt.Errorf("session interface %s: address %v is not a gateway address of pool %v: %w",
					attrs.Name, ip, g.cfg.Pool, errdefs.ErrFailedPrecondition)
			}
			s.idx, found = idx, true
		case ip.Is4():
			return nil, "", fmt.Errorf("session interface %s: address %v outside pool %v; adopt with the configuration that created it: %w",
				attrs.Name, ip, g.cfg.Pool, errdefs.ErrFailedPrecondition)
		case ip.Is6() && g.cfg.Pool6.Contains(ip):
			s.ipv6 = true
		}
	}
	switch {
	case ValidateID(s.id) != nil || sessionKey(s.id) != key:
		return nil, "no session id on the interface", nil
	case !rulesComplete:
		return nil, "ruleset incomplete", nil
	case !found:
		return nil, "no pool address", nil
	}
	s.nsPath = filepath.Join(g.cfg.NetnsDir, sessionNetnsName(g.cfg.Prefix, key))
	if !IsNetns(s.nsPath) {
		return nil, "namespace missing", nil
	}
	s.addrs = g.alloc.addrs(s.idx)
	return s, "", nil
}

// Close removes every session, the uplink, the ruleset and the gateway
// namespace. Sockets opened in the gateway namespace (Do, Dialer) keep the
// namespace itself alive until they are closed, but nothing in it routes
// anywhere after Close.
func (g *Gateway) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	err := g.destroy(ctx)
	if err == nil {
		log.G(ctx).Info("gateway removed", "prefix", g.cfg.Prefix)
	}
	return err
}

// destroy tears everything down, tolerating pieces that do not exist.
func (g *Gateway) destroy(ctx context.Context) error {
	var errs []error
	g.mu.Lock()
	sessions := make([]*Session, 0, len(g.sessions))
	for _, s := range g.sessions {
		sessions = append(sessions, s)
	}
	g.mu.Unlock()
	for _, s := range sessions {
		if err := g.removeSession(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	if g.nl != nil {
		errs = append(errs, g.removeUplink(ctx))
		errs = append(errs, g.withNft(func(c *nftables.Conn) error {
			if err := nft.DeleteTable(c, g.cfg.Prefix); err != nil {
				return err
			}
			return c.Flush()
		}))
	}
	g.release()
	errs = append(errs, Remove(g.path))
	return errors.Join(errs...)
}

// release closes the process's handles without touching kernel state.
func (g *Gateway) release() {
	g.ctMu.Lock()
	if g.ct != nil {
		_ = g.ct.Close()
		g.ct = nil
	}
	g.ctMu.Unlock()
	g.nftMu.Lock()
	if g.nft != nil {
		_ = g.nft.CloseLasting()
		g.nft = nil
	}
	g.nftMu.Unlock()
	if g.nl != nil {
		g.nl.Close()
		g.nl = nil
	}
	if g.ns != nil {
		g.ns.Close()
		g.ns = nil
	}
	if g.dialer != nil {
		g.dialer.Close()
	}
}

// NetnsPath is the gateway namespace's mount point.
func (g *Gateway) NetnsPath() string { return g.path }

// Prefix is the gateway's kernel-object prefix.
func (g *Gateway) Prefix() string { return g.cfg.Prefix }

// UplinkAddr is the gateway's address on its uplink: where services the
// world and the host must reach (credential endpoints) listen, and the
// source address of all traffic the gateway forwards.
func (g *Gateway) UplinkAddr() netip.Addr { return g.uplinkGW4 }

// UplinkPeerAddr is the address of the uplink's far end.
func (g *Gateway) UplinkPeerAddr() netip.Addr { return g.uplinkPeer4 }

// SessionPools are the session address ranges (IPv4 and IPv6).
func (g *Gateway) SessionPools() []netip.Prefix { return []netip.Prefix{g.cfg.Pool, g.cfg.Pool6} }

// UplinkNets are the uplink subnets (IPv4 and IPv6).
func (g *Gateway) UplinkNets() []netip.Prefix {
	return []netip.Prefix{g.cfg.Uplink.Net, g.cfg.Uplink.Net6}
}

// DNSPort is the port sessions may reach on their resolver address.
func (g *Gateway) DNSPort() uint16 { return g.cfg.DNSPort }

// L7Port is the port of the L7 listener in the gateway namespace, where
// the rules redirect sessions' connections on their L7 ports.
func (g *Gateway) L7Port() uint16 { return g.cfg.L7Port }

// Do runs fn on a thread inside the gateway namespace (see the package
// function Do); the DNS proxy opens its listeners this way, on
// 0.0.0.0:DNSPort.
func (g *Gateway) Do(fn func() error) error { return Do(g.path, fn) }

// Dialer returns a DialFunc whose connections start in the gateway
// namespace and leave through the uplink: the DNS proxy's upstream
// queries, and the L7 gateway's upstreams. Its sockets are made by one
// thread that stays in the namespace (NSDialer) until the gateway is
// closed; later dials fail.
func (g *Gateway) Dialer() DialFunc {
	if g.dialer == nil {
		return Dialer(g.path)
	}
	return g.dialer.DialContext
}

// Sessions lists the gateway's sessions, sorted by id.
func (g *Gateway) Sessions() []*Session {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*Session, 0, len(g.sessions))
	for _, s := range g.sessions {
		if s.ready {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *Session) int { return strings.Compare(a.id, b.id) })
	return out
}

// Session returns the session id.
func (g *Gateway) Session(id string) (*Session, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[id]
	if !ok || !s.ready {
		return nil, fmt.Errorf("session %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// SessionByAddr returns the session whose address (IPv4 or IPv6) is a: the
// DNS proxy identifies its clients this way. Sessions cannot spoof their
// source address past the gateway.
func (g *Gateway) SessionByAddr(a netip.Addr) (*Session, error) {
	a = a.Unmap()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.sessions {
		if s.ready && (s.addrs.Session4 == a || s.ipv6 && s.addrs.Session6 == a) {
			return s, nil
		}
	}
	return nil, fmt.Errorf("session with address %v: %w", a, errdefs.ErrNotFound)
}

// DropCounters returns session id's blocked traffic.
func (g *Gateway) DropCounters(ctx context.Context, id string) (DropStats, error) {
	s, err := g.Session(id)
	if err != nil {
		return DropStats{}, err
	}
	return s.Drops(ctx)
}

func linkList(h *netlink.Handle) ([]netlink.Link, error) {
	for range 5 {
		links, err := h.LinkList()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
	}
	return nil, fmt.Errorf("list links: %w", netlink.ErrDumpInterrupted)
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENODEV)
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())}
}
