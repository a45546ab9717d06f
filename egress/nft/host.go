package nft

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Host describes the table airlock installs in the host namespace when the
// gateway's uplink is the host's default route:
//
//	table inet <prefix>-host {
//	    chain prerouting { type filter hook prerouting priority mangle; policy accept
//	        iifname <peer> ct state established,related accept
//	        iifname <peer> fib daddr type local drop }   (before DNAT: ports the
//	                                                      host publishes to containers)
//	    chain input { hook input; policy accept
//	        iifname <peer> ct state established,related accept
//	        iifname <peer> drop }                 (sessions never reach host services)
//	    chain forward { hook forward; policy accept
//	        iifname <peer> accept
//	        oifname <peer> ct state established,related accept
//	        oifname <peer> drop }
//	    chain postrouting { type nat hook postrouting
//	        ip saddr <uplink net> oifname != <peer> masquerade } }
//
// A session's packet to any address of the host is dropped before
// destination NAT, so neither the host's own services nor the ports it
// forwards to containers or VMs (docker run -p, kube-proxy) are reachable,
// whatever the session's allowlist says. Other tables' base chains still
// see the traffic; a host firewall that drops forwarded packets must let
// the uplink through.
type Host struct {
	Table string
	// Peer is the uplink's host-side interface.
	Peer string
	// Net is the uplink subnet (IPv4).
	Net netip.Prefix
}

// InstallHost queues the creation of h; the caller flushes.
func InstallHost(c *nftables.Conn, h Host) error {
	if h.Table == "" || h.Peer == "" || len(h.Peer) >= ifNameSize || !h.Net.Addr().Is4() {
		return fmt.Errorf("nft: bad host table %+v", h)
	}
	t := c.CreateTable(table(h.Table))
	accept := nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{
		Name: ChainPrerouting, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept,
	})
	in := c.AddChain(&nftables.Chain{
		Name: ChainInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	fwd := c.AddChain(&nftables.Chain{
		Name: ChainForward, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	post := c.AddChain(&nftables.Chain{
		Name: ChainPostrouting, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	add := func(ch *nftables.Chain, e ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs(e...)})
	}
	add(pre, iifname(h.Peer), ctEstablished(), one(verdict(expr.VerdictAccept)))
	add(pre, iifname(h.Peer), one(
		&expr.Fib{Register: reg1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: nativeU32(unix.RTN_LOCAL)},
		verdict(expr.VerdictDrop)))
	add(in, iifname(h.Peer), ctEstablished(), one(verdict(expr.VerdictAccept)))
	add(in, iifname(h.Peer), one(verdict(expr.VerdictDrop)))
	add(fwd, iifname(h.Peer), one(verdict(expr.VerdictAccept)))
	add(fwd, oifname(h.Peer), ctEstablished(), one(verdict(expr.VerdictAccept)))
	add(fwd, oifname(h.Peer), one(verdict(expr.VerdictDrop)))
	add(post, saddrIn(h.Net), oifnameNot(h.Peer), one(&expr.Masq{}))
	return nil
}
