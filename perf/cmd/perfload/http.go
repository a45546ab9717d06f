package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/perf/load"
)

// serveCmd serves load.HTTPHandler over HTTP and HTTPS (HTTP/1.1 and
// HTTP/2) until ctx ends or -d has passed.
func serveCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	httpAddr := fs.String("http", "", "ADDR:PORT for plain HTTP")
	httpsAddr := fs.String("https", "", "ADDR:PORT for HTTPS")
	certFile := fs.String("cert", "", "PEM certificate chain for -https")
	keyFile := fs.String("key", "", "PEM key for -https")
	d := fs.Duration("d", 10*time.Minute, "stop after this long (at most 30m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *d <= 0 || *d > 30*time.Minute {
		return fmt.Errorf("-d %v: want at most 30m", *d)
	}
	if *httpAddr == "" && *httpsAddr == "" {
		return errors.New("serve: give -http, -https or both")
	}
	ctx, cancel := context.WithTimeout(ctx, *d)
	defer cancel()
	var srvs []*http.Server
	ready := map[string]string{}
	errc := make(chan error, 2)
	if *httpAddr != "" {
		l, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: load.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second}
		srvs = append(srvs, srv)
		ready["http"] = l.Addr().String()
		go func() { errc <- srv.Serve(l) }()
	}
	if *httpsAddr != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", *httpsAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: load.HTTPHandler(), ReadHeaderTimeout: 10 * time.Second,
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
		srvs = append(srvs, srv)
		ready["https"] = l.Addr().String()
		go func() { errc <- srv.ServeTLS(l, "", "") }()
	}
	if err := json.NewEncoder(os.Stdout).Encode(ready); err != nil {
		return err
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	for _, s := range srvs {
		s.Close()
	}
	return err
}

// httpFlags are the flags of the HTTP clients.
func httpFlags(fs *flag.FlagSet) func() (load.HTTPConfig, error) {
	var cfg load.HTTPConfig
	fs.StringVar(&cfg.URL, "url", "", "http:// or https:// URL")
	fs.StringVar(&cfg.DNS, "dns", "", "resolver ADDR:PORT for the URL's host (default: the first nameserver of /etc/resolv.conf)")
	ca := fs.String("ca", "", "PEM file of the roots that verify HTTPS servers (default: the system's)")
	fs.BoolVar(&cfg.H2, "h2", false, "offer HTTP/2 over TLS (default: HTTP/1.1 only)")
	return func() (load.HTTPConfig, error) {
		if cfg.URL == "" {
			return cfg, errors.New("-url is required")
		}
		if cfg.DNS == "" {
			s, err := load.ResolvConfServer("/etc/resolv.conf")
			if err != nil {
				return cfg, err
			}
			cfg.DNS = s
		}
		if *ca != "" {
			b, err := os.ReadFile(*ca)
			if err != nil {
				return cfg, err
			}
			cfg.Roots = x509.NewCertPool()
			if !cfg.Roots.AppendCertsFromPEM(b) {
				return cfg, fmt.Errorf("-ca %s: no PEM certificate in it", *ca)
			}
		}
		return cfg, nil
	}
}

func requestsCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("requests", flag.ContinueOnError)
	get := httpFlags(fs)
	warmup := fs.Int("warmup", 20, "untimed requests first")
	n := fs.Int("n", 1000, "timed requests, one after another on one connection (at most 1000000)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := get()
	if err != nil {
		return nil, err
	}
	return load.Requests(ctx, cfg, *warmup, *n)
}

func downloadCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("download", flag.ContinueOnError)
	get := httpFlags(fs)
	want := fs.Int64("want", 0, "the body's expected length (0: any)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := get()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	return load.Download(ctx, cfg, *want)
}

func handshakesCmd(ctx context.Context, args []string) (any, error) {
	fs := flag.NewFlagSet("handshakes", flag.ContinueOnError)
	get := httpFlags(fs)
	c := fs.Int("c", 1, "requests at once (at most 64)")
	n := fs.Int("n", 1000, "stop after this many requests (at most 100000)")
	d := fs.Duration("d", 3*time.Second, "stop after this long (at most 1m)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := get()
	if err != nil {
		return nil, err
	}
	return load.Handshakes(ctx, cfg, *c, *n, *d)
}

// idleCmd opens -n kept-alive connections, prints how many, and holds
// them until its stdin ends, -hold has passed or ctx ends.
func idleCmd(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("idle", flag.ContinueOnError)
	get := httpFlags(fs)
	n := fs.Int("n", 100, "connections (at most 4096)")
	hold := fs.Duration("hold", time.Minute, "hold them at most this long (at most 5m)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *hold <= 0 || *hold > 5*time.Minute {
		return fmt.Errorf("-hold %v: want at most 5m", *hold)
	}
	cfg, err := get()
	if err != nil {
		return err
	}
	res, closeAll, err := load.Idle(ctx, cfg, *n)
	if err != nil {
		return err
	}
	defer closeAll()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return err
	}
	stdin := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(stdin) }()
	select {
	case <-stdin:
	case <-ctx.Done():
	case <-time.After(*hold):
	}
	return nil
}
