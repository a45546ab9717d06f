package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// The machine a `--uplink host` daemon runs on, built from namespaces so
// that no packet leaves this one:
//
//	host (H)   the daemon's namespace: 10.216.0.1/30 towards the world,
//	           10.217.0.1/30 towards a container, 10.218.0.1 on lo; default
//	           route to the world; TCP services on 10.216.0.1:8081 and
//	           0.0.0.0:8082; port 8080 of every host address published
//	           (DNAT, as `docker run -p 8080:80` does) to the container
//	world (W)  10.216.0.2/30, DNS and web hosts (internal/world)
//	container  10.217.0.2/30, a web server on :80
var (
	hostWorldAddr = netip.MustParseAddr("10.216.0.1")
	worldHostAddr = netip.MustParseAddr("10.216.0.2")
	hostCtrAddr   = netip.MustParseAddr("10.217.0.1")
	ctrAddr       = netip.MustParseAddr("10.217.0.2")
	hostLoAddr    = netip.MustParseAddr("10.218.0.1")
)

// TestHostUplinkKeepsSessionsOffHostServices runs a daemon with
// `--uplink host` and has a session try every way to the host's own
// services: through a name that resolves to a host address, and through
// manifest CIDRs that cover the host's addresses, on ports the host serves
// itself and on a port it publishes to a container.
func TestHostUplinkKeepsSessionsOffHostServices(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	root, err := os.MkdirTemp("/tmp", "hu-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	tag := "h" + runtime.Prefix(root)[2:]

	w, err := world.Start(ctx, world.Config{Prefix: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	okHost := netip.MustParseAddr("10.214.0.10")
	if err := w.AddHost("ok.test", okHost); err != nil {
		t.Fatal(err)
	}
	if err := w.AddRecord("hostsvc.test", hostWorldAddr); err != nil {
		t.Fatal(err)
	}
	hostNS := testNetns(t, tag+"-host")
	ctrNS := testNetns(t, tag+"-ctr")
	veth(t, hostNS, "hw0", hostWorldAddr, w.NetnsPath(), "wh0", worldHostAddr, 30)
	veth(t, hostNS, "hc0", hostCtrAddr, ctrNS, "ch0", ctrAddr, 30)
	withLink(t, hostNS, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := h.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: hostLoAddr.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		return h.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: worldHostAddr.AsSlice()})
	})
	withLink(t, ctrNS, func(h *netlink.Handle) error {
		return h.RouteAdd(&netlink.Route{Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, Gw: hostCtrAddr.AsSlice()})
	})
	publish(t, hostNS, 8080, netip.AddrPortFrom(ctrAddr, 80))

	var ctrHits, hostHits atomic.Int64
	serve(t, ctrNS, netip.AddrPortFrom(ctrAddr, 80), "published\n", &ctrHits)
	serve(t, hostNS, netip.AddrPortFrom(hostWorldAddr, 8081), "host\n", &hostHits)
	serve(t, hostNS, netip.AddrPortFrom(netip.IPv4Unspecified(), 8082), "host\n", &hostHits)

	// The daemon, in the host namespace.
	sock := filepath.Join(root, "airlock.sock")
	logf, err := os.Create(filepath.Join(root, "airlockd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+hostNS, "--", filepath.Join(h.Env.BinDir, "airlockd"),
		"--root", filepath.Join(root, "state"), "--socket", sock, "--bin-dir", h.Env.BinDir, "--runtime", h.Env.Runtime,
		"--uplink", "host", "--dns-upstream", w.DNSAddr().String(), "--allow-private", w.Net().String(),
		"--stop-containerd", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	dlog := func() string { b, _ := os.ReadFile(logf.Name()); return string(b) }
	client := api.NewClient(sock)
	defer client.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("airlockd did not stop on SIGTERM:\n%s", dlog())
		}
		prefix := netns.PrefixFor(filepath.Join(root, "state"))
		if left, err := netns.Leftovers(netns.DefaultDir, prefix, ""); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := client.Version(ctx); err == nil {
			break
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("airlockd exited (%v):\n%s", err, dlog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlockd did not come up:\n%s", dlog())
		}
	}
	img, err := os.Open(h.Env.AgentImage)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.ImportImage(ctx, daemontest.AgentImage, img)
	img.Close()
	if err != nil {
		t.Fatal(err)
	}

	// From the outside, the host's services and its published port answer.
	for _, ap := range []netip.AddrPort{
		netip.AddrPortFrom(hostWorldAddr, 8080), netip.AddrPortFrom(hostWorldAddr, 8081), netip.AddrPortFrom(hostWorldAddr, 8082),
	} {
		if out, err := fetch(w.NetnsPath(), ap); err != nil {
			t.Fatalf("from the world, %v: %v (%q)", ap, err, out)
		}
	}
	if ctrHits.Load() != 1 || hostHits.Load() != 2 {
		t.Fatalf("from the world: container %d, host %d connections, want 1 and 2", ctrHits.Load(), hostHits.Load())
	}
	ctrHits.Store(0)
	hostHits.Store(0)

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{
		Allow:        []string{"ok.test:80", "hostsvc.test", "10.216.0.0/30", hostCtrAddr.String(), hostLoAddr.String()},
		AllowPrivate: []string{"10.216.0.0/30"},
	}
	s, err := client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, dlog())
	}
	t.Cleanup(func() { _ = client.RemoveSession(context.Background(), s.ID, true) })
	run := func(args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code, err := client.Exec(ctx, s.ID, api.ExecRequest{Command: args}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec %v: %v", args, err)
		}
		return out.String(), code
	}

	// Egress through the host works: the attempts below fail for the
	// perimeter's reasons, not for want of a route.
	if out, code := run("curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://ok.test/"); code != 0 || out != "200" {
		t.Fatalf("allowed world host %v: curl exit %d %q\n%s", okHost, code, out, dlog())
	}
	out, _ := run("dig", "+time=2", "+tries=1", "hostsvc.test")
	if !strings.Contains(out, "status: REFUSED") || !strings.Contains(out, "address of the host") {
		t.Errorf("a name that resolves to a host address: want REFUSED naming the host, got\n%s", out)
	}
	for _, url := range []string{
		"http://10.216.0.1:8080/", // the published port, on the host's address
		"http://10.217.0.1:8080/", // the same on another host address
		"http://10.218.0.1:8080/",
		"http://10.216.0.1:8081/", // the host's own services
		"http://10.216.0.1:8082/",
		"http://10.217.0.1:8082/",
		"http://10.218.0.1:8082/",
	} {
		if out, code := run("curl", "-sS", "--max-time", "2", url); code == 0 || strings.Contains(out, "published") || strings.Contains(out, "host") {
			t.Errorf("the session reached %s: exit %d %q", url, code, out)
		}
	}
	if n, m := ctrHits.Load(), hostHits.Load(); n != 0 || m != 0 {
		t.Errorf("connections from the session: %d to the published container, %d to host services; want none", n, m)
	}

	evs, err := client.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Layer == "dns" && ev.Action == "refused" && ev.Subject == "hostsvc.test" && strings.Contains(fmt.Sprint(ev.Fields["dropped"]), hostWorldAddr.String()) {
			found = true
		}
	}
	if !found {
		t.Errorf("no audit event names the dropped host address; have %+v", evs)
	}

	// The uplink's host-side peer removed: the daemon rebuilds the uplink,
	// and the host table that keeps sessions off host services never goes
	// away meanwhile (it filters by the peer's name, so it may stand while
	// the peer is rebuilt): checked without pause from before the removal
	// until the new peer is in place.
	prefix := netns.PrefixFor(filepath.Join(root, "state"))
	peer, table := prefix+"-up", prefix+"-host"
	hf, err := os.Open(hostNS)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.Close()
	nc, err := nftables.New(nftables.WithNetNSFd(int(hf.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	var checks, missing atomic.Int64
	watchDone, watching := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watching)
		for {
			select {
			case <-watchDone:
				return
			default:
			}
			names, err := nft.TablesWithPrefix(nc, prefix)
			if err != nil {
				continue
			}
			checks.Add(1)
			if !slices.Contains(names, table) {
				missing.Add(1)
			}
		}
	}()
	withLink(t, hostNS, func(h *netlink.Handle) error {
		l, err := h.LinkByName(peer)
		if err != nil {
			return err
		}
		return h.LinkDel(l)
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		var up bool
		withLink(t, hostNS, func(h *netlink.Handle) error {
			l, err := h.LinkByName(peer)
			up = err == nil && l.Attrs().OperState == netlink.OperUp
			return nil
		})
		if up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the uplink's peer %s was not made again within 20s:\n%s", peer, dlog())
		}
	}
	close(watchDone)
	<-watching
	if missing.Load() > 0 || checks.Load() == 0 {
		t.Errorf("while the uplink was rebuilt, the host table %s was missing at %d of %d checks", table, missing.Load(), checks.Load())
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if out, code := run("curl", "-sS", "--max-time", "2", "-o", "/dev/null", "-w", "%{http_code}", "http://ok.test/"); code == 0 && out == "200" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session did not reach %v again after the uplink's repair:\n%s", okHost, dlog())
		}
	}
	for _, url := range []string{"http://10.216.0.1:8080/", "http://10.216.0.1:8081/", "http://10.218.0.1:8082/"} {
		if out, code := run("curl", "-sS", "--max-time", "2", url); code == 0 || strings.Contains(out, "published") || strings.Contains(out, "host") {
			t.Errorf("after the uplink's repair, the session reached %s: exit %d %q", url, code, out)
		}
	}
	if n, m := ctrHits.Load(), hostHits.Load(); n != 0 || m != 0 {
		t.Errorf("after the uplink's repair: %d connections to the published container, %d to host services; want none", n, m)
	}
}

// testNetns creates a namespace with lo up, removed at the end.
func testNetns(t *testing.T, name string) string {
	t.Helper()
	path, err := netns.Create(netns.DefaultDir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Remove(path); err != nil {
			t.Error(err)
		}
	})
	withLink(t, path, func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	})
	return path
}

// withLink runs fn with a netlink handle in the namespace at path.
func withLink(t *testing.T, path string, fn func(*netlink.Handle) error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := fn(h); err != nil {
		t.Fatal(err)
	}
}

// veth links namespace a (interface an, address aa) to b.
func veth(t *testing.T, a, an string, aa netip.Addr, b, bn string, ba netip.Addr, bits int) {
	t.Helper()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	withLink(t, a, func(h *netlink.Handle) error {
		return h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: an}, PeerName: bn, PeerNamespace: netlink.NsFd(int(fb.Fd()))})
	})
	for _, end := range []struct {
		ns, name string
		addr     netip.Addr
	}{{a, an, aa}, {b, bn, ba}} {
		withLink(t, end.ns, func(h *netlink.Handle) error {
			l, err := h.LinkByName(end.name)
			if err != nil {
				return err
			}
			if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: end.addr.AsSlice(), Mask: net.CIDRMask(bits, 32)}}); err != nil {
				return err
			}
			return h.LinkSetUp(l)
		})
	}
}

// publish DNATs TCP port on every local address of the namespace to dst,
// as `docker run -p` does.
func publish(t *testing.T, path string, port uint16, dst netip.AddrPort) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tbl := c.AddTable(&nftables.Table{Name: "publish", Family: nftables.TableFamilyINet})
	ch := c.AddChain(&nftables.Chain{Name: "prerouting", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{byte(port >> 8), byte(port)}},
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint32(nil, unix.RTN_LOCAL)},
		&expr.Immediate{Register: 1, Data: dst.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: []byte{byte(dst.Port() >> 8), byte(dst.Port())}},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// serve answers every TCP connection on ap in the namespace with msg and
// counts it.
func serve(t *testing.T, path string, ap netip.AddrPort, msg string, hits *atomic.Int64) {
	t.Helper()
	l, err := netns.Listen(path, "tcp", ap.String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write([]byte("HTTP/1.0 200 OK\r\nContent-Length: " + fmt.Sprint(len(msg)) + "\r\n\r\n" + msg))
			c.Close()
		}
	}()
}

// fetch connects to ap from the namespace at path and reads the reply.
func fetch(path string, ap netip.AddrPort) (string, error) {
	var c net.Conn
	err := netns.Do(path, func() error {
		var err error
		c, err = net.DialTimeout("tcp", ap.String(), 3*time.Second)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	var b bytes.Buffer
	_, err = b.ReadFrom(c)
	return b.String(), err
}
