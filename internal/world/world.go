// Package world runs a self-contained test network in its own network
// namespace, <prefix>-world: an authoritative DNS server for the `test.`
// zone (or Config.Zone), and per host an HTTP server (:80), an HTTPS server
// (:443, with a certificate from the world's own CA) and a TCP echo server
// (:7), or, with WithHandler, the caller's own HTTP handler on :80 alone
// (the benchmark's world services). All sockets are created inside the
// namespace from this process; the namespace has no route anywhere, so
// nothing sent into it leaves the machine. It serves as the gateway's
// uplink (`--uplink netns:<prefix>-world`), or is served inside a running
// daemon's uplink namespace (Config.Existing). It is the one implementation
// of a test world's network: tests, perf and the benchmark all use it.
//
// Addresses: the DNS server listens on Config.DNSAddr, by default the first
// address of Config.Net (10.214.0.1 by default); hosts take whatever
// addresses the caller gives them, all assigned to the namespace's loopback.
package world

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// Zone is the world's DNS zone.
const Zone = "test."

// Defaults. DefaultNet6 is the IPv6 range tests draw world hosts from;
// AddHost accepts any address.
var (
	DefaultNet  = netip.MustParsePrefix("10.214.0.0/24")
	DefaultNet6 = netip.MustParsePrefix("fd0a:214::/64")
	DefaultTTL  = 60 * time.Second
)

// Config configures a World.
type Config struct {
	// Prefix names the namespace <Prefix>-world. Required unless Existing
	// is set.
	Prefix string
	// Existing, when set, is the path of a network namespace to serve in
	// instead of creating one (a running daemon's uplink). Close leaves it
	// in place and removes the addresses the world assigned there; an
	// address already in it is refused (errdefs.ErrAlreadyExists), not
	// shared.
	Existing string
	// Zone is the zone the DNS server answers for (Zone if empty).
	Zone string
	// DNSAddr is where the DNS server listens (the first address of Net if
	// not set).
	DNSAddr netip.Addr
	// NetnsDir is where the namespace is mounted (netns.DefaultDir).
	NetnsDir string
	// Net is the world's IPv4 range (DefaultNet); the DNS server takes its
	// first address.
	Net netip.Prefix
	// TTL is the TTL of every record (DefaultTTL if zero).
	TTL time.Duration
}

// Query is one DNS question the world's server received.
type Query struct {
	Name  string // lower-case, fully qualified
	Type  string // "A", "AAAA", ...
	Proto string // "udp" or "tcp"
	From  netip.AddrPort
	Time  time.Time
}

// World is a running test network.
type World struct {
	cfg     Config
	zone    string // lower-case, fully qualified
	path    string
	owned   bool // the namespace was created by Start
	nsFile  *os.File
	nl      *netlink.Handle
	dnsAddr netip.Addr
	ca      *x509.Certificate
	caKey   *ecdsa.PrivateKey
	pool    *x509.CertPool
	dns     []*dns.Server

	mu sync.Mutex
	// +checklocks:mu
	records map[string][]dns.RR
	// names by address, in the order they were added.
	// +checklocks:mu
	names map[netip.Addr][]string
	// +checklocks:mu
	addrs map[netip.Addr]bool // assigned to lo
	// +checklocks:mu
	assigned []netip.Addr // the keys of addrs, in order
	// +checklocks:mu
	served map[netip.Addr]bool // HTTP, HTTPS and echo running
	// +checklocks:mu
	closers []io.Closer
	// +checklocks:mu
	certs map[string]*tls.Certificate
	// +checklocks:mu
	queries []Query
	// +checklocks:mu
	closed bool
	// foreign are the names outside the zone the world answers for.
	// +checklocks:mu
	foreign map[string]bool

	wg sync.WaitGroup
}

// Start creates the world's namespace and starts its DNS server. The
// caller Closes it.
func Start(ctx context.Context, cfg Config) (_ *World, retErr error) {
	if cfg.Existing == "" {
		if err := netns.ValidatePrefix(cfg.Prefix); err != nil {
			return nil, err
		}
	} else if !netns.IsNetns(cfg.Existing) {
		return nil, fmt.Errorf("world namespace %s: not a network namespace: %w", cfg.Existing, errdefs.ErrInvalidArgument)
	}
	zone := Zone
	if cfg.Zone != "" {
		zone = dns.Fqdn(strings.ToLower(cfg.Zone))
		if _, ok := dns.IsDomainName(zone); !ok {
			return nil, fmt.Errorf("world zone %q: %w", cfg.Zone, errdefs.ErrInvalidArgument)
		}
	}
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = netns.DefaultDir
	}
	if !cfg.Net.IsValid() {
		cfg.Net = DefaultNet
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if !cfg.Net.Addr().Is4() || cfg.Net.Bits() > 30 {
		return nil, fmt.Errorf("world net %v: want an IPv4 prefix of /30 or larger: %w", cfg.Net, errdefs.ErrInvalidArgument)
	}
	path, owned := cfg.Existing, false
	if path == "" {
		var err error
		if path, err = netns.Create(cfg.NetnsDir, cfg.Prefix+"-world"); err != nil {
			return nil, err
		}
		owned = true
	}
	dnsAddr := cfg.DNSAddr
	if !dnsAddr.IsValid() {
		dnsAddr = cfg.Net.Masked().Addr().Next()
	}
	w := &World{
		cfg: cfg, zone: zone, path: path, owned: owned, dnsAddr: dnsAddr,
		records: map[string][]dns.RR{}, names: map[netip.Addr][]string{},
		addrs: map[netip.Addr]bool{}, served: map[netip.Addr]bool{}, certs: map[string]*tls.Certificate{},
	}
	defer func() {
		if retErr != nil {
			_ = w.Close()
		}
	}()
	var err error
	if w.nsFile, err = os.Open(path); err != nil {
		return nil, err
	}
	if w.nl, err = netlink.NewHandleAt(vnetns.NsHandle(int(w.nsFile.Fd()))); err != nil {
		return nil, err
	}
	lo, err := w.nl.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	if err := w.nl.LinkSetUp(lo); err != nil {
		return nil, err
	}
	if err := w.ensureAddr(w.dnsAddr); err != nil {
		return nil, err
	}
	if err := w.newCA(); err != nil {
		return nil, err
	}
	if err := w.startDNS(ctx); err != nil {
		return nil, err
	}
	w.records[w.zone] = nil
	return w, nil
}

// NetnsName is the namespace's name (for `--uplink netns:NAME`).
func (w *World) NetnsName() string { return filepath.Base(w.path) }

// Zone is the zone the world's DNS server answers for, fully qualified.
func (w *World) Zone() string { return w.zone }

// NetnsPath is the namespace's mount point.
func (w *World) NetnsPath() string { return w.path }

// Net is the world's IPv4 range; a daemon whose uplink is the world lets
// sessions pin its addresses with --allow-private (egress.Config.AllowPrivate).
func (w *World) Net() netip.Prefix { return w.cfg.Net.Masked() }

// DNSAddr is where the world's DNS server listens (port 53, UDP and TCP).
func (w *World) DNSAddr() netip.Addr { return w.dnsAddr }

// CertPool holds the CA that signs the world's HTTPS certificates.
func (w *World) CertPool() *x509.CertPool { return w.pool }

// CAPEM is the world's CA certificate in PEM, for a client of another
// process to trust (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS).
func (w *World) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.ca.Raw})
}

// Dialer dials from inside the world namespace.
func (w *World) Dialer() netns.DialFunc { return netns.Dialer(w.path) }

// assign adds a to the world's loopback.
func (w *World) assign(a netip.Addr) error {
	bits := 32
	if a.Is6() {
		bits = 128
	}
	lo, err := w.nl.LinkByName("lo")
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := w.nl.AddrAdd(lo, addr); err != nil {
		switch {
		case !errors.Is(err, unix.EEXIST):
			return fmt.Errorf("world: add %v: %w", a, err)
		case !w.owned:
			// Not ours to share: the namespace's owner uses it.
			return fmt.Errorf("world address %v is in use in the namespace: %w", a, errdefs.ErrAlreadyExists)
		}
	}
	// The local route of a new address can lag behind the address itself;
	// wait for it so that a dial right after AddHost does not find the
	// network unreachable.
	for i := 0; i < 200; i++ {
		if _, err := w.nl.RouteGet(a.AsSlice()); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("world: no route to %v after adding it", a)
}

func (w *World) fqdn(name string) (string, error) {
	n := dns.Fqdn(strings.ToLower(name))
	if _, ok := dns.IsDomainName(n); !ok || !dns.IsSubDomain(w.zone, n) || n == w.zone {
		return "", fmt.Errorf("world: %q is not a name under %s: %w", name, w.zone, errdefs.ErrInvalidArgument)
	}
	return n, nil
}

// HostOption changes what AddHost serves on a host's address.
type HostOption func(*hostConfig)

type hostConfig struct {
	handler http.Handler
	tls     bool
}

// WithHandler serves h over HTTP on the host's port 80, and nothing else
// on its address: no HTTPS (unless WithTLS), no echo. The benchmark's
// world services are served so.
func WithHandler(h http.Handler) HostOption {
	return func(c *hostConfig) { c.handler = h }
}

// WithTLS also serves the WithHandler handler over HTTPS (HTTP/1.1 and
// HTTP/2) on port 443, with a certificate of the world's CA for the name
// the client asks for.
func WithTLS() HostOption {
	return func(c *hostConfig) { c.tls = true }
}

// AddHost publishes name (under the zone) with address ip (an A or AAAA
// record; a name may have several), assigns ip to the world, and, the first
// time ip is seen, serves HTTP on ip:80 and HTTPS on ip:443 (both answer 200
// with the host's first name) and a TCP echo on ip:7, or what the options
// say (WithHandler).
func (w *World) AddHost(name string, ip netip.Addr, opts ...HostOption) error {
	var hc hostConfig
	for _, o := range opts {
		o(&hc)
	}
	n, ip, err := w.checkRecord("host", name, ip)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("world closed: %w", errdefs.ErrFailedPrecondition)
	}
	for _, rr := range w.records[n] {
		if _, ok := rr.(*dns.CNAME); ok {
			return fmt.Errorf("world: %s is a CNAME: %w", n, errdefs.ErrAlreadyExists)
		}
	}
	if err := w.ensureAddrLocked(ip); err != nil {
		return err
	}
	w.records[n] = append(w.records[n], w.addressRR(n, ip))
	w.names[ip] = append(w.names[ip], n)
	if w.served[ip] {
		return nil
	}
	if err := w.serveHostLocked(ip, hc); err != nil {
		return err
	}
	w.served[ip] = true
	return nil
}

// AddRecord publishes name with address ip without assigning ip to the
// world or serving anything on it: the address lives elsewhere (a test's
// other namespace).
func (w *World) AddRecord(name string, ip netip.Addr) error {
	n, ip, err := w.checkRecord("record", name, ip)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("world closed: %w", errdefs.ErrFailedPrecondition)
	}
	w.records[n] = append(w.records[n], w.addressRR(n, ip))
	return nil
}

// checkRecord returns name as a fully qualified name under the zone and ip
// unmapped, or why they cannot be published.
func (w *World) checkRecord(kind, name string, ip netip.Addr) (string, netip.Addr, error) {
	n, err := w.fqdn(name)
	if err != nil {
		return "", ip, err
	}
	ip = ip.Unmap()
	if !ip.IsValid() {
		return "", ip, fmt.Errorf("world: %s %s: invalid address: %w", kind, name, errdefs.ErrInvalidArgument)
	}
	return n, ip, nil
}

// addressRR is n's A or AAAA record for ip.
func (w *World) addressRR(n string, ip netip.Addr) dns.RR {
	hdr := dns.RR_Header{Name: n, Class: dns.ClassINET, Ttl: uint32(w.cfg.TTL / time.Second)}
	if ip.Is4() {
		hdr.Rrtype = dns.TypeA
		return &dns.A{Hdr: hdr, A: ip.AsSlice()}
	}
	hdr.Rrtype = dns.TypeAAAA
	return &dns.AAAA{Hdr: hdr, AAAA: ip.AsSlice()}
}

// AddCNAME publishes name as an alias of target.
func (w *World) AddCNAME(name, target string) error {
	n, err := w.fqdn(name)
	if err != nil {
		return err
	}
	t := dns.Fqdn(strings.ToLower(target))
	if _, ok := dns.IsDomainName(t); !ok {
		return fmt.Errorf("world: CNAME target %q: %w", target, errdefs.ErrInvalidArgument)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.records[n]) > 0 {
		return fmt.Errorf("world: %s already has records: %w", n, errdefs.ErrAlreadyExists)
	}
	w.records[n] = []dns.RR{&dns.CNAME{
		Hdr:    dns.RR_Header{Name: n, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: uint32(w.cfg.TTL / time.Second)},
		Target: t,
	}}
	return nil
}

// AddTCPEcho serves a TCP echo on ap (the address is assigned to the world
// first unless it is unspecified).
func (w *World) AddTCPEcho(ap netip.AddrPort) error {
	if err := w.ensureAddr(ap.Addr()); err != nil {
		return err
	}
	l, err := netns.Listen(w.path, "tcp", ap.String())
	if err != nil {
		return err
	}
	if err := w.track(l); err != nil {
		return err
	}
	w.goServe(func() { serveEcho(l) })
	return nil
}

// AddUDPEcho serves a UDP echo on ap.
func (w *World) AddUDPEcho(ap netip.AddrPort) error {
	if err := w.ensureAddr(ap.Addr()); err != nil {
		return err
	}
	pc, err := netns.ListenPacket(w.path, "udp", ap.String())
	if err != nil {
		return err
	}
	if err := w.track(pc); err != nil {
		return err
	}
	w.goServe(func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	})
	return nil
}

func (w *World) ensureAddr(a netip.Addr) error {
	a = a.Unmap()
	if a.IsUnspecified() {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ensureAddrLocked(a)
}

// ensureAddrLocked assigns a to the world unless it is already.
//
// Preconditions: w.mu is held.
func (w *World) ensureAddrLocked(a netip.Addr) error {
	if w.addrs[a] {
		return nil
	}
	if err := w.assign(a); err != nil {
		return err
	}
	w.addrs[a] = true
	w.assigned = append(w.assigned, a)
	return nil
}

func (w *World) track(c io.Closer) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		c.Close()
		return fmt.Errorf("world closed: %w", errdefs.ErrFailedPrecondition)
	}
	w.closers = append(w.closers, c)
	return nil
}

func (w *World) goServe(fn func()) {
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		fn()
	}()
}

// serveHostLocked starts ip's HTTP, HTTPS and echo servers, or the
// handler hc names on port 80.
//
// Preconditions: w.mu is held.
func (w *World) serveHostLocked(ip netip.Addr, hc hostConfig) error {
	if hc.handler != nil {
		l, err := netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, 80).String())
		if err != nil {
			return fmt.Errorf("world: listen %v:80: %w", ip, err)
		}
		srv := &http.Server{Handler: hc.handler, ReadHeaderTimeout: 10 * time.Second}
		w.closers = append(w.closers, srv)
		w.goServe(func() { _ = srv.Serve(l) })
		if hc.tls {
			l, err := netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, 443).String())
			if err != nil {
				return fmt.Errorf("world: listen %v:443: %w", ip, err)
			}
			srv := &http.Server{Handler: hc.handler, ReadHeaderTimeout: 10 * time.Second,
				TLSConfig: &tls.Config{GetCertificate: w.certificate, MinVersion: tls.VersionTLS12}}
			w.closers = append(w.closers, srv)
			w.goServe(func() { _ = srv.ServeTLS(l, "", "") })
		}
		return nil
	}
	var ls []net.Listener
	for _, port := range []uint16{80, 443, 7} {
		l, err := netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, port).String())
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return fmt.Errorf("world: listen %v:%d: %w", ip, port, err)
		}
		ls = append(ls, l)
	}
	httpSrv := &http.Server{Handler: http.HandlerFunc(w.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	httpsSrv := &http.Server{
		Handler:           http.HandlerFunc(w.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         &tls.Config{GetCertificate: w.certificate, MinVersion: tls.VersionTLS12},
	}
	w.closers = append(w.closers, httpSrv, httpsSrv, ls[2])
	w.goServe(func() { _ = httpSrv.Serve(ls[0]) })
	w.goServe(func() { _ = httpsSrv.ServeTLS(ls[1], "", "") })
	w.goServe(func() { serveEcho(ls[2]) })
	return nil
}

func serveEcho(l net.Listener) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			_, _ = io.Copy(c, c)
		}()
	}
}

// serveHTTP answers 200 with the first name of the address the request
// arrived on.
func (w *World) serveHTTP(rw http.ResponseWriter, r *http.Request) {
	name := "unknown"
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(la.String()); err == nil {
			w.mu.Lock()
			if ns := w.names[ap.Addr().Unmap()]; len(ns) > 0 {
				name = strings.TrimSuffix(ns[0], ".")
			}
			w.mu.Unlock()
		}
	}
	rw.Header().Set("Content-Type", "text/plain")
	fmt.Fprintln(rw, name)
}

// Close stops every server and removes the namespace, or, in an Existing
// one, the addresses the world assigned there.
func (w *World) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	closers := w.closers
	w.closers = nil
	assigned := w.assigned
	w.mu.Unlock()
	var errs []error
	for _, s := range w.dns {
		if err := s.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range closers {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	w.wg.Wait()
	if w.nl != nil {
		if !w.owned {
			errs = append(errs, w.unassign(assigned))
		}
		w.nl.Close()
	}
	if w.nsFile != nil {
		w.nsFile.Close()
	}
	if w.owned {
		errs = append(errs, netns.Remove(w.path))
	}
	return errors.Join(errs...)
}

// unassign removes addrs from the world's loopback.
func (w *World) unassign(addrs []netip.Addr) error {
	lo, err := w.nl.LinkByName("lo")
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range addrs {
		bits := 32
		if a.Is6() {
			bits = 128
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
		if err := w.nl.AddrDel(lo, addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			errs = append(errs, fmt.Errorf("remove world address %v: %w", a, err))
		}
	}
	return errors.Join(errs...)
}

// Hosts returns the published names (without the trailing dot) and the
// first address of each.
func (w *World) Hosts() map[string]netip.Addr {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]netip.Addr{}
	for n, rrs := range w.records {
		for _, rr := range rrs {
			var a netip.Addr
			switch rr := rr.(type) {
			case *dns.A:
				a, _ = netip.AddrFromSlice(rr.A.To4())
			case *dns.AAAA:
				a, _ = netip.AddrFromSlice(rr.AAAA)
			default:
				continue
			}
			out[strings.TrimSuffix(n, ".")] = a
			break
		}
	}
	return out
}

// DNSLog returns the questions the DNS server received, oldest first.
func (w *World) DNSLog() []Query {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.queries)
}

// Queried reports whether the DNS server received a question for name.
func (w *World) Queried(name string) bool {
	n := dns.Fqdn(strings.ToLower(name))
	for _, q := range w.DNSLog() {
		if q.Name == n {
			return true
		}
	}
	return false
}

func (w *World) newCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "airlock test world CA " + w.cfg.Prefix},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	w.ca, err = x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	w.caKey = key
	w.pool = x509.NewCertPool()
	w.pool.AddCert(w.ca)
	return nil
}

// Certificate is the certificate the world's HTTPS servers show for
// name (a hostname, or an address), its chain ending with the world's
// CA: for a server of the caller's own, in another process, on a host's
// address (the perf harness's load server).
func (w *World) Certificate(name string) (*tls.Certificate, error) {
	name = strings.ToLower(name)
	ip, err := netip.ParseAddr(name)
	if err == nil {
		name = ip.Unmap().String()
	}
	return w.leaf(name, ip.Unmap())
}

// certificate mints (once) a leaf for the requested server name, or for
// the local address when the client sent none.
func (w *World) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := strings.ToLower(hello.ServerName)
	var ip netip.Addr
	if name == "" && hello.Conn != nil {
		if ap, err := netip.ParseAddrPort(hello.Conn.LocalAddr().String()); err == nil {
			ip = ap.Addr().Unmap()
			name = ip.String()
		}
	}
	return w.leaf(name, ip)
}

// leaf mints (once) a leaf for name, for the address ip if it is valid.
func (w *World) leaf(name string, ip netip.Addr) (*tls.Certificate, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c, ok := w.certs[name]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, w.ca, &key.PublicKey, w.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, w.ca.Raw}, PrivateKey: key}
	w.certs[name] = c
	return c, nil
}
