package load

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// Paths the HTTP load server answers (HTTPHandler).
const (
	// SmallPath answers a short body (SmallBody).
	SmallPath = "/small"
	// BytesPath answers ?n=N bytes, N at most MaxBytes.
	BytesPath = "/bytes"
	SmallBody = "airlock perf: a short answer of 64 bytes, for request latency\n"
	MaxBytes  = 8 << 30
)

// HTTPHandler is the load server's handler: SmallPath answers SmallBody,
// BytesPath?n=N streams N bytes (with a Content-Length) in 64 KiB writes.
func HTTPHandler() http.Handler {
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+SmallPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(SmallBody)))
		_, _ = io.WriteString(w, SmallBody)
	})
	mux.HandleFunc("GET "+BytesPath, func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		if err != nil || n < 0 || n > MaxBytes {
			http.Error(w, fmt.Sprintf("n: want 0..%d", int64(MaxBytes)), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			p := chunk[:min(n, int64(len(chunk)))]
			m, err := w.Write(p)
			n -= int64(m)
			if err != nil {
				return
			}
		}
	})
	return mux
}

// HTTPConfig says where an HTTP load goes and how.
type HTTPConfig struct {
	// URL is asked for: http://NAME[:PORT]/PATH or https://...
	URL string
	// DNS is the resolver (ADDR:PORT) NAME is looked up with, once,
	// before anything is timed (a session's DNS proxy, which pins the
	// answer for the session); empty: the system's.
	DNS string
	// Roots verify HTTPS servers; nil: the system's roots.
	Roots *x509.CertPool
	// H2 offers HTTP/2 over TLS; without it the client speaks HTTP/1.1
	// only.
	H2 bool
}

// httpClient is a client whose every connection goes to the address the
// URL's host resolved to, counting the connections it opens.
type httpClient struct {
	*http.Client
	tr    *http.Transport
	conns atomic.Int64
}

// target is a resolved HTTPConfig.
type target struct {
	cfg  HTTPConfig
	host string // the URL's hostname: the SNI
	addr string // where every connection goes
}

// resolve checks c's URL and looks its host up.
func (c HTTPConfig) resolve(ctx context.Context) (*target, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("url %q: want http or https", c.URL)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	ip, err := lookup(ctx, c.DNS, u.Hostname())
	if err != nil {
		return nil, err
	}
	return &target{cfg: c, host: u.Hostname(), addr: net.JoinHostPort(ip.String(), port)}, nil
}

// client returns a client whose connections go to t's address.
func (t *target) client(keepAlive bool) *httpClient {
	hc := &httpClient{}
	var dialer net.Dialer
	hc.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			hc.conns.Add(1)
			return dialer.DialContext(ctx, "tcp", t.addr)
		},
		TLSClientConfig:     &tls.Config{RootCAs: t.cfg.Roots, ServerName: t.host, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   t.cfg.H2,
		DisableCompression:  true,
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: 64,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	if !t.cfg.H2 {
		hc.tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	hc.Client = &http.Client{Transport: hc.tr, Timeout: 5 * time.Minute}
	return hc
}

func (c HTTPConfig) client(ctx context.Context, keepAlive bool) (*httpClient, error) {
	t, err := c.resolve(ctx)
	if err != nil {
		return nil, err
	}
	return t.client(keepAlive), nil
}

// lookup resolves host (an IPv4 address first) through the resolver at
// server, or the system's.
func lookup(ctx context.Context, server, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
	}
	r := net.DefaultResolver
	if server != "" {
		r = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("%s: no address", host)
	}
	return addrs[0], nil
}

// get does one GET of rawURL and reads the whole body; it returns the
// response (body closed) and the body's length.
func (hc *httpClient) get(ctx context.Context, rawURL string) (*http.Response, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return resp, n, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp, n, fmt.Errorf("GET %s: %s", rawURL, resp.Status)
	}
	return resp, n, nil
}

// issuer names who signed the server's certificate (the world's CA, or
// the session CA of a gateway that terminated TLS).
func issuer(resp *http.Response) string {
	if resp == nil || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return ""
	}
	return resp.TLS.PeerCertificates[0].Issuer.CommonName
}

// RequestsResult is a run of requests, one after another, on one
// kept-alive connection.
type RequestsResult struct {
	Requests int `json:"requests"`
	// Conns counts the connections opened (1 when keep-alive held).
	Conns  int64  `json:"conns"`
	Proto  string `json:"proto"`
	Issuer string `json:"issuer,omitempty"`
	// LatencyUS holds each timed request's time from sending it to the
	// body's end (µs, to 0.1).
	LatencyUS []float64 `json:"latency_us"`
}

// Requests does warmup untimed requests and then n timed ones, one after
// another on one kept-alive connection.
func Requests(ctx context.Context, cfg HTTPConfig, warmup, n int) (*RequestsResult, error) {
	if n <= 0 || n > 1_000_000 || warmup < 0 {
		return nil, fmt.Errorf("requests: n %d: want 1..1000000", n)
	}
	hc, err := cfg.client(ctx, true)
	if err != nil {
		return nil, err
	}
	defer hc.tr.CloseIdleConnections()
	res := &RequestsResult{Requests: n, LatencyUS: make([]float64, 0, n)}
	for i := range warmup + n {
		t0 := time.Now()
		resp, _, err := hc.get(ctx, cfg.URL)
		d := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
		if i >= warmup {
			res.LatencyUS = append(res.LatencyUS, math.Round(float64(d)/float64(time.Microsecond)*10)/10)
		}
		res.Proto, res.Issuer = resp.Proto, issuer(resp)
	}
	res.Conns = hc.conns.Load()
	return res, nil
}

// DownloadResult is one GET of a large body.
type DownloadResult struct {
	Bytes int64 `json:"bytes"`
	// Seconds run from sending the request to the body's end; Gbps is
	// Bytes over them.
	Seconds float64 `json:"seconds"`
	Gbps    float64 `json:"gbps"`
	// FirstByteMS is the time to the response's headers.
	FirstByteMS float64 `json:"first_byte_ms"`
	Proto       string  `json:"proto"`
	Issuer      string  `json:"issuer,omitempty"`
}

// Download fetches cfg.URL once on a new connection and reads the whole
// body; want, if positive, is the body's expected length.
func Download(ctx context.Context, cfg HTTPConfig, want int64) (*DownloadResult, error) {
	hc, err := cfg.client(ctx, false)
	if err != nil {
		return nil, err
	}
	defer hc.tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	first := time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", cfg.URL, resp.Status)
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, make([]byte, 256<<10))
	d := time.Since(t0)
	if err != nil {
		return nil, fmt.Errorf("download: %d bytes, then %w", n, err)
	}
	if want > 0 && n != want {
		return nil, fmt.Errorf("download: %d bytes, want %d", n, want)
	}
	return &DownloadResult{Bytes: n, Seconds: d.Seconds(), Gbps: gbps(n, d),
		FirstByteMS: float64(first) / float64(time.Millisecond), Proto: resp.Proto, Issuer: issuer(resp)}, nil
}

// HandshakeResult is a run of requests each on a new connection.
type HandshakeResult struct {
	Requests    int     `json:"requests"`
	Conns       int64   `json:"conns"`
	Concurrency int     `json:"concurrency"`
	Seconds     float64 `json:"seconds"`
	// PerSecond is Requests over Seconds: connections (and, over TLS,
	// full handshakes: the client keeps no session tickets) a second.
	PerSecond float64 `json:"per_second"`
	// LatencyUS is each request's time from dialing to the body's end.
	LatencyUS stats.Summary `json:"latency_us"`
	Issuer    string        `json:"issuer,omitempty"`
}

// Handshakes does requests, each on a new connection, conc at a time,
// until n are done or d has passed (both bounded: n ≤ 100000, d ≤ 1m);
// requests in flight when d has passed are finished, not cut off.
func Handshakes(ctx context.Context, cfg HTTPConfig, conc, n int, d time.Duration) (*HandshakeResult, error) {
	if conc <= 0 || conc > 64 || n <= 0 || n > 100_000 || d <= 0 || d > time.Minute {
		return nil, fmt.Errorf("handshakes: want 1..64 at once, 1..100000 requests, at most 1m")
	}
	hc, err := cfg.client(ctx, false)
	if err != nil {
		return nil, err
	}
	var (
		mu     sync.Mutex
		lat    []float64
		iss    string
		errs   []error
		issued atomic.Int64
		wg     sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for issued.Add(1) <= int64(n) && time.Now().Before(stop) && ctx.Err() == nil {
				t0 := time.Now()
				resp, _, err := hc.get(ctx, cfg.URL)
				dt := time.Since(t0)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					lat = append(lat, float64(dt)/float64(time.Microsecond))
					iss = issuer(resp)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(errs) > 0 {
		return nil, fmt.Errorf("handshakes: %w", errors.Join(errs...))
	}
	return &HandshakeResult{Requests: len(lat), Conns: hc.conns.Load(), Concurrency: conc, Seconds: elapsed.Seconds(),
		PerSecond: float64(len(lat)) / elapsed.Seconds(), LatencyUS: stats.Summarize(lat), Issuer: iss}, nil
}

// IdleResult is a set of kept-alive connections left idle.
type IdleResult struct {
	Open   int    `json:"open"`
	Proto  string `json:"proto"`
	Issuer string `json:"issuer,omitempty"`
}

// Idle opens n connections, does one request on each and keeps them open,
// idle, until close is called.
func Idle(ctx context.Context, cfg HTTPConfig, n int) (_ *IdleResult, closeAll func(), retErr error) {
	if n <= 0 || n > 4096 {
		return nil, nil, fmt.Errorf("idle: n %d: want 1..4096", n)
	}
	var clients []*httpClient
	closeAll = func() {
		for _, hc := range clients {
			hc.tr.CloseIdleConnections()
		}
	}
	defer func() {
		if retErr != nil {
			closeAll()
		}
	}()
	t, err := cfg.resolve(ctx)
	if err != nil {
		return nil, nil, err
	}
	res := &IdleResult{}
	for i := range n {
		// A client each: one connection each, kept in its idle pool.
		hc := t.client(true)
		clients = append(clients, hc)
		resp, _, err := hc.get(ctx, cfg.URL)
		if err != nil {
			return nil, nil, fmt.Errorf("connection %d: %w", i, err)
		}
		res.Open++
		res.Proto, res.Issuer = resp.Proto, issuer(resp)
	}
	return res, closeAll, nil
}
