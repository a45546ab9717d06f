// Package egress is airlock's network perimeter behind one front door.
//
// A Perimeter owns the gateway namespace with its nftables rules (package
// netns, rules from package nft), the DNS allowlist proxy with its
// listeners and goroutines (package dnsproxy, names matched by package
// allowlist), the L7 gateway's listeners (package l7), and the map from
// session addresses to their allowlists.
// Open starts it from a Config; AddSession gives a session its namespace,
// its rules, its registration with the proxy and its resolv.conf, and the
// returned Session contributes the container's spec options (the network
// namespace, a read-only /etc/resolv.conf); Remove records the session's
// blocked connections through the caller's Audit and removes all of it;
// Reconcile re-registers the sessions a restarted daemon finds running;
// Close stops the proxy and removes the gateway once no session uses it.
//
// A session whose egress block says `l7 = "check"` has its TCP to allowed
// destinations on L7Ports redirected to the L7 gateway, which passes a
// connection only if its TLS SNI or HTTP Host is a name the allowlist
// allows and whose DNS answers pinned the destination for this session
// (the proxy records them per session in a dnsproxy.Names), or the
// destination is allowed by a CIDR entry (checkL7); UDP 443 is blocked
// for it unless a CIDR entry allows it. Plain HTTP, and TLS to hosts with
// HTTP rules (package httprule) or a bound secret (or every host, with
// inspect = "all"), are served request by request: TLS terminated with a
// certificate of the session's CA (SessionConfig.CA), each request's Host
// bound to the SNI, its rules applied (asks through SessionConfig.Ask),
// secrets substituted for their placeholders (SessionConfig.Secrets) and
// placeholders elsewhere refused, and each request audited.
//
// The perimeter knows sessions by id only. Their audit logs are the
// caller's: decisions (DNS answers and refusals, dropped connections)
// reach them through an Audit function, as api.AuditEvent values; the L7
// gateway's, one per connection, have layer "l7".
package egress
