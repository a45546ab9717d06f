package l7

import (
	"net"
	"net/netip"
	"testing"
)

// addrConn is a net.Conn with fixed addresses and nothing behind it.
type addrConn struct {
	net.Conn
	local, remote *net.TCPAddr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }
func (c addrConn) Close() error         { return nil }

// TestFlowsShareALocalPort: the kernel gives one local port to upstream
// connections to different servers; each is its own flow, found by both
// ends, and the end of one leaves the other.
func TestFlowsShareALocalPort(t *testing.T) {
	s := &Server{flows: map[flowKey]flow{}, upstreams: map[string]int{}}
	local := &net.TCPAddr{IP: net.ParseIP("10.0.0.2"), Port: 40000}
	a, b := netip.MustParseAddrPort("10.1.0.1:443"), netip.MustParseAddrPort("10.1.0.2:443")
	ca := s.trackFlow("s1", a, addrConn{local: local, remote: net.TCPAddrFromAddrPort(a)})
	s.trackFlow("s2", b, addrConn{local: local, remote: net.TCPAddrFromAddrPort(b)})
	client := netip.MustParseAddrPort("10.0.0.2:40000")
	if id, ok := s.SessionOfFlow(client, a); !ok || id != "s1" {
		t.Errorf("flow to %v: %q %v, want s1", a, id, ok)
	}
	if id, ok := s.SessionOfFlow(client, b); !ok || id != "s2" {
		t.Errorf("flow to %v: %q %v, want s2", b, id, ok)
	}
	if id, ok := s.SessionOfFlow(client, netip.AddrPort{}); ok {
		t.Errorf("without the server, a shared local port named %q", id)
	}
	ca.Close()
	if _, ok := s.SessionOfFlow(client, a); ok {
		t.Error("a closed flow is still found")
	}
	if id, ok := s.SessionOfFlow(client, b); !ok || id != "s2" {
		t.Errorf("closing one flow lost the other: %q %v", id, ok)
	}
	if id, ok := s.SessionOfFlow(client, netip.AddrPort{}); !ok || id != "s2" {
		t.Errorf("without the server, the one flow left: %q %v", id, ok)
	}
}
