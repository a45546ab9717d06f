package nfq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// TCP flags (the header's low byte of flags).
const (
	FIN = 0x01
	SYN = 0x02
	RST = 0x04
	PSH = 0x08
	ACK = 0x10
	URG = 0x20
)

// TCP is one TCP segment of an IPv4 or IPv6 packet.
type TCP struct {
	Src, Dst netip.AddrPort
	Seq, Ack uint32
	Flags    uint8
	// Options are the header's options (a slice of the packet).
	Options []byte
	// Payload is the segment's data (a slice of the packet).
	Payload []byte
}

// ErrNotTCP is returned by ParseTCP for a packet that is not TCP right
// behind its IP header (IPv6 extension headers included).
var ErrNotTCP = errors.New("nfq: not a TCP packet")

// ParseTCP reads a TCP segment from an IP packet as the queue copies it.
func ParseTCP(pkt []byte) (TCP, error) {
	if len(pkt) < 1 {
		return TCP{}, errors.New("nfq: empty packet")
	}
	var src, dst netip.Addr
	var l4 []byte
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return TCP{}, errors.New("nfq: short IPv4 header")
		}
		ihl := int(pkt[0]&0x0f) * 4
		total := int(binary.BigEndian.Uint16(pkt[2:]))
		if ihl < 20 || total < ihl || total > len(pkt) {
			return TCP{}, fmt.Errorf("nfq: bad IPv4 lengths (header %d, total %d, packet %d)", ihl, total, len(pkt))
		}
		if pkt[9] != 6 {
			return TCP{}, ErrNotTCP
		}
		if binary.BigEndian.Uint16(pkt[6:])&0x3fff != 0 {
			return TCP{}, errors.New("nfq: IPv4 fragment")
		}
		src, dst = netip.AddrFrom4([4]byte(pkt[12:16])), netip.AddrFrom4([4]byte(pkt[16:20]))
		l4 = pkt[ihl:total]
	case 6:
		if len(pkt) < 40 {
			return TCP{}, errors.New("nfq: short IPv6 header")
		}
		plen := int(binary.BigEndian.Uint16(pkt[4:]))
		if 40+plen > len(pkt) {
			return TCP{}, fmt.Errorf("nfq: bad IPv6 payload length %d (packet %d)", plen, len(pkt))
		}
		if pkt[6] != 6 {
			return TCP{}, ErrNotTCP
		}
		src, dst = netip.AddrFrom16([16]byte(pkt[8:24])), netip.AddrFrom16([16]byte(pkt[24:40]))
		l4 = pkt[40 : 40+plen]
	default:
		return TCP{}, fmt.Errorf("nfq: IP version %d", pkt[0]>>4)
	}
	if len(l4) < 20 {
		return TCP{}, errors.New("nfq: short TCP header")
	}
	off := int(l4[12]>>4) * 4
	if off < 20 || off > len(l4) {
		return TCP{}, fmt.Errorf("nfq: bad TCP data offset %d", off)
	}
	return TCP{
		Src:     netip.AddrPortFrom(src, binary.BigEndian.Uint16(l4)),
		Dst:     netip.AddrPortFrom(dst, binary.BigEndian.Uint16(l4[2:])),
		Seq:     binary.BigEndian.Uint32(l4[4:]),
		Ack:     binary.BigEndian.Uint32(l4[8:]),
		Flags:   l4[13],
		Options: l4[20:off],
		Payload: l4[off:],
	}, nil
}
