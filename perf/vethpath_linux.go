package perf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// VethPath is the baseline of the TCP measurement: the shape of a
// session's path to the world without airlock's rules. Three namespaces
// <prefix>-a (client), <prefix>-g (forwarding, like the gateway) and
// <prefix>-w (server), joined by two veth pairs:
//
//	a: eth0 10.216.0.1/30 --- g: ga 10.216.0.2/30, gw 10.216.0.5/30 --- w: eth0 10.216.0.6/30
//
// with ip_forward on in g and no nftables rules, no conntrack helpers, no
// NAT. The addresses exist only inside these namespaces.
type VethPath struct {
	dir    string
	prefix string
	// Client, Router and Server are the namespaces' paths.
	Client, Router, Server string
	// ServerAddr is the server's address, reachable from Client via Router.
	ServerAddr netip.Addr
}

var (
	vethClient  = netip.MustParsePrefix("10.216.0.1/30")
	vethRouterA = netip.MustParsePrefix("10.216.0.2/30")
	vethRouterW = netip.MustParsePrefix("10.216.0.5/30")
	vethServer  = netip.MustParsePrefix("10.216.0.6/30")
)

// NewVethPath creates the three namespaces under dir. Close removes them.
func NewVethPath(dir, prefix string) (_ *VethPath, retErr error) {
	if err := netns.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	v := &VethPath{dir: dir, prefix: prefix, ServerAddr: vethServer.Addr()}
	defer func() {
		if retErr != nil {
			_ = v.Close()
		}
	}()
	var err error
	for _, ns := range []struct {
		path   *string
		suffix string
	}{{&v.Client, "-a"}, {&v.Router, "-g"}, {&v.Server, "-w"}} {
		if *ns.path, err = netns.Create(dir, prefix+ns.suffix); err != nil {
			return nil, err
		}
	}
	handles := map[string]*netlink.Handle{}
	files := map[string]*os.File{}
	defer func() {
		for _, h := range handles {
			h.Close()
		}
		for _, f := range files {
			f.Close()
		}
	}()
	for _, p := range []string{v.Client, v.Router, v.Server} {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		files[p] = f
		h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
		if err != nil {
			return nil, err
		}
		handles[p] = h
		lo, err := h.LinkByName("lo")
		if err != nil {
			return nil, err
		}
		if err := h.LinkSetUp(lo); err != nil {
			return nil, err
		}
	}
	g := handles[v.Router]
	for _, pair := range []struct {
		local, peer string
		peerNS      string
		localAddr   netip.Prefix
		peerAddr    netip.Prefix
	}{
		{"ga", "eth0", v.Client, vethRouterA, vethClient},
		{"gw", "eth0", v.Server, vethRouterW, vethServer},
	} {
		if err := g.LinkAdd(&netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: pair.local},
			PeerName:  pair.peer, PeerNamespace: netlink.NsFd(int(files[pair.peerNS].Fd())),
		}); err != nil {
			return nil, fmt.Errorf("veth %s: %w", pair.local, err)
		}
		for _, side := range []struct {
			h    *netlink.Handle
			name string
			addr netip.Prefix
		}{{g, pair.local, pair.localAddr}, {handles[pair.peerNS], pair.peer, pair.peerAddr}} {
			l, err := side.h.LinkByName(side.name)
			if err != nil {
				return nil, err
			}
			ipn := &net.IPNet{IP: side.addr.Addr().AsSlice(), Mask: net.CIDRMask(side.addr.Bits(), 32)}
			if err := side.h.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				return nil, err
			}
			if err := side.h.LinkSetUp(l); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range []struct {
		ns string
		gw netip.Addr
	}{{v.Client, vethRouterA.Addr()}, {v.Server, vethRouterW.Addr()}} {
		if err := handles[r.ns].RouteAdd(&netlink.Route{Gw: r.gw.AsSlice()}); err != nil {
			return nil, fmt.Errorf("default route: %w", err)
		}
	}
	if err := netns.Do(v.Router, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		return nil, fmt.Errorf("forwarding: %w", err)
	}
	return v, nil
}

// Close removes the namespaces (and with them the veths).
func (v *VethPath) Close() error {
	var errs []error
	for _, n := range []string{"-a", "-g", "-w"} {
		p := filepath.Join(v.dir, v.prefix+n)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := netns.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
