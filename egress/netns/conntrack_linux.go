package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/containerd/errdefs"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// SessionByFlow returns the session that opened the connection a service
// saw coming from client, on its own address server (optional: the zero
// AddrPort matches any), with proto "tcp" or "udp". A client address that
// is a session's is that session; otherwise, since the gateway
// masquerades sessions' traffic on the uplink, the gateway's connection
// tracking table says which session address the flow came from. The flow
// must still be tracked: a service asks while it handles the request.
//
// With `--uplink host`, the host masquerades the uplink's traffic once
// more; a client address on the host's side is not found here.
func (g *Gateway) SessionByFlow(ctx context.Context, client, server netip.AddrPort, proto string) (*Session, error) {
	if s, err := g.SessionByAddr(client.Addr()); err == nil {
		return s, nil
	}
	var pn uint8
	switch proto {
	case "tcp":
		pn = unix.IPPROTO_TCP
	case "udp":
		pn = unix.IPPROTO_UDP
	default:
		return nil, fmt.Errorf("protocol %q: %w", proto, errdefs.ErrInvalidArgument)
	}
	family := netlink.InetFamily(unix.AF_INET)
	if client.Addr().Unmap().Is6() {
		family = unix.AF_INET6
	}
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(g.ns.Fd())), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink in gateway netns: %w", err)
	}
	defer h.Close()
	flows, err := h.ConntrackTableList(netlink.ConntrackTable, family)
	if err != nil && len(flows) == 0 {
		return nil, fmt.Errorf("conntrack table of the gateway: %w", err)
	}
	addr := func(ip net.IP) netip.Addr {
		a, _ := netip.AddrFromSlice(ip)
		return a.Unmap()
	}
	// Every matching flow must come from the same session: without the
	// server's address, another session's flow to another server from the
	// same masqueraded port could match too, and a report must never land
	// in the audit of a session that did not send it.
	var found *Session
	for _, f := range flows {
		// The reply goes to the masqueraded source: the client the
		// service saw.
		if f.Forward.Protocol != pn || f.Reverse.DstPort != client.Port() || addr(f.Reverse.DstIP) != client.Addr().Unmap() {
			continue
		}
		if server.IsValid() && (f.Reverse.SrcPort != server.Port() || addr(f.Reverse.SrcIP) != server.Addr().Unmap()) {
			continue
		}
		s, err := g.SessionByAddr(addr(f.Forward.SrcIP))
		if err != nil {
			continue
		}
		if found != nil && found != s {
			return nil, fmt.Errorf("flows of more than one session match %v: %w", client, errdefs.ErrNotFound)
		}
		found = s
	}
	if found == nil {
		return nil, fmt.Errorf("no session flow from %v: %w", client, errdefs.ErrNotFound)
	}
	return found, nil
}
