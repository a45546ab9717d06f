// Package egress is airlock's network perimeter behind one front door.
//
// A Perimeter owns the gateway namespace with its nftables rules (package
// netns, rules from package nft), the DNS allowlist proxy with its
// listeners and goroutines (package dnsproxy, names matched by package
// allowlist), and the map from session addresses to their allowlists.
// Open starts it from a Config; AddSession gives a session its namespace,
// its rules, its registration with the proxy and its resolv.conf, and the
// returned Session contributes the container's spec options (the network
// namespace, a read-only /etc/resolv.conf); Remove records the session's
// blocked connections through the caller's Audit and removes all of it;
// Reconcile re-registers the sessions a restarted daemon finds running;
// Close stops the proxy and removes the gateway once no session uses it.
//
// The perimeter knows sessions by id only. Their audit logs are the
// caller's: decisions (DNS answers and refusals, dropped connections)
// reach them through an Audit function, as api.AuditEvent values.
package egress
