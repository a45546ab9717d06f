package netns

import (
	"net"
	"net/netip"
)

// LocalAddrs lists the addresses of the calling thread's network namespace
// (the daemon's own: the host's, with an uplink to the host). The DNS
// proxy never pins them.
func LocalAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}
