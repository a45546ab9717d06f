package runner

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/sessionca"
)

// The bench's proxy for a real model API sends a request on only for the
// API's own name (the TLS server name and the Host header both), always to
// the API's host, with the operator's key in place of whatever key the
// agent sent; a request for another name never leaves.
func TestUpstreamProxy(t *testing.T) {
	const host = "api.model.example"
	ca, err := sessionca.New("upstream-proxy-test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Leaf(host)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct{ host, path, key, auth string }
	var mu sync.Mutex
	var got []seen
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Host, r.URL.RequestURI(), r.Header.Get("X-Api-Key"), r.Header.Get("Authorization")})
		mu.Unlock()
		_, _ = io.WriteString(rw, "from the API")
	}))
	api.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	api.StartTLS()
	defer api.Close()

	for _, bearer := range []bool{false, true} {
		got = nil
		h, err := upstreamProxy(&Upstream{Host: host, Key: "sk-real", Bearer: bearer, ExtraRoots: ca.CertPEM(),
			Dial: func(ctx context.Context) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "tcp", api.Listener.Addr().String())
			}})
		if err != nil {
			t.Fatal(err)
		}
		proxy := httptest.NewTLSServer(h)
		do := func(sni, hostHeader string) (int, string) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: sni, InsecureSkipVerify: true}}}
			req, _ := http.NewRequest(http.MethodPost, proxy.URL+"/v1/messages?beta=true", strings.NewReader("{}"))
			req.Host = hostHeader
			req.Header.Set("X-Api-Key", Placeholder)
			req.Header.Set("Authorization", "Bearer "+Placeholder)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := do(host, host); code != http.StatusOK || body != "from the API" {
			t.Errorf("bearer %t: the API's own name: %d %q", bearer, code, body)
		}
		for _, c := range [][2]string{{host, "evil.example"}, {"evil.example", host}, {"evil.example", "evil.example"}} {
			if code, _ := do(c[0], c[1]); code != http.StatusMisdirectedRequest {
				t.Errorf("bearer %t: SNI %s, Host %s: %d, want 421", bearer, c[0], c[1], code)
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "http://"+host+"/v1/messages", nil))
		if rec.Code != http.StatusMisdirectedRequest {
			t.Errorf("bearer %t: plain HTTP: %d, want 421", bearer, rec.Code)
		}
		proxy.Close()
		mu.Lock()
		if len(got) != 1 {
			t.Fatalf("bearer %t: the API saw %d requests, want 1: %+v", bearer, len(got), got)
		}
		g := got[0]
		mu.Unlock()
		want := seen{host, "/v1/messages?beta=true", "sk-real", ""}
		if bearer {
			want = seen{host, "/v1/messages?beta=true", "", "Bearer sk-real"}
		}
		if g != want {
			t.Errorf("bearer %t: the API saw %+v, want %+v", bearer, g, want)
		}
	}
}
