package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Rule allows or denies a destination range on one port, or on all ports
// when Port is 0.
type Rule = nft.Rule

// Drop is one blocked destination; DropStats a session's blocked traffic;
// Pinning one allowed destination.
type (
	Drop      = nft.Drop
	DropStats = nft.DropStats
	Pinning   = nft.Pinning
)

// SessionConfig is what a session's manifest says about its network.
type SessionConfig struct {
	// IPv6 gives the session an IPv6 address and lets it reach pinned
	// IPv6 destinations; without it every IPv6 packet is blocked.
	IPv6 bool
	// Drop makes blocked connections time out instead of failing fast.
	// The zero value rejects (TCP reset, ICMP administratively
	// prohibited), the manifest's default.
	Drop bool
	// Allow are static destination ranges (manifest CIDR entries); Deny
	// ranges win over Allow and over pinned addresses.
	Allow, Deny []Rule
	// L7Ports are TCP ports whose connections to allowed destinations are
	// redirected to the gateway's L7 listener (Gateway.L7Port) instead of
	// being forwarded; the listener reads the original destination with
	// SO_ORIGINAL_DST. None: every allowed connection is forwarded.
	L7Ports []uint16
	// FastPorts are L7 ports whose connections take the kernel fast
	// path instead (nft.Session.FastPorts): forwarded, with their first
	// packets held in the gateway namespace's queue (nft.FastQueue) for
	// the gateway's decision.
	FastPorts []uint16
}

func (c SessionConfig) validate() error {
	for _, r := range slices.Concat(c.Allow, c.Deny) {
		if !r.Prefix.IsValid() || r.Prefix.Addr().Is4In6() {
			return fmt.Errorf("egress rule %v: %w", r, errdefs.ErrInvalidArgument)
		}
	}
	if slices.Contains(c.L7Ports, 0) {
		return fmt.Errorf("L7 port 0: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// anyPort is Pin's ports when it is given none: every port.
var anyPort = [1]uint16{0}

// MinPinTTL is the shortest lifetime Pin gives an entry; shorter TTLs (DNS
// answers with TTL 0) are raised to it so the client can still connect.
const MinPinTTL = time.Second

// Session is one sandbox's network: a namespace whose only interface
// (besides lo) is eth0, the far end of a veth whose other end sits in the
// gateway, with a route to nowhere but the gateway.
type Session struct {
	gw     *Gateway
	id     string
	key    string
	iface  string
	nsPath string
	idx    uint32
	addrs  sessionAddrs
	ipv6   bool

	// ready is guarded by gw.mu: the session is complete and not being
	// removed.
	ready bool

	mu sync.Mutex
	// +checklocks:mu
	pins map[pinKey]pinState
	// sweepAt is the size of pins at which Pin next forgets the expired
	// entries: twice what was left after the last sweep, at least
	// minPinSweep, so that a session with many live pins does not walk
	// them on every answer.
	// +checklocks:mu
	sweepAt int
	// terminated is when each address Terminate put in the terminate
	// sets leaves them, as far as this process put it there: an address
	// asked for again for no longer is left alone (every cached answer of
	// such a name asks).
	// +checklocks:mu
	terminated map[netip.Addr]time.Time
	// +checklocks:mu
	removed bool
}

// minPinSweep is the number of remembered pins below which Pin does not
// look for expired ones.
const minPinSweep = 1024

type pinKey struct {
	addr netip.Addr
	port uint16
}

type pinState struct{ expires time.Time }

// ID is the session id.
func (s *Session) ID() string { return s.id }

// NetnsPath is the session namespace's mount point, for the container
// spec's network namespace.
func (s *Session) NetnsPath() string { return s.nsPath }

// Addr is the session's IPv4 address.
func (s *Session) Addr() netip.Addr { return s.addrs.Session4 }

// Addr6 is the session's IPv6 address, or the zero Addr without IPv6.
func (s *Session) Addr6() netip.Addr {
	if !s.ipv6 {
		return netip.Addr{}
	}
	return s.addrs.Session6
}

// Resolver is the address the session's resolv.conf names: the gateway
// side of its veth, where the DNS proxy (listening on 0.0.0.0:DNSPort in
// the gateway) is the only thing the session may reach.
func (s *Session) Resolver() netip.Addr { return s.addrs.GW4 }

// Interface is the session's interface name in the gateway namespace.
func (s *Session) Interface() string { return s.iface }

// AddSession creates session id's namespace, veth, addresses, routes and
// rules. Nothing is reachable until Pin (or an Allow rule) opens it.
func (g *Gateway) AddSession(ctx context.Context, id string, cfg SessionConfig) (_ *Session, retErr error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := sessionKey(id)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, fmt.Errorf("gateway %s closed: %w", g.cfg.Prefix, errdefs.ErrFailedPrecondition)
	}
	for _, o := range g.sessions {
		if o.id == id || o.key == key {
			g.mu.Unlock()
			return nil, fmt.Errorf("session %q (key %s): %w", id, key, errdefs.ErrAlreadyExists)
		}
	}
	idx, err := g.alloc.allocate(key)
	if err != nil {
		g.mu.Unlock()
		return nil, err
	}
	s := &Session{
		gw: g, id: id, key: key, iface: sessionIfaceName(key),
		nsPath: filepath.Join(g.cfg.NetnsDir, sessionNetnsName(g.cfg.Prefix, key)),
		idx:    idx, addrs: g.alloc.addrs(idx), ipv6: cfg.IPv6,
		pins: map[pinKey]pinState{},
	}
	g.sessions[id] = s
	g.mu.Unlock()

	ctx = log.With(ctx, "session", id)
	defer func() {
		if retErr == nil {
			return
		}
		cleanupErr := g.teardownKey(context.WithoutCancel(ctx), key, s.addrs.Session4, s.addrs.Session6)
		g.mu.Lock()
		delete(g.sessions, id)
		if cleanupErr == nil {
			g.alloc.release(idx)
		}
		g.mu.Unlock()
		if cleanupErr != nil {
			log.G(ctx).Warn("session rollback failed; its address stays reserved", "error", cleanupErr)
		}
	}()

	if err := s.create(cfg); err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	g.mu.Lock()
	s.ready = true
	g.mu.Unlock()
	log.G(ctx).Info("session network created", "netns", s.nsPath, "addr", s.addrs.Session4, "iface", s.iface)
	return s, nil
}

func (s *Session) create(cfg SessionConfig) error {
	g := s.gw
	if _, err := Create(g.cfg.NetnsDir, filepath.Base(s.nsPath)); err != nil {
		return err
	}
	f, err := os.Open(s.nsPath)
	if err != nil {
		return err
	}
	defer f.Close()
	sh, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("netlink in session netns: %w", err)
	}
	defer sh.Close()

	// The peer is created directly in the session namespace as eth0.
	if err := g.nl.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: s.iface},
		PeerName:      sessionIface,
		PeerNamespace: netlink.NsFd(int(f.Fd())),
	}); err != nil {
		return fmt.Errorf("create veth %s: %w", s.iface, err)
	}
	gwLink, err := g.nl.LinkByName(s.iface)
	if err != nil {
		return err
	}
	// The alias records the session id for a restarted daemon (the kernel
	// ignores an alias given at creation).
	if err := g.nl.LinkSetAlias(gwLink, s.id); err != nil {
		return fmt.Errorf("alias %s: %w", s.iface, err)
	}
	if err := addAddr(g.nl, gwLink, s.addrs.GW4, 31); err != nil {
		return err
	}
	if s.ipv6 {
		if err := addAddr(g.nl, gwLink, s.addrs.GW6, 127); err != nil {
			return err
		}
	}

	rules := nft.Session{Name: s.iface, Addr4: s.addrs.Session4, Drop: cfg.Drop, Allow: cfg.Allow, Deny: cfg.Deny, L7Ports: cfg.L7Ports, FastPorts: cfg.FastPorts}
	if s.ipv6 {
		rules.Addr6 = s.addrs.Session6
	}
	if err := g.withNft(func(c *nftables.Conn) error {
		if err := nft.AddSession(c, g.cfg.Prefix, g.cfg.base(), rules); err != nil {
			return err
		}
		return c.Flush()
	}); err != nil {
		return fmt.Errorf("session rules: %w", err)
	}
	if err := g.nl.LinkSetUp(gwLink); err != nil {
		return fmt.Errorf("%s up: %w", s.iface, err)
	}

	// Inside the session namespace.
	lo, err := sh.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := sh.LinkSetUp(lo); err != nil {
		return fmt.Errorf("session lo up: %w", err)
	}
	eth, err := sh.LinkByName(sessionIface)
	if err != nil {
		return err
	}
	if !s.ipv6 {
		if err := doFd(int(f.Fd()), func() error {
			return writeSysctl("net/ipv6/conf/"+sessionIface+"/disable_ipv6", "1")
		}); err != nil {
			return err
		}
	}
	if err := addAddr(sh, eth, s.addrs.Session4, 31); err != nil {
		return err
	}
	if s.ipv6 {
		if err := addAddr(sh, eth, s.addrs.Session6, 127); err != nil {
			return err
		}
	}
	if err := sh.LinkSetUp(eth); err != nil {
		return fmt.Errorf("session eth0 up: %w", err)
	}
	if err := waitOperUp(sh, sessionIface); err != nil {
		return err
	}
	if err := waitOperUp(g.nl, s.iface); err != nil {
		return err
	}
	gwAddrs, sAddrs := []netip.Addr{s.addrs.GW4}, []netip.Addr{s.addrs.Session4}
	if s.ipv6 {
		gwAddrs, sAddrs = append(gwAddrs, s.addrs.GW6), append(sAddrs, s.addrs.Session6)
	}
	if err := pairNeighbors(g.nl, gwLink, gwAddrs, sh, eth, sAddrs); err != nil {
		return err
	}
	if err := errors.Join(waitAddrsReady(g.nl, gwAddrs), waitAddrsReady(sh, sAddrs)); err != nil {
		return err
	}
	gws := []netip.Addr{s.addrs.GW4}
	if s.ipv6 {
		gws = append(gws, s.addrs.GW6)
	}
	for _, gw := range gws {
		if err := sh.RouteAdd(&netlink.Route{
			LinkIndex: eth.Attrs().Index, Dst: ipNet(zeroOf(gw), 0), Gw: gw.AsSlice(),
		}); err != nil {
			return fmt.Errorf("session default route via %v: %w", gw, err)
		}
	}
	return nil
}

// RemoveSession removes session id's rules, veth, conntrack entries and
// namespace. Processes still inside the namespace keep it alive, but
// without an interface.
func (g *Gateway) RemoveSession(ctx context.Context, id string) error {
	g.mu.Lock()
	s, ok := g.sessions[id]
	if !ok || !s.ready {
		g.mu.Unlock()
		return fmt.Errorf("session %q: %w", id, errdefs.ErrNotFound)
	}
	s.ready = false
	g.mu.Unlock()
	return g.removeSession(log.With(ctx, "session", id), s)
}

func (g *Gateway) removeSession(ctx context.Context, s *Session) error {
	s.mu.Lock()
	s.removed = true
	s.pins = nil
	s.mu.Unlock()
	err := g.teardownKey(ctx, s.key, s.addrs.Session4, s.addrs.Session6)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		// Keep the entry and its address reserved: the pieces left
		// behind still use them. A retry goes through RemoveSession.
		s.ready = true
		return fmt.Errorf("remove session %q: %w", s.id, err)
	}
	delete(g.sessions, s.id)
	g.alloc.release(s.idx)
	log.G(ctx).Info("session network removed", "iface", s.iface)
	return nil
}

// teardownKey removes whatever exists of session key: its rules, its
// conntrack entries (so a later session given the same address inherits no
// established flows), the veth and the namespace.
func (g *Gateway) teardownKey(ctx context.Context, key string, addr4, addr6 netip.Addr) error {
	iface := sessionIfaceName(key)
	var errs []error
	if err := g.withNft(func(c *nftables.Conn) error {
		if err := nft.DeleteSession(c, g.cfg.Prefix, iface); err != nil {
			return err
		}
		return c.Flush()
	}); err != nil {
		errs = append(errs, fmt.Errorf("delete rules: %w", err))
	}
	if !addr4.IsValid() || !addr6.IsValid() {
		// Adoption cleanup: take the addresses from the interface.
		if l, err := g.nl.LinkByName(iface); err == nil {
			if as, err := g.nl.AddrList(l, netlink.FAMILY_ALL); err == nil {
				for _, a := range as {
					if ip, ok := netip.AddrFromSlice(a.IP); ok {
						if idx, ok := g.alloc.indexOf(ip.Unmap()); ok {
							sa := g.alloc.addrs(idx)
							addr4, addr6 = sa.Session4, sa.Session6
						}
					}
				}
			}
		}
	}
	for _, a := range []netip.Addr{addr4, addr6} {
		if !a.IsValid() {
			continue
		}
		fam := netlink.InetFamily(unix.AF_INET)
		if a.Is6() {
			fam = unix.AF_INET6
		}
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(netlink.ConntrackOrigSrcIP, a.AsSlice()); err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := g.nl.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f); err != nil && !errors.Is(err, unix.ENOENT) {
			log.G(ctx).Debug("conntrack flush", "addr", a, "error", err)
		}
	}
	if l, err := g.nl.LinkByName(iface); err == nil {
		if err := g.nl.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", iface, err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, err)
	}
	errs = append(errs, Remove(filepath.Join(g.cfg.NetnsDir, sessionNetnsName(g.cfg.Prefix, key))))
	return errors.Join(errs...)
}

// Pin allows the session to open connections to addrs on ports (on any
// port when ports is empty) for ttl, raised to MinPinTTL. It implements the
// DNS proxy's Pinner: when Pin returns nil the kernel enforces the entries.
// Entries already allowed for longer are left alone, so a short TTL never
// cuts a longer one short. Connections opened before an entry expires live
// on; new ones are blocked. IPv6 entries only matter with
// SessionConfig.IPv6.
//
// An answer from the DNS proxy's cache asks for no longer than the pin made
// when the answer was stored, which is then left as it is: a hit costs no
// nftables update. The session remembers what it pinned until then; once
// an entry expired, or a revision removed it, the next Pin adds it again.
func (s *Session) Pin(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ttl = max(ttl, MinPinTTL)
	now := time.Now()
	expires := now.Add(ttl)
	if len(ports) == 0 {
		ports = anyPort[:]
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return fmt.Errorf("session %q: %w", s.id, errdefs.ErrNotFound)
	}
	if len(s.pins) > max(s.sweepAt, minPinSweep) {
		for k, st := range s.pins {
			if st.expires.Before(now) {
				delete(s.pins, k)
			}
		}
		s.sweepAt = 2 * len(s.pins)
	}
	var todo []nft.Pinning
	for _, a := range addrs {
		a = a.Unmap()
		if !a.IsValid() || a.Is6() && !s.ipv6 {
			continue
		}
		for _, p := range ports {
			if st, ok := s.pins[pinKey{a, p}]; ok && !st.expires.Before(expires) {
				continue
			}
			todo = append(todo, nft.Pinning{Addr: a, Port: p, Expires: ttl})
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if err := s.gw.withNft(func(c *nftables.Conn) error {
		if err := nft.Pin(c, s.gw.cfg.Prefix, s.iface, todo); err != nil {
			return err
		}
		return c.Flush()
	}); err != nil {
		return fmt.Errorf("session %q: pin: %w", s.id, err)
	}
	for _, p := range todo {
		s.pins[pinKey{p.Addr, p.Port}] = pinState{expires: expires}
	}
	return nil
}

// Terminate has the session's connections to addrs on its fast ports go
// to the L7 listener, not the kernel fast path, for ttl (see
// nft.Terminated): the gateway terminates TLS to a name there. With
// reset, the addresses there before are removed first, in the same batch.
func (s *Session) Terminate(ctx context.Context, addrs []netip.Addr, ttl time.Duration, reset bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ttl = max(ttl, MinPinTTL)
	now := time.Now()
	expires := now.Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed {
		return fmt.Errorf("session %q: %w", s.id, errdefs.ErrNotFound)
	}
	if reset || s.terminated == nil {
		s.terminated = map[netip.Addr]time.Time{}
	}
	var todo []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if at, ok := s.terminated[a]; ok && !reset && !at.Before(expires) {
			continue
		}
		todo = append(todo, a)
	}
	if len(todo) == 0 && !reset {
		return nil
	}
	if err := s.gw.withNft(func(c *nftables.Conn) error {
		if reset {
			nft.ClearTerminated(c, s.gw.cfg.Prefix, s.iface)
		}
		if len(todo) > 0 {
			if err := nft.Terminated(c, s.gw.cfg.Prefix, s.iface, todo, ttl); err != nil {
				return err
			}
		}
		return c.Flush()
	}); err != nil {
		// What the kernel has is not known: ask again next time.
		s.terminated = nil
		return fmt.Errorf("session %q: terminate: %w", s.id, err)
	}
	if len(s.terminated) > minPinSweep {
		for a, at := range s.terminated {
			if at.Before(now) {
				delete(s.terminated, a)
			}
		}
	}
	for _, a := range todo {
		s.terminated[a] = expires
	}
	return nil
}

// Terminated lists the addresses Terminate put in the session's sets and
// that are still there.
func (s *Session) Terminated(ctx context.Context) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []netip.Addr
	err := s.gw.withNft(func(c *nftables.Conn) error {
		var err error
		out, err = nft.TerminatedAddrs(c, s.gw.cfg.Prefix, s.iface)
		return err
	})
	return out, err
}

// Pinned lists the session's allowed entries with their remaining life, as
// the kernel has them.
func (s *Session) Pinned(ctx context.Context) ([]Pinning, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Pinning
	err := s.gw.withNft(func(c *nftables.Conn) error {
		var err error
		out, err = nft.Pinned(c, s.gw.cfg.Prefix, s.iface)
		return err
	})
	return out, err
}

// Drops returns the session's blocked traffic: per destination, protocol
// and port, and in total. Each entry is a connection attempt the perimeter
// refused; DropStats.Since turns two readings into audit events.
func (s *Session) Drops(ctx context.Context) (DropStats, error) {
	if err := ctx.Err(); err != nil {
		return DropStats{}, err
	}
	var st DropStats
	err := s.gw.withNft(func(c *nftables.Conn) error {
		var err error
		st, err = nft.Drops(c, s.gw.cfg.Prefix, s.iface)
		return err
	})
	if err != nil {
		return DropStats{}, fmt.Errorf("session %q: drops: %w", s.id, err)
	}
	return st, nil
}

// Revise replaces the session's destination rules by cfg's Allow and Deny
// (cfg must otherwise be the configuration the session was created with:
// IPv6, Drop and L7Ports are not changed; FastPorts may be), removes the pinned entries
// unpin from its sets, and then ends its tracked connections through the
// gateway that cut reports: their next packet meets the revised rules.
// Connections to the gateway itself (the DNS proxy) are never ended. It
// returns how many connections it ended.
func (s *Session) Revise(ctx context.Context, cfg SessionConfig, unpin []Pinning, cut func(TrackedFlow) bool) (int, error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	g := s.gw
	s.mu.Lock()
	if s.removed {
		s.mu.Unlock()
		return 0, fmt.Errorf("session %q: %w", s.id, errdefs.ErrNotFound)
	}
	rules := nft.Session{Name: s.iface, Addr4: s.addrs.Session4, Drop: cfg.Drop, Allow: cfg.Allow, Deny: cfg.Deny, L7Ports: cfg.L7Ports, FastPorts: cfg.FastPorts}
	if s.ipv6 {
		rules.Addr6 = s.addrs.Session6
	}
	err := g.withNft(func(c *nftables.Conn) error {
		if err := nft.ReviseSession(c, g.cfg.Prefix, g.cfg.base(), rules); err != nil {
			return err
		}
		return c.Flush()
	})
	if err != nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("session %q: revise rules: %w", s.id, err)
	}
	// One entry per batch: an entry that expired meanwhile is already
	// gone, and must not fail the others.
	for _, p := range unpin {
		p.Addr = p.Addr.Unmap()
		if err := g.withNft(func(c *nftables.Conn) error {
			if err := nft.Unpin(c, g.cfg.Prefix, s.iface, []Pinning{{Addr: p.Addr, Port: p.Port, Expires: time.Second}}); err != nil {
				return err
			}
			return c.Flush()
		}); err != nil && !errors.Is(err, unix.ENOENT) {
			log.G(ctx).Debug("unpin", "session", s.id, "addr", p.Addr, "port", p.Port, "error", err)
		}
		delete(s.pins, pinKey{p.Addr, p.Port})
	}
	s.mu.Unlock()
	if cut == nil {
		return 0, nil
	}
	src := map[netip.Addr]bool{s.addrs.Session4: true}
	if s.ipv6 {
		src[s.addrs.Session6] = true
	}
	local := map[netip.Addr]bool{s.addrs.GW4: true, s.addrs.GW6: true}
	filter := flowFilter(func(f *netlink.ConntrackFlow) bool {
		from, _ := netip.AddrFromSlice(f.Forward.SrcIP)
		to, _ := netip.AddrFromSlice(f.Forward.DstIP)
		if !src[from.Unmap()] || local[to.Unmap()] {
			return false
		}
		var proto string
		switch f.Forward.Protocol {
		case unix.IPPROTO_TCP:
			proto = "tcp"
		case unix.IPPROTO_UDP:
			proto = "udp"
		default:
			return false
		}
		return cut(TrackedFlow{Src: netip.AddrPortFrom(from.Unmap(), f.Forward.SrcPort), Dst: netip.AddrPortFrom(to.Unmap(), f.Forward.DstPort), Proto: proto, Mark: f.Mark})
	})
	n := 0
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		if fam == unix.AF_INET6 && !s.ipv6 {
			continue
		}
		k, err := g.nl.ConntrackDeleteFilters(netlink.ConntrackTable, fam, filter)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return n, fmt.Errorf("session %q: end connections: %w", s.id, err)
		}
		n += int(k)
	}
	return n, nil
}

// TrackedFlow is a session's connection as the gateway's conntrack has
// it: its original direction, protocol ("tcp" or "udp") and mark.
type TrackedFlow struct {
	Src, Dst netip.AddrPort
	Proto    string
	Mark     uint32
}

// flowFilter matches the conntrack flows a function reports.
type flowFilter func(*netlink.ConntrackFlow) bool

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (f flowFilter) MatchConntrackFlow(fl *netlink.ConntrackFlow) bool { return f(fl) }
