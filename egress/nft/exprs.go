package nft

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Registers. The kernel has 16-byte registers 1..4 which overlap the 4-byte
// registers 8..23; concatenations are loaded into consecutive 4-byte
// registers, each field padded to a multiple of four bytes.
const (
	regVerdict uint32 = 0
	reg1       uint32 = 1
	reg32      uint32 = 8 // NFT_REG32_00
)

const ifNameSize = 16 // IFNAMSIZ

// Protocol numbers as seen by meta l4proto.
const (
	protoICMP   = unix.IPPROTO_ICMP
	protoTCP    = unix.IPPROTO_TCP
	protoUDP    = unix.IPPROTO_UDP
	protoICMPv6 = unix.IPPROTO_ICMPV6
)

func nfproto(family byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{family}},
	}
}

// ifnameData is an interface name as meta iifname loads it: NUL padded to
// IFNAMSIZ.
func ifnameData(name string) []byte {
	b := make([]byte, ifNameSize)
	copy(b, name)
	return b
}

// iifname matches the input interface exactly.
func iifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifnameData(name)},
	}
}

// iifnamePrefix matches input interfaces whose name starts with prefix (the
// `iifname "prefix*"` of nft): the comparison omits the terminating NUL.
func iifnamePrefix(prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte(prefix)},
	}
}

func oifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: ifnameData(name)},
	}
}

func oifnameNot(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: ifnameData(name)},
	}
}

// ctEstablished matches `ct state established,related`.
func ctEstablished() []expr.Any {
	return ctStateIs(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED)
}

// l4protoIs matches `meta l4proto p`.
func l4protoIs(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{p}},
	}
}

// l4protoTCPUDP matches `meta l4proto { tcp, udp }` (invert: the complement).
func l4protoTCPUDP(invert bool) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Lookup{SourceRegister: reg1, SetName: setTCPUDP, Invert: invert},
	}
}

// dport loads the transport header's destination port (valid for TCP and
// UDP only; callers match l4proto first).
func dport(reg uint32) expr.Any {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}
}

// Network header offsets.
const (
	ip4Saddr = 12
	ip4Daddr = 16
	ip6Saddr = 8
	ip6Daddr = 24
)

func addrLen(a netip.Addr) uint32 {
	if a.Is4() {
		return 4
	}
	return 16
}

func familyOf(a netip.Addr) byte {
	if a.Is4() {
		return unix.NFPROTO_IPV4
	}
	return unix.NFPROTO_IPV6
}

// loadAddr loads the source or destination address of the packet's family.
func loadAddr(family byte, dst bool, reg uint32) expr.Any {
	var off, n uint32
	switch {
	case family == unix.NFPROTO_IPV4 && dst:
		off, n = ip4Daddr, 4
	case family == unix.NFPROTO_IPV4:
		off, n = ip4Saddr, 4
	case dst:
		off, n = ip6Daddr, 16
	default:
		off, n = ip6Saddr, 16
	}
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

// saddrNot matches packets of a's family whose source is not a.
func saddrNot(a netip.Addr) []expr.Any {
	f := familyOf(a)
	return append(nfproto(f),
		loadAddr(f, false, reg1),
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: a.AsSlice()},
	)
}

// daddrIn matches destinations inside p, and if port is not zero, that
// transport destination port (the caller has matched TCP or UDP).
func daddrIn(p netip.Prefix, port uint16) []expr.Any { return addrIn(p, true, port) }

// saddrIn matches sources inside p.
func saddrIn(p netip.Prefix) []expr.Any { return addrIn(p, false, 0) }

func addrIn(p netip.Prefix, dst bool, port uint16) []expr.Any {
	p = p.Masked()
	f := familyOf(p.Addr())
	n := addrLen(p.Addr())
	exprs := append(nfproto(f), loadAddr(f, dst, reg1))
	if p.Bits() < int(n*8) {
		exprs = append(exprs, &expr.Bitwise{
			SourceRegister: reg1, DestRegister: reg1, Len: n,
			Mask: prefixMask(p), Xor: make([]byte, n),
		})
	}
	exprs = append(exprs, &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: p.Addr().AsSlice()})
	if port != 0 {
		exprs = append(exprs,
			dport(reg1),
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, port)},
		)
	}
	return exprs
}

func prefixMask(p netip.Prefix) []byte {
	n := addrLen(p.Addr())
	m := make([]byte, n)
	for i := 0; i < p.Bits(); i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }

func gotoChain(name string) expr.Any { return &expr.Verdict{Kind: expr.VerdictGoto, Chain: name} }

func jumpChain(name string) expr.Any { return &expr.Verdict{Kind: expr.VerdictJump, Chain: name} }

func exprs(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func one(e ...expr.Any) []expr.Any { return e }
