package load

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// loopbackDNS answers every A query with 127.0.0.1 and counts them.
func loopbackDNS(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			seen.Add(1)
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(127, 0, 0, 1)}}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), &seen
}

// tlsServer serves HTTPHandler over TLS (HTTP/1.1 and HTTP/2) with a
// certificate for srv.test from a CA of its own, which the pool trusts.
func tlsServer(t *testing.T) (*httptest.Server, *x509.CertPool, *connCount) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "load test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "srv.test"}, DNSNames: []string{"srv.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	conns := &connCount{}
	srv := httptest.NewUnstartedServer(HTTPHandler())
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			conns.Add(1)
			conns.active.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.active.Add(-1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return srv, pool, conns
}

// connCount counts the connections a test server accepted (its value)
// and those open now (active).
type connCount struct {
	atomic.Int64
	active atomic.Int64
}

func port(t *testing.T, srv *httptest.Server) string {
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRequestsKeepAlive(t *testing.T) {
	resolver, lookups := loopbackDNS(t)
	srv, pool, conns := tlsServer(t)
	for _, h2 := range []bool{false, true} {
		cfg := HTTPConfig{URL: fmt.Sprintf("https://srv.test:%s%s", port(t, srv), SmallPath), DNS: resolver, Roots: pool, H2: h2}
		res, err := Requests(context.Background(), cfg, 3, 20)
		if err != nil {
			t.Fatal(err)
		}
		wantProto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		if res.Requests != 20 || len(res.LatencyUS) != 20 || res.Conns != 1 || res.Proto != wantProto || res.Issuer != "load test CA" {
			t.Errorf("h2=%v: %+v; want 20 timed requests on 1 %s connection", h2, res, wantProto)
		}
		for _, l := range res.LatencyUS {
			if l <= 0 {
				t.Errorf("latency %v", l)
			}
		}
	}
	if got := conns.Load(); got != 2 {
		t.Errorf("server saw %d connections, want 2", got)
	}
	if got := lookups.Load(); got != 2 {
		t.Errorf("%d A lookups, want one per run", got)
	}
}

func TestDownload(t *testing.T) {
	resolver, _ := loopbackDNS(t)
	srv, pool, _ := tlsServer(t)
	cfg := HTTPConfig{URL: fmt.Sprintf("https://srv.test:%s%s?n=%d", port(t, srv), BytesPath, 3<<20+5), DNS: resolver, Roots: pool}
	res, err := Download(context.Background(), cfg, 3<<20+5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 3<<20+5 || res.Gbps <= 0 || res.Seconds <= 0 || res.Proto != "HTTP/1.1" {
		t.Errorf("%+v", res)
	}
	if _, err := Download(context.Background(), cfg, 1<<20); err == nil || !strings.Contains(err.Error(), "want 1048576") {
		t.Errorf("short body accepted: %v", err)
	}
	bad := cfg
	bad.URL = fmt.Sprintf("https://srv.test:%s%s?n=-1", port(t, srv), BytesPath)
	if _, err := Download(context.Background(), bad, 0); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("bad n: %v", err)
	}
	// The world's CA is not the system's: an unverified server is an error.
	untrusted := cfg
	untrusted.Roots = x509.NewCertPool()
	if _, err := Download(context.Background(), untrusted, 0); err == nil {
		t.Error("download from an untrusted server")
	}
}

func TestHandshakesNewConnectionEach(t *testing.T) {
	resolver, _ := loopbackDNS(t)
	srv, pool, conns := tlsServer(t)
	cfg := HTTPConfig{URL: fmt.Sprintf("https://srv.test:%s%s", port(t, srv), SmallPath), DNS: resolver, Roots: pool}
	res, err := Handshakes(context.Background(), cfg, 3, 30, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 30 || res.Conns != 30 || res.LatencyUS.N != 30 || res.PerSecond <= 0 {
		t.Errorf("%+v; want 30 requests on 30 connections", res)
	}
	if got := conns.Load(); got != 30 {
		t.Errorf("server saw %d connections, want 30", got)
	}
	// Bounded by time.
	res, err = Handshakes(context.Background(), cfg, 2, 100_000, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Seconds > 2 || res.Requests == 0 {
		t.Errorf("time-bounded run: %+v", res)
	}
	if _, err := Handshakes(context.Background(), cfg, 1, 10, 2*time.Minute); err == nil {
		t.Error("a run of 2m accepted")
	}
}

func TestIdleKeepsConnectionsOpen(t *testing.T) {
	resolver, lookups := loopbackDNS(t)
	srv, pool, conns := tlsServer(t)
	cfg := HTTPConfig{URL: fmt.Sprintf("https://srv.test:%s%s", port(t, srv), SmallPath), DNS: resolver, Roots: pool, H2: true}
	res, closeAll, err := Idle(context.Background(), cfg, 12)
	if err != nil {
		t.Fatal(err)
	}
	if res.Open != 12 || res.Proto != "HTTP/2.0" {
		t.Errorf("%+v", res)
	}
	if got := conns.active.Load(); got != 12 {
		t.Errorf("server holds %d connections, want 12", got)
	}
	if got := lookups.Load(); got != 1 {
		t.Errorf("%d lookups, want 1", got)
	}
	closeAll()
	for deadline := time.Now().Add(5 * time.Second); conns.active.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := conns.active.Load(); got != 0 {
		t.Errorf("%d connections open after close", got)
	}
}

func TestPlainHTTP(t *testing.T) {
	resolver, _ := loopbackDNS(t)
	srv := httptest.NewServer(HTTPHandler())
	defer srv.Close()
	cfg := HTTPConfig{URL: fmt.Sprintf("http://srv.test:%s%s", port(t, srv), SmallPath), DNS: resolver}
	res, err := Requests(context.Background(), cfg, 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Conns != 1 || res.Proto != "HTTP/1.1" || res.Issuer != "" {
		t.Errorf("%+v", res)
	}
	if _, err := Requests(context.Background(), HTTPConfig{URL: "ftp://srv.test/"}, 0, 1); err == nil {
		t.Error("ftp URL accepted")
	}
}
