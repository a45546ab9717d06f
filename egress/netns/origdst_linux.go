package netns

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDst is IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h),
// which golang.org/x/sys/unix does not define; it has SO_ORIGINAL_DST's value.
const ip6tSOOriginalDst = 80

// OriginalDst returns the destination a redirected TCP connection had before
// the gateway's rules redirected it to the L7 listener: conntrack's original
// tuple, read with SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6).
// A connection that was not redirected fails with ENOENT.
func OriginalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	la, ok := c.LocalAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: local address %v is not TCP", c.LocalAddr())
	}
	v4 := la.IP.To4() != nil
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v4 {
			// struct sockaddr_in fits the 16 bytes of an ipv6_mreq.
			mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = err
				return
			}
			b := mreq.Multiaddr
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			return
		}
		// struct sockaddr_in6 fits the 32 bytes of an ip6_mtuinfo.
		info, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDst)
		if err != nil {
			serr = err
			return
		}
		port := binary.NativeEndian.AppendUint16(nil, info.Addr.Port) // the bytes as stored: network order
		ap = netip.AddrPortFrom(netip.AddrFrom16(info.Addr.Addr).Unmap(), binary.BigEndian.Uint16(port))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, nil
}
