package nfq

import (
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestVerdictOnGonePacket: the kernel drops the queued packets of an
// interface that goes away (a session's, when its network is removed
// while the gateway holds its ClientHellos), and answers a verdict on
// one with an error message on the queue's socket. Receive returned that
// error, with no packet: the gateway's reader takes an error of Receive
// for a failing queue and waits 10 ms before reading on, so that a
// session which held 256 packets and ended stalled every session's fast
// path for 2.5 s when they were refused. The answer is not the queue's
// failure: Receive reads on to the next packet.
func TestVerdictOnGonePacket(t *testing.T) {
	ns := newTestNS(t)
	q, err := Open(0, Config{NetNS: int(ns.fd)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// A connection's SYN, out of an interface, is queued; the interface
	// goes away, and the kernel drops the packet.
	ns.do(t, func() error {
		la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "gone0"}, PeerName: "gone1"}
		if err := netlink.LinkAdd(la); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.77.0.1/24")
		if err := netlink.AddrAdd(la, addr); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("gone1")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(la); err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: testPort, Addr: [4]byte{10, 77, 0, 2}}); err != unix.EINPROGRESS {
			return err
		}
		return nil
	})
	pkts, err := q.Receive()
	if err != nil || len(pkts) == 0 {
		t.Fatalf("the SYN: %v %v", pkts, err)
	}
	id := pkts[0].ID
	ns.do(t, func() error {
		l, err := netlink.LinkByName("gone0")
		if err != nil {
			return err
		}
		return netlink.LinkDel(l)
	})
	// The packet is gone: the kernel answers its verdict with ENOENT.
	if err := q.SetVerdict(id, Drop, nil); err != nil {
		t.Fatal(err)
	}
	// Another connection's packet, queued after.
	ns.do(t, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Connect(fd, &unix.SockaddrInet4{Port: testPort, Addr: [4]byte{127, 0, 0, 1}}); err != unix.EINPROGRESS {
			return err
		}
		return nil
	})
	start := time.Now()
	pkts, err = q.Receive()
	if err != nil {
		t.Fatalf("Receive after a verdict on a packet the kernel no longer holds: %v (the reader takes the queue for failing)", err)
	}
	if len(pkts) == 0 || pkts[0].ID == id {
		t.Errorf("Receive: %+v, want the other connection's SYN", pkts)
	}
	t.Logf("the next packet after %v", time.Since(start))
	for _, p := range pkts {
		_ = q.SetVerdict(p.ID, Drop, nil)
	}
}
