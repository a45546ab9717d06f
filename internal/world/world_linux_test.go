package world_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
)

var (
	ipA  = netip.MustParseAddr("10.214.0.10")
	ipA6 = netip.MustParseAddr("fd0a:214::10")
)

func start(t *testing.T) *world.World {
	t.Helper()
	testutil.RequiresRoot(t)
	w, err := world.Start(t.Context(), world.Config{Prefix: "w" + strings.ToLower(rand.Text()[:5]), TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
		if netns.IsNetns(w.NetnsPath()) {
			t.Errorf("%s survives Close", w.NetnsPath())
		}
	})
	must(t, w.AddHost("a.test", ipA))
	must(t, w.AddHost("A.Test.", ipA6))
	must(t, w.AddCNAME("www.test", "a.test"))
	must(t, w.AddCNAME("out.test", "example.com"))
	must(t, w.AddCNAME("loop1.test", "loop2.test"))
	must(t, w.AddCNAME("loop2.test", "loop1.test"))
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func query(t *testing.T, w *world.World, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	conn, err := w.Dialer()(ctx, network, netip.AddrPortFrom(w.DNSAddr(), 53).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&dns.Client{Net: network}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn})
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	}
	return r
}

func TestDNS(t *testing.T) {
	t.Parallel()
	w := start(t)
	tests := []struct {
		name    string
		qtype   uint16
		rcode   int
		answers []string // record data, in order
		soa     bool
	}{
		{"a.test.", dns.TypeA, dns.RcodeSuccess, []string{"10.214.0.10"}, false},
		{"A.TEST.", dns.TypeAAAA, dns.RcodeSuccess, []string{"fd0a:214::10"}, false},
		{"www.test.", dns.TypeA, dns.RcodeSuccess, []string{"a.test.", "10.214.0.10"}, false},
		{"www.test.", dns.TypeCNAME, dns.RcodeSuccess, []string{"a.test."}, false},
		{"out.test.", dns.TypeA, dns.RcodeSuccess, []string{"example.com."}, false},
		{"a.test.", dns.TypeMX, dns.RcodeSuccess, nil, true},
		{"nope.test.", dns.TypeA, dns.RcodeNameError, nil, true},
		{"example.com.", dns.TypeA, dns.RcodeRefused, nil, false},
		{"loop1.test.", dns.TypeA, dns.RcodeSuccess, []string{"loop2.test.", "loop1.test.", "loop2.test.", "loop1.test.", "loop2.test.", "loop1.test.", "loop2.test.", "loop1.test."}, false},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(network+" "+tt.name+" "+dns.TypeToString[tt.qtype], func(t *testing.T) {
				r := query(t, w, network, tt.name, tt.qtype)
				if r.Rcode != tt.rcode {
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
				}
				var got []string
				for _, rr := range r.Answer {
					switch rr := rr.(type) {
					case *dns.A:
						got = append(got, rr.A.String())
					case *dns.AAAA:
						got = append(got, rr.AAAA.String())
					case *dns.CNAME:
						got = append(got, rr.Target)
					}
					if rr.Header().Ttl != 5 {
						t.Errorf("TTL %d, want 5", rr.Header().Ttl)
					}
				}
				if strings.Join(got, " ") != strings.Join(tt.answers, " ") {
					t.Errorf("answers %v, want %v", got, tt.answers)
				}
				if hasSOA := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == dns.TypeSOA; hasSOA != tt.soa {
					t.Errorf("authority %v, want SOA: %v", r.Ns, tt.soa)
				}
				if tt.rcode != dns.RcodeRefused && !r.Authoritative {
					t.Error("answer not authoritative")
				}
			})
		}
	}
	if !w.Queried("NOPE.test") || w.Queried("never-asked.test") {
		t.Error("Queried does not reflect the queries")
	}
	var udp, tcp int
	for _, q := range w.DNSLog() {
		if q.Name == "a.test." && q.Type == "A" {
			switch q.Proto {
			case "udp":
				udp++
			case "tcp":
				tcp++
			}
			if !q.From.Addr().IsLoopback() && q.From.Addr() != w.DNSAddr() {
				t.Errorf("query from %v", q.From)
			}
		}
	}
	if udp != 1 || tcp != 1 {
		t.Errorf("log has %d udp and %d tcp queries for a.test A, want 1 and 1", udp, tcp)
	}
}

func TestHosts(t *testing.T) {
	t.Parallel()
	w := start(t)
	client := func(tlsName string) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext:     w.Dialer(),
			TLSClientConfig: &tls.Config{RootCAs: w.CertPool(), ServerName: tlsName},
		}}
	}
	for _, tt := range []struct{ url, sni string }{
		{"http://10.214.0.10/", ""},
		{"http://[fd0a:214::10]/", ""},
		{"https://10.214.0.10/", "a.test"},
		{"https://10.214.0.10/", ""}, // certificate for the IP
	} {
		resp, err := client(tt.sni).Get(tt.url)
		if err != nil {
			t.Errorf("GET %s (SNI %q): %v", tt.url, tt.sni, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != "a.test" {
			t.Errorf("GET %s: %s %q, want 200 a.test", tt.url, resp.Status, body)
		}
	}

	must(t, w.AddTCPEcho(netip.MustParseAddrPort("10.214.0.20:9000")))
	must(t, w.AddUDPEcho(netip.MustParseAddrPort("10.214.0.20:9001")))
	for _, tt := range []struct{ network, addr string }{
		{"tcp", "10.214.0.10:7"}, {"tcp", "10.214.0.20:9000"}, {"udp", "10.214.0.20:9001"},
	} {
		c, err := w.Dialer()(t.Context(), tt.network, tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Errorf("echo %s %s: %q %v", tt.network, tt.addr, buf, err)
		}
		c.Close()
	}

	// Nothing routes out of the world.
	if c, err := w.Dialer()(t.Context(), "tcp", "192.0.2.1:80"); err == nil {
		c.Close()
		t.Error("the world reached 192.0.2.1")
	}
}

func TestAddErrors(t *testing.T) {
	t.Parallel()
	w := start(t)
	if err := w.AddHost("example.com", ipA); !errdefs.IsInvalidArgument(err) {
		t.Errorf("AddHost outside the zone = %v", err)
	}
	if err := w.AddHost("test.", ipA); !errdefs.IsInvalidArgument(err) {
		t.Errorf("AddHost at the apex = %v", err)
	}
	if err := w.AddHost("b.test", netip.Addr{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("AddHost without an address = %v", err)
	}
	if err := w.AddCNAME("a.test", "b.test"); !errdefs.IsAlreadyExists(err) {
		t.Errorf("AddCNAME over an A record = %v", err)
	}
	if err := w.AddHost("www.test", ipA); !errdefs.IsAlreadyExists(err) {
		t.Errorf("AddHost on a CNAME = %v", err)
	}
	// A second name on a served address keeps the first as the HTTP body.
	must(t, w.AddHost("second.test", ipA))
	if r := query(t, w, "udp", "second.test.", dns.TypeA); len(r.Answer) != 1 {
		t.Errorf("second.test: %v", r.Answer)
	}
}

// TestHandlerHostInOwnZone is the benchmark's use: a zone of its own and a
// handler of its own on port 80, and nothing else on the host's address.
func TestHandlerHostInOwnZone(t *testing.T) {
	t.Parallel()
	testutil.RequiresRoot(t)
	w, err := world.Start(t.Context(), world.Config{Prefix: "w" + strings.ToLower(rand.Text()[:5]), Zone: "Bench.Test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { must(t, w.Close()) })
	if w.Zone() != "bench.test." {
		t.Errorf("zone %q", w.Zone())
	}
	ip := netip.MustParseAddr("10.214.0.4")
	must(t, w.AddHost("jobs.bench.test", ip, world.WithHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(rw, "jobs %s", r.URL.Path)
	}))))
	if err := w.AddHost("a.test", ipA); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a host outside the zone: %v", err)
	}
	r := query(t, w, "udp", "jobs.bench.test.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != ip.String() {
		t.Errorf("A jobs.bench.test = %v", r)
	}
	if r := query(t, w, "udp", "jobs.bench.test.", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("AAAA jobs.bench.test = %v, want an empty answer with the SOA", r)
	}
	if r := query(t, w, "udp", "paste.bench.test.", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || r.Ns[0].Header().Name != "bench.test." {
		t.Errorf("unknown name = %v, want NXDOMAIN with the zone's SOA", r)
	}
	for _, name := range []string{"a.test.", "example.com."} {
		if r := query(t, w, "udp", name, dns.TypeA); r.Rcode != dns.RcodeRefused {
			t.Errorf("%s outside the zone: rcode %d, want REFUSED", name, r.Rcode)
		}
	}
	if got := w.Hosts(); len(got) != 1 || got["jobs.bench.test"] != ip {
		t.Errorf("Hosts() = %v", got)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return w.Dialer()(ctx, network, netip.AddrPortFrom(ip, 80).String())
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
	for _, port := range []uint16{443, 7} {
		if c, err := w.Dialer()(t.Context(), "tcp", netip.AddrPortFrom(ip, port).String()); err == nil {
			c.Close()
			t.Errorf("a handler host serves port %d too", port)
		}
	}
}

// TestExistingNamespace serves the world in a namespace it did not create
// (a running daemon's uplink): it refuses an address already there, and
// Close removes its own addresses and leaves the namespace.
func TestExistingNamespace(t *testing.T) {
	t.Parallel()
	testutil.RequiresRoot(t)
	path, err := netns.Create(netns.DefaultDir, "x"+strings.ToLower(rand.Text()[:5]))
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
		slices.Sort(out)
		return out
	}
	w, err := world.Start(t.Context(), world.Config{Existing: path, Zone: "bench.test.", DNSAddr: netip.MustParseAddr("10.214.0.53")})
	if err != nil {
		t.Fatal(err)
	}
	if w.NetnsPath() != path || w.NetnsName() != filepath.Base(path) {
		t.Errorf("namespace %s (%s), want %s", w.NetnsPath(), w.NetnsName(), path)
	}
	must(t, w.AddHost("git.bench.test", netip.MustParseAddr("10.214.0.4"), world.WithHandler(http.NotFoundHandler())))
	if got := addrs(); w.DNSAddr().String() != "10.214.0.53" || !slices.Equal(got, []string{"10.214.0.4", "10.214.0.53"}) {
		t.Errorf("dns %v, addresses %v", w.DNSAddr(), got)
	}
	if r := query(t, w, "udp", "git.bench.test.", dns.TypeA); len(r.Answer) != 1 {
		t.Errorf("A git.bench.test = %v", r)
	}
	must(t, w.Close())
	if !netns.IsNetns(path) {
		t.Error("a namespace the world did not create was removed")
	}
	if got := addrs(); len(got) != 0 {
		t.Errorf("addresses left in the namespace: %v", got)
	}
	if _, err := world.Start(t.Context(), world.Config{Existing: path + "-nope"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("a missing namespace: %v", err)
	}

	// An address the namespace's owner holds is not taken.
	f, _ := os.Open(path)
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 214, 0, 1).To4(), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := world.Start(t.Context(), world.Config{Existing: path}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("a DNS address the namespace holds: %v, want already exists", err)
	}
	if got := addrs(); !slices.Equal(got, []string{"10.214.0.1"}) {
		t.Errorf("the owner's address was removed: %v", got)
	}
}

// TestCertificate: the certificate a caller gets for a name is the one the
// world's HTTPS servers show for it, verified by the world's CA, with the
// CA last in its chain; addresses get one for the address.
func TestCertificate(t *testing.T) {
	t.Parallel()
	w := start(t)
	cert, err := w.Certificate("A.Test")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := w.Certificate("a.test"); err != nil || again != cert {
		t.Errorf("a second call minted another certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "a.test", Roots: w.CertPool()}); err != nil {
		t.Errorf("leaf for a.test: %v", err)
	}
	ca, err := x509.ParseCertificate(cert.Certificate[len(cert.Certificate)-1])
	if err != nil || !ca.IsCA || leaf.CheckSignatureFrom(ca) != nil {
		t.Errorf("the chain does not end with the CA that signed the leaf: %v", err)
	}
	c, err := w.Dialer()(t.Context(), "tcp", netip.AddrPortFrom(ipA, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "a.test", RootCAs: w.CertPool()})
	defer tc.Close()
	if err := tc.HandshakeContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().PeerCertificates[0]; !got.Equal(leaf) {
		t.Error("the HTTPS server shows another certificate for a.test")
	}
	byAddr, err := w.Certificate(ipA.String())
	if err != nil {
		t.Fatal(err)
	}
	al, _ := x509.ParseCertificate(byAddr.Certificate[0])
	if _, err := al.Verify(x509.VerifyOptions{Roots: w.CertPool()}); err != nil || len(al.IPAddresses) != 1 || !al.IPAddresses[0].Equal(ipA.AsSlice()) {
		t.Errorf("certificate for %v: %v %v", ipA, al.IPAddresses, err)
	}
}

// A foreign host: its one name outside the zone is answered and nothing
// else outside it; it is served over HTTPS on 443 alone, with a certificate
// for that name only.
func TestForeignHost(t *testing.T) {
	w := start(t)
	ip := netip.MustParseAddr("10.214.0.40")
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(rw, "api "+r.Host) })
	must(t, w.AddForeignHost("API.example.com", ip, h))
	for _, bad := range []string{"localhost", "x.test", "10.0.0.1.example"[:8]} {
		if err := w.AddForeignHost(bad, ip, h); !errdefs.IsInvalidArgument(err) {
			t.Errorf("AddForeignHost(%q): %v, want invalid argument", bad, err)
		}
	}
	r := query(t, w, "udp", "api.example.com.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != ip.String() {
		t.Errorf("A api.example.com: %v", r)
	}
	for _, other := range []string{"example.com.", "x.api.example.com.", "api.example.org."} {
		if r := query(t, w, "udp", other, dns.TypeA); r.Rcode != dns.RcodeRefused {
			t.Errorf("A %s: rcode %s, want REFUSED", other, dns.RcodeToString[r.Rcode])
		}
	}
	client := func(sni string) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return w.Dialer()(ctx, network, netip.AddrPortFrom(ip, 443).String())
			},
			TLSClientConfig: &tls.Config{RootCAs: w.CertPool(), ServerName: sni},
		}}
	}
	resp, err := client("api.example.com").Get("https://api.example.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "api api.example.com" {
		t.Errorf("body %q", b)
	}
	if _, err := client("evil.example").Get("https://evil.example/"); err == nil {
		t.Error("a TLS handshake for another name succeeded")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if c, err := w.Dialer()(ctx, "tcp", netip.AddrPortFrom(ip, 80).String()); err == nil {
		c.Close()
		t.Error("port 80 of a foreign host answers")
	}

	// WithPlainHTTP: the same handler on port 80 too.
	ip2 := netip.MustParseAddr("10.214.0.41")
	must(t, w.AddForeignHost("paste.example.net", ip2, h, world.WithPlainHTTP()))
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return w.Dialer()(ctx, network, netip.AddrPortFrom(ip2, 80).String())
		},
	}}
	resp, err = plain.Get("http://paste.example.net/documents")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "api paste.example.net" {
		t.Errorf("plain HTTP body %q", b)
	}
}
