package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// MaxPeek bounds the bytes read from a client before its first TLS
// ClientHello or HTTP request header ends: a ClientHello with post-quantum
// key shares is a few KiB, a request header rarely more than 8.
const MaxPeek = 64 << 10

// Protocols a connection is recognised as.
const (
	ProtoTLS  = "tls"
	ProtoHTTP = "http"
)

// Hello is what a client's first bytes say about where it goes.
type Hello struct {
	// Proto is ProtoTLS when the first byte starts a TLS handshake record,
	// ProtoHTTP otherwise.
	Proto string
	// SNI is the ClientHello's server name, as sent (empty if none).
	SNI string
	// Host is the HTTP/1.x request's host, without a port: the authority
	// of an absolute-form target, or else the Host header (empty if none).
	Host string
	// Method is the HTTP request's method.
	Method string
}

// Name is the name the client asks for: the SNI of a TLS connection, the
// Host of an HTTP request.
func (h Hello) Name() string {
	if h.Proto == ProtoTLS {
		return h.SNI
	}
	return h.Host
}

// ErrPeekTooLong is returned when a client sends more than MaxPeek bytes
// without completing its ClientHello or request header.
var ErrPeekTooLong = errors.New("l7: first message longer than the peek limit")

// recorder reads from r and keeps a copy of every byte it returned, up to
// max bytes; past max, Read fails with ErrPeekTooLong.
type recorder struct {
	r   io.Reader
	buf bytes.Buffer
	max int
}

func (rc *recorder) Read(p []byte) (int, error) {
	left := rc.max - rc.buf.Len()
	if left <= 0 {
		return 0, ErrPeekTooLong
	}
	if len(p) > left {
		p = p[:left]
	}
	n, err := rc.r.Read(p)
	rc.buf.Write(p[:n])
	return n, err
}

// Peek reads a client's first message from r, a TLS ClientHello or an
// HTTP/1.x request header, without answering it, and returns what it says
// and every byte it read: the caller sends those on first, so that the
// server sees the stream as the client sent it. Bytes past the message
// (the start of a request body, a pipelined request) may be among them.
// The error says why the message could not be read; the bytes read are
// returned with it. The caller bounds the time with a read deadline on r.
func Peek(r io.Reader) (Hello, []byte, error) {
	rec := &recorder{r: r, max: MaxPeek}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return Hello{}, rec.buf.Bytes(), fmt.Errorf("l7: no first byte: %w", err)
	}
	stream := io.MultiReader(bytes.NewReader(first[:]), rec)
	if first[0] == 0x16 { // TLS handshake record
		sni, err := peekTLS(stream)
		return Hello{Proto: ProtoTLS, SNI: sni}, rec.buf.Bytes(), err
	}
	h, err := peekHTTP(stream)
	h.Proto = ProtoHTTP
	return h, rec.buf.Bytes(), err
}

var errHelloRead = errors.New("client hello read")

// peekTLS runs crypto/tls's server handshake on r until the ClientHello
// is parsed, and stops it there: the server name comes from Go's own
// parser, and nothing is written to the client.
func peekTLS(r io.Reader) (string, error) {
	var sni string
	var got, encrypted bool
	conn := tls.Server(readOnlyConn{r: r}, &tls.Config{
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, got = hi.ServerName, true
			encrypted = slices.ContainsFunc(hi.Extensions, func(e uint16) bool { return e == extECH || e == extESNI })
			return nil, errHelloRead
		},
	})
	err := conn.HandshakeContext(context.Background())
	if got && encrypted {
		// The name checked would be the outer one, a front: a server
		// that holds the ECH keys reads the inner ClientHello and serves
		// the name in it, which no one checked.
		return "", fmt.Errorf("l7: an encrypted ClientHello (ECH) for %q: the name it asks for is hidden from the gateway", sni)
	}
	if got {
		// crypto/tls passes the name's bytes on as sent; a host name
		// (IDNA ones in their ASCII form) is printable ASCII.
		if i := strings.IndexFunc(sni, func(c rune) bool { return c <= ' ' || c >= 0x7f }); i >= 0 {
			return "", fmt.Errorf("l7: server name %q holds a byte that is not printable ASCII", sni)
		}
		return sni, nil
	}
	if errors.Is(err, ErrPeekTooLong) {
		return "", err
	}
	return "", fmt.Errorf("l7: not a TLS ClientHello: %w", err)
}

// TLS extensions that hide the name a ClientHello asks for: Encrypted
// Client Hello (RFC 9849's encrypted_client_hello) and its draft
// predecessor, encrypted SNI.
const (
	extECH  = 0xfe0d
	extESNI = 0xffce
)

// peekHTTP reads an HTTP/1.x request line and header.
func peekHTTP(r io.Reader) (Hello, error) {
	h, _, err := parseRequest(bufio.NewReader(r))
	return h, err
}

// parseRequest reads an HTTP/1.x request line and header, and finds the
// request's host.
func parseRequest(br *bufio.Reader) (Hello, textproto.MIMEHeader, error) {
	tp := textproto.NewReader(br)
	line, err := tp.ReadLine()
	if err != nil {
		return Hello{}, nil, httpErr(err)
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || method == "" || target == "" || !strings.HasPrefix(proto, "HTTP/1.") || len(proto) != len("HTTP/1.1") {
		return Hello{}, nil, errors.New("l7: not an HTTP/1.x request line")
	}
	h := Hello{Method: method}
	if method == "CONNECT" {
		return h, nil, errors.New("l7: CONNECT is not a request to the destination")
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil {
		return h, nil, httpErr(err)
	}
	for k := range hdr {
		if strings.ContainsAny(k, " \t") {
			// RFC 9112 5.1: servers must reject it; some take it as is.
			return h, nil, fmt.Errorf("l7: whitespace in header name %q", k)
		}
	}
	hosts := hdr.Values("Host")
	if len(hosts) > 1 {
		return h, nil, errors.New("l7: more than one Host header")
	}
	var hostHdr string
	if len(hosts) == 1 {
		if hostHdr, err = hostOnly(hosts[0]); err != nil {
			return h, nil, fmt.Errorf("l7: Host header: %w", err)
		}
	}
	h.Host = hostHdr
	if !strings.HasPrefix(target, "/") && target != "*" {
		// Absolute form: the target's authority is the host (RFC 9112
		// 3.2.2), and a Host header that says otherwise is a request
		// servers read differently.
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host == "" {
			return h, nil, errors.New("l7: request target is neither a path nor an absolute URL")
		}
		uh, err := hostOnly(u.Host)
		if err != nil {
			return h, nil, fmt.Errorf("l7: request target: %w", err)
		}
		if len(hosts) == 1 && !strings.EqualFold(uh, hostHdr) {
			return h, nil, fmt.Errorf("l7: request target host %q differs from the Host header %q", uh, hostHdr)
		}
		h.Host = uh
	}
	return h, hdr, nil
}

func httpErr(err error) error {
	if errors.Is(err, ErrPeekTooLong) {
		return err
	}
	return fmt.Errorf("l7: not an HTTP/1.x request: %w", err)
}

// hostOnly strips the port from a Host value ("name", "name:80",
// "[::1]:80", "1.2.3.4").
func hostOnly(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", fmt.Errorf("bad port in %q", s)
		}
		return h, nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		return s[1 : len(s)-1], nil
	}
	if strings.Contains(s, ":") {
		if _, err := netip.ParseAddr(s); err != nil {
			return "", fmt.Errorf("bad host %q", s)
		}
	}
	return s, nil
}

// NameOf returns the name a Hello asks for as an FQDN, or ok false when it
// asks for none: no SNI or Host, or an IP address literal (then ip is it).
func NameOf(s string) (name allowlist.FQDN, ip netip.Addr, err error) {
	if s == "" {
		return "", netip.Addr{}, nil
	}
	if a, perr := netip.ParseAddr(s); perr == nil {
		return "", a.Unmap(), nil
	}
	name, err = allowlist.ToFQDN(s)
	return name, netip.Addr{}, err
}

// readOnlyConn is the net.Conn crypto/tls reads the ClientHello from;
// whatever the handshake writes (an alert) is dropped.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
