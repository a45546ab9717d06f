package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/nft"
)

// uplinkNetnsFile opens the namespace that receives the uplink's peer.
func (g *Gateway) uplinkNetnsFile() (*os.File, error) {
	if g.cfg.Uplink.Host {
		// The daemon's own namespace. Only locked threads ever leave it,
		// so the one this goroutine is locked to is in it. Not
		// /proc/self/ns/net: that is the main thread's, which may be
		// locked in another namespace at this moment.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		return os.Open("/proc/thread-self/ns/net")
	}
	return os.Open(g.cfg.uplinkNetnsPath())
}

// addUplink creates the uplink veth: "uplink" in the gateway namespace,
// "<prefix>-up" in the uplink namespace (or the host), the first two
// addresses of the uplink subnets, and the gateway's default routes via the
// peer. In host mode it first installs the host table that masquerades the
// uplink subnet and keeps sessions away from host services: its rules match
// the peer by name, so they are in place before the peer exists and no
// packet crosses the peer unfiltered, at creation or at a repair.
func (g *Gateway) addUplink(ctx context.Context) error {
	peerName := uplinkPeerName(g.cfg.Prefix)
	f, err := g.uplinkNetnsFile()
	if err != nil {
		return err
	}
	defer f.Close()
	ph, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("netlink in uplink netns: %w", err)
	}
	defer ph.Close()
	if _, err := ph.LinkByName(peerName); err == nil {
		return fmt.Errorf("interface %s exists in the uplink namespace: %w", peerName, errdefs.ErrAlreadyExists)
	}
	if g.cfg.Uplink.Host {
		if err := g.addHostNAT(); err != nil {
			return fmt.Errorf("host table: %w", err)
		}
	}

	if err := g.nl.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: uplinkIface},
		PeerName:      peerName,
		PeerNamespace: netlink.NsFd(int(f.Fd())),
	}); err != nil {
		return fmt.Errorf("create uplink veth: %w", err)
	}
	link, err := g.nl.LinkByName(uplinkIface)
	if err != nil {
		return err
	}
	peer, err := ph.LinkByName(peerName)
	if err != nil {
		return err
	}
	for _, a := range []struct {
		h    *netlink.Handle
		l    netlink.Link
		addr netip.Addr
		bits int
	}{
		{g.nl, link, g.uplinkGW4, g.cfg.Uplink.Net.Bits()},
		{g.nl, link, g.uplinkGW6, g.cfg.Uplink.Net6.Bits()},
		{ph, peer, g.uplinkPeer4, g.cfg.Uplink.Net.Bits()},
		{ph, peer, g.uplinkPeer6, g.cfg.Uplink.Net6.Bits()},
	} {
		if err := addAddr(a.h, a.l, a.addr, a.bits); err != nil {
			return err
		}
	}
	if err := g.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("uplink up: %w", err)
	}
	if err := ph.LinkSetUp(peer); err != nil {
		return fmt.Errorf("uplink peer up: %w", err)
	}
	if err := waitOperUp(g.nl, uplinkIface); err != nil {
		return err
	}
	if err := pairNeighbors(g.nl, link, []netip.Addr{g.uplinkGW4, g.uplinkGW6},
		ph, peer, []netip.Addr{g.uplinkPeer4, g.uplinkPeer6}); err != nil {
		return err
	}
	if err := errors.Join(
		waitAddrsReady(g.nl, []netip.Addr{g.uplinkGW4, g.uplinkGW6}),
		waitAddrsReady(ph, []netip.Addr{g.uplinkPeer4, g.uplinkPeer6}),
	); err != nil {
		return err
	}
	// The peer's addresses must be reachable on the link (its connected
	// routes in place) before a route names them as its gateway: IPv6 adds
	// the prefix route when the link comes up, and a route via an address
	// not yet on-link is refused (EINVAL).
	if err := waitOnLink(g.nl, link.Attrs().Index, []netip.Addr{g.uplinkPeer4, g.uplinkPeer6}); err != nil {
		return err
	}
	for _, gw := range []netip.Addr{g.uplinkPeer4, g.uplinkPeer6} {
		if err := g.nl.RouteAdd(&netlink.Route{
			LinkIndex: link.Attrs().Index, Dst: ipNet(zeroOf(gw), 0), Gw: gw.AsSlice(),
		}); err != nil {
			return fmt.Errorf("gateway default route via %v: %w", gw, err)
		}
	}
	return nil
}

func zeroOf(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// addHostNAT turns on IPv4 forwarding in the host and installs the host
// table (nft.Host), replacing one left by an earlier uplink. IPv6
// forwarding in the host is left alone: turning it on changes how the host
// treats router advertisements.
func (g *Gateway) addHostNAT() error {
	if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return err
	}
	name := hostTableName(g.cfg.Prefix)
	// One transaction: the old table's rules stay until the new ones
	// are in.
	if err := nft.DeleteTable(c, name); err != nil {
		return err
	}
	if err := nft.InstallHost(c, nft.Host{
		Table: name, Peer: uplinkPeerName(g.cfg.Prefix), Net: g.cfg.Uplink.Net,
	}); err != nil {
		return err
	}
	return c.Flush()
}

// checkUplink verifies an adopted gateway's uplink.
func (g *Gateway) checkUplink() error {
	link, err := g.nl.LinkByName(uplinkIface)
	if err != nil {
		return err
	}
	addrs, err := g.nl.AddrList(link, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == g.uplinkGW4 {
			return nil
		}
	}
	return fmt.Errorf("interface %s lacks address %v", uplinkIface, g.uplinkGW4)
}

// removeUplink deletes the uplink veth (both ends) and, in host mode, the
// host table.
func (g *Gateway) removeUplink(context.Context) error {
	errs := []error{g.removeUplinkLink()}
	if g.cfg.Uplink.Host {
		errs = append(errs, removeHostObjects(g.cfg.Prefix))
	}
	return errors.Join(errs...)
}

// removeUplinkLink deletes the uplink veth; its peer goes with it.
func (g *Gateway) removeUplinkLink() error {
	l, err := g.nl.LinkByName(uplinkIface)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	if err := g.nl.LinkDel(l); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete uplink: %w", err)
	}
	return nil
}

// removeHostObjects deletes what host mode created in the daemon's
// namespace: the uplink peer and the host table.
func removeHostObjects(prefix string) error {
	var errs []error
	if l, err := netlink.LinkByName(uplinkPeerName(prefix)); err == nil {
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	names, err := nft.TablesWithPrefix(c, prefix)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, n := range names {
		if err := nft.DeleteTable(c, n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Flush(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitOperUp waits until the kernel reports name operationally up. The
// kernel activates a new veth's queueing discipline from its link-watch
// work, up to a second after the carrier comes on; packets sent before that
// are dropped. The operational state changes in the same step, so once it
// reads up, the first packet gets through.
func waitOperUp(h *netlink.Handle, name string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := h.LinkByName(name)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still %v after 5s", name, l.Attrs().OperState)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAddrsReady waits until the kernel routes each of addrs as local.
// Even without duplicate address detection, an IPv6 address becomes usable
// and gets its local route from deferred work after the link comes up;
// a packet to it that arrives before then is discarded.
func waitAddrsReady(h *netlink.Handle, addrs []netip.Addr) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, a := range addrs {
		for {
			routes, err := h.RouteGet(a.AsSlice())
			if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_LOCAL {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("address %v not local after 5s (%v, %v)", a, routes, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// waitOnLink waits (at most 5 s) until each address routes directly
// through the link with index ifindex.
func waitOnLink(h *netlink.Handle, ifindex int, addrs []netip.Addr) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, a := range addrs {
		for {
			routes, err := h.RouteGet(a.AsSlice())
			if err == nil && len(routes) > 0 && routes[0].Type == unix.RTN_UNICAST && routes[0].LinkIndex == ifindex && routes[0].Gw == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("address %v not on the uplink after 5s (%v, %v)", a, routes, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// pairNeighbors installs permanent neighbour entries for a veth pair's
// addresses on both ends: nothing needs ARP or neighbour discovery, so the
// first packet of a new session never waits for a resolution (IPv6 would
// otherwise lose it to a one-second retransmission).
func pairNeighbors(ha *netlink.Handle, a netlink.Link, aAddrs []netip.Addr, hb *netlink.Handle, b netlink.Link, bAddrs []netip.Addr) error {
	set := func(h *netlink.Handle, on, peer netlink.Link, addrs []netip.Addr) error {
		for _, ip := range addrs {
			fam := netlink.FAMILY_V4
			if ip.Is6() {
				fam = netlink.FAMILY_V6
			}
			if err := h.NeighSet(&netlink.Neigh{
				LinkIndex: on.Attrs().Index, Family: fam, State: netlink.NUD_PERMANENT,
				IP: ip.AsSlice(), HardwareAddr: peer.Attrs().HardwareAddr,
			}); err != nil {
				return fmt.Errorf("neighbour %v on %s: %w", ip, on.Attrs().Name, err)
			}
		}
		return nil
	}
	// a's neighbours are b's addresses, and the other way round.
	return errors.Join(set(ha, a, b, bAddrs), set(hb, b, a, aAddrs))
}

// addAddr assigns a/bits to l, without duplicate address detection (the
// links are point-to-point and ours).
func addAddr(h *netlink.Handle, l netlink.Link, a netip.Addr, bits int) error {
	addr := &netlink.Addr{IPNet: ipNet(a, bits)}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(l, addr); err != nil {
		return fmt.Errorf("add %v/%d to %s: %w", a, bits, l.Attrs().Name, err)
	}
	return nil
}
