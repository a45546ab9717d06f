package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/world"
)

// Zone is the DNS zone of the benchmark's world.
const Zone = "bench.test."

// DefaultWorldNet is the address range of the world namespace: the DNS
// server takes its first address, the hosts the following ones.
var DefaultWorldNet = netip.MustParsePrefix("10.214.0.0/24")

// NetworkConfig says where the world's network lives.
type NetworkConfig struct {
	// Name is the namespace to create in Dir (netns.DefaultDir if empty).
	Name, Dir string
	// Existing, when set, is the path of a namespace to serve in instead
	// of creating one (a running daemon's uplink); it is left in place.
	Existing string
	// Net is the world's IPv4 range (DefaultWorldNet if invalid).
	Net netip.Prefix
	// DNSAddr is where the DNS server listens (default: Net's first
	// address).
	DNSAddr netip.Addr
}

// Network is the world's network: a namespace with no route anywhere,
// an authoritative DNS server for bench.test and one HTTP server per world
// host, each on its own address. Every socket is opened in the namespace
// from this process, so the handlers run here. Sessions reach it only
// through airlock's gateway, whose uplink is this namespace.
type Network struct {
	path    string
	owned   bool
	dnsAddr netip.Addr
	nl      *netlink.Handle
	nsFile  *os.File

	mu    sync.Mutex
	hosts map[string]netip.Addr // fully qualified, lower-case
	addrs []netip.Addr          // assigned by us, removed by Close
	net   netip.Prefix
	next  netip.Addr

	dns     []*dns.Server
	servers []*http.Server
	wg      sync.WaitGroup
}

// StartNetwork creates (or joins) the namespace and starts the DNS server.
func StartNetwork(ctx context.Context, cfg NetworkConfig) (_ *Network, retErr error) {
	if !cfg.Net.IsValid() {
		cfg.Net = DefaultWorldNet
	}
	if !cfg.Net.Addr().Is4() || cfg.Net.Bits() > 28 {
		return nil, fmt.Errorf("world net %v: want an IPv4 prefix of /28 or larger: %w", cfg.Net, errdefs.ErrInvalidArgument)
	}
	n := &Network{hosts: map[string]netip.Addr{}, net: cfg.Net.Masked()}
	if cfg.Existing != "" {
		if !netns.IsNetns(cfg.Existing) {
			return nil, fmt.Errorf("world namespace %s: not a network namespace: %w", cfg.Existing, errdefs.ErrInvalidArgument)
		}
		n.path = cfg.Existing
	} else {
		dir := cfg.Dir
		if dir == "" {
			dir = netns.DefaultDir
		}
		p, err := netns.Create(dir, cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("world namespace: %w", err)
		}
		n.path, n.owned = p, true
	}
	defer func() {
		if retErr != nil {
			n.Close()
		}
	}()
	var err error
	if n.nsFile, err = os.Open(n.path); err != nil {
		return nil, err
	}
	if n.nl, err = netlink.NewHandleAt(vnetns.NsHandle(int(n.nsFile.Fd()))); err != nil {
		return nil, fmt.Errorf("netlink in the world namespace: %w", err)
	}
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		return nil, err
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		return nil, err
	}
	n.dnsAddr = cfg.DNSAddr
	if !n.dnsAddr.IsValid() {
		n.dnsAddr = cfg.Net.Masked().Addr().Next()
	}
	n.next = cfg.Net.Masked().Addr().Next().Next().Next().Next() // .4 onwards
	if err := n.assign(n.dnsAddr); err != nil {
		return nil, err
	}
	if err := n.startDNS(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// Path is the namespace's path.
func (n *Network) Path() string { return n.path }

// DNSAddr is the DNS server's address (port 53, UDP and TCP).
func (n *Network) DNSAddr() netip.Addr { return n.dnsAddr }

// Net is the world's address range: the daemon's --allow-private.
func (n *Network) Net() netip.Prefix { return n.net }

// Hosts returns the published names and their addresses.
func (n *Network) Hosts() map[string]netip.Addr {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]netip.Addr, len(n.hosts))
	for k, v := range n.hosts {
		out[strings.TrimSuffix(k, ".")] = v
	}
	return out
}

// AddHost publishes name (under bench.test) on the next free address and
// serves h on its port 80.
func (n *Network) AddHost(name string, h http.Handler) (netip.Addr, error) {
	fq := dns.Fqdn(strings.ToLower(name))
	if !dns.IsSubDomain(Zone, fq) || fq == Zone {
		return netip.Addr{}, fmt.Errorf("host %q is not under %s: %w", name, Zone, errdefs.ErrInvalidArgument)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.hosts[fq]; ok {
		return netip.Addr{}, fmt.Errorf("host %s: %w", name, errdefs.ErrAlreadyExists)
	}
	ip := n.next
	n.next = ip.Next()
	if err := n.assign(ip); err != nil {
		return netip.Addr{}, err
	}
	l, err := netns.Listen(n.path, "tcp", netip.AddrPortFrom(ip, 80).String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("host %s: %w", name, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	n.servers = append(n.servers, srv)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_ = srv.Serve(l)
	}()
	n.hosts[fq] = ip
	return ip, nil
}

// assign adds a to the namespace's loopback.
func (n *Network) assign(a netip.Addr) error {
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		return err
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := n.nl.AddrAdd(lo, addr); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("world address %v is in use in the namespace: %w", a, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("world address %v: %w", a, err)
	}
	n.addrs = append(n.addrs, a)
	return nil
}

func (n *Network) startDNS(ctx context.Context) error {
	servers, err := world.ServeDNS(ctx, n.path, netip.AddrPortFrom(n.dnsAddr, 53), dns.HandlerFunc(n.serveDNS), func(fn func()) {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			fn()
		}()
	})
	n.dns = servers
	return err
}

// serveDNS answers A questions for the published hosts, NXDOMAIN for other
// names of the zone, and REFUSED outside it.
func (n *Network) serveDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	if len(r.Question) != 1 {
		m.SetRcode(r, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.ToLower(dns.Fqdn(q.Name))
	if q.Qclass != dns.ClassINET || !dns.IsSubDomain(Zone, name) {
		m.SetRcode(r, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	m.SetReply(r)
	m.Authoritative = true
	n.mu.Lock()
	ip, ok := n.hosts[name]
	n.mu.Unlock()
	soa := &dns.SOA{
		Hdr: dns.RR_Header{Name: Zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns:  "ns." + Zone, Mbox: "hostmaster." + Zone, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 60,
	}
	switch {
	case !ok && name != Zone:
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa}
	case ok && (q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY):
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: ip.AsSlice()}}
	default:
		m.Ns = []dns.RR{soa}
	}
	_ = w.WriteMsg(m)
}

// Close stops the servers, removes the addresses it assigned and, if it
// created the namespace, removes it.
func (n *Network) Close() error {
	var errs []error
	for _, s := range n.dns {
		if err := s.Shutdown(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range n.servers {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	n.wg.Wait()
	if n.nl != nil {
		if !n.owned {
			if lo, err := n.nl.LinkByName("lo"); err == nil {
				for _, a := range n.addrs {
					addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}}
					if err := n.nl.AddrDel(lo, addr); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
						errs = append(errs, fmt.Errorf("remove world address %v: %w", a, err))
					}
				}
			}
		}
		n.nl.Close()
	}
	if n.nsFile != nil {
		n.nsFile.Close()
	}
	if n.owned {
		errs = append(errs, netns.Remove(n.path))
	}
	return errors.Join(errs...)
}
