package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/httpserve"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Path is where the metrics are served.
const Path = "/metrics"

// CheckAddr checks addr, a TCP HOST:PORT for --metrics-listen. HOST must
// be an IP address: a loopback one, or with remote any other but the
// unspecified address (every interface: 0.0.0.0, ::, or an empty host)
// or an address inside sessionPools, where sessions live. The metrics
// name every session and count what each did, so by default they stay
// on the host.
func CheckAddr(addr string, remote bool, sessionPools ...netip.Prefix) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("metrics address %q: want HOST:PORT: %w", addr, errdefs.ErrInvalidArgument)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("metrics address %q: bad port: %w", addr, errdefs.ErrInvalidArgument)
	}
	if host == "" {
		return fmt.Errorf("metrics address %q listens on every interface: give a loopback address (127.0.0.1:PORT), or one address with --metrics-listen-remote: %w", addr, errdefs.ErrInvalidArgument)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("metrics address %q: HOST must be an IP address, not a name: %w", addr, errdefs.ErrInvalidArgument)
	}
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return nil
	case ip.IsUnspecified():
		return fmt.Errorf("metrics address %q listens on every interface, which may include ones sessions reach: give one address: %w", addr, errdefs.ErrInvalidArgument)
	}
	for _, p := range sessionPools {
		if p.Contains(ip) {
			return fmt.Errorf("metrics address %q is in the session pool %s, where sessions live: %w", addr, p, errdefs.ErrInvalidArgument)
		}
	}
	if !remote {
		return fmt.Errorf("metrics address %q is not a loopback address: the metrics name every session and count what each did; serve them off the host only with --metrics-listen-remote: %w", addr, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Serve serves the metrics at Path on addr until ctx is done or the
// returned server is closed; bound is the address it listens on (addr
// with the port it was given for port 0).
func (m *Metrics) Serve(ctx context.Context, addr string) (_ *http.Server, bound string, _ error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, m.Handler())
	var h http.Handler = mux
	if ap, err := netip.ParseAddrPort(l.Addr().String()); err == nil && ap.Addr().Unmap().IsLoopback() {
		h = loopbackHostsOnly(h, ap.Port())
	}
	srv := httpserve.Server(h, limits)
	go func() {
		if err := srv.Serve(httpserve.Listener(l, limits)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.G(ctx).Error("metrics listener", "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.G(ctx).Info("serving metrics", "address", "http://"+l.Addr().String()+Path)
	return srv, l.Addr().String(), nil
}

// limits bound the metrics server's connections (tests shorten them).
var limits = httpserve.Default

// loopbackHostsOnly answers 421 to a request whose Host does not name a
// loopback address on port: a web page whose name an attacker rebinds to
// 127.0.0.1 (DNS rebinding) would otherwise read every session's id and
// counts through the browser of someone on this host.
func loopbackHostsOnly(h http.Handler, port uint16) http.Handler {
	ok := httpserve.LoopbackHosts(int(port))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(ok, strings.ToLower(r.Host)) {
			w.Header().Set("Connection", "close")
			http.Error(w, "metrics are served to their loopback address only, not to host "+r.Host, http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
