// Package nft builds airlock's egress ruleset in the gateway network
// namespace with netlink (github.com/google/nftables); it never runs nft.
//
// One table, `inet <prefix>`, holds everything:
//
//	set tcpudp          { type inet_proto; constant: tcp, udp }
//	set resolverports   { type inet_service; constant: 53, 853 }
//	set never4, never6  { interval: destinations no session may reach:
//	                      allowlist.NeverRanges (0/8, 127/8, 169.254/16,
//	                      168.63.129.16, 100.100.100.200, 224/4, 240/4,
//	                      ::1, fe80::/10, ff00::/8, fd00:ec2::254, ...),
//	                      the session pools, the uplink subnets, and any
//	                      operator-supplied ranges }
//	map fwd-sessions    { type ifname : verdict }   iifname -> goto <s>-fwd
//	map in-sessions     { type ifname : verdict }   iifname -> goto <s>-in
//
//	chain guard { hook prerouting priority raw      (ChainGuard)
//	    iifname "s-*" fib saddr . iif oif missing counter notrack }
//	chain forward { hook forward; policy drop
//	    ct state established,related accept
//	    iifname vmap @fwd-sessions }
//	chain input { hook input; policy accept
//	    ct state established,related accept
//	    iifname <uplink> meta l4proto {tcp,udp} th dport <dns> drop
//	    iifname vmap @in-sessions
//	    iifname "s-*" drop }
//	chain postrouting { type nat hook postrouting
//	    oifname <uplink> masquerade }
//	map l7-sessions     { type ifname : verdict }   iifname -> goto <s>-l7
//	chain prerouting { type nat hook prerouting priority dstnat
//	    iifname <uplink> tcp dport <l7> drop         (the L7 gateway's listener)
//	    iifname vmap @l7-sessions }
//
// Each session (interface name <s> = "s-" + hash) adds:
//
//	set <s>-p4 { ipv4_addr . inet_service; timeout }   pinned addr:port
//	set <s>-a4 { ipv4_addr; timeout }                  pinned addr, any port
//	set <s>-p6, <s>-a6                                 the same for IPv6
//	set <s>-d4 { ipv4_addr . inet_proto . inet_service; dynamic; counter }
//	set <s>-d6                                          blocked destinations
//
//	chain <s>-fwd {
//	    ip saddr != <session addr> goto <s>-blk         (anti-spoofing)
//	    ip6 saddr != <session addr6> goto <s>-blk       (or: meta nfproto ipv6 goto <s>-blk)
//	    meta l4proto != @tcpudp goto <s>-blk            (ICMP tunnels, raw IP)
//	    th dport @resolverports goto <s>-blk            (other resolvers, DoT)
//	    ip daddr @never4 goto <s>-blk; ip6 daddr @never6 goto <s>-blk
//	    <deny CIDR[:port]> goto <s>-blk
//	    udp dport 443: <allow CIDR> accept, else goto <s>-blk  (L7 port 443 only: QUIC)
//	    ip daddr . th dport @<s>-p4 accept; ip daddr @<s>-a4 accept
//	    ip6 daddr . th dport @<s>-p6 accept; ip6 daddr @<s>-a6 accept
//	    <allow CIDR[:port]> accept
//	    goto <s>-blk }
//	chain <s>-in {
//	    icmpv6 type 133-136 accept (neighbour discovery)
//	    ip6 daddr ff00::/8 drop    (MLD and router solicitations, not counted)
//	    ip saddr != <session addr> goto <s>-blk
//	    udp dport <dns> limit rate over N/second burst N packets goto <s>-blk  (DNSPacketRate)
//	    meta l4proto @tcpudp th dport <dns> fib daddr . iif type local accept
//	    goto <s>-blk }
//	chain <s>-l7 {                                   (sessions with L7 ports only)
//	    ip saddr != <session addr> return; ...      (whatever <s>-fwd blocks
//	    meta l4proto != tcp return                   is not redirected: it goes on
//	    tcp dport <each L7 port> goto <s>-l7ok      to <s>-fwd and is blocked
//	    return }                                     and counted there)
//	chain <s>-l7ok {
//	    th dport @resolverports return; ip daddr @never4 return; ...
//	    <deny CIDR[:port]> return
//	    ip daddr . th dport @<s>-p4 redirect to :<l7>; ip daddr @<s>-a4 redirect to :<l7>
//	    (the same for IPv6)
//	    <allow CIDR[:port]> redirect to :<l7> }
//	(and in <s>-in, before the DNS rules: tcp dport <l7> ct status dnat accept)
//	chain <s>-blk {
//	    update @<s>-d4 { ip daddr . meta l4proto . th dport }   (port 0 unless TCP/UDP)
//	    update @<s>-d6 { ip6 daddr . meta l4proto . th dport }
//	    counter comment "drops"
//	    ct state untracked drop                         (forged sources: ChainGuard)
//	    meta l4proto tcp reject with tcp reset
//	    reject with icmpx admin-prohibited }   (or: drop)
//
// A session's TCP connection to an allowed destination on one of its L7
// ports is thus redirected to the gateway's own L7 listener, which reads
// the original destination back with SO_ORIGINAL_DST; the same rules decide
// what is allowed on both paths (sessionVerdicts).
//
// Nothing a session sends can change these rules: they live in a namespace
// the sandbox has no handle on.
package nft

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// DefaultDNSPacketRate is a bound, per session, on the UDP packets a
// second that reach the DNS proxy (with a burst as large): the rest are
// blocked and counted like any blocked destination. The proxy's own
// per-session limit is lower (100 queries a second, bursts of 200); this
// one keeps a flood off the proxy's socket, whose receive queue all
// sessions share: at 2000 a second, one session's flood could still fill
// it on a loaded host and crowd another session's queries out.
const DefaultDNSPacketRate = 400

// Object names inside the table.
const (
	ChainForward     = "forward"
	ChainInput       = "input"
	ChainPostrouting = "postrouting"
	ChainPrerouting  = "prerouting"

	setTCPUDP        = "tcpudp"
	setResolverPorts = "resolverports"
	setNever4        = "never4"
	setNever6        = "never6"
	mapFwdSessions   = "fwd-sessions"
	mapInSessions    = "in-sessions"
	mapL7Sessions    = "l7-sessions"

	dropsComment = "drops"
)

// DropSetSize bounds the number of distinct blocked destinations itemised
// per session and address family, so a session scanning addresses cannot
// grow kernel memory without limit. Packets past the bound are still
// blocked and counted in DropStats.Packets.
const DropSetSize = 4096

// ResolverPorts are the destination ports no session may reach directly,
// pinned or not: DNS and DNS over TLS. Name resolution goes through the
// gateway's proxy.
var ResolverPorts = []uint16{53, 853}

// DefaultNever are the destinations no session may reach: "this network",
// loopback, link-local, cloud metadata addresses, multicast, reserved
// space, their IPv6 counterparts and IPv6 encodings (NAT64, 6to4, Teredo)
// (allowlist.NeverRanges).
var DefaultNever = allowlist.NeverPrefixes()

// Base describes the gateway table.
type Base struct {
	// Table is the name of the inet table (the daemon's prefix).
	Table string
	// SessionIfacePrefix starts every session interface name.
	SessionIfacePrefix string
	// Uplink is the gateway's uplink interface; traffic leaving through it
	// is masqueraded.
	Uplink string
	// DNSPort is the port of the gateway's DNS proxy.
	DNSPort uint16
	// DNSPacketRate bounds each session's UDP packets a second to the DNS
	// proxy (and its burst); 0: no bound. See DefaultDNSPacketRate.
	DNSPacketRate uint32
	// Never are destinations no session may reach, in addition to
	// DefaultNever.
	Never []netip.Prefix
	// L7Port is the port of the gateway's L7 listener, where sessions' L7
	// connections are redirected; 0: DefaultL7Port.
	L7Port uint16
}

// DefaultL7Port is the port the gateway's L7 listener has when Base says
// none.
const DefaultL7Port = 15001

func (b Base) l7Port() uint16 {
	if b.L7Port == 0 {
		return DefaultL7Port
	}
	return b.L7Port
}

// Rule allows or denies a destination range, on one port or (Port 0) all.
type Rule struct {
	Prefix netip.Prefix
	Port   uint16
}

func (r Rule) String() string {
	if r.Port == 0 {
		return r.Prefix.String()
	}
	return fmt.Sprintf("%s:%d", r.Prefix, r.Port)
}

// Session describes one session's rules.
type Session struct {
	// Name is the session's interface name in the gateway namespace; it
	// also names the session's chains and sets.
	Name string
	// Addr4 is the session's IPv4 address; Addr6 its IPv6 address, or the
	// zero Addr when the session has no IPv6.
	Addr4, Addr6 netip.Addr
	// Drop silently drops blocked packets instead of rejecting them.
	Drop bool
	// Allow and Deny are static destination rules; Deny wins over Allow
	// and over pins.
	Allow, Deny []Rule
	// L7Ports are the TCP ports whose allowed connections are redirected
	// to the gateway's L7 listener (Base.L7Port); none: the session has
	// no L7 rules.
	L7Ports []uint16
	// FastPorts are the L7 ports (some of L7Ports) whose connections take
	// the kernel fast path (see fastpath.go): forwarded, their first
	// packets held in the gateway's queue until the gateway decides on
	// their ClientHello, instead of redirected to its listener.
	FastPorts []uint16
}

// setIDs hands out batch-local set ids. The library's own allocator is a
// package variable without synchronisation, so every set gets an explicit
// id here.
var setIDs atomic.Uint32

func newSet(s *nftables.Set) *nftables.Set {
	s.ID = setIDs.Add(1)
	return s
}

var (
	typePin4  = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetService)
	typePin6  = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetService)
	typeDrop4 = nftables.MustConcatSetType(nftables.TypeIPAddr, nftables.TypeInetProto, nftables.TypeInetService)
	typeDrop6 = nftables.MustConcatSetType(nftables.TypeIP6Addr, nftables.TypeInetProto, nftables.TypeInetService)
)

func table(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

func comment(s string) []byte {
	return userdata.AppendString(nil, userdata.TypeComment, s)
}

// Validate reports whether b can be installed.
func (b Base) Validate() error {
	switch {
	case b.Table == "":
		return errors.New("nft: empty table name")
	case b.SessionIfacePrefix == "":
		return errors.New("nft: empty session interface prefix")
	case b.Uplink == "" || len(b.Uplink) >= ifNameSize:
		return fmt.Errorf("nft: bad uplink interface name %q", b.Uplink)
	case b.DNSPort == 0:
		return errors.New("nft: DNS port 0")
	}
	for _, p := range b.Never {
		if !p.IsValid() {
			return fmt.Errorf("nft: invalid never range %v", p)
		}
	}
	return nil
}

// Install queues the creation of the table described by b on c; the caller
// flushes. It fails at flush time if the table exists.
func Install(c *nftables.Conn, b Base) error {
	if err := b.Validate(); err != nil {
		return err
	}
	t := c.CreateTable(table(b.Table))

	tcpudp := newSet(&nftables.Set{Table: t, Name: setTCPUDP, Constant: true, KeyType: nftables.TypeInetProto})
	if err := c.AddSet(tcpudp, []nftables.SetElement{{Key: []byte{protoTCP}}, {Key: []byte{protoUDP}}}); err != nil {
		return err
	}
	var rp []nftables.SetElement
	for _, p := range ResolverPorts {
		rp = append(rp, nftables.SetElement{Key: be16(p)})
	}
	if err := c.AddSet(newSet(&nftables.Set{Table: t, Name: setResolverPorts, Constant: true, KeyType: nftables.TypeInetService}), rp); err != nil {
		return err
	}
	never := append(slices.Clone(DefaultNever), b.Never...)
	for _, fam := range []struct {
		name string
		typ  nftables.SetDatatype
		is4  bool
	}{{setNever4, nftables.TypeIPAddr, true}, {setNever6, nftables.TypeIP6Addr, false}} {
		var ps []netip.Prefix
		for _, p := range never {
			if p.Addr().Is4() == fam.is4 {
				ps = append(ps, p)
			}
		}
		s := newSet(&nftables.Set{Table: t, Name: fam.name, Interval: true, KeyType: fam.typ})
		if err := c.AddSet(s, IntervalElements(ps)); err != nil {
			return err
		}
	}
	for _, name := range []string{mapFwdSessions, mapInSessions} {
		// Interface names are strings: big endian tells nft to print them
		// as such.
		m := newSet(&nftables.Set{
			Table: t, Name: name, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict,
			KeyByteOrder: binaryutil.BigEndian,
		})
		if err := c.AddSet(m, nil); err != nil {
			return err
		}
	}

	addGuard(c, t, b)
	policyDrop, policyAccept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	fwd := c.AddChain(&nftables.Chain{
		Name: ChainForward, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &policyDrop,
	})
	in := c.AddChain(&nftables.Chain{
		Name: ChainInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept,
	})
	post := c.AddChain(&nftables.Chain{
		Name: ChainPostrouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})

	vmap := func(name string) []expr.Any {
		return one(
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
			&expr.Lookup{SourceRegister: reg1, SetName: name, DestRegister: regVerdict, IsDestRegSet: true},
		)
	}
	for _, r := range fastBaseRules(b) {
		c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: r, UserData: comment(fastComment)})
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: exprs(ctEstablished(), one(verdict(expr.VerdictAccept)))})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: vmap(mapFwdSessions)})

	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: exprs(ctEstablished(), one(verdict(expr.VerdictAccept)))})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: exprs(
		iifname(b.Uplink), l4protoTCPUDP(false),
		one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(b.DNSPort)}, verdict(expr.VerdictDrop)),
	)})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: vmap(mapInSessions)})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: exprs(iifnamePrefix(b.SessionIfacePrefix), one(verdict(expr.VerdictDrop)))})

	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: exprs(oifname(b.Uplink), one(&expr.Masq{}))})
	return addL7Base(c, t, b)
}

// addL7Base queues the L7 dispatch map and the prerouting chain.
func addL7Base(c *nftables.Conn, t *nftables.Table, b Base) error {
	m := newSet(&nftables.Set{
		Table: t, Name: mapL7Sessions, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict,
		KeyByteOrder: binaryutil.BigEndian,
	})
	if err := c.AddSet(m, nil); err != nil {
		return err
	}
	pre := c.AddChain(&nftables.Chain{
		Name: ChainPrerouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: exprs(
		iifname(b.Uplink), l4protoIs(protoTCP),
		one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(b.l7Port())}, verdict(expr.VerdictDrop)),
	)})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: one(
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
		&expr.Lookup{SourceRegister: reg1, SetName: mapL7Sessions, DestRegister: regVerdict, IsDestRegSet: true},
	)})
	return nil
}

// EnsureL7 queues the L7 dispatch map and prerouting chain of b in its
// table when they are missing (a gateway made before they existed); the
// caller flushes.
func EnsureL7(c *nftables.Conn, b Base) error {
	t := table(b.Table)
	if _, err := c.ListChain(t, ChainPrerouting); err == nil {
		return nil
	}
	return addL7Base(c, t, b)
}

// Check reports whether the table named name exists with its base chains.
func Check(c *nftables.Conn, name string) error {
	t := table(name)
	for _, ch := range []string{ChainForward, ChainInput, ChainPostrouting} {
		if _, err := c.ListChain(t, ch); err != nil {
			return fmt.Errorf("table %q chain %q: %w", name, ch, err)
		}
	}
	for _, s := range []string{setTCPUDP, setResolverPorts, setNever4, setNever6, mapFwdSessions, mapInSessions} {
		if _, err := c.GetSetByName(t, s); err != nil {
			return fmt.Errorf("table %q set %q: %w", name, s, err)
		}
	}
	return nil
}

// DeleteTable queues the deletion of the table name, if it exists. It is
// not an error for the table to be missing.
func DeleteTable(c *nftables.Conn, name string) error {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if t.Name == name {
			c.DelTable(t)
		}
	}
	return nil
}

// TablesWithPrefix lists the inet tables whose name is prefix or starts with
// prefix followed by "-".
func TablesWithPrefix(c *nftables.Conn, prefix string) ([]string, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range tables {
		if t.Name == prefix || strings.HasPrefix(t.Name, prefix+"-") {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

func sessionObjects(name string) (fwd, in, blk string, sets []string) {
	return name + "-fwd", name + "-in", name + "-blk",
		[]string{name + "-p4", name + "-a4", name + "-p6", name + "-a6", name + "-d4", name + "-d6", name + "-t4", name + "-t6"}
}

// sessionL7Chains names a session's L7 chains.
func sessionL7Chains(name string) (l7, ok string) { return name + "-l7", name + "-l7ok" }

// Validate reports whether s can be installed.
func (s Session) Validate() error {
	if s.Name == "" || len(s.Name) >= ifNameSize {
		return fmt.Errorf("nft: bad session interface name %q", s.Name)
	}
	if !s.Addr4.Is4() {
		return fmt.Errorf("nft: session %s: address %v is not IPv4", s.Name, s.Addr4)
	}
	if s.Addr6.IsValid() && !s.Addr6.Is6() {
		return fmt.Errorf("nft: session %s: address %v is not IPv6", s.Name, s.Addr6)
	}
	for _, r := range slices.Concat(s.Allow, s.Deny) {
		if !r.Prefix.IsValid() || r.Prefix.Addr().Is4In6() {
			return fmt.Errorf("nft: session %s: bad rule %v", s.Name, r)
		}
	}
	if slices.Contains(s.L7Ports, 0) {
		return fmt.Errorf("nft: session %s: L7 port 0", s.Name)
	}
	for _, p := range s.FastPorts {
		if !slices.Contains(s.L7Ports, p) {
			return fmt.Errorf("nft: session %s: fast port %d is not one of its L7 ports", s.Name, p)
		}
	}
	return nil
}

// AddSession queues the sets, chains and map entries of session s in table
// tableName (see the package documentation); the caller flushes. All of it
// lands in one batch, so it is installed completely or not at all.
func AddSession(c *nftables.Conn, tableName string, b Base, s Session) error {
	if err := s.Validate(); err != nil {
		return err
	}
	t := table(tableName)
	fwdName, inName, blkName, _ := sessionObjects(s.Name)

	sets := []*nftables.Set{
		{Name: s.Name + "-p4", KeyType: typePin4, Concatenation: true, HasTimeout: true},
		{Name: s.Name + "-a4", KeyType: nftables.TypeIPAddr, HasTimeout: true},
		{Name: s.Name + "-p6", KeyType: typePin6, Concatenation: true, HasTimeout: true},
		{Name: s.Name + "-a6", KeyType: nftables.TypeIP6Addr, HasTimeout: true},
		{Name: s.Name + "-d4", KeyType: typeDrop4, Concatenation: true, Dynamic: true, Counter: true, Size: DropSetSize},
		{Name: s.Name + "-d6", KeyType: typeDrop6, Concatenation: true, Dynamic: true, Counter: true, Size: DropSetSize},
	}
	sets = append(sets, terminateSets(s.Name)...)
	for _, set := range sets {
		set.Table = t
		if err := c.AddSet(newSet(set), nil); err != nil {
			return fmt.Errorf("session %s: set %s: %w", s.Name, set.Name, err)
		}
	}

	blk := c.AddChain(&nftables.Chain{Name: blkName, Table: t})
	fwd := c.AddChain(&nftables.Chain{Name: fwdName, Table: t})
	in := c.AddChain(&nftables.Chain{Name: inName, Table: t})
	toBlk := gotoChain(blkName)
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs(e...)})
	}

	// <s>-blk: record, count, refuse.
	for _, fam := range []struct {
		family byte
		set    string
		proto  uint32 // register of the l4proto field
	}{
		{unix.NFPROTO_IPV4, s.Name + "-d4", reg32 + 1},
		{unix.NFPROTO_IPV6, s.Name + "-d6", reg32 + 4},
	} {
		update := &expr.Dynset{SrcRegKey: reg32, SetName: fam.set, Operation: unix.NFT_DYNSET_OP_UPDATE}
		load := one(
			loadAddr(fam.family, true, reg32),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: fam.proto},
		)
		add(blk, nfproto(fam.family), l4protoTCPUDP(false), load, one(dport(fam.proto+1), update))
		add(blk, nfproto(fam.family), l4protoTCPUDP(true), load,
			one(&expr.Immediate{Register: fam.proto + 1, Data: []byte{0, 0, 0, 0}}, update))
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: blk, Exprs: one(&expr.Counter{}), UserData: comment(dropsComment)})
	if s.Drop {
		add(blk, one(verdict(expr.VerdictDrop)))
	} else {
		add(blk, ctUntracked(), one(verdict(expr.VerdictDrop)))
		add(blk, l4protoIs(protoTCP), one(&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}))
		add(blk, one(&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}))
	}

	// <s>-fwd: what the session may reach through the gateway.
	for _, r := range fwdRules(s) {
		add(fwd, r)
	}
	accept := verdict(expr.VerdictAccept)

	// <s>-l7 and <s>-l7ok: what <s>-fwd would accept on an L7 port is
	// redirected to the gateway's L7 listener; the rest returns, to be
	// blocked by <s>-fwd.
	l7Name, l7okName := sessionL7Chains(s.Name)
	if len(s.L7Ports) > 0 {
		l7 := c.AddChain(&nftables.Chain{Name: l7Name, Table: t})
		l7ok := c.AddChain(&nftables.Chain{Name: l7okName, Table: t})
		for _, r := range l7Rules(s) {
			add(l7, r)
		}
		for _, r := range l7okRules(s, b) {
			add(l7ok, r)
		}
	}

	// <s>-in: what the session may reach on the gateway itself.
	add(in, nfproto(unix.NFPROTO_IPV6), l4protoIs(protoICMPv6), one(
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Range{Op: expr.CmpOpEq, Register: reg1, FromData: []byte{133}, ToData: []byte{136}},
		accept))
	add(in, daddrIn(netip.MustParsePrefix("ff00::/8"), 0), one(verdict(expr.VerdictDrop)))
	add(in, saddrNot(s.Addr4), one(toBlk))
	if len(s.L7Ports) > 0 {
		// The session's connections <s>-l7 redirected to the L7 listener.
		add(in, l4protoIs(protoTCP), one(
			dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(b.l7Port())},
			&expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
			&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4,
				Mask: nativeU32(ctStatusDstNAT), Xor: nativeU32(0)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: nativeU32(0)},
			accept))
	}
	// A flood of DNS packets stops here, before the proxy's one socket
	// reader: the proxy limits each session far below this.
	if b.DNSPacketRate > 0 {
		add(in, nfproto(unix.NFPROTO_IPV4), l4protoIs(unix.IPPROTO_UDP), one(
			dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(b.DNSPort)},
			&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(b.DNSPacketRate), Unit: expr.LimitTimeSecond, Burst: b.DNSPacketRate, Over: true},
			toBlk))
	}
	add(in, nfproto(unix.NFPROTO_IPV4), l4protoTCPUDP(false), one(
		dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(b.DNSPort)},
		&expr.Fib{Register: reg1, FlagDADDR: true, FlagIIF: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(unix.RTN_LOCAL)},
		accept))
	add(in, one(toBlk))

	// Dispatch: the session's interface enters its chains.
	dispatch := []struct{ set, chain string }{{mapFwdSessions, fwdName}, {mapInSessions, inName}}
	if len(s.L7Ports) > 0 {
		dispatch = append(dispatch, struct{ set, chain string }{mapL7Sessions, l7Name})
	}
	for _, m := range dispatch {
		vm := &nftables.Set{Table: t, Name: m.set, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
		if err := c.SetAddElements(vm, []nftables.SetElement{{
			Key: ifnameData(s.Name), VerdictData: &expr.Verdict{Kind: expr.VerdictGoto, Chain: m.chain},
		}}); err != nil {
			return fmt.Errorf("session %s: map %s: %w", s.Name, m.set, err)
		}
	}
	return nil
}

// fwdRules are the rules of session s's <s>-fwd chain: what it may reach
// through the gateway.
func fwdRules(s Session) [][]expr.Any {
	toBlk := one(gotoChain(s.Name + "-blk"))
	var rules [][]expr.Any
	add := func(e ...[]expr.Any) { rules = append(rules, exprs(e...)) }
	add(saddrNot(s.Addr4), toBlk)
	if s.Addr6.IsValid() {
		add(saddrNot(s.Addr6), toBlk)
	} else {
		add(nfproto(unix.NFPROTO_IPV6), toBlk)
	}
	add(l4protoTCPUDP(true), toBlk)
	rules = append(rules, sessionVerdicts(s, toBlk, one(verdict(expr.VerdictAccept)))...)
	add(toBlk)
	return rules
}

// l7okRules are the rules of session s's <s>-l7ok chain: what <s>-fwd
// would accept on an L7 port is redirected to the gateway's L7 listener.
func l7okRules(s Session, b Base) [][]expr.Any {
	redirect := one(
		&expr.Immediate{Register: reg1, Data: be16(b.l7Port())},
		&expr.Redir{RegisterProtoMin: reg1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	)
	return sessionVerdicts(s, one(verdict(expr.VerdictReturn)), redirect)
}

// ReviseSession queues the replacement of session s's destination rules
// (its Allow and Deny, in <s>-fwd and, with L7 ports, <s>-l7ok) by those
// s gives; the caller flushes. The chains are flushed and refilled in
// the same batch, so a packet meets either the old rules or the new ones.
// Its sets, and so its pins, stay; s must otherwise be the session as
// AddSession installed it (addresses, Drop, L7Ports); its FastPorts may
// change (<s>-l7 is refilled too).
func ReviseSession(c *nftables.Conn, tableName string, b Base, s Session) error {
	if err := s.Validate(); err != nil {
		return err
	}
	t := table(tableName)
	fwdName, _, _, _ := sessionObjects(s.Name)
	l7Name, l7okName := sessionL7Chains(s.Name)
	type chainRules struct {
		name  string
		rules [][]expr.Any
	}
	chains := []chainRules{{fwdName, fwdRules(s)}}
	if len(s.L7Ports) > 0 {
		chains = append(chains, chainRules{l7Name, l7Rules(s)}, chainRules{l7okName, l7okRules(s, b)})
		// A session made before the terminate sets gains them (adding a
		// set that is there changes nothing).
		for _, set := range terminateSets(s.Name) {
			set.Table = t
			if err := c.AddSet(newSet(set), nil); err != nil {
				return fmt.Errorf("session %s: set %s: %w", s.Name, set.Name, err)
			}
		}
	}
	for _, ch := range chains {
		chain := &nftables.Chain{Name: ch.name, Table: t}
		c.FlushChain(chain)
		for _, r := range ch.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: r})
		}
	}
	return nil
}

// pinSet is one of a session's four pin sets and the elements of some
// pinnings that go in it.
type pinSet struct {
	set   string
	typ   nftables.SetDatatype
	elems []nftables.SetElement
}

// pinSets sorts ps into session name's pin sets: address and port, or
// any port, for each family.
func pinSets(name string, ps []Pinning) []pinSet {
	pin4, any4, pin6, any6 := PinElements(ps)
	return []pinSet{
		{name + "-p4", typePin4, pin4}, {name + "-a4", nftables.TypeIPAddr, any4},
		{name + "-p6", typePin6, pin6}, {name + "-a6", nftables.TypeIP6Addr, any6},
	}
}

// Unpin queues the removal of ps from session name's sets; the caller
// flushes. Removing an entry that is not there (it expired) fails the
// batch: give one entry per batch, or entries just read.
func Unpin(c *nftables.Conn, tableName, name string, ps []Pinning) error {
	t := table(tableName)
	for _, x := range pinSets(name, ps) {
		if len(x.elems) == 0 {
			continue
		}
		for i := range x.elems {
			x.elems[i].Timeout = 0
		}
		s := &nftables.Set{Table: t, Name: x.set, KeyType: x.typ, HasTimeout: true}
		if err := c.SetDeleteElements(s, x.elems); err != nil {
			return err
		}
	}
	return nil
}

// ctStatusDstNAT is IPS_DST_NAT: the connection's destination was
// translated (`ct status dnat`).
const ctStatusDstNAT = 1 << 5

// sessionVerdicts are the rules that decide what session s may reach,
// once its source address and protocol are checked: resolver ports, the
// never sets and Deny rules lead to block, pinned destinations and Allow
// rules to allow. <s>-fwd uses them with accept, <s>-l7ok with a redirect,
// so both paths allow the same destinations.
func sessionVerdicts(s Session, block, allow []expr.Any) [][]expr.Any {
	var rules [][]expr.Any
	add := func(e ...[]expr.Any) { rules = append(rules, exprs(e...)) }
	add(one(dport(reg1), &expr.Lookup{SourceRegister: reg1, SetName: setResolverPorts}), block)
	add(nfproto(unix.NFPROTO_IPV4), one(loadAddr(unix.NFPROTO_IPV4, true, reg1), &expr.Lookup{SourceRegister: reg1, SetName: setNever4}), block)
	add(nfproto(unix.NFPROTO_IPV6), one(loadAddr(unix.NFPROTO_IPV6, true, reg1), &expr.Lookup{SourceRegister: reg1, SetName: setNever6}), block)
	for _, r := range s.Deny {
		add(daddrIn(r.Prefix, r.Port), block)
	}
	for _, port := range s.L7Ports {
		// UDP on a port the gateway checks (QUIC, HTTP/3 on 443 or any
		// other of them) would pass it by: only Allow rules open it, pins
		// do not, so clients fall back to TCP, which the gateway sees.
		for _, r := range s.Allow {
			if r.Prefix.Addr().Is6() && !s.Addr6.IsValid() || r.Port != 0 && r.Port != port {
				continue
			}
			add(l4protoIs(protoUDP), daddrIn(r.Prefix, port), allow)
		}
		add(l4protoIs(protoUDP), one(dport(reg1), &expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: be16(port)}), block)
	}
	add(nfproto(unix.NFPROTO_IPV4), one(
		loadAddr(unix.NFPROTO_IPV4, true, reg32), dport(reg32+1),
		&expr.Lookup{SourceRegister: reg32, SetName: s.Name + "-p4"}), allow)
	add(nfproto(unix.NFPROTO_IPV4), one(
		loadAddr(unix.NFPROTO_IPV4, true, reg1),
		&expr.Lookup{SourceRegister: reg1, SetName: s.Name + "-a4"}), allow)
	if s.Addr6.IsValid() {
		add(nfproto(unix.NFPROTO_IPV6), one(
			loadAddr(unix.NFPROTO_IPV6, true, reg32), dport(reg32+4),
			&expr.Lookup{SourceRegister: reg32, SetName: s.Name + "-p6"}), allow)
		add(nfproto(unix.NFPROTO_IPV6), one(
			loadAddr(unix.NFPROTO_IPV6, true, reg1),
			&expr.Lookup{SourceRegister: reg1, SetName: s.Name + "-a6"}), allow)
	}
	for _, r := range s.Allow {
		if r.Prefix.Addr().Is6() && !s.Addr6.IsValid() {
			continue
		}
		add(daddrIn(r.Prefix, r.Port), allow)
	}
	return rules
}

// DeleteSession queues the removal of everything AddSession created for
// session name; the caller flushes. Objects already gone are skipped, so a
// half-removed session can be removed again.
func DeleteSession(c *nftables.Conn, tableName, name string) error {
	t := table(tableName)
	fwdName, inName, blkName, setNames := sessionObjects(name)
	l7Name, l7okName := sessionL7Chains(name)
	for _, m := range []string{mapFwdSessions, mapInSessions, mapL7Sessions} {
		vm := &nftables.Set{Table: t, Name: m, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict}
		elems, err := c.GetSetElements(vm)
		if err != nil && m == mapL7Sessions {
			continue // a gateway from before the L7 map: EnsureL7 adds it
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", m, err)
		}
		for _, e := range elems {
			if bytes.Equal(e.Key, ifnameData(name)) {
				if err := c.SetDeleteElements(vm, []nftables.SetElement{{Key: e.Key}}); err != nil {
					return err
				}
			}
		}
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return err
	}
	var present []*nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name == tableName && slices.Contains([]string{fwdName, inName, blkName, l7Name, l7okName}, ch.Name) {
			present = append(present, ch)
		}
	}
	for _, ch := range present {
		c.FlushChain(ch)
	}
	// <s>-l7 jumps to <s>-l7ok, and <s>-fwd and <s>-in to <s>-blk: the
	// chains jumped to go last.
	slices.SortStableFunc(present, func(a, b *nftables.Chain) int {
		rank := func(n string) int {
			if n == blkName || n == l7okName {
				return 1
			}
			return 0
		}
		return rank(a.Name) - rank(b.Name)
	})
	for _, ch := range present {
		c.DelChain(ch)
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return err
	}
	for _, s := range sets {
		if slices.Contains(setNames, s.Name) {
			c.DelSet(s)
		}
	}
	return nil
}

// Sessions lists the session names that have chains in table tableName,
// and which of them are complete (both dispatch entries present).
func Sessions(c *nftables.Conn, tableName string) (all []string, complete map[string]bool, err error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, nil, err
	}
	seen := map[string]bool{}
	for _, ch := range chains {
		if ch.Table.Name != tableName {
			continue
		}
		for _, suf := range []string{"-fwd", "-in", "-blk", "-l7", "-l7ok"} {
			if n, ok := strings.CutSuffix(ch.Name, suf); ok && ch.Hooknum == nil {
				seen[n] = true
			}
		}
	}
	counts := map[string]int{}
	t := table(tableName)
	for _, m := range []string{mapFwdSessions, mapInSessions} {
		elems, err := c.GetSetElements(&nftables.Set{Table: t, Name: m, IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeVerdict})
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", m, err)
		}
		for _, e := range elems {
			n := string(bytes.TrimRight(e.Key, "\x00"))
			seen[n] = true
			counts[n]++
		}
	}
	complete = map[string]bool{}
	for n := range seen {
		all = append(all, n)
		complete[n] = counts[n] == 2
	}
	slices.Sort(all)
	return all, complete, nil
}

// PinElements builds the set elements for ps, split by set: pin4 and any4
// hold IPv4 entries, pin6 and any6 IPv6 ones; Port 0 means any port, and
// Expires is the lifetime to give. IPv4-mapped IPv6 addresses count as IPv4.
func PinElements(ps []Pinning) (pin4, any4, pin6, any6 []nftables.SetElement) {
	for _, p := range ps {
		a := p.Addr.Unmap()
		if !a.IsValid() {
			continue
		}
		switch {
		case p.Port == 0 && a.Is4():
			any4 = append(any4, nftables.SetElement{Key: a.AsSlice(), Timeout: p.Expires})
		case p.Port == 0:
			any6 = append(any6, nftables.SetElement{Key: a.AsSlice(), Timeout: p.Expires})
		case a.Is4():
			pin4 = append(pin4, nftables.SetElement{Key: PinKey(a, p.Port), Timeout: p.Expires})
		default:
			pin6 = append(pin6, nftables.SetElement{Key: PinKey(a, p.Port), Timeout: p.Expires})
		}
	}
	return pin4, any4, pin6, any6
}

// Pin queues the addition of ps to session name's sets; the caller flushes.
// Adding an element that exists sets its timeout to the new lifetime.
func Pin(c *nftables.Conn, tableName, name string, ps []Pinning) error {
	for _, p := range ps {
		if p.Expires < time.Millisecond {
			return fmt.Errorf("nft: pin %v lifetime %v too short", p.Addr, p.Expires)
		}
	}
	t := table(tableName)
	for _, x := range pinSets(name, ps) {
		if len(x.elems) == 0 {
			continue
		}
		s := &nftables.Set{Table: t, Name: x.set, KeyType: x.typ, HasTimeout: true}
		if err := c.SetAddElements(s, x.elems); err != nil {
			return err
		}
	}
	return nil
}

// Pinned lists session name's pinned entries with their remaining lifetime.
func Pinned(c *nftables.Conn, tableName, name string) ([]Pinning, error) {
	t := table(tableName)
	var out []Pinning
	for _, x := range []struct {
		set string
		typ nftables.SetDatatype
	}{{name + "-p4", typePin4}, {name + "-a4", nftables.TypeIPAddr}, {name + "-p6", typePin6}, {name + "-a6", nftables.TypeIP6Addr}} {
		elems, err := c.GetSetElements(&nftables.Set{Table: t, Name: x.set, KeyType: x.typ, HasTimeout: true})
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", x.set, err)
		}
		for _, e := range elems {
			p, err := decodePin(e.Key)
			if err != nil {
				return nil, fmt.Errorf("set %s: %w", x.set, err)
			}
			p.Expires = e.Expires
			out = append(out, p)
		}
	}
	return out, nil
}

// Pinning is one allowed destination.
type Pinning struct {
	Addr netip.Addr
	Port uint16 // 0: any port
	// Expires is the remaining lifetime when read back, the lifetime to
	// give when pinning.
	Expires time.Duration
}

// Drops reads session name's blocked-destination counters.
func Drops(c *nftables.Conn, tableName, name string) (DropStats, error) {
	t := table(tableName)
	var st DropStats
	for _, x := range []struct {
		set string
		typ nftables.SetDatatype
	}{{name + "-d4", typeDrop4}, {name + "-d6", typeDrop6}} {
		elems, err := c.GetSetElements(&nftables.Set{Table: t, Name: x.set, KeyType: x.typ, Dynamic: true})
		if err != nil {
			return DropStats{}, fmt.Errorf("list %s: %w", x.set, err)
		}
		for _, e := range elems {
			d, err := DecodeDropKey(e.Key)
			if err != nil {
				return DropStats{}, fmt.Errorf("set %s: %w", x.set, err)
			}
			if e.Counter != nil {
				d.Packets, d.Bytes = e.Counter.Packets, e.Counter.Bytes
			}
			st.Dests = append(st.Dests, d)
		}
	}
	_, _, blkName, _ := sessionObjects(name)
	rules, err := c.GetRules(t, &nftables.Chain{Name: blkName, Table: t})
	if err != nil {
		return DropStats{}, fmt.Errorf("list %s: %w", blkName, err)
	}
	for _, r := range rules {
		if cm, ok := userdata.GetString(r.UserData, userdata.TypeComment); !ok || cm != dropsComment {
			continue
		}
		for _, e := range r.Exprs {
			if cnt, ok := e.(*expr.Counter); ok {
				st.Packets, st.Bytes = cnt.Packets, cnt.Bytes
			}
		}
	}
	SortDrops(st.Dests)
	return st, nil
}
