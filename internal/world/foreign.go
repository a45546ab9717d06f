package world

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// AddForeignHost publishes name, a real host's name outside the zone
// (api.anthropic.com), with address ip, and serves h on ip:443 alone over
// HTTPS (HTTP/1.1 and HTTP/2) with a certificate of the world's CA for that
// name; a client asking for another name gets no certificate. The world's
// DNS answers for that exact name, and still refuses every other name
// outside the zone. h decides what becomes of a request: a test double, or
// a proxy that sends it on to the real host. With WithPlainHTTP, h is also
// served over plain HTTP on ip:80.
func (w *World) AddForeignHost(name string, ip netip.Addr, h http.Handler, opts ...ForeignOption) error {
	var fc foreignConfig
	for _, o := range opts {
		o(&fc)
	}
	n := dns.Fqdn(strings.ToLower(name))
	if _, ok := dns.IsDomainName(n); !ok || strings.Count(n, ".") < 2 || dns.IsSubDomain(w.zone, n) {
		return fmt.Errorf("world: foreign host %q: want a host name outside %s: %w", name, w.zone, errdefs.ErrInvalidArgument)
	}
	if _, err := netip.ParseAddr(strings.TrimSuffix(n, ".")); err == nil {
		return fmt.Errorf("world: foreign host %q is an address: %w", name, errdefs.ErrInvalidArgument)
	}
	ip = ip.Unmap()
	if !ip.IsValid() || h == nil {
		return fmt.Errorf("world: foreign host %s: an address and a handler are required: %w", name, errdefs.ErrInvalidArgument)
	}
	host := strings.TrimSuffix(n, ".")
	getCert := func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if !strings.EqualFold(strings.TrimSuffix(hello.ServerName, "."), host) {
			return nil, fmt.Errorf("world: no certificate for %q on %s's address", hello.ServerName, host)
		}
		return w.certificate(hello)
	}
	if err := w.ensureAddr(ip); err != nil {
		return err
	}
	l, err := netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, 443).String())
	if err != nil {
		return fmt.Errorf("world: listen %v:443: %w", ip, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		TLSConfig: &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}}
	if err := w.track(srv); err != nil {
		l.Close()
		return err
	}
	var plain *http.Server
	var pl net.Listener
	if fc.plainHTTP {
		if pl, err = netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, 80).String()); err != nil {
			l.Close()
			return fmt.Errorf("world: listen %v:80: %w", ip, err)
		}
		plain = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		if err := w.track(plain); err != nil {
			l.Close()
			pl.Close()
			return err
		}
	}
	w.mu.Lock()
	if w.foreign == nil {
		w.foreign = map[string]bool{}
	}
	w.foreign[n] = true
	w.records[n] = append(w.records[n], w.addressRR(n, ip))
	w.names[ip] = append(w.names[ip], n)
	w.mu.Unlock()
	w.goServe(func() { _ = srv.ServeTLS(l, "", "") })
	if plain != nil {
		w.goServe(func() { _ = plain.Serve(pl) })
	}
	return nil
}

// ForeignOption changes what AddForeignHost serves.
type ForeignOption func(*foreignConfig)

type foreignConfig struct{ plainHTTP bool }

// WithPlainHTTP also serves the foreign host's handler over plain HTTP on
// port 80, as an external site that answers both does.
func WithPlainHTTP() ForeignOption { return func(c *foreignConfig) { c.plainHTTP = true } }
