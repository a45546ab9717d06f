// Package netns builds the kernel side of airlock's egress perimeter with
// netlink (vishvananda/netlink for links, addresses and routes;
// google/nftables for rules); it never runs `ip` or `nft`.
//
// Layout, for a daemon whose kernel-object prefix is P (PrefixFor(root)):
//
//	/run/netns/P-gw            the gateway namespace (Gateway), ip_forward on
//	  uplink                   veth to the uplink namespace (or the host), 10.215.0.1/30,
//	                           fd0a:215::1/126; default routes via .2 / ::2; traffic
//	                           leaving it is masqueraded
//	  s-<hash>                 one veth per session, gateway side, e.g. 10.213.0.2/31
//	                           (and fd0a:213::2/127 with IPv6); its alias is the
//	                           session id, so a restarted daemon can re-adopt it
//	  table inet P             the ruleset (see package nft): per-session allow sets
//	                           with timeouts, per-session drop counters, everything
//	                           else rejected (or dropped)
//	/run/netns/P-s-<hash>      a session namespace: lo, and eth0 with e.g.
//	                           10.213.0.3/31, default route via 10.213.0.2 only
//	<uplink ns>: P-up          the uplink's far end, 10.215.0.2/30 (`--uplink
//	                           netns:NAME`); with `--uplink host` it sits in the
//	                           daemon's namespace and table inet P-host NATs it
//
// <hash> is the first 10 hex digits of the SHA-256 of the session id; the
// pools (sessions: 10.213.0.0/16 and fd0a:213::/64, a /31 and a /127 per
// session at the same index; uplink: 10.215.0.0/30 and fd0a:215::/126) are
// configurable. Session addresses are recovered from the interfaces after a
// restart, so nothing about the network is kept on disk.
//
// A session may reach its resolver address (the gateway side of its veth)
// on the DNS port, where the DNS proxy listens on 0.0.0.0 in the gateway
// namespace (Gateway.Do), and whatever Session.Pin or a static Allow rule
// opened, on TCP and UDP only, never port 53 or 853, never loopback,
// link-local (cloud metadata), multicast, the gateway, the uplink, other
// sessions or operator-listed ranges. Every refused packet is counted per
// destination, protocol and port (Session.Drops). A session created with
// L7 ports (SessionConfig.L7Ports) has its allowed TCP connections on
// those ports redirected to the L7 listener on Gateway.L7Port instead, in
// the gateway namespace like the DNS proxy's; the listener reads the
// original destination with SO_ORIGINAL_DST (OriginalDst).
//
// The gateway and every session namespace are created by this process;
// Cleanup removes what a crashed daemon left, AdoptGateway takes it over.
package netns
