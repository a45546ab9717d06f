package nft

import (
	"encoding/binary"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// ChainGuard keeps from connection tracking the packets from a session
// interface whose source address is not routed back through that
// interface (a strict reverse-path check, for IPv4 and IPv6):
//
//	chain guard { type filter hook prerouting priority raw
//	    iifname "s-*" fib saddr . iif oif missing counter notrack }
//
// Untracked, such a packet matches none of the rules that read a
// connection's state or mark: it reaches its session's chains, whose
// anti-spoofing sends it to <s>-blk, which counts it among the session's
// drops and drops it (`ct state untracked drop`: a reset or an ICMP
// error would go to the address it forged, another session's).
//
// Each session's own chains check its source address too, but only for
// new connections: the forward and input chains accept established
// packets, and the fast path's rules read a connection's mark, before a
// session's chains are reached, and conntrack files a packet under
// whichever entry its addresses and ports name. Without this chain a
// session allowed raw packets (CAP_NET_RAW) could send, from its own
// interface, packets in another session's name: a SYN that makes that
// session's passed connection undecided again (and refused), a reset
// that closes its connection tracking entry, data into its connections.
const ChainGuard = "guard"

// priorityRaw runs before connection tracking (NF_IP_PRI_CONNTRACK,
// -200), as iptables' raw table does.
var priorityRaw = nftables.ChainPriorityRaw

// addGuard queues the guard chain in t.
func addGuard(c *nftables.Conn, t *nftables.Table, b Base) {
	ch := c.AddChain(&nftables.Chain{
		Name: ChainGuard, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: priorityRaw,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs(iifnamePrefix(b.SessionIfacePrefix), one(
		&expr.Fib{Register: reg1, FlagSADDR: true, FlagIIF: true, ResultOIF: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(0)},
		&expr.Counter{},
		&expr.Notrack{},
	))})
}

// EnsureGuard queues the guard chain of b in its table when it is
// missing (a gateway made before it existed); the caller flushes.
func EnsureGuard(c *nftables.Conn, b Base) error {
	t := table(b.Table)
	if _, err := c.ListChain(t, ChainGuard); err == nil {
		return nil
	}
	addGuard(c, t, b)
	return nil
}

// ctUntracked matches `ct state untracked`: packets the guard kept from
// connection tracking.
func ctUntracked() []expr.Any { return ctStateIs(expr.CtStateBitUNTRACKED) }

// ctInvalid matches `ct state invalid`.
func ctInvalid() []expr.Any { return ctStateIs(expr.CtStateBitINVALID) }

// ctStateIs matches `ct state` holding any of bits.
func ctStateIs(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
		&expr.Bitwise{
			SourceRegister: reg1, DestRegister: reg1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, bits),
			Xor:  binary.NativeEndian.AppendUint32(nil, 0),
		},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: binary.NativeEndian.AppendUint32(nil, 0)},
	}
}
