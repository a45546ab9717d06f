package runner

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%04x", prefix, os.Getpid()&0xffff)
}

func query(t *testing.T, n *Network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	conn, err := netns.Dialer(n.Path())(context.Background(), "udp", netip.AddrPortFrom(n.DNSAddr(), 53).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &dns.Conn{Conn: conn}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := c.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNetwork(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	name := uniqueName("bt") + "-world"
	n, err := StartNetwork(ctx, NetworkConfig{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			n.Close()
		}
	})
	ip, err := n.AddHost("jobs.bench.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "jobs %s", r.URL.Path)
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddHost("jobs.bench.test", http.NotFoundHandler()); err == nil {
		t.Error("a host was published twice")
	}
	if _, err := n.AddHost("example.com", http.NotFoundHandler()); err == nil {
		t.Error("a host outside the zone was published")
	}

	r := query(t, n, "jobs.bench.test.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != ip.String() {
		t.Errorf("A jobs.bench.test = %v", r)
	}
	if r := query(t, n, "jobs.bench.test.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Errorf("AAAA jobs.bench.test = %v, want an empty answer", r)
	}
	if r := query(t, n, "paste.bench.test.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Errorf("unknown name: rcode %d, want NXDOMAIN", r.Rcode)
	}
	if r := query(t, n, "example.com.", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Errorf("name outside the zone: rcode %d, want REFUSED", r.Rcode)
	}

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return netns.Dialer(n.Path())(ctx, network, netip.AddrPortFrom(ip, 80).String())
	}}}
	resp, err := hc.Get("http://jobs.bench.test/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "jobs /v1/jobs" {
		t.Errorf("body = %q", b)
	}
	// The world's addresses live in its namespace only.
	hostAddrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range hostAddrs {
		if strings.HasPrefix(a.String(), ip.String()+"/") || strings.HasPrefix(a.String(), n.DNSAddr().String()+"/") {
			t.Errorf("world address %v assigned in the host namespace", a)
		}
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if _, err := os.Stat(n.Path()); !os.IsNotExist(err) {
		t.Errorf("namespace left behind: %v", err)
	}
}

func TestNetworkInExistingNamespace(t *testing.T) {
	testutil.RequiresRoot(t)
	path, err := netns.Create(netns.DefaultDir, uniqueName("bx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(path) })
	addrs := func() []string {
		f, _ := os.Open(path)
		defer f.Close()
		h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		list, err := h.AddrList(nil, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, a := range list {
			if !a.IP.IsLoopback() {
				out = append(out, a.IP.String())
			}
		}
		return out
	}
	n, err := StartNetwork(context.Background(), NetworkConfig{Existing: path, DNSAddr: netip.MustParseAddr("10.214.0.53")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddHost("git.bench.test", http.NotFoundHandler()); err != nil {
		t.Fatal(err)
	}
	if got := addrs(); n.DNSAddr().String() != "10.214.0.53" || len(got) != 2 || got[0] != "10.214.0.53" {
		t.Errorf("dns %v, addresses %v", n.DNSAddr(), got)
	}
	if r := query(t, n, "git.bench.test.", dns.TypeA); len(r.Answer) != 1 {
		t.Errorf("A git.bench.test = %v", r)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if !netns.IsNetns(path) {
		t.Error("a namespace the network did not create was removed")
	}
	if got := addrs(); len(got) != 0 {
		t.Errorf("addresses left in the namespace: %v", got)
	}
	if _, err := StartNetwork(context.Background(), NetworkConfig{Existing: path + "-nope"}); err == nil {
		t.Error("a missing namespace was accepted")
	}
}

func TestCheckUplink(t *testing.T) {
	testutil.RequiresRoot(t)
	path, err := netns.Create(netns.DefaultDir, uniqueName("bu"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(path) })
	const prefix = "alfeed"
	if err := checkUplink(path, prefix); err == nil || !strings.Contains(err.Error(), "not the namespace") {
		t.Errorf("empty namespace: %v", err)
	}
	if err := checkUplink(t.TempDir(), prefix); err == nil {
		t.Error("a directory passed for a namespace")
	}
	f, _ := os.Open(path)
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: prefix + "-up"}, PeerName: prefix + "-pe"}); err != nil {
		t.Fatal(err)
	}
	if err := checkUplink(path, prefix); err != nil {
		t.Errorf("with the uplink peer: %v", err)
	}
}
