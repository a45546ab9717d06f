package nft

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/nfq"
)

// The kernel fast path of TLS passed through unseen (Session.FastPorts).
// A session's TCP connection to one of its fast ports is marked
// undecided by its <s>-l7 chain instead of being redirected, and is
// forwarded like any other; the forward chain, before anything else,
// queues an undecided connection's packets, both ways, to the gateway
// (FastQueue), which holds the client's with data until their TLS
// ClientHello is whole and checked. A refused connection's go through the
// rules again marked MarkRefuse. A passed one's go on (MarkSeen), and the
// connection stays undecided until the server has acknowledged the whole
// ClientHello and answered it: meanwhile every copy of its bytes the
// client sends again must be the bytes checked (a copy that died past the
// gateway, its TTL run out or too big for a link, would otherwise be sent
// again with other bytes, unchecked), the client's bytes after it are held,
// and a HelloRetryRequest has the second ClientHello checked (egress/l7's
// ServeQueue); the server's answer goes on marked MarkPass. The mark becomes the connection's, and every later packet of
// it is forwarded, or refused with a TCP reset, by the kernel alone:
//
//	chain forward {
//	    iifname "s-*" ct state invalid counter drop      comment "fastpath"
//	    meta mark MarkPass ct mark set MarkPass
//	    meta mark MarkRefuse ct mark set MarkRefuse
//	    ct mark {MarkPass, MarkRefuse} ct direction original meta mark 0
//	        tcp flags & (syn|ack) == syn ct mark set MarkUndecided
//	    ct mark MarkRefuse meta l4proto tcp reject with tcp reset
//	    ct mark MarkUndecided meta l4proto tcp meta mark != MarkSeen
//	        queue num FastQueue   (an ICMP error of the connection goes on)
//	    ct state established,related accept
//	    ...
//	set <s>-t4 { ipv4_addr; timeout }  set <s>-t6 { ipv6_addr; timeout }
//	chain <s>-l7 {
//	    ...
//	    tcp dport <each fast port> ip daddr @<s>-t4 goto <s>-l7ok
//	    tcp dport <each fast port> ip6 daddr @<s>-t6 goto <s>-l7ok
//	    tcp dport <each fast port> ct mark set MarkUndecided return
//	    tcp dport <each L7 port> goto <s>-l7ok
//	    ...
//
// The terminate sets hold the addresses of the session's names whose TLS
// the gateway terminates (a host with HTTP rules or a secret): pinned
// there when a DNS answer pins them, before the answer goes out, so that
// connections to them go to the listener, which terminates; the fast path
// adds the address of a connection it had to refuse for that reason
// (reached by address, not by an answer), so that the client's next one
// does too. Whatever else the session reaches on a fast port takes the
// fast path.
//
// A client's SYN on a decided connection's entry makes it undecided
// again: it starts a new connection, which conntrack may keep on the old
// entry (a SYN after the server reset the last one is let through on it,
// and the server's SYN/ACK brings the entry back in sync), and which must
// not inherit the decision.
//
// A packet connection tracking finds invalid (out of its window, flags
// no stack sends) has no connection, so no mark: without the first rule
// it would skip the queue and be judged by <s>-fwd's addresses alone,
// where the server's stack, whose idea of the window is its own, might
// take its data unchecked.
//
// The SYN and the packets without data are let go at once by the
// gateway, through the rules again marked MarkSeen (past the queue), so
// <s>-fwd still decides, as for any connection, whether the session may
// reach the address at all. The queue fails closed: with no
// gateway reading it, nothing of an undecided connection passes.
const (
	MarkUndecided uint32 = 0x41460001
	MarkPass      uint32 = 0x41460002
	MarkRefuse    uint32 = 0x41460003
	// MarkSeen marks a packet the gateway let go on undecided (a SYN, a
	// packet without data): it goes through the rules again past the
	// queue, so that the session's own rules decide it. A verdict that
	// accepted it would end the forward hook's rules there, <s>-fwd
	// unread: a SYN to any address on a fast port would pass.
	MarkSeen uint32 = 0x41460004
	// FastQueue is the netfilter queue of the gateway namespace the
	// undecided connections' packets go to.
	FastQueue uint16 = 0

	fastComment = "fastpath"

	// TCP header flags.
	tcpSYN = 0x02
	tcpACK = 0x10
)

// fastBaseRules are the forward chain's first rules.
func fastBaseRules(b Base) [][]expr.Any {
	setCtMark := func(m uint32) []expr.Any {
		return one(
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(m)},
			&expr.Immediate{Register: reg1, Data: nativeU32(m)},
			&expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true},
		)
	}
	ctMark := func(m uint32) []expr.Any {
		return one(
			&expr.Ct{Key: expr.CtKeyMARK, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(m)},
		)
	}
	// A SYN (without ACK) the client sends on a decided entry; not one
	// the gateway sent through again (with a mark: a SYN it refused
	// would be made undecided and queued again, for ever).
	synAgain := func(m uint32) []expr.Any {
		return exprs(ctMark(m), l4protoIs(protoTCP), one(
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(0)},
			&expr.Ct{Key: expr.CtKeyDIRECTION, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{0}}, // IP_CT_DIR_ORIGINAL
			&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 1, Mask: []byte{tcpSYN | tcpACK}, Xor: []byte{0}},
			&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{tcpSYN}},
			&expr.Immediate{Register: reg1, Data: nativeU32(MarkUndecided)},
			&expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true},
		))
	}
	return [][]expr.Any{
		exprs(iifnamePrefix(b.SessionIfacePrefix), ctInvalid(), one(&expr.Counter{}, verdict(expr.VerdictDrop))),
		setCtMark(MarkPass),
		setCtMark(MarkRefuse),
		synAgain(MarkPass),
		synAgain(MarkRefuse),
		exprs(ctMark(MarkRefuse), l4protoIs(protoTCP), one(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST})),
		exprs(ctMark(MarkUndecided), l4protoIs(protoTCP), one(
			&expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: nativeU32(MarkSeen)},
			nfq.Target(FastQueue),
		)),
	}
}

// addFastBase queues the fast path's rules at the head of the forward
// chain (InsertRule puts each first: they go in reverse).
func addFastBase(c *nftables.Conn, t *nftables.Table, fwd *nftables.Chain, b Base) {
	rules := fastBaseRules(b)
	for i := len(rules) - 1; i >= 0; i-- {
		c.InsertRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: rules[i], UserData: comment(fastComment)})
	}
}

// EnsureFast queues the replacement of the fast path's rules in b's
// forward chain by this version's (a gateway made before the fast path
// has none, one made by an earlier version may lack some); the caller
// flushes.
func EnsureFast(c *nftables.Conn, b Base) error {
	t := table(b.Table)
	fwd := &nftables.Chain{Name: ChainForward, Table: t}
	rules, err := c.GetRules(t, fwd)
	if err != nil {
		return fmt.Errorf("nft: forward chain: %w", err)
	}
	for _, r := range rules {
		if s, ok := userdata.GetString(r.UserData, userdata.TypeComment); ok && s == fastComment {
			if err := c.DelRule(r); err != nil {
				return fmt.Errorf("nft: forward chain: %w", err)
			}
		}
	}
	addFastBase(c, t, fwd, b)
	return nil
}

// l7Rules are the rules of session s's <s>-l7 chain: its own TCP
// connections on its fast ports are marked for the fast path, those on
// its other L7 ports go to <s>-l7ok; anything else returns.
func l7Rules(s Session) [][]expr.Any {
	_, l7okName := sessionL7Chains(s.Name)
	ret := one(verdict(expr.VerdictReturn))
	var rules [][]expr.Any
	add := func(e ...[]expr.Any) { rules = append(rules, exprs(e...)) }
	add(saddrNot(s.Addr4), ret)
	if s.Addr6.IsValid() {
		add(saddrNot(s.Addr6), ret)
	} else {
		add(nfproto(unix.NFPROTO_IPV6), ret)
	}
	add([]expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{protoTCP}},
	}, ret)
	for _, p := range s.FastPorts {
		port := one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(p)})
		add(nfproto(unix.NFPROTO_IPV4), port, one(loadAddr(unix.NFPROTO_IPV4, true, reg1),
			&expr.Lookup{SourceRegister: reg1, SetName: s.Name + "-t4"}, gotoChain(l7okName)))
		if s.Addr6.IsValid() {
			add(nfproto(unix.NFPROTO_IPV6), port, one(loadAddr(unix.NFPROTO_IPV6, true, reg1),
				&expr.Lookup{SourceRegister: reg1, SetName: s.Name + "-t6"}, gotoChain(l7okName)))
		}
		add(one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(p)},
			&expr.Immediate{Register: reg1, Data: nativeU32(MarkUndecided)},
			&expr.Ct{Key: expr.CtKeyMARK, Register: reg1, SourceRegister: true},
		), ret)
	}
	for _, p := range s.L7Ports {
		add(one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(p)}, gotoChain(l7okName)))
	}
	add(ret)
	return rules
}

// TerminateSetSize bounds each terminate set: past it, an address is not
// added, and connections there keep taking the fast path, which refuses
// those whose name the gateway must terminate.
const TerminateSetSize = 4096

// terminateSets are session name's terminate sets (<s>-t4, <s>-t6).
func terminateSets(name string) []*nftables.Set {
	return []*nftables.Set{
		{Name: name + "-t4", KeyType: nftables.TypeIPAddr, HasTimeout: true, Size: TerminateSetSize},
		{Name: name + "-t6", KeyType: nftables.TypeIP6Addr, HasTimeout: true, Size: TerminateSetSize},
	}
}

// Terminated queues the addition of addrs to session name's terminate
// sets for ttl (an address there again gets the later expiry); the caller
// flushes.
func Terminated(c *nftables.Conn, tableName, name string, addrs []netip.Addr, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("nft: terminate %v lifetime %v too short", addrs, ttl)
	}
	t := table(tableName)
	var v4, v6 []nftables.SetElement
	for _, a := range addrs {
		a = a.Unmap()
		switch {
		case a.Is4():
			v4 = append(v4, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		case a.Is6():
			v6 = append(v6, nftables.SetElement{Key: a.AsSlice(), Timeout: ttl})
		}
	}
	for _, x := range []struct {
		set   string
		typ   nftables.SetDatatype
		elems []nftables.SetElement
	}{{name + "-t4", nftables.TypeIPAddr, v4}, {name + "-t6", nftables.TypeIP6Addr, v6}} {
		if len(x.elems) == 0 {
			continue
		}
		if err := c.SetAddElements(&nftables.Set{Table: t, Name: x.set, KeyType: x.typ, HasTimeout: true}, x.elems); err != nil {
			return err
		}
	}
	return nil
}

// ClearTerminated queues the emptying of session name's terminate sets;
// the caller flushes.
func ClearTerminated(c *nftables.Conn, tableName, name string) {
	t := table(tableName)
	for _, set := range terminateSets(name) {
		set.Table = t
		c.FlushSet(set)
	}
}

// TerminatedAddrs lists the addresses in session name's terminate sets.
func TerminatedAddrs(c *nftables.Conn, tableName, name string) ([]netip.Addr, error) {
	t := table(tableName)
	var out []netip.Addr
	for _, set := range terminateSets(name) {
		set.Table = t
		elems, err := c.GetSetElements(set)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", set.Name, err)
		}
		for _, e := range elems {
			if a, ok := netip.AddrFromSlice(e.Key); ok {
				out = append(out, a)
			}
		}
	}
	return out, nil
}
