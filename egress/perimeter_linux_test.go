package egress_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/google/nftables"
	"github.com/miekg/dns"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

var (
	allowedHost = netip.MustParseAddr("10.214.0.10")
	deniedHost  = netip.MustParseAddr("10.214.0.11")
)

// auditLog collects the events a perimeter reports, as a daemon's audit
// log would.
type auditLog struct {
	mu  sync.Mutex
	evs []api.AuditEvent
}

func (a *auditLog) emit(_ context.Context, ev api.AuditEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, ev)
}

// find returns the first event of session id with layer, action and
// subject.
func (a *auditLog) find(id, layer, action, subject string) (api.AuditEvent, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range a.evs {
		if ev.Session == id && ev.Layer == layer && ev.Action == action && ev.Subject == subject {
			return ev, true
		}
	}
	return api.AuditEvent{}, false
}

// TestPerimeter opens a perimeter on a world, gives sessions their
// networks, checks from inside them what the allowlist lets through and
// what the audit saw, removes them, and closes the perimeter: the
// gateway stays while a session uses it, is adopted again by the next
// perimeter, and goes with the last session.
func TestPerimeter(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close world: %v", err)
		}
	})
	for name, ip := range map[string]netip.Addr{"allowed.test": allowedHost, "denied.test": deniedHost} {
		if err := w.AddHost(name, ip); err != nil {
			t.Fatal(err)
		}
	}
	// A service on the allowed host that sees its clients' addresses.
	svc, err := netns.Listen(w.NetnsPath(), "tcp", netip.AddrPortFrom(allowedHost, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })

	cfg := egress.Config{
		Uplink:       "netns:" + w.NetnsName(),
		DNSUpstreams: []string{w.DNSAddr().String()},
		AllowPrivate: []netip.Prefix{w.Net()},
	}
	p, err := egress.Open(ctx, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatal("Open with an uplink returned no perimeter")
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = p.Close(context.Background())
		}
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	gwPath := filepath.Join(netns.DefaultDir, prefix+"-gw")

	eg := &policies.Egress{Allow: []string{"allowed.test:80", "allowed.test:8080"}}
	var audit auditLog
	s1 := addSession(t, p, "s1", eg, &audit)
	s2 := addSession(t, p, "s2", eg, &audit)
	s3 := addSession(t, p, "s3", eg, &audit)
	for _, id := range []string{"s1", "s2", "s3"} {
		if objs := sessionObjects(t, gwPath, prefix, id); len(objs) < 3 {
			t.Fatalf("session %s: objects %v; want its netns, veth, chains and sets", id, objs)
		}
	}

	t.Run("allowed name resolves and connects", func(t *testing.T) {
		r := query(t, s1, "allowed.test")
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != allowedHost.String() {
			t.Fatalf("allowed.test: %v", r)
		}
		c := dial(t, s1, netip.AddrPortFrom(allowedHost, 8080))
		defer c.Close()
		sc, err := svc.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		client := netip.MustParseAddrPort(sc.RemoteAddr().String())
		server := netip.MustParseAddrPort(sc.LocalAddr().String())
		if id, err := p.SessionOfFlow(ctx, client, server, "tcp"); err != nil || id != "s1" {
			t.Errorf("SessionOfFlow(%v -> %v) = %q, %v; want s1", client, server, id, err)
		}
		if _, ok := audit.find("s1", "dns", "allowed", "allowed.test"); !ok {
			t.Errorf("audit lacks the allowed query: %v", audit.evs)
		}
	})
	t.Run("denied name is refused", func(t *testing.T) {
		r := query(t, s1, "denied.test")
		if r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Fatalf("denied.test: %v; want REFUSED", r)
		}
		ev, ok := audit.find("s1", "dns", "refused", "denied.test")
		if !ok || ev.Reason == "" || ev.Fields["rcode"] != "REFUSED" {
			t.Errorf("audit of the refused query: %+v (found %v) in %v", ev, ok, audit.evs)
		}
		if w.Queried("denied.test.") {
			t.Error("the refused name was forwarded upstream")
		}
	})
	t.Run("unpinned address is blocked and counted", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		if c, err := netns.Dialer(s1.NetnsPath())(ctx, "tcp", netip.AddrPortFrom(deniedHost, 80).String()); err == nil {
			c.Close()
			t.Fatal("connected to an address no answer pinned")
		}
		subject := netip.AddrPortFrom(deniedHost, 80).String()
		if !slices.ContainsFunc(p.Drops(ctx, "s1"), func(ev api.AuditEvent) bool { return ev.Layer == "net" && ev.Subject == subject }) {
			t.Errorf("live drops of s1 lack %s: %v", subject, p.Drops(ctx, "s1"))
		}
		if _, ok := audit.find("s1", "net", "dropped", subject); ok {
			t.Error("a drop reached the audit before the network was removed")
		}
	})

	if err := p.Remove(ctx, "s1", audit.emit); err != nil {
		t.Fatal(err)
	}
	ev, ok := audit.find("s1", "net", "dropped", netip.AddrPortFrom(deniedHost, 80).String())
	if !ok || ev.Fields["proto"] != "tcp" || ev.Fields["packets"].(uint64) == 0 {
		t.Errorf("Remove's drop event: %+v (found %v)", ev, ok)
	}
	if objs := sessionObjects(t, gwPath, prefix, "s1"); len(objs) > 0 {
		t.Errorf("s1 left after Remove: %v", objs)
	}
	if objs := sessionObjects(t, gwPath, prefix, "s2"); len(objs) < 3 {
		t.Errorf("Remove of s1 took s2's objects: left %v", objs)
	}
	if err := p.Remove(ctx, "s1", audit.emit); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := os.Stat(s1.ResolvConf()); err != nil {
		t.Errorf("the caller's resolv.conf: %v", err)
	}

	// Closed with sessions still using it, the gateway stays for the next
	// perimeter, which re-registers the running session and removes the
	// others' networks.
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	if !netns.IsNetns(gwPath) {
		t.Fatal("the gateway went while sessions used it")
	}
	p, err = egress.Open(ctx, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed = false
	var audit2 auditLog
	p.Reconcile(ctx, func(id string) *egress.SessionConfig {
		if id == "s2" {
			return &egress.SessionConfig{Egress: eg, Audit: audit2.emit}
		}
		return nil
	})
	if objs := sessionObjects(t, gwPath, prefix, "s3"); len(objs) > 0 || netns.IsNetns(s3.NetnsPath()) {
		t.Errorf("the network of a session not running is left after Reconcile: %v", objs)
	}
	if r := query(t, s2, "allowed.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("allowed.test from the re-registered session: %v", r)
	}
	if _, ok := audit2.find("s2", "dns", "allowed", "allowed.test"); !ok {
		t.Errorf("the re-registered session's decisions miss its audit: %v", audit2.evs)
	}
	if err := p.Discard(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if objs := sessionObjects(t, gwPath, prefix, "s2"); len(objs) > 0 {
		t.Errorf("s2 left after Discard: %v", objs)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	left, err := netns.Leftovers(netns.DefaultDir, prefix, w.NetnsPath())
	if err != nil || len(left) > 0 {
		t.Errorf("left after the last Close: %v (%v)", left, err)
	}
}

// addSession gives session id a network and checks what it contributes
// to the container's spec.
func addSession(t *testing.T, p *egress.Perimeter, id string, eg *policies.Egress, audit *auditLog) *egress.Session {
	t.Helper()
	dir := t.TempDir()
	s, err := p.AddSession(t.Context(), id, egress.SessionConfig{Egress: eg, Dir: dir, Audit: audit.emit})
	if err != nil {
		t.Fatalf("AddSession(%s): %v", id, err)
	}
	if s.ResolvConf() != filepath.Join(dir, "resolv.conf") {
		t.Errorf("resolv.conf at %s, want in %s", s.ResolvConf(), dir)
	}
	spec := &oci.Spec{Linux: &specs.Linux{}}
	for _, o := range s.SpecOpts() {
		if err := o(t.Context(), nil, &containers.Container{}, spec); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Contains(spec.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: s.NetnsPath()}) {
		t.Errorf("spec namespaces %v lack %s", spec.Linux.Namespaces, s.NetnsPath())
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != "/etc/resolv.conf" || spec.Mounts[0].Source != s.ResolvConf() ||
		!slices.Contains(spec.Mounts[0].Options, "ro") {
		t.Errorf("spec mounts %+v; want resolv.conf bound read-only", spec.Mounts)
	}
	return s
}

// resolver reads the session's resolver from its resolv.conf.
func resolver(t *testing.T, s *egress.Session) netip.AddrPort {
	t.Helper()
	b, err := os.ReadFile(s.ResolvConf())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if a, ok := strings.CutPrefix(l, "nameserver "); ok {
			return netip.AddrPortFrom(netip.MustParseAddr(a), 53)
		}
	}
	t.Fatalf("no nameserver in %q", b)
	return netip.AddrPort{}
}

// query asks the session's resolver for name's A record from inside the
// session.
func query(t *testing.T, s *egress.Session, name string) *dns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	conn, err := netns.Dialer(s.NetnsPath())(ctx, "udp", resolver(t, s).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return r
}

func dial(t *testing.T, s *egress.Session, ap netip.AddrPort) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	c, err := netns.Dialer(s.NetnsPath())(ctx, "tcp", ap.String())
	if err != nil {
		t.Fatalf("dial %v: %v", ap, err)
	}
	return c
}

// sessionObjects lists session id's kernel objects: its namespace, and in
// the gateway its veth and its nftables chains and sets, all named after
// the hash of the id (see package netns).
func sessionObjects(t *testing.T, gwPath, prefix, id string) []string {
	t.Helper()
	sum := sha256.Sum256([]byte(id))
	key := hex.EncodeToString(sum[:])[:10]
	var out []string
	if ns := filepath.Join(netns.DefaultDir, prefix+"-s-"+key); netns.IsNetns(ns) {
		out = append(out, "netns "+ns)
	}
	f, err := os.Open(gwPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.Contains(l.Attrs().Name, key) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		if ch.Table.Name == prefix && strings.Contains(ch.Name, key) {
			out = append(out, "chain "+ch.Name)
		}
	}
	sets, err := c.GetSets(&nftables.Table{Name: prefix, Family: nftables.TableFamilyINet})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sets {
		if strings.Contains(s.Name, key) {
			out = append(out, "set "+s.Name)
		}
	}
	return out
}
