package l7

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkWebsocketEcho sends messages of each size through the gateway
// to the world's websocket echo server and reads their echoes, the
// writes pipelined: MB/s is the rate one way. The session has the
// guarded secrets ("secrets": the gateway reads the client's frames and
// scans them) or none (its frames pass unread); plain HTTP and
// terminated TLS. The messages are JSON lines with an escape each, so
// the scan decodes.
func BenchmarkWebsocketEcho(b *testing.B) {
	world, session := newTestCA(b, "world CA"), newTestCA(b, "session CA")
	ws := &wsWorld{discard: true, conns: map[string]*wsSeen{}}
	plain := httptest.NewServer(ws)
	b.Cleanup(plain.Close)
	secure := httptest.NewUnstartedServer(ws)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{*world.leaf(b, "allowed.test")}}
	secure.StartTLS()
	b.Cleanup(secure.Close)
	line := []byte(`{"type":"delta","text":"the quick brown fox jumps over the lazy dog\n"}` + "\n")
	for _, secrets := range []bool{false, true} {
		var sec []Secret
		if secrets {
			sec = guardedSecrets()
		}
		for _, tr := range []struct {
			name, url string
			client    *http.Client
		}{
			{"plain", "http://allowed.test/ws", benchClient(benchGateway(b, plain.Listener.Addr().String(), false, session, world, sec...), nil, false, true)},
			{"terminated", "https://allowed.test/ws", benchClient(benchGateway(b, secure.Listener.Addr().String(), true, session, world, sec...), session.pool, false, true)},
		} {
			for _, size := range []int{1 << 10, 64 << 10} {
				name := fmt.Sprintf("%s/%s/%dKiB", map[bool]string{false: "none", true: "secrets"}[secrets], tr.name, size>>10)
				b.Run(name, func(b *testing.B) {
					msg := bytes.Repeat(line, size/len(line)+1)[:size]
					frame := appendWSClientFrame(nil, wsf{fin: true, op: 0x1, payload: msg}, true)
					c := dialWS(b, tr.client, tr.url, "")
					defer c.rw.Close()
					errc := make(chan error, 1)
					go func() {
						for range b.N {
							if _, err := c.rw.Write(frame); err != nil {
								errc <- err
								return
							}
						}
						errc <- nil
					}()
					b.SetBytes(int64(size))
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						f, _, err := readWSAny(c.r)
						if err != nil || len(f.payload) != size {
							b.Fatalf("echo: %d bytes, %v", len(f.payload), err)
						}
					}
					if err := <-errc; err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	}
}

// discardRWC is an upstream that drops what it is written.
type discardRWC struct{}

func (discardRWC) Read([]byte) (int, error)    { return 0, io.EOF }
func (discardRWC) Write(p []byte) (int, error) { return len(p), nil }
func (discardRWC) Close() error                { return nil }

// BenchmarkWSScanWrite times the gateway's work on a client's websocket
// frames alone (parse, unmask, scan, frame again, mask), without the
// network: 64 KiB messages of JSON lines written 16 KiB at a time (a
// TLS record's worth), as the relay writes them.
func BenchmarkWSScanWrite(b *testing.B) {
	line := []byte(`{"type":"delta","text":"the quick brown fox jumps over the lazy dog\n"}` + "\n")
	for _, name := range []string{"json", "plain"} {
		b.Run(name, func(b *testing.B) {
			l := line
			if name == "plain" {
				l = bytes.ReplaceAll(line, []byte(`\n`), []byte("  "))
			}
			msg := bytes.Repeat(l, 64<<10/len(l)+1)[:64<<10]
			wire := appendWSClientFrame(nil, wsf{fin: true, op: 0x1, payload: msg}, true)
			c := newWSScanConn(discardRWC{}, guardedSecrets())
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				for off := 0; off < len(wire); off += 16 << 10 {
					if _, err := c.Write(wire[off:min(off+16<<10, len(wire))]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
