package l7

import (
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAttackH2Informational101Echo: over HTTP/2 both ways (the
// client spoke h2, so the gateway speaks h2 upstream), a bound host's
// informational response with status 101 goes through the transport's
// Got1xxResponse like a 103, and countingWriter.WriteHeader skipped the
// scrub for 101 (as if a 101 were always final, as in HTTP/1.1).
func TestAttackH2Informational101Echo(t *testing.T) {
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("x-api-key"))
		w.WriteHeader(http.StatusSwitchingProtocols) // informational in h2
		w.Header().Del("X-Echo")
		io.WriteString(w, "ok")
	}), attackOpts{tls: true, secrets: placeholderSecret("allowed.test")})
	req, hints := informational(mustReq("GET", "https://allowed.test/"))
	req.Header.Set("x-api-key", testPlaceholder)
	code, body, _ := get(t, g.client(true), req)
	t.Logf("final %d %q, 1xx seen by the sandbox: %q", code, body, *hints)
	if len(*hints) == 0 {
		t.Fatal("no 1xx reached the client: proves nothing")
	}
	for _, h := range *hints {
		if strings.Contains(h, testSecret) {
			t.Errorf("the value reached the sandbox in an h2 101 informational response: %s", h)
		}
	}
}

// TestAttackUpstreamErrorEchoesValue: the 502 the gateway writes when the
// round trip fails quotes the transport's error, unscrubbed; Go's
// transport quotes the offending line of a malformed response.
func TestAttackUpstreamErrorEchoesValue(t *testing.T) {
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		// A header line without a colon that quotes the request's key.
		fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nbad line %s\r\nContent-Length: 0\r\n\r\n", r.Header.Get("x-api-key"))
		brw.Flush()
	}), attackOpts{tls: true, upstreamH1Only: true, secrets: placeholderSecret("allowed.test")})
	req := mustReq("GET", "https://allowed.test/")
	req.Header.Set("x-api-key", testPlaceholder)
	code, body, _ := get(t, g.client(false), req)
	t.Logf("%d %s", code, body)
	if strings.Contains(body, testSecret) {
		t.Errorf("the value reached the sandbox in the gateway's own 502 body: %s", body)
	}
}

// TestAttackContentEncodingEchoesValue: decodeForScrub's error quotes the
// response's Content-Encoding, and the 502 carries it unscrubbed.
func TestAttackContentEncodingEchoesValue(t *testing.T) {
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "br; k="+r.Header.Get("x-api-key"))
		io.WriteString(w, "x")
	}), attackOpts{tls: true, secrets: placeholderSecret("allowed.test")})
	req := mustReq("GET", "https://allowed.test/")
	req.Header.Set("x-api-key", testPlaceholder)
	code, body, _ := get(t, g.client(true), req)
	t.Logf("%d %s", code, body)
	if strings.Contains(body, testSecret) {
		t.Errorf("the value reached the sandbox in the gateway's own 502 body: %s", body)
	}
}

// TestAttackTrailerEcho: a bound host echoing the value in an
// unannounced trailer, plain and gzip, over h1 and h2 (control: expected
// to be scrubbed).
func TestAttackTrailerEcho(t *testing.T) {
	for _, gz := range []bool{false, true} {
		for _, h2 := range []bool{false, true} {
			g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if gz {
					w.Header().Set("Content-Encoding", "gzip")
					zw := gzip.NewWriter(w)
					io.WriteString(zw, "body")
					zw.Close()
				} else {
					io.WriteString(w, "body")
				}
				w.Header().Set(http.TrailerPrefix+"X-Echo", r.Header.Get("x-api-key"))
			}), attackOpts{tls: true, secrets: placeholderSecret("allowed.test")})
			req := mustReq("GET", "https://allowed.test/")
			req.Header.Set("x-api-key", testPlaceholder)
			resp, err := g.client(h2).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("gz=%v h2=%v: %d %q trailer %v", gz, h2, resp.StatusCode, b, resp.Trailer)
			if strings.Contains(fmt.Sprint(resp.Trailer), testSecret) {
				t.Errorf("LEAK gz=%v h2=%v: value in trailer", gz, h2)
			}
		}
	}
}

// TestAttackHeaderNameEcho: scrubHeader rewrote header values only; a
// bound host that put the value in a header's name passed it on.
func TestAttackHeaderNameEcho(t *testing.T) {
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-"+r.Header.Get("x-api-key"), "1")
		io.WriteString(w, "ok")
	}), attackOpts{tls: true, secrets: placeholderSecret("allowed.test")})
	req := mustReq("GET", "https://allowed.test/")
	req.Header.Set("x-api-key", testPlaceholder)
	_, _, h := get(t, g.client(false), req)
	t.Logf("response header: %v", h)
	if strings.Contains(strings.ToLower(fmt.Sprint(h)), strings.ToLower(testSecret)) {
		t.Errorf("the value reached the sandbox in a response header's name")
	}
}
