package netns_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/world"
)

// TestNSDialer dials from the world's namespace with an NSDialer: TCP and
// UDP reach the world's echo servers (which the host's namespace has no
// route to), a closed port is refused, a cancelled dial fails without
// connecting, and a closed dialer dials no more.
func TestNSDialer(t *testing.T) {
	t.Parallel()
	w := newWorld(t, testPrefix())
	udpEcho := netip.AddrPortFrom(hostY, echoAlt)
	if err := w.AddUDPEcho(udpEcho); err != nil {
		t.Fatal(err)
	}
	d, err := netns.NewDialer(w.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	echo := func(network string, ap netip.AddrPort) {
		t.Helper()
		c, err := d.DialContext(t.Context(), network, ap.String())
		if err != nil {
			t.Fatalf("dial %s %v: %v", network, ap, err)
		}
		defer c.Close()
		if got := c.RemoteAddr().String(); got != ap.String() {
			t.Errorf("%s: remote address %s, want %v", network, got, ap)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Errorf("%s echo from %v: %q, %v", network, ap, buf, err)
		}
	}
	for range 3 {
		echo("tcp", netip.AddrPortFrom(hostX, echoAlt))
	}
	echo("tcp6", netip.AddrPortFrom(hostX6, echoAlt))
	echo("udp", udpEcho)

	_, err = d.DialContext(t.Context(), "tcp", netip.AddrPortFrom(hostX, 1).String())
	var op *net.OpError
	if !errors.Is(err, syscall.ECONNREFUSED) || !errors.As(err, &op) || op.Op != "dial" {
		t.Errorf("dial to a closed port: %v, want a dial error: connection refused", err)
	}
	if _, err := d.DialContext(t.Context(), "tcp4", netip.AddrPortFrom(hostX6, echoAlt).String()); err == nil {
		t.Error("tcp4 to an IPv6 address dialled")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(hostX, echoAlt).String()); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dial: %v, %v", c, err)
	}

	d.Close()
	if _, err := d.DialContext(t.Context(), "tcp", netip.AddrPortFrom(hostX, echoAlt).String()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("dial after Close: %v", err)
	}
	if _, err := netns.NewDialer("/proc/self/status"); err == nil {
		t.Error("NewDialer on a file that is not a namespace succeeded")
	}
}

// BenchmarkDial dials a TCP connection from the world's namespace and
// closes it: Dialer enters the namespace on every dial, NSDialer made its
// sockets on a thread that stays there.
func BenchmarkDial(b *testing.B) {
	w, err := world.Start(b.Context(), world.Config{Prefix: testPrefix()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ap := netip.AddrPortFrom(hostX, echoAlt)
	if err := w.AddTCPEcho(ap); err != nil {
		b.Fatal(err)
	}
	d, err := netns.NewDialer(w.NetnsPath())
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	for _, bc := range []struct {
		name string
		dial netns.DialFunc
	}{{"Dialer", netns.Dialer(w.NetnsPath())}, {"NSDialer", d.DialContext}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := bc.dial(b.Context(), "tcp", ap.String())
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
