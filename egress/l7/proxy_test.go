package l7

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// testCA is a certificate authority for tests: the session's CA the
// gateway shows clients, or the world's the upstreams use.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) leaf(t testing.TB, names ...string) *tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: names, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

const (
	testSecret      = "sk-real-value-that-must-never-show-7f3a"
	testPlaceholder = "airlock-secret-0123456789abcdef0123456789abcdef"
)

// proxyTest is a gateway on loopback in front of one upstream (TLS with
// the world's CA, HTTP/2 enabled), for a session that allows the names
// "allowed.test" and "rules.test" and terminates TLS for both.
type proxyTest struct {
	*gatewayTest
	session *testCA
	asks    chan Ask
	answer  chan AskDecision
}

type proxyOpts struct {
	rules   []policies.HTTPHost
	secrets []Secret
	tls     bool
}

func startProxy(t *testing.T, h http.Handler, o proxyOpts) *proxyTest {
	t.Helper()
	return startAttack(t, h, attackOpts{rules: o.rules, secrets: o.secrets, tls: o.tls}).proxyTest
}

// client trusts only the session's CA, as a sandbox does.
func (p *proxyTest) client(h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", p.addr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: p.session.pool},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestTerminatedHTTP1AndHTTP2(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s %s %s", r.Proto, r.Host, r.TLS.ServerName, r.URL.Path)
	}), proxyOpts{tls: true})
	for i, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://allowed.test/a/b?token=abc", nil)
		code, body, _ := get(t, p.client(h2), req)
		// Upstream, the gateway speaks the client's HTTP version.
		want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2] + " allowed.test allowed.test /a/b"
		if code != 200 || body != want {
			t.Fatalf("h2=%v: %d %q", h2, code, body)
		}
		ev := p.events(t, i+1)[i]
		if ev.Kind != KindRequest || !ev.Terminated || ev.Action != ActionAllowed || ev.Host != "allowed.test" ||
			ev.Path != "/a/b" || !ev.Query || ev.Status != 200 || ev.BytesDn != int64(len(body)) {
			t.Errorf("h2=%v: event %+v", h2, ev)
		}
		if b, _ := json.Marshal(ev); strings.Contains(string(b), "abc") {
			t.Errorf("the query reached the audit: %s", b)
		}
	}
}

// TestTerminatedHostMustBeSNI is fronting inside TLS: the SNI names an
// allowed host, the Host header another. The upstream never sees it.
func TestTerminatedHostMustBeSNI(t *testing.T) {
	var seen sync.Map
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Host, true)
	}), proxyOpts{tls: true})
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://allowed.test/", nil)
		req.Host = "evil.test"
		code, body, _ := get(t, p.client(h2), req)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "differs from SNI") {
			t.Errorf("h2=%v: Host evil.test over SNI allowed.test: %d %s", h2, code, body)
		}
	}
	if _, ok := seen.Load("evil.test"); ok {
		t.Error("the upstream saw a request for evil.test")
	}
}

// TestTerminatedStreamsEvents checks that a server-sent event reaches the
// client before the server sends the next one.
func TestTerminatedStreamsEvents(t *testing.T) {
	got := make(chan struct{})
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			fmt.Fprint(w, "data: timeout\n\n")
			return
		}
		fmt.Fprint(w, "data: two\n\n")
	}), proxyOpts{tls: true})
	for _, h2 := range []bool{false, true} {
		got = make(chan struct{})
		resp, err := p.client(h2).Get("https://allowed.test/v1/messages")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, _ := br.ReadString('\n')
		if line != "data: one\n" {
			t.Fatalf("h2=%v: first line %q", h2, line)
		}
		close(got)
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if !strings.Contains(string(rest), "data: two") {
			t.Fatalf("h2=%v: rest %q; the first event was held back", h2, rest)
		}
	}
}

// TestTerminatedWebsocket upgrades a terminated HTTP/1.1 connection and
// echoes through it.
func TestTerminatedWebsocket(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		fmt.Fprint(brw, "echo "+line)
		brw.Flush()
	}), proxyOpts{tls: true})
	req, _ := http.NewRequest("GET", "https://allowed.test/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := p.client(false).Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	rw := resp.Body.(io.ReadWriteCloser)
	defer rw.Close()
	io.WriteString(rw, "hello\n")
	line, _ := bufio.NewReader(rw).ReadString('\n')
	if line != "echo hello\n" {
		t.Fatalf("through the upgraded connection: %q", line)
	}
}

func secretOpts(tls bool) proxyOpts {
	return proxyOpts{tls: tls, secrets: []Secret{{
		Name: "API_KEY", Placeholder: testPlaceholder, Value: []byte(testSecret),
		Inject: []Inject{{Host: "allowed.test", Header: "x-api-key"}},
	}}}
}

// TestSecretInjected: the placeholder the sandbox holds becomes the real
// value on TLS to the bound host, and only there.
func TestSecretInjected(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Header.Get("x-api-key")
		r.Header.Del("x-api-key")
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %v %s", r.Host, r.URL, r.Header, b))
		if key != "" && (key != testSecret || r.Host != "allowed.test") {
			seen = append(seen, "x-api-key "+key+" to "+r.Host)
		}
		mu.Unlock()
		if key == testSecret {
			io.WriteString(w, "authorized")
		}
	}), secretOpts(true))
	c := p.client(true)

	req, _ := http.NewRequest("GET", "https://allowed.test/v1/models", nil)
	req.Header.Set("x-api-key", testPlaceholder)
	if code, body, _ := get(t, c, req); code != 200 || body != "authorized" {
		t.Fatalf("placeholder to the bound host: %d %q", code, body)
	}

	attacks := map[string]*http.Request{}
	r, _ := http.NewRequest("GET", "https://rules.test/", nil)
	r.Header.Set("x-api-key", testPlaceholder)
	attacks["bound header to another host"] = r
	r, _ = http.NewRequest("GET", "https://allowed.test/?k="+testPlaceholder, nil)
	attacks["query to the bound host"] = r
	r, _ = http.NewRequest("GET", "https://rules.test/", nil)
	r.URL.RawQuery = "bad=%zz&k=" + strings.Replace(testPlaceholder, "a", "%61", 1)
	attacks["encoded placeholder beside an invalid escape"] = r
	r, _ = http.NewRequest("GET", "https://allowed.test/", nil)
	r.Header.Set("x-other", "Bearer "+testPlaceholder)
	attacks["another header to the bound host"] = r
	r, _ = http.NewRequest("POST", "https://allowed.test/upload", strings.NewReader(strings.Repeat("x", 100000)+testPlaceholder+"tail"))
	attacks["body to the bound host"] = r
	r, _ = http.NewRequest("POST", "https://rules.test/upload", &slowReader{parts: []string{"aaaa" + testPlaceholder[:20], testPlaceholder[20:] + "bbbb"}})
	attacks["body split across writes"] = r
	for name, req := range attacks {
		resp, err := c.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 || !strings.Contains(string(b), "placeholder of secret API_KEY") {
				t.Errorf("%s: %d %s", name, resp.StatusCode, b)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.Contains(s, testPlaceholder) || strings.Contains(s, testSecret) || strings.HasPrefix(s, "x-api-key") {
			t.Errorf("an upstream saw %.200q", s)
		}
	}
	evs := p.events(t, 1+len(attacks))
	n := 0
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b), testSecret) {
			t.Errorf("the secret reached the audit: %s", b)
		}
		if ev.Action == ActionExfiltration {
			n++
		}
	}
	if n != len(attacks) {
		t.Errorf("%d exfiltration events, want %d: %+v", n, len(attacks), evs)
	}
}

// TestSecretNotOverPlainHTTP: on plain HTTP the placeholder is blocked
// even to the bound host, and never substituted.
func TestSecretNotOverPlainHTTP(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "key="+r.Header.Get("x-api-key"))
	}), secretOpts(false))
	req, _ := http.NewRequest("GET", "http://allowed.test/", nil)
	req.Header.Set("x-api-key", testPlaceholder)
	code, body, _ := get(t, p.gatewayTest.client(""), req)
	if code != 403 || strings.Contains(body, testSecret) {
		t.Fatalf("placeholder over plain HTTP: %d %q", code, body)
	}
}

type slowReader struct{ parts []string }

func (s *slowReader) Read(p []byte) (int, error) {
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	time.Sleep(20 * time.Millisecond)
	n := copy(p, s.parts[0])
	s.parts[0] = s.parts[0][n:]
	if s.parts[0] == "" {
		s.parts = s.parts[1:]
	}
	return n, nil
}

// TestRules: a deny rule answers 403 naming it; an ask holds the request
// until a decision, and passes it on only if approved.
func TestRules(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
	}), proxyOpts{tls: true, rules: []policies.HTTPHost{{Host: "rules.test", Rules: []policies.HTTPRule{
		{Methods: []string{"DELETE"}, Action: policies.HTTPDeny},
		{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk},
	}}}})
	c := p.client(true)

	req, _ := http.NewRequest("DELETE", "https://rules.test/jobs/7", nil)
	code, body, _ := get(t, c, req)
	var refused struct{ Error, Rule string }
	if err := json.Unmarshal([]byte(body), &refused); code != 403 || err != nil || refused.Rule == "" {
		t.Fatalf("DELETE: %d %q", code, body)
	}

	for _, approve := range []bool{true, false} {
		res := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest("POST", "https://rules.test/deploy/prod", nil)
			code, _, _ := get(t, c, req)
			res <- code
		}()
		var a Ask
		select {
		case a = <-p.asks:
		case <-time.After(5 * time.Second):
			t.Fatal("the ask was never raised")
		}
		if a.Method != "POST" || a.Host != "rules.test" || a.Path != "/deploy/prod" {
			t.Errorf("ask %+v", a)
		}
		select {
		case code := <-res:
			t.Fatalf("the held request was answered %d before a decision", code)
		case <-time.After(100 * time.Millisecond):
		}
		p.answer <- AskDecision{Allow: approve, By: "test", Reason: "because", ID: "a1"}
		want := 200
		if !approve {
			want = 403
		}
		if code := <-res; code != want {
			t.Errorf("approve=%v: %d, want %d", approve, code, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "POST /deploy/prod" {
		t.Errorf("the upstream saw %v; want only the approved POST", seen)
	}
}

// TestSecretNotEchoedBack: a bound host that echoes the request (header,
// body, trailer) hands the sandbox the placeholder, never the value.
func TestSecretNotEchoedBack(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Echo-Trailer")
		w.Header().Set("X-Echo", r.Header.Get("x-api-key"))
		w.(http.Flusher).Flush()
		// The value split across two writes.
		k := r.Header.Get("x-api-key")
		io.WriteString(w, "you sent "+k[:7])
		w.(http.Flusher).Flush()
		time.Sleep(20 * time.Millisecond)
		io.WriteString(w, k[7:]+" ok")
		w.Header().Set("X-Echo-Trailer", k)
	}), secretOpts(true))
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://allowed.test/echo", nil)
		req.Header.Set("x-api-key", testPlaceholder)
		resp, err := p.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		all := fmt.Sprint(resp.Header, string(b), resp.Trailer)
		if strings.Contains(all, testSecret) {
			t.Errorf("h2=%v: the value reached the client: %s", h2, all)
		}
		if string(b) != "you sent "+testPlaceholder+" ok" || resp.Header.Get("X-Echo") != testPlaceholder {
			t.Errorf("h2=%v: body %q, X-Echo %q; want the placeholder in place of the value", h2, b, resp.Header.Get("X-Echo"))
		}
	}
}

// TestSecretInTrailer: a placeholder in a request trailer is refused like
// one in the body.
func TestSecretInTrailer(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, fmt.Sprint(r.Trailer))
		mu.Unlock()
	}), secretOpts(true))
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("POST", "https://rules.test/up", io.NopCloser(strings.NewReader("body")))
		req.ContentLength = -1
		req.Trailer = http.Header{"X-Sum": {testPlaceholder}}
		resp, err := p.client(h2).Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 403 || !strings.Contains(string(b), "trailer") {
				t.Errorf("h2=%v: %d %s", h2, resp.StatusCode, b)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range seen {
		if strings.Contains(s, testPlaceholder) {
			t.Errorf("the upstream saw the trailer %s", s)
		}
	}
}

// TestSecretNotEchoedCompressed: an echo the bound host compresses is
// decoded and scrubbed too; the client's Accept-Encoding does not reach
// the host.
func TestSecretNotEchoedCompressed(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("X-Asked", r.Header.Get("Accept-Encoding"))
		zw := gzip.NewWriter(w)
		io.WriteString(zw, "you sent "+r.Header.Get("x-api-key"))
		zw.Close()
	}), secretOpts(true))
	req, _ := http.NewRequest("GET", "https://allowed.test/echo", nil)
	req.Header.Set("x-api-key", testPlaceholder)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := p.client(true).Transport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Encoding") != "" || string(b) != "you sent "+testPlaceholder || resp.Header.Get("X-Asked") != "" {
		t.Errorf("Content-Encoding %q, X-Asked %q, body %q; want the placeholder, uncompressed",
			resp.Header.Get("Content-Encoding"), resp.Header.Get("X-Asked"), b)
	}
}

// TestSecretNotEchoedWithLength: a scrubbed echo whose server declared a
// Content-Length arrives whole (the placeholder is longer than the value).
func TestSecretNotEchoedWithLength(t *testing.T) {
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := "you sent " + r.Header.Get("x-api-key")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		io.WriteString(w, body)
	}), secretOpts(true))
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", "https://allowed.test/echo", nil)
		req.Header.Set("x-api-key", testPlaceholder)
		code, body, _ := get(t, p.client(h2), req)
		if code != 200 || body != "you sent "+testPlaceholder {
			t.Errorf("h2=%v: %d %q", h2, code, body)
		}
	}
}

// TestTerminateWithoutCAFailsClosed: TLS to a host whose rules need it
// terminated is refused when the session has no CA, never passed through
// unchecked.
func TestTerminateWithoutCAFailsClosed(t *testing.T) {
	up := httptestTLS(t)
	dst := up
	var mu sync.Mutex
	var evs []Event
	sess := &Session{
		ID:        "s1",
		Check:     func(netip.AddrPort, Hello, time.Time) Decision { return Decision{Allow: true} },
		Audit:     func(ev Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() },
		Terminate: func(string) bool { return true },
	}
	srv, err := New(Config{
		Sessions:    func(netip.Addr) (*Session, bool) { return sess, true },
		OriginalDst: func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil },
		Dial:        (&net.Dialer{}).DialContext,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{ServerName: "rules.test", InsecureSkipVerify: true})
	if err == nil {
		c.Close()
		t.Fatal("TLS to a host with rules passed through a session without a CA")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(evs) != 1 || evs[0].Action != ActionRefused || !strings.Contains(evs[0].Reason, "no CA") {
		t.Errorf("events %+v", evs)
	}
}

// httptestTLS is a TLS server on loopback that answers anything.
func httptestTLS(t *testing.T) netip.AddrPort {
	t.Helper()
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	return netip.MustParseAddrPort(up.Listener.Addr().String())
}
