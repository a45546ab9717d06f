package l7

import (
	"bytes"
	"crypto/rand"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestBodyNotHeldWhileServerWaits: a response body with a length is
// written to an HTTP/1.x client behind, several TLS records a write, but
// what the gateway has read reaches the client before the gateway waits
// on the server for more; over HTTP/2 too (before, the tail of each read
// stayed in the HTTP server's buffers until the next). The server sends
// half of its body and waits until the client has it.
func TestBodyNotHeldWhileServerWaits(t *testing.T) {
	const half = 100_000 // several TLS records, less than writeBehindSize
	for _, c := range []struct {
		name string
		tls  bool
		h2   bool
	}{{"terminated-h1", true, false}, {"terminated-h2", true, true}, {"plain-http", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			got := make(chan struct{})
			p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(2*half))
				w.Write(bytes.Repeat([]byte("a"), half))
				w.(http.Flusher).Flush()
				select {
				case <-got:
				case <-time.After(5 * time.Second):
					return // the client never had the first half: a short body
				}
				w.Write(bytes.Repeat([]byte("b"), half))
			}), proxyOpts{tls: c.tls})
			client, url := p.client(c.h2), "https://allowed.test/file"
			if !c.tls {
				client, url = p.gatewayTest.client(""), "http://allowed.test/file"
			}
			resp, err := client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, half)
			start := time.Now()
			if _, err := io.ReadFull(resp.Body, first); err != nil {
				t.Fatalf("first half: %v", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("the first half came after %v: held while the gateway waited on the server", d)
			}
			close(got)
			rest, err := io.ReadAll(resp.Body)
			if err != nil || !bytes.Equal(first, bytes.Repeat([]byte("a"), half)) || !bytes.Equal(rest, bytes.Repeat([]byte("b"), half)) {
				t.Fatalf("body: %d+%d bytes, %v", len(first), len(rest), err)
			}
			if ev := p.events(t, 1)[0]; ev.BytesDn != 2*half || ev.Status != 200 {
				t.Errorf("event %+v", ev)
			}
		})
	}
}

// TestDownloadsWrittenBehindIntact: downloads one after another on one
// kept-alive connection, and at once on several, each of another length
// and content, arrive whole through the held writes.
func TestDownloadsWrittenBehindIntact(t *testing.T) {
	bodies := map[string][]byte{}
	for i, n := range []int{1, 16 << 10, 16<<10 + 1, writeBehindSize - 7, writeBehindSize + 5, 3<<20 + 11} {
		b := make([]byte, n)
		rand.Read(b)
		bodies["/"+strconv.Itoa(i)] = b
	}
	p := startProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodies[r.URL.Path]
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}), proxyOpts{tls: true})
	client := p.client(false)
	check := func(path string) error {
		resp, err := client.Get("https://allowed.test" + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, bodies[path]) {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	for round := range 2 {
		for path := range bodies {
			if err := check(path); err != nil {
				t.Fatalf("round %d, %s: %v", round, path, err)
			}
		}
	}
	errs := make(chan error, len(bodies))
	for path := range bodies {
		go func() { errs <- check(path) }()
	}
	for range bodies {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
