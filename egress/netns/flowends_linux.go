package netns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ctnetlink's message types, groups and attributes (linux/netfilter/
// nfnetlink_conntrack.h).
const (
	subsysCT       = 1 // NFNL_SUBSYS_CTNETLINK
	ctMsgNew       = 0 // IPCTNL_MSG_CT_NEW (new and update events)
	ctMsgGet       = 1 // IPCTNL_MSG_CT_GET
	ctMsgDelete    = 2 // IPCTNL_MSG_CT_DELETE (destroy events)
	groupCTUpdate  = 2 // NFNLGRP_CONNTRACK_UPDATE
	groupCTDestroy = 3 // NFNLGRP_CONNTRACK_DESTROY

	ctaTupleOrig     = 1
	ctaProtoinfo     = 4
	ctaMark          = 8
	ctaCountersOrig  = 9
	ctaCountersReply = 10
	ctaID            = 12

	ctaTupleIP    = 1
	ctaTupleProto = 2
	ctaIPv4Src    = 1
	ctaIPv4Dst    = 2
	ctaIPv6Src    = 3
	ctaIPv6Dst    = 4
	ctaProtoNum   = 1
	ctaProtoSrc   = 2
	ctaProtoDst   = 3

	ctaProtoinfoTCP      = 1
	ctaProtoinfoTCPState = 1
	ctaCountersBytes     = 2

	tcpStateTimeWait = 7 // TCP_CONNTRACK_TIME_WAIT
	tcpStateClose    = 8 // TCP_CONNTRACK_CLOSE
)

// FlowEnd is a tracked TCP connection of the gateway's at its end, as
// conntrack saw it: its original direction (the session's address and
// the destination it connected to), its mark, and the bytes of its IP
// packets each way, headers included.
type FlowEnd struct {
	Client, Server netip.AddrPort
	// ID is the conntrack entry's id: another connection on the same
	// addresses and ports is another entry, with another id.
	ID                uint32
	Mark              uint32
	BytesUp, BytesDn  uint64
	Destroyed, Closed bool
}

// flowEventsBuffer is the receive buffer of the conntrack event socket:
// the kernel drops events (and WatchFlowEnds reports them lost) when its
// reader falls this far behind. A variable for the tests, which overflow
// it.
var flowEventsBuffer = 8 << 20

// testHookFlowReceive, if set, runs before each read of conntrack events.
var testHookFlowReceive func()

// enableConntrackAccounting has the gateway namespace's conntrack count
// each connection's bytes, and keep events for every connection (the
// default, 2, gives a connection none unless a listener was there when
// it was made: one passed while the watcher subscribes would never be
// told to end), for connections tracked from then on.
func (g *Gateway) enableConntrackAccounting() error {
	return doFd(int(g.ns.Fd()), func() error {
		return errors.Join(writeSysctl("net/netfilter/nf_conntrack_acct", "1"), writeSysctl("net/netfilter/nf_conntrack_events", "1"))
	})
}

// WatchFlowEnds calls fn, until ctx ends, for each TCP connection
// forwarded by the gateway whose conntrack mark is mark when it ends: its
// FIN exchanged or a reset (conntrack's TIME_WAIT or CLOSE), or its entry
// destroyed (a timeout, a deletion). fn may be called more than once for
// one connection (the end, then the entry's destruction); it must not
// block. When the kernel drops events (the socket's buffer overflowed
// under heavy churn), lost is called: the ends they told of are not
// known, and the caller reconciles with MarkedFlows.
func (g *Gateway) WatchFlowEnds(ctx context.Context, mark uint32, fn func(FlowEnd), lost func()) error {
	if err := g.enableConntrackAccounting(); err != nil {
		return fmt.Errorf("conntrack accounting in the gateway: %w", err)
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(g.ns.Fd()),
		Groups: 1<<(groupCTUpdate-1) | 1<<(groupCTDestroy-1)})
	if err != nil {
		return fmt.Errorf("conntrack events in the gateway: %w", err)
	}
	_ = c.SetReadBuffer(flowEventsBuffer)
	// Update events carry no counters: a connection's at its end are
	// read from its entry, which stays (TIME_WAIT) for a while.
	get, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(g.ns.Fd())})
	if err != nil {
		c.Close()
		return fmt.Errorf("conntrack in the gateway: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close(); get.Close() })
	defer stop()
	for {
		if testHookFlowReceive != nil {
			testHookFlowReceive()
		}
		msgs, err := c.Receive()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				if lost != nil {
					lost()
				}
				continue
			}
			select { // an error that stays must not spin
			case <-ctx.Done():
				return nil
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		for _, m := range msgs {
			t := uint16(m.Header.Type)
			if t>>8 != subsysCT || len(m.Data) < 4 {
				continue
			}
			end, state, ok := parseCTEvent(m.Data[4:])
			if !ok || end.Mark != mark {
				continue
			}
			switch {
			case t&0xff == ctMsgDelete:
				end.Destroyed = true
			case t&0xff == ctMsgNew && (state == tcpStateTimeWait || state == tcpStateClose):
				end.Closed = true
				e, ok := entry(get, end.Client, end.Server)
				if !ok || e.ID != end.ID {
					continue // gone already: its destroy event says
				}
				end.BytesUp, end.BytesDn = e.BytesUp, e.BytesDn
			default:
				continue
			}
			fn(end)
		}
	}
}

// parseCTEvent reads a TCP connection's tuple, mark, counters and TCP
// state from a ctnetlink event.
func parseCTEvent(b []byte) (end FlowEnd, state uint8, ok bool) {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return FlowEnd{}, 0, false
	}
	ad.ByteOrder = binary.BigEndian
	var proto uint8
	bytesOf := func(dst *uint64) func(*netlink.AttributeDecoder) error {
		return func(nad *netlink.AttributeDecoder) error {
			for nad.Next() {
				if nad.Type() == ctaCountersBytes {
					*dst = nad.Uint64()
				}
			}
			return nil
		}
	}
	for ad.Next() {
		switch ad.Type() {
		case ctaTupleOrig:
			ad.Nested(func(tad *netlink.AttributeDecoder) error {
				var src, dst netip.Addr
				var sport, dport uint16
				for tad.Next() {
					switch tad.Type() {
					case ctaTupleIP:
						tad.Nested(func(iad *netlink.AttributeDecoder) error {
							for iad.Next() {
								a, _ := netip.AddrFromSlice(iad.Bytes())
								switch iad.Type() {
								case ctaIPv4Src, ctaIPv6Src:
									src = a
								case ctaIPv4Dst, ctaIPv6Dst:
									dst = a
								}
							}
							return nil
						})
					case ctaTupleProto:
						tad.Nested(func(pad *netlink.AttributeDecoder) error {
							for pad.Next() {
								switch pad.Type() {
								case ctaProtoNum:
									proto = pad.Uint8()
								case ctaProtoSrc:
									sport = pad.Uint16()
								case ctaProtoDst:
									dport = pad.Uint16()
								}
							}
							return nil
						})
					}
				}
				end.Client = netip.AddrPortFrom(src.Unmap(), sport)
				end.Server = netip.AddrPortFrom(dst.Unmap(), dport)
				return nil
			})
		case ctaProtoinfo:
			ad.Nested(func(pad *netlink.AttributeDecoder) error {
				for pad.Next() {
					if pad.Type() == ctaProtoinfoTCP {
						pad.Nested(func(tad *netlink.AttributeDecoder) error {
							for tad.Next() {
								if tad.Type() == ctaProtoinfoTCPState {
									state = tad.Uint8()
								}
							}
							return nil
						})
					}
				}
				return nil
			})
		case ctaMark:
			end.Mark = ad.Uint32()
		case ctaID:
			end.ID = ad.Uint32()
		case ctaCountersOrig:
			ad.Nested(bytesOf(&end.BytesUp))
		case ctaCountersReply:
			ad.Nested(bytesOf(&end.BytesDn))
		}
	}
	if ad.Err() != nil || proto != unix.IPPROTO_TCP || !end.Client.IsValid() || !end.Server.IsValid() {
		return FlowEnd{}, 0, false
	}
	return end, state, true
}

// ctRequest sends one ctnetlink request of type typ (IPCTNL_MSG_CT_GET,
// IPCTNL_MSG_CT_DELETE) about the TCP connection from client to server,
// its original direction (CTA_TUPLE_ORIG), and returns the kernel's
// answers.
func ctRequest(c *netlink.Conn, typ uint8, client, server netip.AddrPort) ([]netlink.Message, error) {
	ca, sa := client.Addr().Unmap(), server.Addr().Unmap()
	family, src, dst := byte(unix.AF_INET), uint16(ctaIPv4Src), uint16(ctaIPv4Dst)
	if ca.Is6() {
		family, src, dst = unix.AF_INET6, ctaIPv6Src, ctaIPv6Dst
	}
	ae := netlink.NewAttributeEncoder()
	ae.Nested(ctaTupleOrig, func(tae *netlink.AttributeEncoder) error {
		tae.Nested(ctaTupleIP, func(iae *netlink.AttributeEncoder) error {
			iae.Bytes(src, ca.AsSlice())
			iae.Bytes(dst, sa.AsSlice())
			return nil
		})
		tae.Nested(ctaTupleProto, func(pae *netlink.AttributeEncoder) error {
			pae.Uint8(ctaProtoNum, unix.IPPROTO_TCP)
			pae.Bytes(ctaProtoSrc, binary.BigEndian.AppendUint16(nil, client.Port()))
			pae.Bytes(ctaProtoDst, binary.BigEndian.AppendUint16(nil, server.Port()))
			return nil
		})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	return c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysCT<<8 | uint16(typ)), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append([]byte{family, 0, 0, 0}, attrs...),
	})
}

// entry reads the conntrack entry of the TCP connection from client to
// server (IPCTNL_MSG_CT_GET): its id, mark and byte counters.
func entry(c *netlink.Conn, client, server netip.AddrPort) (FlowEnd, bool) {
	msgs, err := ctRequest(c, ctMsgGet, client, server)
	if err != nil {
		return FlowEnd{}, false
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		if end, _, ok := parseCTEvent(m.Data[4:]); ok {
			return end, true
		}
	}
	return FlowEnd{}, false
}

// ctConn is the gateway's netlink connection for requests about one
// conntrack entry, dialled on first use.
//
// +checklocks:g.ctMu
func (g *Gateway) ctConn() (*netlink.Conn, error) {
	if g.ct == nil {
		c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(g.ns.Fd())})
		if err != nil {
			return nil, err
		}
		g.ct = c
	}
	return g.ct, nil
}

// FlowID returns the conntrack id of the gateway's TCP connection from
// client to server, if it is tracked.
func (g *Gateway) FlowID(client, server netip.AddrPort) (uint32, bool) {
	g.ctMu.Lock()
	defer g.ctMu.Unlock()
	c, err := g.ctConn()
	if err != nil {
		return 0, false
	}
	e, ok := entry(c, client, server)
	return e.ID, ok
}

// MarkedFlows lists the gateway's tracked TCP connections whose conntrack
// mark is mark (a dump of the table, both families), without counters.
func (g *Gateway) MarkedFlows(mark uint32) ([]FlowEnd, error) {
	// Its own connection: FlowID, which the fast path calls for each
	// connection it passes, does not wait for a dump.
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(g.ns.Fd())})
	if err != nil {
		return nil, fmt.Errorf("conntrack in the gateway: %w", err)
	}
	defer c.Close()
	var out []FlowEnd
	for _, family := range []byte{unix.AF_INET, unix.AF_INET6} {
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: netlink.HeaderType(subsysCT<<8 | ctMsgGet), Flags: netlink.Request | netlink.Dump},
			Data:   []byte{family, 0, 0, 0},
		})
		if err != nil {
			return nil, fmt.Errorf("conntrack dump in the gateway: %w", err)
		}
		for _, m := range msgs {
			if len(m.Data) < 4 {
				continue
			}
			if end, _, ok := parseCTEvent(m.Data[4:]); ok && end.Mark == mark {
				out = append(out, end)
			}
		}
	}
	return out, nil
}

// CutFlow ends the gateway's tracked TCP connection from client to server
// (its original direction): its conntrack entry is deleted, so that its
// next packet meets the rules as a new one. It returns how many entries
// it deleted: 1, or 0 when none is tracked. One request finds the entry
// by its tuple (a dump of the table per connection would cost a revision
// that cuts many a dump each). The kernel looks the tuple up in either
// direction: with no entry of this connection, it could find one whose
// reply is this tuple, a connection from server to client, which the
// gateway does not forward (sessions are not reached from outside).
func (g *Gateway) CutFlow(client, server netip.AddrPort) (int, error) {
	g.ctMu.Lock()
	defer g.ctMu.Unlock()
	c, err := g.ctConn()
	if err != nil {
		return 0, fmt.Errorf("end connection %v -> %v: conntrack in the gateway: %w", client, server, err)
	}
	if _, err := ctRequest(c, ctMsgDelete, client, server); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return 0, nil
		}
		return 0, fmt.Errorf("end connection %v -> %v: %w", client, server, err)
	}
	return 1, nil
}
