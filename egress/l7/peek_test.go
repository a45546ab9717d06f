package l7

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello returns the first flight of a crypto/tls client asking for
// serverName.
func clientHello(t testing.TB, serverName string) []byte {
	t.Helper()
	c := &captureConn{}
	_ = tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: serverName == ""}).HandshakeContext(context.Background())
	if c.out.Len() == 0 {
		t.Fatal("the TLS client wrote nothing")
	}
	return c.out.Bytes()
}

// captureConn records what is written and reads EOF.
type captureConn struct {
	readOnlyConn
	out bytes.Buffer
}

func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *captureConn) Write(p []byte) (int, error) { return c.out.Write(p) }

func TestPeek(t *testing.T) {
	long := strings.Repeat("x", MaxPeek)
	tests := []struct {
		name    string
		in      []byte
		want    Hello
		wantErr bool
	}{
		{name: "tls sni", in: clientHello(t, "allowed.test"), want: Hello{Proto: ProtoTLS, SNI: "allowed.test"}},
		{name: "tls sni as sent", in: clientHello(t, "Allowed.TEST"), want: Hello{Proto: ProtoTLS, SNI: "Allowed.TEST"}},
		{name: "tls no sni", in: clientHello(t, ""), want: Hello{Proto: ProtoTLS}},
		{name: "tls truncated", in: clientHello(t, "allowed.test")[:40], want: Hello{Proto: ProtoTLS}, wantErr: true},
		{name: "tls garbage record", in: []byte{0x16, 3, 1, 0, 4, 1, 2, 3, 4}, want: Hello{Proto: ProtoTLS}, wantErr: true},
		{name: "http host", in: []byte("GET / HTTP/1.1\r\nHost: allowed.test\r\nUser-Agent: x\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "allowed.test", Method: "GET"}},
		{name: "http host port", in: []byte("GET / HTTP/1.1\r\nhost: allowed.test:80\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "allowed.test", Method: "GET"}},
		{name: "http ipv6 host", in: []byte("GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "2001:db8::1", Method: "GET"}},
		{name: "http 1.0 no host", in: []byte("GET / HTTP/1.0\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}},
		{name: "http body follows", in: []byte("POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"), want: Hello{Proto: ProtoHTTP, Host: "a.test", Method: "POST"}},
		{name: "http absolute form", in: []byte("GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "a.test", Method: "GET"}},
		{name: "http absolute form without host", in: []byte("GET http://a.test:80/x HTTP/1.1\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "a.test", Method: "GET"}},
		{name: "http absolute form other host", in: []byte("GET http://a.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Host: "b.test", Method: "GET"}, wantErr: true},
		{name: "http two hosts", in: []byte("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}, wantErr: true},
		{name: "http space before colon", in: []byte("GET / HTTP/1.1\r\nHost : b.test\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}, wantErr: true},
		{name: "http connect", in: []byte("CONNECT b.test:443 HTTP/1.1\r\nHost: b.test\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "CONNECT"}, wantErr: true},
		{name: "http2 preface", in: []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), want: Hello{Proto: ProtoHTTP}, wantErr: true},
		{name: "http bad port", in: []byte("GET / HTTP/1.1\r\nHost: a.test:x\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}, wantErr: true},
		{name: "http header never ends", in: []byte("GET / HTTP/1.1\r\nHost: a.test\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}, wantErr: true},
		{name: "http too long", in: []byte("GET / HTTP/1.1\r\nX: " + long + "\r\n\r\n"), want: Hello{Proto: ProtoHTTP, Method: "GET"}, wantErr: true},
		{name: "ssh", in: []byte("SSH-2.0-OpenSSH_9.6\r\n"), want: Hello{Proto: ProtoHTTP}, wantErr: true},
		{name: "empty", in: nil, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, peeked, err := Peek(bytes.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("Peek error = %v, want error %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Peek = %+v, want %+v", got, tt.want)
			}
			if !bytes.HasPrefix(tt.in, peeked) || len(peeked) > MaxPeek {
				t.Errorf("peeked %d bytes that are not a prefix of the input (%d bytes)", len(peeked), len(tt.in))
			}
		})
	}
}

// TestPeekReplays checks that the bytes Peek returns, followed by what it
// left unread, are the client's stream as sent.
func TestPeekReplays(t *testing.T) {
	for _, in := range [][]byte{
		clientHello(t, "allowed.test"),
		[]byte("POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello"),
	} {
		r := bytes.NewReader(append(in, "rest of the stream"...))
		_, peeked, err := Peek(r)
		if err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		if got := append(append([]byte{}, peeked...), rest...); !bytes.Equal(got, append(in, "rest of the stream"...)) {
			t.Errorf("replay differs from the stream sent:\n%q\n%q", got, in)
		}
	}
}

// TestPeekWaitsForWholeHello feeds a ClientHello a byte at a time.
func TestPeekWaitsForWholeHello(t *testing.T) {
	hello := clientHello(t, "slow.test")
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		for i := range hello {
			if _, err := b.Write(hello[i : i+1]); err != nil {
				return
			}
		}
	}()
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	h, peeked, err := Peek(a)
	b.Close()
	if err != nil || h.SNI != "slow.test" || !bytes.Equal(peeked, hello) {
		t.Errorf("Peek = %+v, %d bytes, %v; want slow.test and the whole hello", h, len(peeked), err)
	}
}

func TestNameOf(t *testing.T) {
	for _, tt := range []struct {
		in, name, ip string
		wantErr      bool
	}{
		{in: ""},
		{in: "Allowed.Test", name: "allowed.test."},
		{in: "allowed.test.", name: "allowed.test."},
		{in: "10.0.0.1", ip: "10.0.0.1"},
		{in: "::ffff:10.0.0.1", ip: "10.0.0.1"},
		{in: "bad_name!", wantErr: true},
		{in: "a..b", wantErr: true},
	} {
		name, ip, err := NameOf(tt.in)
		if (err != nil) != tt.wantErr || string(name) != tt.name || (ip.IsValid() && ip.String() != tt.ip) || (!ip.IsValid() && tt.ip != "") {
			t.Errorf("NameOf(%q) = %q, %v, %v; want %q, %q, error %v", tt.in, name, ip, err, tt.name, tt.ip, tt.wantErr)
		}
	}
}

// FuzzPeek checks Peek's invariants on any input: it never reads past
// MaxPeek, what it returns is a prefix of the input, a recognised message
// has a protocol, and a name it returns is one a client could have sent.
func FuzzPeek(f *testing.F) {
	f.Add(clientHello(f, "allowed.test"))
	f.Add(clientHello(f, ""))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("GET http://a.test/x HTTP/1.1\r\nHost: b.test\r\n\r\n"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, peeked, err := Peek(bytes.NewReader(in))
		if len(peeked) > MaxPeek || !bytes.HasPrefix(in, peeked) {
			t.Fatalf("peeked %d bytes, not a prefix of the input", len(peeked))
		}
		if len(in) > 0 && h.Proto != ProtoTLS && h.Proto != ProtoHTTP {
			t.Fatalf("protocol %q", h.Proto)
		}
		if err == nil && errors.Is(err, ErrPeekTooLong) {
			t.Fatal("unreachable")
		}
		if err != nil {
			return
		}
		if h.Proto == ProtoTLS && h.Host != "" || h.Proto == ProtoHTTP && h.SNI != "" {
			t.Fatalf("hello %+v mixes protocols", h)
		}
		if strings.ContainsAny(h.Name(), "\r\n\x00") {
			t.Fatalf("name %q holds control characters", h.Name())
		}
	})
}

// echClientHello returns the first flight of a crypto/tls client that
// encrypts its ClientHello (ECH) to a key whose public name is outer: the
// outer hello asks for outer, the encrypted inner one for inner.
func echClientHello(t *testing.T, outer, inner string) []byte {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u16 := func(b []byte, v int) []byte { return append(b, byte(v>>8), byte(v)) }
	var c []byte
	c = append(c, 7)   // config_id
	c = u16(c, 0x0020) // DHKEM(X25519, HKDF-SHA256)
	c = u16(c, len(key.PublicKey().Bytes()))
	c = append(c, key.PublicKey().Bytes()...)
	c = u16(c, 4)      // cipher suites
	c = u16(c, 0x0001) // HKDF-SHA256
	c = u16(c, 0x0001) // AES-128-GCM
	c = append(c, 64)  // maximum_name_length
	c = append(c, byte(len(outer)))
	c = append(c, outer...)
	c = u16(c, 0) // extensions
	config := u16(u16(nil, extECH), len(c))
	config = append(config, c...)
	list := u16(nil, len(config))
	list = append(list, config...)
	cc := &captureConn{}
	_ = tls.Client(cc, &tls.Config{ServerName: inner, MinVersion: tls.VersionTLS13, EncryptedClientHelloConfigList: list}).HandshakeContext(context.Background())
	if cc.out.Len() == 0 {
		t.Fatal("the TLS client wrote nothing")
	}
	return cc.out.Bytes()
}

// TestPeekRefusesEncryptedHello: with Encrypted Client Hello, the name a
// ClientHello shows is a front (the key's public name), and a server that
// holds the key serves the inner one: Go's server, without the key,
// reported the front as the server name, and the gateway checked it. Such
// a hello is refused, on the listener's path and the fast path alike
// (both Peek).
func TestPeekRefusesEncryptedHello(t *testing.T) {
	hello := echClientHello(t, "allowed.test", "other.test")
	if !bytes.Contains(hello, []byte("allowed.test")) || bytes.Contains(hello, []byte("other.test")) {
		t.Fatalf("the ECH hello does not show the front and hide the inner name")
	}
	h, _, err := Peek(bytes.NewReader(hello))
	if err == nil || !strings.Contains(err.Error(), "encrypted ClientHello") {
		t.Errorf("Peek of an ECH hello fronted by allowed.test = %+v, %v; want refused", h, err)
	}
	if h.SNI == "allowed.test" {
		t.Errorf("Peek reported the front %q as the name asked for", h.SNI)
	}
}
