package dnsproxy

import (
	"encoding/binary"
	"net"
	"net/netip"
	"syscall"
)

// pktinfo is what a query's control messages tell: the address it was sent
// to (IP_PKTINFO, IPV6_PKTINFO).
type pktinfo struct {
	dst netip.Addr
}

// oobSize holds an IPV6_PKTINFO and an IP_PKTINFO message, which a
// dual-stack socket receives together for an IPv4 query.
const oobSize = 64

// parsePktinfo returns the destination address of the packet whose
// control messages are oob, preferring IPV6_PKTINFO (as miekg/dns does);
// the zero pktinfo when there is none.
func parsePktinfo(oob []byte) pktinfo {
	var v4, v6 netip.Addr
	for len(oob) >= syscall.SizeofCmsghdr {
		l, level, typ := cmsgHeader(oob)
		if l < syscall.SizeofCmsghdr || l > len(oob) {
			break
		}
		data := oob[syscall.CmsgLen(0):l]
		switch {
		case level == syscall.IPPROTO_IPV6 && typ == syscall.IPV6_PKTINFO && len(data) >= syscall.SizeofInet6Pktinfo:
			v6 = netip.AddrFrom16([16]byte(data[:16])) // in6_pktinfo.ipi6_addr
		case level == syscall.IPPROTO_IP && typ == syscall.IP_PKTINFO && len(data) >= syscall.SizeofInet4Pktinfo:
			v4 = netip.AddrFrom4([4]byte(data[8:12])) // in_pktinfo.ipi_addr
		}
		oob = oob[min(len(oob), syscall.CmsgSpace(l-syscall.CmsgLen(0))):]
	}
	if v6.IsValid() {
		return pktinfo{dst: v6}
	}
	return pktinfo{dst: v4}
}

func cmsgHeader(b []byte) (length, level, typ int) {
	var l uint64
	if syscall.SizeofCmsghdr == 16 {
		l = binary.NativeEndian.Uint64(b)
	} else {
		l = uint64(binary.NativeEndian.Uint32(b))
	}
	o := syscall.SizeofCmsghdr - 8
	return int(min(l, 1<<20)), int(int32(binary.NativeEndian.Uint32(b[o:]))), int(int32(binary.NativeEndian.Uint32(b[o+4:])))
}

// writeUDP sends b to w's client from the address its query was sent to:
// an IP_PKTINFO (for IPv4 and IPv4-mapped addresses) or IPV6_PKTINFO
// message with that source, as miekg/dns answers.
func writeUDP(c *net.UDPConn, w *udpWriter, b []byte) (int, error) {
	n, _, err := c.WriteMsgUDPAddrPort(b, pktinfoCmsg(w.oob[:], w.pi.dst), w.src)
	return n, err
}

// pktinfoCmsg writes into buf the control message that sends a packet
// from dst, and returns it; nil when dst is the zero address.
func pktinfoCmsg(buf []byte, dst netip.Addr) []byte {
	if !dst.IsValid() {
		return nil
	}
	if dst.Is4() || dst.Is4In6() {
		oob := putCmsg(buf, syscall.IPPROTO_IP, syscall.IP_PKTINFO, syscall.SizeofInet4Pktinfo)
		a := dst.Unmap().As4()
		copy(oob[syscall.CmsgLen(0)+4:], a[:]) // in_pktinfo.ipi_spec_dst
		return oob
	}
	oob := putCmsg(buf, syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, syscall.SizeofInet6Pktinfo)
	a := dst.As16()
	copy(oob[syscall.CmsgLen(0):], a[:]) // in6_pktinfo.ipi6_addr
	return oob
}

// putCmsg writes a control message header for dataLen bytes of zeroed data
// at the start of buf and returns the whole message.
func putCmsg(buf []byte, level, typ, dataLen int) []byte {
	m := buf[:syscall.CmsgSpace(dataLen)]
	clear(m)
	if syscall.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(m, uint64(syscall.CmsgLen(dataLen)))
	} else {
		binary.NativeEndian.PutUint32(m, uint32(syscall.CmsgLen(dataLen)))
	}
	o := syscall.SizeofCmsghdr - 8
	binary.NativeEndian.PutUint32(m[o:], uint32(level))
	binary.NativeEndian.PutUint32(m[o+4:], uint32(typ))
	return m
}
