package l7

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchBody is what the upstream answers to /small.
const benchBody = "a short answer of 64 bytes, for the gateway's request benchmarks\n"

// benchUpstream serves /small (benchBody) and /bytes?n=N over plain HTTP
// and over TLS (HTTP/1.1 and HTTP/2) with a certificate for
// "allowed.test" from world.
func benchUpstream(tb testing.TB, world *testCA) (plain, secure *httptest.Server) {
	tb.Helper()
	chunk := make([]byte, 64<<10)
	h := http.NewServeMux()
	h.HandleFunc("/small", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(benchBody)))
		io.WriteString(w, benchBody)
	})
	h.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			m, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= m
		}
	})
	plain = httptest.NewServer(h)
	tb.Cleanup(plain.Close)
	secure = httptest.NewUnstartedServer(h)
	secure.EnableHTTP2 = true
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{*world.leaf(tb, "allowed.test")}}
	secure.StartTLS()
	tb.Cleanup(secure.Close)
	return plain, secure
}

// benchGateway serves a gateway on loopback whose every connection is
// taken to have been redirected to dst, for a session that allows
// "allowed.test" and, with terminate, terminates its TLS with a leaf of
// sessionCA. Its audit only counts events. The session has secrets when
// some are given.
func benchGateway(tb testing.TB, dst string, terminate bool, sessionCA, world *testCA, secrets ...Secret) string {
	tb.Helper()
	d := netip.MustParseAddrPort(dst)
	var events atomic.Int64
	leaf := sessionCA.leaf(tb, "allowed.test")
	sess := &Session{
		ID: "bench",
		Check: func(got netip.AddrPort, h Hello, _ time.Time) Decision {
			if got == d && h.Name() == "allowed.test" {
				return Decision{Allow: true, Rule: "allowed.test"}
			}
			return Decision{Reason: "not allowed"}
		},
		Audit: func(Event) { events.Add(1) },
	}
	if len(secrets) > 0 {
		sess.Secrets = func() []Secret { return secrets }
	}
	if terminate {
		sess.Terminate = func(name string) bool { return name == "allowed.test" }
		sess.Certificate = func(string) (*tls.Certificate, error) { return leaf, nil }
	}
	srv, err := New(Config{
		Sessions:      func(netip.Addr) (*Session, bool) { return sess, true },
		OriginalDst:   func(*net.TCPConn) (netip.AddrPort, error) { return d, nil },
		Dial:          (&net.Dialer{}).DialContext,
		UpstreamRoots: world.pool,
	})
	if err != nil {
		tb.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, l) }()
	tb.Cleanup(func() { cancel(); <-done })
	return l.Addr().String()
}

// benchClient sends every request to addr, trusting roots, over HTTP/2
// when h2 (and TLS) and HTTP/1.1 otherwise; keepAlive false opens a
// connection per request.
func benchClient(addr string, roots *x509.CertPool, h2, keepAlive bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig:    &tls.Config{RootCAs: roots, ServerName: "allowed.test"},
		ForceAttemptHTTP2:  h2,
		DisableKeepAlives:  !keepAlive,
		DisableCompression: true,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// benchPath is one way from a client to the upstream.
type benchPath struct {
	name string
	// client reaches the upstream this way; url is what it asks for,
	// path appended.
	client *http.Client
	url    string
}

// benchPaths builds the ways a session's request reaches the upstream:
// directly (what the L3 path adds nothing to), through the gateway as
// plain HTTP (served), TLS passed through, and TLS terminated.
func benchPaths(b *testing.B, h2, keepAlive bool) []benchPath {
	world, session := newTestCA(b, "world CA"), newTestCA(b, "session CA")
	plain, secure := benchUpstream(b, world)
	tlsAddr := secure.Listener.Addr().String()
	var paths []benchPath
	if !h2 {
		paths = append(paths,
			benchPath{"direct/http", benchClient(plain.Listener.Addr().String(), nil, false, keepAlive), "http://allowed.test"},
			benchPath{"served/http", benchClient(benchGateway(b, plain.Listener.Addr().String(), false, session, world), nil, false, keepAlive), "http://allowed.test"})
	}
	return append(paths,
		benchPath{"direct/https", benchClient(tlsAddr, world.pool, h2, keepAlive), "https://allowed.test"},
		benchPath{"passthrough/https", benchClient(benchGateway(b, tlsAddr, false, session, world), world.pool, h2, keepAlive), "https://allowed.test"},
		benchPath{"terminated/https", benchClient(benchGateway(b, tlsAddr, true, session, world), session.pool, h2, keepAlive), "https://allowed.test"},
	)
}

func benchGet(b *testing.B, c *http.Client, url string, want int64) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || n != want {
		b.Fatalf("GET %s: %s, %d bytes, %v", url, resp.Status, n, err)
	}
}

// BenchmarkProxyRequest times one small request on a kept-alive
// connection through the gateway on loopback (no namespaces, no root),
// over each path, HTTP/1.1 and HTTP/2: the gateway's added time per
// request is a path's time minus direct's. The session's audit only
// counts events (perf's L7 section writes them as airlockd does).
func BenchmarkProxyRequest(b *testing.B) {
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "h1", true: "h2"}[h2]
		for _, p := range benchPaths(b, h2, true) {
			b.Run(proto+"/"+p.name, func(b *testing.B) {
				benchGet(b, p.client, p.url+"/small", int64(len(benchBody)))
				b.ReportAllocs()
				for b.Loop() {
					benchGet(b, p.client, p.url+"/small", int64(len(benchBody)))
				}
			})
		}
	}
}

// BenchmarkProxyDownload streams 4 MiB bodies over HTTP/1.1 (each on the
// kept-alive connection) over each path; MB/s is the rate.
func BenchmarkProxyDownload(b *testing.B) {
	const size = 4 << 20
	for _, p := range benchPaths(b, false, true) {
		b.Run(p.name, func(b *testing.B) {
			url := fmt.Sprintf("%s/bytes?n=%d", p.url, size)
			benchGet(b, p.client, url, size)
			b.SetBytes(size)
			for b.Loop() {
				benchGet(b, p.client, url, size)
			}
		})
	}
}

// BenchmarkProxyHandshake times a small request on a new connection (a
// full TLS handshake over HTTPS) over each path.
func BenchmarkProxyHandshake(b *testing.B) {
	for _, p := range benchPaths(b, false, false) {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				benchGet(b, p.client, p.url+"/small", int64(len(benchBody)))
			}
		})
	}
}
