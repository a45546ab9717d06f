package netns

import (
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// HasLink reports whether the gateway namespace has an interface name.
func (g *Gateway) HasLink(name string) bool {
	_, err := g.nl.LinkByName(name)
	return err == nil
}

// ForceIPv6 gives a session without IPv6 its would-be IPv6 address and a
// default route via the gateway's link-local address, as a sandbox with
// CAP_NET_ADMIN could.
func ForceIPv6(g *Gateway, s *Session) error {
	gwLink, err := g.nl.LinkByName(s.Interface())
	if err != nil {
		return err
	}
	var ll netip.Addr
	for deadline := time.Now().Add(3 * time.Second); !ll.IsValid() && time.Now().Before(deadline); {
		addrs, err := g.nl.AddrList(gwLink, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				ll = ip
			}
		}
		if !ll.IsValid() {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if !ll.IsValid() {
		return fmt.Errorf("gateway side of %s has no usable link-local address", s.Interface())
	}
	if err := Do(s.NetnsPath(), func() error {
		return writeSysctl("net/ipv6/conf/eth0/disable_ipv6", "0")
	}); err != nil {
		return err
	}
	f, err := os.Open(s.NetnsPath())
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName(sessionIface)
	if err != nil {
		return err
	}
	if err := addAddr(h, eth, s.addrs.Session6, 127); err != nil {
		return err
	}
	return h.RouteAdd(&netlink.Route{
		LinkIndex: eth.Attrs().Index, Dst: ipNet(netip.IPv6Unspecified(), 0), Gw: ll.AsSlice(),
	})
}

// Release closes g's handles and leaves the gateway in the kernel, as a
// daemon that exits does.
func Release(g *Gateway) { g.release() }

// SetFlowEvents sets the conntrack event socket's buffer and a function
// run before each read of it, until the test ends.
func SetFlowEvents(t interface{ Cleanup(func()) }, buffer int, beforeRead func()) {
	b, h := flowEventsBuffer, testHookFlowReceive
	flowEventsBuffer, testHookFlowReceive = buffer, beforeRead
	t.Cleanup(func() { flowEventsBuffer, testHookFlowReceive = b, h })
}
