package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/containerd/errdefs"

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
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
