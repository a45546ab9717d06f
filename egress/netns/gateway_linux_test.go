package netns_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestGatewayPerimeter drives two sessions side by side through everything
// the perimeter must refuse, and checks what it must allow.
func TestGatewayPerimeter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.session(t, "session-a", netns.SessionConfig{})
	b := e.session(t, "session-b", netns.SessionConfig{})
	if a.Addr() == b.Addr() || a.Resolver() == b.Resolver() {
		t.Fatalf("sessions share addresses: %v/%v and %v/%v", a.Addr(), a.Resolver(), b.Addr(), b.Resolver())
	}

	// A DNS proxy stand-in on the gateway, 0.0.0.0:53, and another
	// service on the gateway that no session may reach.
	startGatewayDNS(t, e.g)
	var gwListener net.Listener
	if err := e.g.Do(func() error {
		var err error
		gwListener, err = net.Listen("tcp", "0.0.0.0:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gwListener.Close() })
	go func() {
		for {
			c, err := gwListener.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	t.Run("nothing before a pin", func(t *testing.T) {
		wantRejected(t, a, "tcp", ap(hostX, 80))
	})
	before := wantDrops(t, a, netns.Drop{Dst: hostX, Port: 80, Proto: "tcp"})

	pin(t, a, hostX, time.Minute, 80)
	t.Run("pinned address and port", func(t *testing.T) {
		wantGet(t, a, url(hostX, "/"), "x.test")
	})
	t.Run("pinned address, other port", func(t *testing.T) {
		wantRejected(t, a, "tcp", ap(hostX, echoAlt))
	})
	t.Run("unpinned address", func(t *testing.T) {
		wantRejected(t, a, "tcp", ap(hostY, 80))
	})
	t.Run("other session's pins", func(t *testing.T) {
		wantRejected(t, b, "tcp", ap(hostX, 80))
	})

	t.Run("resolver on the gateway", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			r, err := dnsQuery(t.Context(), a, network, ap(a.Resolver(), 53), "x.test")
			if err != nil || len(r.Answer) != 1 {
				t.Errorf("%s query to the gateway resolver: %v %v", network, r, err)
			}
		}
	})
	t.Run("other resolvers, even pinned", func(t *testing.T) {
		pin(t, a, e.w.DNSAddr(), time.Minute) // any port
		for _, network := range []string{"udp", "tcp"} {
			if r, err := dnsQuery(t.Context(), a, network, ap(e.w.DNSAddr(), 53), "leak-"+network+".test"); err == nil {
				t.Errorf("%s query to the world's DNS answered: %v", network, r)
			}
		}
		for _, q := range e.w.DNSLog() {
			if q.Name == "leak-udp.test." || q.Name == "leak-tcp.test." {
				t.Errorf("world DNS received %v", q)
			}
		}
		wantRejected(t, a, "tcp", ap(e.w.DNSAddr(), 53))
		wantRejected(t, a, "tcp", ap(e.w.DNSAddr(), 853))
	})
	t.Run("gateway beyond the resolver", func(t *testing.T) {
		// The gateway's own listener works from the gateway...
		c, err := e.g.Dialer()(t.Context(), "tcp", ap(a.Resolver(), 8080).String())
		if err != nil {
			t.Fatalf("control: dial from the gateway: %v", err)
		}
		c.Close()
		// ...but not from a session, on any gateway address.
		pin(t, a, e.g.UplinkAddr(), time.Minute)
		wantRejected(t, a, "tcp", ap(a.Resolver(), 8080))
		wantRejected(t, a, "tcp", ap(e.g.UplinkAddr(), 8080))
		wantRejected(t, a, "tcp", ap(e.g.UplinkAddr(), 53))
		wantRejected(t, a, "tcp", ap(b.Resolver(), 53))
	})
	t.Run("uplink peer (the host side)", func(t *testing.T) {
		c, err := e.g.Dialer()(t.Context(), "tcp", ap(e.g.UplinkPeerAddr(), 2222).String())
		if err != nil {
			t.Fatalf("control: dial the uplink peer from the gateway: %v", err)
		}
		c.Close()
		pin(t, a, e.g.UplinkPeerAddr(), time.Minute)
		wantRejected(t, a, "tcp", ap(e.g.UplinkPeerAddr(), 2222))
	})
	t.Run("metadata address", func(t *testing.T) {
		if body, err := get(t.Context(), e.g.Dialer(), url(meta, "/")); err != nil || body != "metadata.test" {
			t.Fatalf("control: metadata server from the gateway: %q %v", body, err)
		}
		pin(t, a, meta, time.Minute, 80)
		wantRejected(t, a, "tcp", ap(meta, 80))
	})
	t.Run("other sessions", func(t *testing.T) {
		pin(t, a, b.Addr(), time.Minute)
		wantRejected(t, a, "tcp", ap(b.Addr(), 80))
	})
	t.Run("ICMP", func(t *testing.T) {
		pin(t, a, hostX, time.Minute) // any port: still no ICMP
		if err := ping(t.Context(), a, hostX); err == nil {
			t.Error("ping through the gateway got a reply")
		}
	})
	t.Run("IPv6 without ipv6", func(t *testing.T) {
		// The session has no IPv6; give it some behind the gateway's back,
		// as a sandbox with CAP_NET_ADMIN could, and the gateway still
		// refuses it.
		if err := netns.ForceIPv6(e.g, a); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if c, err := netns.Dialer(a.NetnsPath())(ctx, "tcp", ap(hostX6, 80).String()); err == nil {
			c.Close()
			t.Fatal("IPv6 connection from a session without IPv6 went through")
		}
	})
	t.Run("drop counters", func(t *testing.T) {
		st := wantDrops(t, a,
			netns.Drop{Dst: hostX, Port: echoAlt, Proto: "tcp"},
			netns.Drop{Dst: hostY, Port: 80, Proto: "tcp"},
			netns.Drop{Dst: e.w.DNSAddr(), Port: 53, Proto: "udp"},
			netns.Drop{Dst: e.w.DNSAddr(), Port: 53, Proto: "tcp"},
			netns.Drop{Dst: e.w.DNSAddr(), Port: 853, Proto: "tcp"},
			netns.Drop{Dst: a.Resolver(), Port: 8080, Proto: "tcp"},
			netns.Drop{Dst: e.g.UplinkAddr(), Port: 53, Proto: "tcp"},
			netns.Drop{Dst: e.g.UplinkPeerAddr(), Port: 2222, Proto: "tcp"},
			netns.Drop{Dst: meta, Port: 80, Proto: "tcp"},
			netns.Drop{Dst: b.Addr(), Port: 80, Proto: "tcp"},
			netns.Drop{Dst: hostX, Port: 0, Proto: "icmp"},
			netns.Drop{Dst: hostX6, Port: 80, Proto: "tcp"},
		)
		x0, _ := before.Find(hostX, 80, "tcp")
		if x, _ := st.Find(hostX, 80, "tcp"); x.Packets != x0.Packets {
			t.Errorf("allowed traffic counted as dropped: %d packets to %v:80 before the pin, %d after", x0.Packets, hostX, x.Packets)
		}
		stB := wantDrops(t, b, netns.Drop{Dst: hostX, Port: 80, Proto: "tcp"})
		if _, ok := stB.Find(hostY, 80, "tcp"); ok {
			t.Errorf("session b has session a's drops: %v", stB.Dests)
		}
		got, err := e.g.DropCounters(t.Context(), a.ID())
		if err != nil || got.Packets < st.Packets {
			t.Errorf("DropCounters = %v, %v; want at least %d packets", got, err, st.Packets)
		}
		// A new attempt shows up as a delta.
		wantRejected(t, a, "tcp", ap(hostY, 80))
		after, err := a.Drops(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		delta := after.Since(st)
		if len(delta) != 1 || delta[0].Dst != hostY || delta[0].Port != 80 {
			t.Errorf("Since = %v, want one entry for %v:80", delta, hostY)
		}
	})
}

// startGatewayDNS answers every A query with 192.0.2.1 on 0.0.0.0:53 in
// the gateway, as the DNS proxy would listen.
func startGatewayDNS(t *testing.T, g *netns.Gateway) {
	t.Helper()
	var pc net.PacketConn
	var l net.Listener
	if err := g.Do(func() error {
		var err error
		if pc, err = net.ListenPacket("udp", "0.0.0.0:53"); err != nil {
			return err
		}
		l, err = net.Listen("tcp", "0.0.0.0:53")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{
			Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1},
			A:   net.IPv4(192, 0, 2, 1),
		}}
		_ = w.WriteMsg(m)
	})
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the servers' Shutdown below
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() { _ = s.Shutdown() })
	}
}

// ping sends one ICMP echo request from the session and waits a second for
// the reply.
func ping(ctx context.Context, s *netns.Session, dst netip.Addr) error {
	var c *icmp.PacketConn
	if err := netns.Do(s.NetnsPath(), func() error {
		var err error
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 1, Data: []byte("airlock")}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			return err
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err == nil && m.Type == ipv4.ICMPTypeEchoReply && from.String() == dst.String() {
			return nil
		}
	}
}

func TestGatewayIPv6(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.session(t, "v6", netns.SessionConfig{IPv6: true})
	if !s.Addr6().IsValid() || !netns.DefaultPool6.Contains(s.Addr6()) {
		t.Fatalf("Addr6 = %v, want an address in %v", s.Addr6(), netns.DefaultPool6)
	}
	wantRejected(t, s, "tcp", ap(hostX6, 80))
	pin(t, s, hostX6, time.Minute, 80)
	wantGet(t, s, "http://"+ap(hostX6, 80).String()+"/", "x.test")
	wantRejected(t, s, "tcp", ap(hostX6, echoAlt))
	wantRejected(t, s, "tcp", ap(hostY6, 80))
	// IPv4 still works alongside.
	pin(t, s, hostX, time.Minute, 80)
	wantGet(t, s, url(hostX, "/"), "x.test")
	wantDrops(t, s, netns.Drop{Dst: hostX6, Port: echoAlt, Proto: "tcp"}, netns.Drop{Dst: hostY6, Port: 80, Proto: "tcp"})

	// A session without IPv6 ignores IPv6 pins.
	v4 := e.session(t, "v4", netns.SessionConfig{})
	pin(t, v4, hostX6, time.Minute, 80)
	pins, err := v4.Pinned(t.Context())
	if err != nil || len(pins) != 0 {
		t.Errorf("IPv4-only session pinned %v (%v)", pins, err)
	}
}

func TestGatewayPinExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.session(t, "expiry", netns.SessionConfig{})
	start := time.Now()
	pin(t, s, hostX, time.Second, 80)
	wantGet(t, s, url(hostX, "/"), "x.test")

	// A long pin is not cut short by a later short one.
	pin(t, s, hostY, time.Minute, 80)
	pin(t, s, hostY, time.Second, 80)

	var expired bool
	for time.Since(start) < 6*time.Second {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		c, err := netns.Dialer(s.NetnsPath())(ctx, "tcp", ap(hostX, 80).String())
		cancel()
		if err != nil {
			expired = true
			break
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
	}
	if !expired {
		t.Fatal("pin with a 1s TTL still allows connections after 6s")
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("pin expired after %v, before its TTL", d)
	}
	wantRejected(t, s, "tcp", ap(hostX, 80))
	wantGet(t, s, url(hostY, "/"), "y.test")

	// Pinning again restores access.
	pin(t, s, hostX, time.Minute, 80)
	wantGet(t, s, url(hostX, "/"), "x.test")
}

// TestGatewayPinKeptAndRenewed: a pin asked again for no longer than the
// entry has left is not written again (the kernel's entry keeps its
// expiry), one asked for longer is; after a revision removed the entry,
// the same pin adds it back.
func TestGatewayPinKeptAndRenewed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.session(t, "renew", netns.SessionConfig{})
	left := func() time.Duration {
		t.Helper()
		pins, err := s.Pinned(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pins {
			if p.Addr == hostX && p.Port == 80 {
				return p.Expires
			}
		}
		return 0
	}
	pin(t, s, hostX, 30*time.Second, 80)
	time.Sleep(500 * time.Millisecond)
	pin(t, s, hostX, 29*time.Second, 80)
	if l := left(); l > 29700*time.Millisecond || l < 25*time.Second {
		t.Errorf("pinned for 30s, asked again for 29s after 0.5s: %v left, want about 29.5s (left alone)", l)
	}
	pin(t, s, hostX, time.Minute, 80)
	if l := left(); l < 55*time.Second {
		t.Errorf("asked for a minute: %v left", l)
	}
	wantGet(t, s, url(hostX, "/"), "x.test")

	if _, err := s.Revise(t.Context(), netns.SessionConfig{}, []netns.Pinning{{Addr: hostX, Port: 80}}, nil); err != nil {
		t.Fatal(err)
	}
	if l := left(); l != 0 {
		t.Fatalf("after the revision removed it, the entry has %v left", l)
	}
	wantRejected(t, s, "tcp", ap(hostX, 80))
	pin(t, s, hostX, 30*time.Second, 80)
	if l := left(); l < 25*time.Second {
		t.Errorf("pinned again after the revision: %v left", l)
	}
	wantGet(t, s, url(hostX, "/"), "x.test")
}

func TestGatewayDropMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	drop := e.session(t, "drop", netns.SessionConfig{Drop: true})
	reject := e.session(t, "reject", netns.SessionConfig{})
	for _, s := range []*netns.Session{drop, reject} {
		pin(t, s, hostX, time.Minute, 80)
		wantGet(t, s, url(hostX, "/"), "x.test")
	}
	wantSilentDrop(t, drop, ap(hostX, echoAlt))
	wantSilentDrop(t, drop, ap(drop.Resolver(), 8080))
	wantRejected(t, reject, "tcp", ap(hostX, echoAlt))
	wantDrops(t, drop, netns.Drop{Dst: hostX, Port: echoAlt, Proto: "tcp"}, netns.Drop{Dst: drop.Resolver(), Port: 8080, Proto: "tcp"})
}

func TestGatewayCIDRRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	z1, z2 := netip.MustParseAddr("10.214.0.33"), netip.MustParseAddr("10.214.0.40")
	for _, ip := range []netip.Addr{z1, z2} {
		if err := e.w.AddHost("z.test", ip); err != nil {
			t.Fatal(err)
		}
	}
	s := e.session(t, "cidr", netns.SessionConfig{
		Allow: []netns.Rule{{Prefix: netip.MustParsePrefix("10.214.0.32/28"), Port: 80}, {Prefix: netip.MustParsePrefix("169.254.0.0/16")}},
		Deny:  []netns.Rule{{Prefix: netip.MustParsePrefix("10.214.0.40/32")}},
	})
	wantGet(t, s, url(z1, "/"), "z.test")
	wantRejected(t, s, "tcp", ap(z1, 7))
	wantRejected(t, s, "tcp", ap(z2, 80))
	pin(t, s, z2, time.Minute, 80)
	wantRejected(t, s, "tcp", ap(z2, 80)) // deny wins over pins
	wantRejected(t, s, "tcp", ap(meta, 80))
}

func TestGatewayManySessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 6
	hosts := make([]netip.Addr, n)
	sessions := make([]*netns.Session, n)
	for i := range n {
		hosts[i] = netip.AddrFrom4([4]byte{10, 214, 0, byte(100 + i)})
		if err := e.w.AddHost("h"+string(rune('a'+i))+".test", hosts[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sessions[i], errs[i] = e.g.AddSession(t.Context(), "many-"+string(rune('a'+i)), netns.SessionConfig{})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for i, s := range sessions {
		if seen[s.Addr()] {
			t.Fatalf("address %v handed out twice", s.Addr())
		}
		seen[s.Addr()] = true
		pin(t, s, hosts[i], time.Minute, 80)
	}
	for i, s := range sessions {
		t.Run(s.ID(), func(t *testing.T) {
			t.Parallel()
			wantGet(t, s, url(hosts[i], "/"), "h"+string(rune('a'+i))+".test")
			for j, h := range hosts {
				if j != i {
					wantRejected(t, s, "tcp", ap(h, 80))
				}
			}
		})
	}
}

func TestGatewayRemoveSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.session(t, "gone", netns.SessionConfig{})
	keep := e.session(t, "kept", netns.SessionConfig{})
	pin(t, s, hostX, time.Minute, 80)
	pin(t, keep, hostX, time.Minute, 80)
	// An established connection survives nothing: after removal the
	// session's conntrack entries are gone too.
	if err := e.g.RemoveSession(t.Context(), s.ID()); err != nil {
		t.Fatal(err)
	}
	if err := e.g.RemoveSession(t.Context(), s.ID()); !errdefs.IsNotFound(err) {
		t.Errorf("second RemoveSession = %v, want not found", err)
	}
	if err := s.Pin(t.Context(), []netip.Addr{hostX}, nil, time.Minute); !errdefs.IsNotFound(err) {
		t.Errorf("Pin on a removed session = %v, want not found", err)
	}
	if netns.IsNetns(s.NetnsPath()) {
		t.Errorf("%s still mounted", s.NetnsPath())
	}
	if e.g.HasLink(s.Interface()) {
		t.Errorf("veth %s still exists", s.Interface())
	}
	if got := e.g.Sessions(); len(got) != 1 || got[0] != keep {
		t.Errorf("Sessions = %v, want only %s", got, keep.ID())
	}
	if _, err := e.g.SessionByAddr(s.Addr()); !errdefs.IsNotFound(err) {
		t.Errorf("SessionByAddr(removed) = %v", err)
	}
	if got, err := e.g.SessionByAddr(keep.Addr()); err != nil || got != keep {
		t.Errorf("SessionByAddr(%v) = %v, %v", keep.Addr(), got, err)
	}
	wantGet(t, keep, url(hostX, "/"), "x.test")
	if _, err := e.g.AddSession(t.Context(), keep.ID(), netns.SessionConfig{}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("AddSession of an existing id = %v, want already exists", err)
	}
	if _, err := e.g.AddSession(t.Context(), "bad/id", netns.SessionConfig{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("AddSession with a bad id = %v, want invalid argument", err)
	}
	// The id can be reused.
	again := e.session(t, "gone", netns.SessionConfig{})
	wantRejected(t, again, "tcp", ap(hostX, 80))
}

func TestGatewayExists(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := netns.NewGateway(t.Context(), netns.Config{Prefix: e.prefix, Uplink: netns.Uplink{Netns: e.w.NetnsPath()}})
	if !errdefs.IsAlreadyExists(err) {
		t.Errorf("second netns.NewGateway = %v, want already exists", err)
	}
	_, err = netns.NewGateway(t.Context(), netns.Config{Prefix: testPrefix(), Uplink: netns.Uplink{Netns: "/run/netns/does-not-exist"}})
	if !errdefs.IsNotFound(err) {
		t.Errorf("netns.NewGateway with a missing uplink namespace = %v, want not found", err)
	}
	_, err = netns.NewGateway(t.Context(), netns.Config{Prefix: testPrefix()})
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("netns.NewGateway without an uplink = %v, want invalid argument", err)
	}
	_, err = netns.AdoptGateway(t.Context(), netns.Config{Prefix: testPrefix(), Uplink: netns.Uplink{Netns: e.w.NetnsPath()}})
	if !errdefs.IsNotFound(err) {
		t.Errorf("netns.AdoptGateway of nothing = %v, want not found", err)
	}
	got := slices.Collect(func(yield func(string) bool) {
		for _, s := range e.g.Sessions() {
			yield(s.ID())
		}
	})
	if len(got) != 0 {
		t.Errorf("fresh gateway has sessions %v", got)
	}
}
