package egress_test

import (
	"crypto/tls"
	"encoding/binary"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// serverPeers lists the clients (as the world sees them: the gateway's
// uplink address) of the world's established connections on port 443.
func serverPeers(t *testing.T, fw *fastWorld) map[netip.AddrPort]bool {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+fw.w.NetnsPath(), "ss", "-Htn", "state", "established", "( sport = :443 )").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v %s", err, out)
	}
	m := map[netip.AddrPort]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		if ap, err := netip.ParseAddrPort(f[len(f)-1]); err == nil {
			m[ap] = true
		}
	}
	return m
}

// newPeer is the one peer in after and not in before.
func newPeer(t *testing.T, before, after map[netip.AddrPort]bool) netip.AddrPort {
	t.Helper()
	for p := range after {
		if !before[p] {
			return p
		}
	}
	t.Fatalf("no new peer in %v", after)
	return netip.AddrPort{}
}

// sendFragNeeded sends, from the world, an ICMP "fragmentation needed"
// about a packet from peer to the HTTPS server, as a router past the
// gateway would.
func sendFragNeeded(t *testing.T, fw *fastWorld, peer netip.AddrPort) {
	t.Helper()
	inner := make([]byte, 28)
	inner[0] = 0x45
	binary.BigEndian.PutUint16(inner[2:], 1500)
	inner[6] = 0x40
	inner[8], inner[9] = 63, 6
	p4, s4 := peer.Addr().As4(), fw.https.Addr().As4()
	copy(inner[12:], p4[:])
	copy(inner[16:], s4[:])
	binary.BigEndian.PutUint16(inner[10:], inetChecksum(inner[:20]))
	binary.BigEndian.PutUint16(inner[20:], peer.Port())
	binary.BigEndian.PutUint16(inner[22:], 443)
	binary.BigEndian.PutUint32(inner[24:], 12345)
	icmp := append([]byte{3, 4, 0, 0, 0, 0, 0x05, 0x00}, inner...)
	binary.BigEndian.PutUint16(icmp[2:], inetChecksum(icmp))
	err := netns.Do(fw.w.NetnsPath(), func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, icmp, 0, &unix.SockaddrInet4{Addr: p4})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// icmpUnreachIn is the session "fast"'s count of ICMP destination
// unreachable messages received.
func icmpUnreachIn(t *testing.T, fw *fastWorld) int {
	t.Helper()
	var n int
	err := netns.Do(fw.fast.NetnsPath(), func() error {
		b, err := os.ReadFile("/proc/thread-self/net/snmp")
		if err != nil {
			return err
		}
		var hdr []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "Icmp: ") {
				continue
			}
			f := strings.Fields(l)
			if hdr == nil {
				hdr = f
				continue
			}
			for i, h := range hdr {
				if h == "InDestUnreachs" {
					n, _ = strconv.Atoi(f[i])
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFastPathICMPRelated: an ICMP error from past the gateway
// (fragmentation needed, which path MTU discovery needs, and which comes
// when the ClientHello, the first full-size segment, goes out) about a
// connection still undecided reaches the client, as one about a passed
// connection does. The queue took it with the connection's packets (it
// is related, so it has the connection's mark) and dropped it, not TCP.
func TestFastPathICMPRelated(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	before := serverPeers(t, fw)
	c, err := fw.dialFrom(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(200 * time.Millisecond)
	peer := newPeer(t, before, serverPeers(t, fw))
	n0 := icmpUnreachIn(t, fw)
	sendFragNeeded(t, fw, peer)
	time.Sleep(300 * time.Millisecond)
	n1 := icmpUnreachIn(t, fw)
	t.Logf("undecided connection (peer %v): ICMP dest-unreach delivered to the session: %d", peer, n1-n0)

	before = serverPeers(t, fw)
	c2, err := fw.dialFrom(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	tc := tls.Client(c2, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "allowed.test"})
	_ = c2.SetDeadline(time.Now().Add(3 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	peer2 := newPeer(t, before, serverPeers(t, fw))
	sendFragNeeded(t, fw, peer2)
	time.Sleep(300 * time.Millisecond)
	n2 := icmpUnreachIn(t, fw)
	t.Logf("passed connection (peer %v): ICMP dest-unreach delivered to the session: %d", peer2, n2-n1)
	if n1 == n0 {
		t.Errorf("fragmentation needed about an undecided connection was not delivered to the client")
	}
	if n2 == n1 {
		t.Errorf("fragmentation needed about a passed connection was not delivered to the client")
	}
}
