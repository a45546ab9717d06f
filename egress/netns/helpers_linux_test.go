package netns_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/netns"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
)

// World hosts every test uses.
var (
	hostX   = netip.MustParseAddr("10.214.0.10")
	hostY   = netip.MustParseAddr("10.214.0.11")
	hostX6  = netip.MustParseAddr("fd0a:214::10")
	hostY6  = netip.MustParseAddr("fd0a:214::11")
	meta    = netip.MustParseAddr("169.254.169.254")
	echoAlt = uint16(81) // a port the world serves but no test pins
)

// testPrefix returns a prefix no other test (or daemon) uses.
func testPrefix() string { return "t" + strings.ToLower(rand.Text()[:5]) }

type env struct {
	prefix string
	w      *world.World
	g      *netns.Gateway
}

// newWorld starts a world with the hosts every test uses.
func newWorld(t *testing.T, p string) *world.World {
	t.Helper()
	testutil.RequiresRoot(t)
	w, err := world.Start(t.Context(), world.Config{Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close world: %v", err)
		}
	})
	for _, h := range []struct {
		name string
		ip   netip.Addr
	}{{"x.test", hostX}, {"y.test", hostY}, {"x.test", hostX6}, {"y.test", hostY6}, {"metadata.test", meta}} {
		if err := w.AddHost(h.name, h.ip); err != nil {
			t.Fatal(err)
		}
	}
	for _, ap := range []netip.AddrPort{
		netip.AddrPortFrom(hostX, echoAlt), netip.AddrPortFrom(hostX6, echoAlt),
		netip.AddrPortFrom(w.DNSAddr(), 853),
		netip.AddrPortFrom(netip.IPv4Unspecified(), 2222),
	} {
		if err := w.AddTCPEcho(ap); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// wantNoLeftovers checks that nothing with prefix p is left.
func wantNoLeftovers(t *testing.T, p string, w *world.World) {
	t.Helper()
	left, err := netns.Leftovers(netns.DefaultDir, p, w.NetnsPath())
	if err != nil {
		t.Error(err)
	}
	if len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}

// newEnv starts a world and a gateway whose uplink is the world, and
// checks at the end that closing them leaves nothing behind.
func newEnv(t *testing.T) *env {
	t.Helper()
	p := testPrefix()
	w := newWorld(t, p)
	g, err := netns.NewGateway(t.Context(), netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: w.NetnsPath()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("close gateway: %v", err)
		}
		wantNoLeftovers(t, p, w)
	})
	return &env{prefix: p, w: w, g: g}
}

func (e *env) session(t *testing.T, id string, cfg netns.SessionConfig) *netns.Session {
	t.Helper()
	s, err := e.g.AddSession(t.Context(), id, cfg)
	if err != nil {
		t.Fatalf("AddSession(%s): %v", id, err)
	}
	return s
}

func pin(t *testing.T, s *netns.Session, addr netip.Addr, ttl time.Duration, ports ...uint16) {
	t.Helper()
	if err := s.Pin(t.Context(), []netip.Addr{addr}, ports, ttl); err != nil {
		t.Fatalf("Pin(%v %v): %v", addr, ports, err)
	}
}

// get fetches url with connections made by dial, and returns the body.
func get(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), url string) (string, error) {
	c := &http.Client{
		Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

func wantGet(t *testing.T, s *netns.Session, url, body string) {
	t.Helper()
	got, err := get(t.Context(), netns.Dialer(s.NetnsPath()), url)
	if err != nil {
		t.Fatalf("session %s: GET %s: %v", s.ID(), url, err)
	}
	if got != body {
		t.Fatalf("session %s: GET %s = %q, want %q", s.ID(), url, got, body)
	}
}

// wantRejected dials addr from the session and wants a fast refusal.
func wantRejected(t *testing.T, s *netns.Session, network string, addr netip.AddrPort) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	start := time.Now()
	c, err := netns.Dialer(s.NetnsPath())(ctx, network, addr.String())
	if err == nil {
		c.Close()
		t.Fatalf("session %s: %s %v connected; want it rejected", s.ID(), network, addr)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("session %s: %s %v failed after %v (%v); want a fast rejection", s.ID(), network, addr, d, err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.EACCES) {
		t.Errorf("session %s: %s %v: %v; want connection refused or host unreachable", s.ID(), network, addr, err)
	}
}

// wantSilentDrop dials addr from the session and wants a timeout.
func wantSilentDrop(t *testing.T, s *netns.Session, addr netip.AddrPort) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	c, err := netns.Dialer(s.NetnsPath())(ctx, "tcp", addr.String())
	if err == nil {
		c.Close()
		t.Fatalf("session %s: %v connected; want it dropped", s.ID(), addr)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("session %s: %v: %v; want a timeout", s.ID(), addr, err)
	}
}

// dnsQuery asks server for name's A record from the session.
func dnsQuery(ctx context.Context, s *netns.Session, network string, server netip.AddrPort, name string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := netns.Dialer(s.NetnsPath())(ctx, network, server.String())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
	return r, err
}

// wantDrops checks that the session's counters list each of want.
func wantDrops(t *testing.T, s *netns.Session, want ...netns.Drop) netns.DropStats {
	t.Helper()
	st, err := s.Drops(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, w := range want {
		d, ok := st.Find(w.Dst, w.Port, w.Proto)
		if !ok || d.Packets == 0 {
			t.Errorf("session %s: no drop counted for %s %v:%d; have %v", s.ID(), w.Proto, w.Dst, w.Port, st.Dests)
		}
		sum += d.Packets
	}
	if st.Packets < sum {
		t.Errorf("session %s: total %d packets < itemised %d", s.ID(), st.Packets, sum)
	}
	return st
}

func ap(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }

func url(a netip.Addr, path string) string {
	return "http://" + netip.AddrPortFrom(a, 80).String() + path
}
