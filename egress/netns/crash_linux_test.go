package netns_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/world"
)

const (
	crashPrefixEnv = "AIRLOCK_NETNS_CRASH_PREFIX"
	crashUplinkEnv = "AIRLOCK_NETNS_CRASH_UPLINK"
	// Leftovers of a crash in the middle of AddSession.
	orphanNetns = "-s-00000000ff"
	orphanIface = "s-00000000aa"
)

// TestCrashHelper is not a test: run by crashDaemon in a child process, it
// builds a gateway with two pinned sessions and half a third, and exits
// without cleaning up, as a daemon killed mid-flight would.
func TestCrashHelper(t *testing.T) {
	p := os.Getenv(crashPrefixEnv)
	if p == "" {
		return
	}
	if err := crashHelper(p, os.Getenv(crashUplinkEnv)); err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	os.Exit(0)
}

func crashHelper(p, uplink string) error {
	ctx := context.Background()
	g, err := netns.NewGateway(ctx, netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: uplink}})
	if err != nil {
		return err
	}
	for _, id := range []string{"crash-a", "crash-b"} {
		s, err := g.AddSession(ctx, id, netns.SessionConfig{IPv6: id == "crash-b"})
		if err != nil {
			return err
		}
		if err := s.Pin(ctx, []netip.Addr{hostX}, []uint16{80}, time.Minute); err != nil {
			return err
		}
	}
	// Half a session: a namespace, and a veth without rules or id.
	if _, err := netns.Create(netns.DefaultDir, p+orphanNetns); err != nil {
		return err
	}
	f, err := os.Open(g.NetnsPath())
	if err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return err
	}
	return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: orphanIface}, PeerName: orphanIface + "p"})
}

// crashDaemon runs TestCrashHelper in a child process with prefix p and
// the world as its uplink.
func crashDaemon(t *testing.T, p string, w *world.World) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashPrefixEnv+"="+p, crashUplinkEnv+"="+w.NetnsPath())
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("ready")) {
		t.Fatalf("crash helper: %v\n%s", err, out)
	}
	left, err := netns.Leftovers(netns.DefaultDir, p, w.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"netns " + filepath.Join(netns.DefaultDir, p+"-gw"),
		"netns " + filepath.Join(netns.DefaultDir, p+orphanNetns),
		"link " + p + "-up in " + w.NetnsPath(),
	} {
		if !slices.Contains(left, want) {
			t.Fatalf("after the crash, Leftovers = %v; want it to list %q", left, want)
		}
	}
}

func TestCrashCleanup(t *testing.T) {
	t.Parallel()
	p := testPrefix()
	w := newWorld(t, p)
	crashDaemon(t, p, w)
	if err := netns.Cleanup(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	wantNoLeftovers(t, p, w)
	// Cleaning up nothing is fine.
	if err := netns.Cleanup(t.Context(), p); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
	// The prefix is free again.
	g, err := netns.NewGateway(t.Context(), netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: w.NetnsPath()}})
	if err != nil {
		t.Fatalf("NewGateway after Cleanup: %v", err)
	}
	if err := g.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantNoLeftovers(t, p, w)
}

func TestCrashAdopt(t *testing.T) {
	t.Parallel()
	p := testPrefix()
	w := newWorld(t, p)
	crashDaemon(t, p, w)
	cfg := netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: w.NetnsPath()}}
	if _, err := netns.NewGateway(t.Context(), cfg); err == nil {
		t.Fatal("NewGateway over a running gateway succeeded")
	}
	// Another pool: adoption refuses and tears nothing down.
	other := cfg
	other.Pool = netip.MustParsePrefix("10.99.0.0/16")
	if _, err := netns.AdoptGateway(t.Context(), other); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("AdoptGateway with another pool = %v, want failed precondition", err)
	}
	g, err := netns.AdoptGateway(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		wantNoLeftovers(t, p, w)
	})

	var ids []string
	for _, s := range g.Sessions() {
		ids = append(ids, s.ID())
	}
	if !slices.Equal(ids, []string{"crash-a", "crash-b"}) {
		t.Fatalf("adopted sessions %v, want crash-a and crash-b", ids)
	}
	a, err := g.Session("crash-a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := g.Session("crash-b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr6().IsValid() || !b.Addr6().IsValid() {
		t.Errorf("adopted IPv6: a %v, b %v; want only b", a.Addr6(), b.Addr6())
	}
	if got, err := g.SessionByAddr(b.Addr()); err != nil || got != b {
		t.Errorf("SessionByAddr(%v) = %v, %v", b.Addr(), got, err)
	}
	// The half-made session is gone.
	if netns.IsNetns(filepath.Join(netns.DefaultDir, p+orphanNetns)) {
		t.Error("orphan session namespace survived adoption")
	}
	if g.HasLink(orphanIface) {
		t.Error("orphan session veth survived adoption")
	}
	// Pins made before the crash still hold, and new ones work.
	pins, err := a.Pinned(t.Context())
	if err != nil || len(pins) != 1 || pins[0].Addr != hostX || pins[0].Port != 80 {
		t.Errorf("adopted pins = %v, %v", pins, err)
	}
	wantGet(t, a, url(hostX, "/"), "x.test")
	wantRejected(t, a, "tcp", ap(hostY, 80))
	pin(t, a, hostY, time.Minute, 80)
	wantGet(t, a, url(hostY, "/"), "y.test")
	wantDrops(t, a, netns.Drop{Dst: hostY, Port: 80, Proto: "tcp"})

	// New sessions get fresh addresses.
	c, err := g.AddSession(t.Context(), "after-restart", netns.SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*netns.Session{a, b} {
		if c.Addr() == o.Addr() {
			t.Errorf("new session got adopted session %s's address %v", o.ID(), o.Addr())
		}
	}
	if err := g.RemoveSession(t.Context(), "crash-a"); err != nil {
		t.Fatal(err)
	}
	if netns.IsNetns(a.NetnsPath()) {
		t.Error("removed adopted session's namespace survives")
	}
}

// TestNetnsDo checks that Do runs in the namespace and returns to the
// original one.
func TestNetnsDo(t *testing.T) {
	t.Parallel()
	p := testPrefix()
	w := newWorld(t, p)
	var inside []string
	if err := netns.Do(w.NetnsPath(), func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			inside = append(inside, i.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inside, []string{"lo"}) {
		t.Errorf("interfaces in the world: %v, want just lo", inside)
	}
	wantErr := fmt.Errorf("boom")
	if err := netns.Do(w.NetnsPath(), func() error { return wantErr }); err != wantErr {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if err := netns.Do("/proc/self/status", func() error { return nil }); err == nil {
		t.Error("Do on a file that is not a namespace succeeded")
	}
	if _, err := netns.Create(netns.DefaultDir, p+"-world"); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("Create over an existing namespace = %v", err)
	}
}

// TestAdoptAddsL7 adopts a gateway made before the L7 gateway's
// prerouting chain and map existed: adoption adds them, and a session with
// L7 ports can then be created.
func TestAdoptAddsL7(t *testing.T) {
	t.Parallel()
	p := testPrefix()
	w := newWorld(t, p)
	cfg := netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: w.NetnsPath()}}
	g, err := netns.NewGateway(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(g.NetnsPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Name: p, Family: nftables.TableFamilyINet}
	c.DelChain(&nftables.Chain{Name: nft.ChainPrerouting, Table: tbl})
	c.DelSet(&nftables.Set{Name: "l7-sessions", Table: tbl})
	if err := c.Flush(); err != nil {
		t.Fatalf("strip the L7 objects: %v", err)
	}
	netns.Release(g)

	g, err = netns.AdoptGateway(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		wantNoLeftovers(t, p, w)
	})
	if _, err := c.ListChain(tbl, nft.ChainPrerouting); err != nil {
		t.Errorf("the adopted gateway has no prerouting chain: %v", err)
	}
	if _, err := g.AddSession(t.Context(), "l7", netns.SessionConfig{L7Ports: []uint16{80, 443}}); err != nil {
		t.Errorf("a session with L7 ports on the adopted gateway: %v", err)
	}
}
