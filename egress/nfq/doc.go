// Package nfq holds packets in the kernel's netfilter queue (NFQUEUE)
// for a decision in user space, then lets each go, drops it, or sends it
// through the rules again with a mark.
//
// The gateway uses it to look at the first bytes of a connection (a TLS
// ClientHello) that the kernel forwards itself once the connection is
// decided: a rule queues the packets of undecided connections, the
// gateway gives the held ones back with a mark (Repeat), and a rule
// earlier in the chain turns the mark into the connection's conntrack
// mark, so that the rest of the connection never leaves the kernel.
//
// Queues are per network namespace. A rule's Target queues fail closed:
// with no program bound to the queue, or the queue full, the kernel
// drops the packet (TCP sends it again).
//
// The protocol is nfnetlink_queue's (linux/netfilter/nfnetlink_queue.h),
// spoken over github.com/mdlayher/netlink; only what the gateway needs:
// bind a queue, copy whole packets, verdicts with an optional mark.
package nfq
