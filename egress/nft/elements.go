package nft

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/nftables"
)

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func nativeU32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// PinKey encodes addr . port as the kernel stores an element of a
// `ipv4_addr . inet_service` (or ipv6_addr) set: each field padded to four
// bytes.
func PinKey(addr netip.Addr, port uint16) []byte {
	b := addr.AsSlice()
	return append(b, byte(port>>8), byte(port), 0, 0)
}

func decodePin(key []byte) (Pinning, error) {
	switch len(key) {
	case 4, 16:
		a, _ := netip.AddrFromSlice(key)
		return Pinning{Addr: a}, nil
	case 8, 20:
		a, _ := netip.AddrFromSlice(key[:len(key)-4])
		return Pinning{Addr: a, Port: binary.BigEndian.Uint16(key[len(key)-4:])}, nil
	}
	return Pinning{}, fmt.Errorf("pin key of %d bytes", len(key))
}

// Drop is one blocked destination and how much was sent to it.
type Drop struct {
	Dst netip.Addr
	// Port is the destination port for TCP and UDP, 0 otherwise.
	Port uint16
	// Proto is "tcp", "udp", "icmp", "icmpv6" or the protocol number.
	Proto   string
	Packets uint64
	Bytes   uint64
}

func (d Drop) String() string {
	return fmt.Sprintf("%s %s packets=%d", d.Proto, netip.AddrPortFrom(d.Dst, d.Port), d.Packets)
}

// DropStats is a session's blocked traffic.
type DropStats struct {
	// Packets and Bytes count everything blocked, including packets to
	// destinations past DropSetSize that are not itemised in Dests.
	Packets, Bytes uint64
	// Dests itemises blocked traffic per destination, protocol and port.
	Dests []Drop
}

// Find returns the entry for dst, port and proto.
func (s DropStats) Find(dst netip.Addr, port uint16, proto string) (Drop, bool) {
	for _, d := range s.Dests {
		if d.Dst == dst && d.Port == port && d.Proto == proto {
			return d, true
		}
	}
	return Drop{}, false
}

// Since returns the entries of s that are new or grew since prev, with the
// growth as their counts: what an audit log records between two readings.
func (s DropStats) Since(prev DropStats) []Drop {
	type key struct {
		dst   netip.Addr
		port  uint16
		proto string
	}
	old := make(map[key]Drop, len(prev.Dests))
	for _, d := range prev.Dests {
		old[key{d.Dst, d.Port, d.Proto}] = d
	}
	var out []Drop
	for _, d := range s.Dests {
		o := old[key{d.Dst, d.Port, d.Proto}]
		if d.Packets <= o.Packets {
			continue
		}
		d.Packets -= o.Packets
		d.Bytes -= min(o.Bytes, d.Bytes)
		out = append(out, d)
	}
	return out
}

// SortDrops orders drops by address, protocol and port.
func SortDrops(ds []Drop) {
	slices.SortFunc(ds, func(a, b Drop) int {
		return cmp.Or(a.Dst.Compare(b.Dst), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
	})
}

func protoName(p byte) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoICMP:
		return "icmp"
	case protoICMPv6:
		return "icmpv6"
	}
	return strconv.Itoa(int(p))
}

// DropKey encodes a drop-set key: address . l4proto . port, each field
// padded to four bytes.
func DropKey(dst netip.Addr, proto byte, port uint16) []byte {
	b := dst.AsSlice()
	b = append(b, proto, 0, 0, 0)
	return append(b, byte(port>>8), byte(port), 0, 0)
}

// DecodeDropKey decodes a key of a session's drop set.
func DecodeDropKey(key []byte) (Drop, error) {
	var n int
	switch len(key) {
	case 12:
		n = 4
	case 24:
		n = 16
	default:
		return Drop{}, fmt.Errorf("drop key of %d bytes", len(key))
	}
	a, _ := netip.AddrFromSlice(key[:n])
	return Drop{
		Dst:   a,
		Proto: protoName(key[n]),
		Port:  binary.BigEndian.Uint16(key[n+4 : n+6]),
	}, nil
}

// IntervalElements encodes prefixes as the elements of an interval set: a
// start element and an interval-end element one past the last address of
// each merged range. Overlapping and adjacent prefixes are merged, since
// the kernel rejects overlapping intervals. All prefixes must be of one
// family.
func IntervalElements(ps []netip.Prefix) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range MergeRanges(ps) {
		out = append(out, nftables.SetElement{Key: r.From.AsSlice()})
		if end := r.To.Next(); end.IsValid() {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// Range is an inclusive address range.
type Range struct{ From, To netip.Addr }

// MergeRanges converts prefixes to sorted, disjoint, non-adjacent ranges.
func MergeRanges(ps []netip.Prefix) []Range {
	var rs []Range
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		p = p.Masked()
		rs = append(rs, Range{p.Addr(), lastAddr(p)})
	}
	slices.SortFunc(rs, func(a, b Range) int { return a.From.Compare(b.From) })
	var out []Range
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			next := last.To.Next()
			if r.From.Compare(last.To) <= 0 || (next.IsValid() && r.From == next) {
				if r.To.Compare(last.To) > 0 {
					last.To = r.To
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
