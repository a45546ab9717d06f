package nfq

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestVerdictOnGonePacket: the kernel answers a verdict on a packet it
// no longer holds (it drops a connection's queued packets when their
// interface goes away, as when a session's network is removed while the
// gateway holds its ClientHellos) with an error message on the queue's
// socket. Receive returned that error, with no packet: the gateway's
// reader takes an error of Receive for a failing queue and waits 10 ms
// before reading on, so that a session which held 256 packets and ended
// stalled every session's fast path for 2.5 s when they were refused. The
// answer is not the queue's failure: Receive reads on to the next packet.
func TestVerdictOnGonePacket(t *testing.T) {
	ns := newTestNS(t)
	q, err := Open(0, Config{NetNS: int(ns.fd)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// A connection's SYN is queued, and sent again a second later.
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
	pkts, err := q.Receive()
	if err != nil || len(pkts) == 0 {
		t.Fatalf("the SYN: %v %v", pkts, err)
	}
	id := pkts[0].ID
	if err := q.SetVerdict(id, Drop, nil); err != nil {
		t.Fatal(err)
	}
	// The packet is gone: the kernel answers this one with ENOENT.
	if err := q.SetVerdict(id, Drop, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pkts, err = q.Receive()
	if err != nil {
		t.Fatalf("Receive after a verdict on a packet the kernel no longer holds: %v (the reader takes the queue for failing)", err)
	}
	if len(pkts) == 0 || pkts[0].ID == id {
		t.Errorf("Receive: %+v, want the SYN sent again", pkts)
	}
	t.Logf("the SYN sent again after %v", time.Since(start))
	for _, p := range pkts {
		_ = q.SetVerdict(p.ID, Drop, nil)
	}
}
