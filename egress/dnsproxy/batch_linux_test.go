package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// batchClient is a client socket connected to one of a wildcard socket's
// addresses: it takes packets from that address only.
type batchClient struct {
	c   *net.UDPConn
	dst netip.Addr // as the server sees it
	id  uint16
}

// batchClients dials port on each of dests, skipping an IPv6 loopback
// the machine lacks; mapped gives IPv4 destinations as a dual-stack socket
// sees them.
func batchClients(t *testing.T, port int, dests []string, mapped bool) []batchClient {
	t.Helper()
	var cs []batchClient
	for i, d := range dests {
		c, err := net.Dial("udp", net.JoinHostPort(d, fmt.Sprint(port)))
		if err != nil {
			if d == "::1" {
				t.Logf("no IPv6 loopback: %v", err)
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		dst := netip.MustParseAddr(d)
		if mapped && dst.Is4() {
			dst = netip.AddrFrom16(dst.As16())
		}
		cs = append(cs, batchClient{c: c.(*net.UDPConn), dst: dst, id: uint16(0x200 + i)})
	}
	return cs
}

// waitQueued leaves time for queries sent to reach the server's socket.
// On loopback the kernel delivers a packet within the sender's write, so
// this is a margin, not a guess at a rate.
func waitQueued() { time.Sleep(50 * time.Millisecond) }

var batchCases = []struct {
	network, listen string
	mapped          bool
	dests           []string
}{
	{"udp4", "0.0.0.0:0", false, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.1", "127.0.0.4"}},
	{"udp", "[::]:0", true, []string{"127.0.0.2", "::1", "127.0.0.3", "::1", "127.0.0.1"}},
}

// TestBatchReaderReadsQueuedQueriesTogether sends queries from several
// clients to several addresses of a wildcard socket before reading: one
// recvmmsg(2) reads them all, each with its client and the address it was
// sent to.
func TestBatchReaderReadsQueuedQueriesTogether(t *testing.T) {
	for _, tc := range batchCases {
		t.Run(tc.network, func(t *testing.T) {
			pc, err := net.ListenPacket(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			c := pc.(*net.UDPConn)
			if err := setUDPSocketOptions(c); err != nil {
				t.Fatal(err)
			}
			cs := batchClients(t, c.LocalAddr().(*net.UDPAddr).Port, tc.dests, tc.mapped)
			for _, bc := range cs {
				if _, err := bc.c.Write(packQuery("a.test.", bc.id)); err != nil {
					t.Fatal(err)
				}
			}
			waitQueued()
			br, err := newBatchReader(c)
			if err != nil {
				t.Fatal(err)
			}
			defer br.close()
			for _, bc := range cs {
				p, err := br.read()
				if err != nil {
					t.Fatal(err)
				}
				var m dns.Msg
				if err := m.Unpack(p.buf[:p.n]); err != nil {
					t.Fatalf("query %d: %v", bc.id, err)
				}
				src := bc.c.LocalAddr().(*net.UDPAddr).AddrPort()
				if tc.mapped && src.Addr().Is4() {
					src = netip.AddrPortFrom(netip.AddrFrom16(src.Addr().As16()), src.Port())
				}
				if m.Id != bc.id || p.src != src || p.pi.dst != bc.dst {
					t.Errorf("read query %d from %v to %v, want %d from %v to %v", m.Id, p.src, p.pi.dst, bc.id, src, bc.dst)
				}
				putPacket(p)
			}
			if br.fills != 1 {
				t.Errorf("%d queries read in %d batches, want 1", len(cs), br.fills)
			}
		})
	}
}

// TestUDPServesQueuedQueriesFromSeveralClients queues queries from several
// clients to several addresses before the server reads: each is answered,
// from the address it was sent to.
func TestUDPServesQueuedQueriesFromSeveralClients(t *testing.T) {
	for _, tc := range batchCases {
		t.Run(tc.network, func(t *testing.T) {
			s, err := New(&SessionMap{}, WithUpstreams("192.0.2.1"))
			if err != nil {
				t.Fatal(err)
			}
			pc, err := net.ListenPacket(tc.network, tc.listen)
			if err != nil {
				t.Fatal(err)
			}
			cs := batchClients(t, pc.LocalAddr().(*net.UDPAddr).Port, tc.dests, tc.mapped)
			for _, bc := range cs {
				if _, err := bc.c.Write(packQuery("a.test.", bc.id)); err != nil {
					t.Fatal(err)
				}
			}
			waitQueued()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.ServePacketConn(ctx, pc) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("serve: %v", err)
				}
			}()
			for _, bc := range cs {
				if err := bc.c.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 512)
				n, err := bc.c.Read(buf)
				if err != nil {
					t.Fatalf("client %d (to %v): %v", bc.id, bc.dst, err)
				}
				var m dns.Msg
				if err := m.Unpack(buf[:n]); err != nil || m.Id != bc.id || m.Rcode != dns.RcodeRefused {
					t.Errorf("client %d (to %v) got answer %d rcode %d, %v; want REFUSED (unknown source)", bc.id, bc.dst, m.Id, m.Rcode, err)
				}
			}
		})
	}
}
