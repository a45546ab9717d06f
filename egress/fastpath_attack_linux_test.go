package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// fastWorld is a gateway with the fast path and a world where
// allowed.test and other.test share an address; the session "fast"
// allows allowed.test only, and has resolved it.
type fastWorld struct {
	w     *world.World
	p     *egress.Perimeter
	fast  *egress.Session
	audit *auditLog
	https netip.AddrPort
	// gw is the gateway namespace's path.
	gw string
	// prefix and cfg opened p.
	prefix string
	cfg    egress.Config
}

func startFastWorld(t *testing.T) *fastWorld { return startWorld(t, true) }

// startWorld is startFastWorld, with the fast path or without (the
// listener checks every connection).
func startWorld(t *testing.T, fastPath bool) *fastWorld {
	t.Helper()
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	host := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, r.Host) })
	for _, name := range []string{"allowed.test", "other.test"} {
		if err := w.AddHost(name, sharedHost, world.WithHandler(host), world.WithTLS()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := egress.Config{
		Uplink:        "netns:" + w.NetnsName(),
		DNSUpstreams:  []string{w.DNSAddr().String()},
		AllowPrivate:  []netip.Prefix{w.Net()},
		UpstreamRoots: w.CertPool(),
		FastPath:      fastPath,
	}
	p, err := egress.Open(ctx, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	fw := &fastWorld{w: w, p: p, audit: &auditLog{}, https: netip.AddrPortFrom(sharedHost, 443),
		gw: filepath.Join(netns.DefaultDir, prefix+"-gw"), prefix: prefix, cfg: cfg}
	fw.fast = addSession(t, p, "fast", &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}, fw.audit)
	t.Cleanup(func() { _ = p.Remove(context.Background(), "fast", nil) })
	if r := query(t, fw.fast, "allowed.test"); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Fatalf("allowed.test: %v", r)
	}
	return fw
}

// dialFrom connects from the session's namespace from local port port
// (0: any), as any unprivileged process can (SO_REUSEADDR, a port above
// 1023).
func (fw *fastWorld) dialFrom(ctx context.Context, port uint16) (*net.TCPConn, error) {
	d := &net.Dialer{
		LocalAddr: &net.TCPAddr{Port: int(port)},
		Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
	var c net.Conn
	err := netns.Do(fw.fast.NetnsPath(), func() (err error) {
		c, err = d.DialContext(ctx, "tcp", fw.https.String())
		return err
	})
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// getOver sends GET / over TLS with server name sni on c and returns the
// body.
func (fw *fastWorld) getOver(c net.Conn, sni string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: sni, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
	b, err := io.ReadAll(tc)
	if i := bytes.Index(b, []byte("\r\n\r\n")); i >= 0 {
		return string(b[i+4:]), nil
	}
	return string(b), err
}

// TestFastAttackTupleReuse: a connection on the four-tuple of one passed
// a moment ago is checked on its own. The sandbox passes a connection
// with the allowed name from a port it chose, resets it (SO_LINGER 0),
// and connects again from the same port at once: the new SYN must not
// inherit the decided flow's pass (it did, its ClientHello for
// other.test never queued), and other.test is refused.
func TestFastAttackTupleReuse(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	port := uint16(40000 + time.Now().UnixNano()%20000)
	c, err := fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := fw.getOver(c, "allowed.test"); err != nil || body != "allowed.test" {
		t.Fatalf("allowed.test: %q %v", body, err)
	}
	_ = c.SetLinger(0)
	c.Close()
	c, err = fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatalf("dial again from port %d: %v", port, err)
	}
	defer c.Close()
	if body, err := fw.getOver(c, "other.test"); err == nil {
		t.Errorf("other.test through allowed.test's address from a reused port: %q; want refused", body)
	}
}

// tlsExt is a TLS extension: type, length, data.
func tlsExt(typ uint16, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
	return append(b, data...)
}

func sniExt(name string) []byte {
	entry := append([]byte{0}, binary.BigEndian.AppendUint16(nil, uint16(len(name)))...)
	entry = append(entry, name...)
	return tlsExt(0, append(binary.BigEndian.AppendUint16(nil, uint16(len(entry))), entry...))
}

// tls12Hello is a TLS 1.2 ClientHello record (no supported_versions: the
// server answers with its certificate in the clear) with extensions exts.
func tls12Hello(exts []byte) []byte {
	body := []byte{3, 3}
	random := make([]byte, 32)
	_, _ = rand.Read(random)
	body = append(body, random...)
	body = append(body, 0)                            // no session id
	body = append(body, 0, 4, 0xc0, 0x2b, 0xc0, 0x2f) // ECDHE_ECDSA/RSA_WITH_AES_128_GCM_SHA256
	body = append(body, 1, 0)                         // null compression
	groups := tlsExt(10, []byte{0, 4, 0, 0x1d, 0, 0x17})
	points := tlsExt(11, []byte{1, 0})
	sigs := tlsExt(13, []byte{0, 4, 4, 3, 8, 4})
	all := append(append(append(groups, points...), sigs...), exts...)
	body = append(body, binary.BigEndian.AppendUint16(nil, uint16(len(all)))...)
	body = append(body, all...)
	hs := append([]byte{1, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{0x16, 3, 1, byte(len(hs) >> 8), byte(len(hs))}, hs...)
}

// urgentFront builds the bytes a client sends so that the gateway reads a
// ClientHello for gwName while a server that drops the urgent byte (any
// that does not set SO_OOBINLINE) reads one for srvName: wire is sent with
// its byte at urgent marked urgent (MSG_OOB).
//
// The gateway's extensions (after the common ones):
//
//	A: 0xaaaa len 0x0000                      (unknown, empty)
//	B: 0x0f01 len n  [12 bytes][SNI srvName][C header: 0xcccc len m]
//	SNI gwName
//
// Without A's length's high byte (the urgent one), the server reads A's
// length as 0x00 0x0f: A holds B's next 15 bytes, then comes the SNI
// for srvName, then C (unknown) over the gateway's SNI extension to the
// end, plus one byte past the gateway's hello (the server's hello ends a
// byte later).
func urgentFront(gwName, srvName string) (wire []byte, urgent int) {
	gwSNI := sniExt(gwName)
	srvSNI := sniExt(srvName)
	var bdata []byte
	bdata = append(bdata, make([]byte, 12)...)
	bdata = append(bdata, srvSNI...)
	// C's data: what is left of B (nothing), the gateway's SNI extension,
	// and the extra byte.
	bdata = append(bdata, tlsExt(0xcccc, nil)[:2]...)
	bdata = binary.BigEndian.AppendUint16(bdata, uint16(len(gwSNI)+1))
	b := tlsExt(0x0f01, bdata)
	a := tlsExt(0xaaaa, nil)
	exts := append(append(append([]byte{}, a...), b...), gwSNI...)
	rec := tls12Hello(exts)
	// A's length's high byte: A starts len(gwSNI)+len(b)+len(a) before
	// the end.
	urgent = len(rec) - len(gwSNI) - len(b) - len(a) + 2
	if rec[urgent] != 0 || rec[urgent+1] != 0 || rec[urgent+2] != 0x0f {
		panic("urgentFront: layout")
	}
	return append(rec, 0x42), urgent
}

// serverView is what a server that drops the urgent byte reads of wire.
func serverView(wire []byte, urgent int) []byte {
	return append(append([]byte{}, wire[:urgent]...), wire[urgent+1:]...)
}

// TestFastAttackUrgentByte: the gateway reassembles the bytes on the
// wire, urgent ones included, while the server's TCP stack takes the
// urgent byte out of the stream its application reads (without
// SO_OOBINLINE, as every TLS server). A ClientHello whose one urgent byte
// shifts a length field reads as allowed.test to the gateway and as
// other.test to the server, which answered with other.test's certificate
// (fronting, by an unprivileged client: send with MSG_OOB) until the fast
// path refused urgent data in a ClientHello. Through the listener the
// gateway's own socket drops the urgent byte as the server would, and
// checks what the server reads.
func TestFastAttackUrgentByte(t *testing.T) { testUrgentByte(t, true) }

// TestListenerUrgentByte: the same bytes through the listener are
// refused (the gateway's socket reads what the server would).
func TestListenerUrgentByte(t *testing.T) { testUrgentByte(t, false) }

func testUrgentByte(t *testing.T, fastPath bool) {
	wire, urgent := urgentFront("allowed.test", "other.test")
	if name, err := helloName(wire); err != nil || name != "allowed.test" {
		t.Fatalf("the gateway's view names %q (%v)", name, err)
	}
	if name, err := helloName(serverView(wire, urgent)); err != nil || name != "other.test" {
		t.Fatalf("the server's view names %q (%v)", name, err)
	}
	fw := startWorld(t, fastPath)
	c, err := fw.dialFrom(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendUrgent(t, c, wire[:urgent+1])
	// The rest may find the connection reset already: refused at its
	// urgent segment.
	_, _ = c.Write(wire[urgent+1:])
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	cn, err := serverCertName(c)
	if err == nil && cn == "other.test" {
		t.Errorf("the server answered with the certificate of %q: the gateway passed a ClientHello the server read as another name", cn)
	} else {
		t.Logf("server's answer: %q %v", cn, err)
	}
	if fastPath {
		// Refused, and audited as the kernel path's.
		if ev := fw.audit.waitEvent(t, "fast", "l7", "refused", fw.https.String()); ev.Fields["kernel"] != true {
			t.Errorf("audit event %+v", ev)
		}
	}
}

// helloName is the server name crypto/tls reads in the ClientHello that
// starts b.
func helloName(b []byte) (string, error) {
	var name string
	srv := tls.Server(&replayConn{r: bytes.NewReader(b)}, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		name = hi.ServerName
		return nil, errors.New("stop")
	}})
	err := srv.Handshake()
	if name != "" {
		return name, nil
	}
	return "", err
}

type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *replayConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }

// serverCertName reads a TLS 1.2 server's first flight from c and returns
// the common name of its certificate.
func serverCertName(c net.Conn) (string, error) {
	var hs []byte
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return "", err
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
		if _, err := io.ReadFull(c, body); err != nil {
			return "", err
		}
		if hdr[0] != 0x16 {
			return "", fmt.Errorf("record type %d", hdr[0])
		}
		hs = append(hs, body...)
		for len(hs) >= 4 {
			n := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
			if len(hs) < 4+n {
				break
			}
			msg := hs[4 : 4+n]
			if hs[0] == 11 { // certificate
				if len(msg) < 6 {
					return "", errors.New("short certificate message")
				}
				l := int(msg[3])<<16 | int(msg[4])<<8 | int(msg[5])
				cert, err := x509.ParseCertificate(msg[6 : 6+l])
				if err != nil {
					return "", err
				}
				return cert.Subject.CommonName, nil
			}
			hs = hs[4+n:]
		}
	}
}

// TestFastAttackServerReset: the pass is the conntrack entry's mark, and
// conntrack keeps an entry for a new connection on the same four ends
// when the server was the one that reset the last: a SYN in its CLOSE
// state (no FIN seen, the last RST the server's) is "ignored" and let
// through on the old entry, which the server's SYN/ACK then brings back
// in sync (nf_conntrack_proto_tcp.c, TCP_CONNTRACK_IGNORE). The sandbox
// passes a connection for allowed.test from a port it chose, makes the
// server reset it (bytes that are no TLS record, more than the server
// reads before it closes), and connects again from the same port: the
// new connection carried the pass mark, was never queued, and its
// ClientHello for other.test reached the server, until a client's SYN on
// a decided entry made it undecided again (egress/nft's fast path).
// Through the listener the entry's DNAT sends the new connection to the
// gateway, which checks it.
func TestFastAttackServerReset(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	port := uint16(40000 + time.Now().UnixNano()%20000)
	c, err := fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "allowed.test"})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	// No TLS record: the server answers with an alert and closes with
	// bytes unread, which resets the connection.
	junk := bytes.Repeat([]byte{0xff}, 256<<10)
	go func() { _, _ = c.Write(junk) }()
	_, err = io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Logf("the first connection ended with %v", err)
	}
	c.Close()
	_ = netns.Do(fw.gw, func() error {
		b, err := os.ReadFile("/proc/net/nf_conntrack")
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, fmt.Sprintf("sport=%d ", port)) {
				t.Logf("conntrack: %s", l)
			}
		}
		return err
	})
	before := fw.p.FastPackets()
	c, err = fw.dialFrom(ctx, port)
	if err != nil {
		t.Fatalf("dial again from port %d: %v", port, err)
	}
	defer c.Close()
	body, err := fw.getOver(c, "other.test")
	if err == nil {
		t.Errorf("other.test through allowed.test's address on the entry of a connection the server reset: %q (the gateway was given %d packets of it); want refused",
			body, fw.p.FastPackets()-before)
	} else {
		t.Logf("refused: %v", err)
	}
}

// TestFastAttackQueueFull: the kernel's queue (nfq.Config.MaxLen 4096)
// counts every packet held for a decision, and all sessions share it. One
// session within its own bounds (fewer than MaxSessionConns undecided
// connections, each holding the ten segments its initial congestion
// window lets out, of a ClientHello it never finishes) fills it; the
// queue then drops every other session's SYN and ClientHello until the
// peek timeout, and the session could do it again at once, until a
// client's held packets were bounded (fastMaxClientHeld). Sixteen
// sessions together still can: the queue is one for all.
func TestFastAttackQueueFull(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	victim := addSession(t, fw.p, "victim", &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}, fw.audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "victim", nil) })
	if r := query(t, victim, "allowed.test"); len(r.Answer) == 0 {
		t.Fatalf("allowed.test: %v", r)
	}
	if _, _, err := get(t, victim, fw.https, fw.w, "https://allowed.test/", ""); err != nil {
		t.Fatalf("the victim before: %v", err)
	}
	const conns, segs = 480, 10
	var held []*net.TCPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// A record header announcing 16 KiB, then a byte at a time.
	start := []byte{0x16, 3, 1, 0x40, 0, 1, 0, 0x3f, 0xfc}
	t0 := time.Now()
	for i := 0; i < conns; i++ {
		dctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		c, err := fw.dialFrom(dctx, 0)
		cancel()
		if err != nil {
			// The queue is full: the session's own SYN was dropped.
			t.Logf("connection %d after %v: %v", i, time.Since(t0), err)
			break
		}
		if i%50 == 0 {
			t.Logf("connection %d after %v, %d packets to the gateway", i, time.Since(t0), fw.p.FastPackets())
		}
		held = append(held, c)
		_ = c.SetNoDelay(true)
		for j := 0; j < segs; j++ {
			if _, err := c.Write(start[j%len(start) : j%len(start)+1]); err != nil {
				break // refused
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	begin := time.Now()
	code, body, err := get(t, victim, fw.https, fw.w, "https://allowed.test/", "")
	if err != nil {
		t.Errorf("another session's connection while one session holds the queue: %v after %v", err, time.Since(begin).Round(time.Millisecond))
	} else {
		t.Logf("the victim: %d %q in %v", code, body, time.Since(begin))
	}
}

// TestFastAttackIPv6: the fast path over IPv6 (the gateway's rules and
// ParseTCP's other family): an allowed name passes, decided by the
// kernel path; fronting, a connection on the entry of one the server
// reset, and a ClientHello with an urgent byte are refused.
func TestFastAttackIPv6(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	v6 := netip.MustParseAddr("fd0a:214::20")
	host := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, r.Host) })
	for _, name := range []string{"v6.test", "other6.test"} {
		if err := fw.w.AddHost(name, v6, world.WithHandler(host), world.WithTLS()); err != nil {
			t.Fatal(err)
		}
	}
	s6 := addSession(t, fw.p, "fast6", &policies.Egress{Allow: []string{"v6.test"}, AllowPrivate: []string{"fd0a:214::/64"}, IPv6: true, L7: policies.L7Check}, fw.audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "fast6", nil) })
	conn, err := netns.Dialer(s6.NetnsPath())(ctx, "udp", resolver(t, s6).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion("v6.test.", dns.TypeAAAA)
	if r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn}); err != nil || len(r.Answer) != 1 {
		t.Fatalf("AAAA v6.test: %v %v", r, err)
	}
	fw6 := &fastWorld{w: fw.w, p: fw.p, fast: s6, audit: fw.audit, https: netip.AddrPortFrom(v6, 443), gw: fw.gw}
	if body, err := fw6.get(ctx, 0, "v6.test"); err != nil || body != "v6.test" {
		t.Fatalf("v6.test: %q %v", body, err)
	}
	if ev := fw.audit.waitEvent(t, "fast6", "l7", "allowed", "v6.test", "sni", "v6.test"); ev.Fields["kernel"] != true {
		t.Errorf("audit event %+v; want the kernel path's", ev)
	}
	if body, err := fw6.get(ctx, 0, "other6.test"); err == nil {
		t.Errorf("other6.test through v6.test's address: %q; want refused", body)
	}
	// The server resets a passed connection; the same port again.
	port := uint16(40000 + time.Now().UnixNano()%20000)
	c, err := fw6.dialFrom(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "v6.test"}).Handshake(); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = c.Write(bytes.Repeat([]byte{0xff}, 256<<10)) }()
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	if body, err := fw6.get(ctx, port, "other6.test"); err == nil {
		t.Errorf("other6.test on the entry of a connection the server reset: %q; want refused", body)
	}
	// An urgent byte.
	wire, urgent := urgentFront("v6.test", "other6.test")
	c, err = fw6.dialFrom(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sendUrgent(t, c, wire[:urgent+1])
	_, _ = c.Write(wire[urgent+1:])
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if cn, err := serverCertName(c); err == nil && cn == "other6.test" {
		t.Errorf("the server answered with the certificate of %q over IPv6", cn)
	}
}

// get connects from port (0: any) and fetches / from sni.
func (fw *fastWorld) get(ctx context.Context, port uint16, sni string) (string, error) {
	c, err := fw.dialFrom(ctx, port)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return fw.getOver(c, sni)
}

// TestFastAttackRevisionKeepsName: a revision that withdraws a name on
// an address another allowed name still pins ends, through the listener,
// every open connection that asked for the withdrawn name (Server.Recheck;
// the doc of Perimeter.Revise promises it); a connection the fast path
// passed is no longer the gateway's, and the conntrack sweep kept it
// (its address is still allowed): the session went on talking to
// other.test after other.test was withdrawn, until the sweep asked the
// fast path (Server.FastKeep) of each connection on FastPort. A
// connection to the name still allowed on the same address is kept.
func TestFastAttackRevisionKeepsName(t *testing.T) { testRevisionKeepsName(t, true) }

// TestListenerRevisionEndsName: the same through the listener.
func TestListenerRevisionEndsName(t *testing.T) { testRevisionKeepsName(t, false) }

func testRevisionKeepsName(t *testing.T, fastPath bool) {
	fw := startWorld(t, fastPath)
	ctx := t.Context()
	fw.allowBoth(t)
	// A kept connection of each name.
	other, allowed := fw.keptConn(t, "other.test"), fw.keptConn(t, "allowed.test")
	for name, rt := range map[string]func() (string, error){"other.test": other, "allowed.test": allowed} {
		if body, err := rt(); err != nil || body != name {
			t.Fatalf("%s while allowed: %q %v", name, body, err)
		}
	}
	only := &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}
	if _, err := fw.p.Revise(ctx, "fast", egress.SessionConfig{Egress: only, Audit: fw.audit.emit, PolicyVersion: 3}); err != nil {
		t.Fatal(err)
	}
	if body, err := other(); err == nil {
		t.Errorf("other.test on a connection opened before it was withdrawn: %q; want the connection ended", body)
	}
	if body, err := allowed(); err != nil || body != "allowed.test" {
		t.Errorf("allowed.test, still allowed, on a connection opened before the revision: %q %v; want it kept", body, err)
	}
}

// allowBoth revises the session "fast" to allow other.test too (policy
// version 2), resolves it, and returns the revised egress block.
func (fw *fastWorld) allowBoth(t *testing.T) *policies.Egress {
	t.Helper()
	both := &policies.Egress{Allow: []string{"allowed.test", "other.test"}, L7: policies.L7Check}
	if _, err := fw.p.Revise(t.Context(), "fast", egress.SessionConfig{Egress: both, Audit: fw.audit.emit, PolicyVersion: 2}); err != nil {
		t.Fatal(err)
	}
	if r := query(t, fw.fast, "other.test"); len(r.Answer) == 0 {
		t.Fatalf("other.test: %v", r)
	}
	return both
}

// keptConn opens a kept-alive HTTPS connection with server name name,
// and returns a function that sends GET / on it and returns the body.
func (fw *fastWorld) keptConn(t *testing.T, name string) func() (string, error) {
	t.Helper()
	c, err := fw.dialFrom(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: name, NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	return func() (string, error) {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", name)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
}

// TestFastAttackRestartWithoutIt: connections the fast path passed
// outlive airlockd (the kernel forwards them); a next airlockd started
// with the fast path off does not know them, and a revision that
// withdraws their name, on an address another allowed name keeps, kept
// them: only connections on the fast ports of a session whose policy
// took the fast path were ended, and this one's no longer did. A
// connection the kernel forwards as passed (its conntrack mark) that no
// one can check again is ended by any revision.
func TestFastAttackRestartWithoutIt(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	both := fw.allowBoth(t)
	other := fw.keptConn(t, "other.test")
	if body, err := other(); err != nil || body != "other.test" {
		t.Fatalf("other.test while allowed: %q %v", body, err)
	}
	if ev := fw.audit.waitEvent(t, "fast", "l7", "allowed", "other.test"); ev.Fields["kernel"] != true {
		t.Fatalf("other.test: %+v; want passed on the kernel's fast path", ev)
	}
	if err := fw.p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := fw.cfg
	cfg.FastPath = false
	p, err := egress.Open(ctx, fw.prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	// The daemon's record of the session: its policy and the names it
	// resolved.
	expires := time.Now().Add(time.Minute)
	resolved := []egress.Resolved{
		{Name: "allowed.test", Addrs: []netip.Addr{sharedHost}, Expires: expires},
		{Name: "other.test", Addrs: []netip.Addr{sharedHost}, Expires: expires},
	}
	p.Reconcile(ctx, func(id string) *egress.SessionConfig {
		if id == "fast" {
			return &egress.SessionConfig{Egress: both, Audit: fw.audit.emit, PolicyVersion: 2, Resolved: resolved}
		}
		return nil
	})
	if body, err := other(); err != nil || body != "other.test" {
		t.Fatalf("other.test across the restart: %q %v; want the kernel to forward it still", body, err)
	}

	only := &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}
	if _, err := p.Revise(ctx, "fast", egress.SessionConfig{Egress: only, Audit: fw.audit.emit, PolicyVersion: 3}); err != nil {
		t.Fatal(err)
	}
	if body, err := other(); err == nil {
		t.Errorf("other.test, withdrawn, on a connection passed before a restart without the fast path: %q; want it ended", body)
	}
	// New connections go through the listener now, and are checked.
	allowed := fw.keptConn(t, "allowed.test")
	if body, err := allowed(); err != nil || body != "allowed.test" {
		t.Errorf("allowed.test after the revision: %q %v", body, err)
	}
}

// sendUrgent writes b on c with its last byte urgent (send with
// MSG_OOB, as any unprivileged client may), unbuffered.
func sendUrgent(t *testing.T, c *net.TCPConn, b []byte) {
	t.Helper()
	_ = c.SetNoDelay(true)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		_, serr = unix.SendmsgN(int(fd), b, nil, nil, unix.MSG_OOB)
		return !errors.Is(serr, unix.EAGAIN)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
}

// TestFastAttackSpoofedSYN: a session allowed raw packets (CAP_NET_RAW)
// sends, from its own interface, a SYN with another session's address
// and port to that session's passed connection. The forward chain's fast
// path rules ran before <s>-fwd's anti-spoofing, and conntrack files the
// SYN under the victim's entry: the victim's connection was made
// undecided, its next request queued as a connection the gateway never
// saw, and refused with a reset. A packet whose source is not routed back
// through the interface it came in on is dropped before anything else.
func TestFastAttackSpoofedSYN(t *testing.T) {
	fw := startFastWorld(t)
	ctx := t.Context()
	raw := addSession(t, fw.p, "raw", &policies.Egress{Allow: []string{"allowed.test"}, L7: policies.L7Check}, fw.audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "raw", nil) })

	c, err := fw.dialFrom(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tc := tls.Client(c, &tls.Config{RootCAs: fw.w.CertPool(), ServerName: "allowed.test", NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	request := func() error {
		if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "allowed.test" {
			err = fmt.Errorf("body %q", b)
		}
		return err
	}
	if err := request(); err != nil {
		t.Fatalf("the victim's first request: %v", err)
	}
	victim := netip.MustParseAddrPort(c.LocalAddr().String())
	err = netns.Do(raw.NetnsPath(), func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrInet4{Addr: fw.https.Addr().As4()}
		for i := 0; i < 3; i++ {
			if err := unix.Sendto(fd, spoofedSYN(victim, fw.https, uint32(i)*7919), 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("sending the spoofed SYN: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := request(); err != nil {
		t.Errorf("the victim's request after another session spoofed a SYN on its connection: %v; want it unharmed", err)
	}
	// The forged packets are the sending session's drops.
	subject := fw.https.String()
	if drops := fw.p.Drops(ctx, "raw"); !slices.ContainsFunc(drops, func(ev api.AuditEvent) bool {
		return ev.Subject == subject && ev.Fields["packets"] == uint64(3)
	}) {
		t.Errorf("the raw session's drops %+v; want the 3 forged SYNs to %s", drops, subject)
	}
	if drops := fw.p.Drops(ctx, "fast"); len(drops) != 0 {
		t.Errorf("the victim's drops %+v; want none", drops)
	}
}

// spoofedSYN is an IPv4 packet carrying a TCP SYN from src to dst with
// sequence number seq, its TCP checksum right (conntrack checks it).
func spoofedSYN(src, dst netip.AddrPort, seq uint32) []byte {
	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	s, d := src.Addr().As4(), dst.Addr().As4()
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, unix.IPPROTO_TCP, 0, byte(len(tcp)))
	binary.BigEndian.PutUint16(tcp[16:], inetChecksum(append(pseudo, tcp...)))
	ip := make([]byte, 20)
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)+len(tcp)))
	ip[8] = 64
	ip[9] = unix.IPPROTO_TCP
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
	return append(ip, tcp...)
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// dropTTL1 makes the world drop IPv4 packets that arrive with TTL 1, as
// any router past the gateway does (in production the host forwards the
// gateway's uplink traffic at least once more).
func dropTTL1(t *testing.T, fw *fastWorld) {
	t.Helper()
	c := testutil.NftConn(t, fw.w.NetnsPath())
	tab := c.AddTable(&nftables.Table{Name: "rv", Family: nftables.TableFamilyIPv4})
	ch := c.AddChain(&nftables.Chain{Name: "pre", Table: tab, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRaw})
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1}},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// swapHello sends, from session s, a ClientHello for gwName with a TTL
// that dies one hop past the gateway, from a file's page (sendfile), then
// rewrites the page with one for srvName of the same length and restores
// the TTL, so that the kernel's retransmission carries srvName; it returns
// the name in the certificate the server answered with ("" if none).
func swapHello(t *testing.T, fw *fastWorld, s *egress.Session, gwName, srvName string) string {
	t.Helper()
	var c net.Conn
	if err := netns.Do(s.NetnsPath(), func() (err error) {
		c, err = (&net.Dialer{}).DialContext(t.Context(), "tcp", fw.https.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	_ = tc.SetNoDelay(true)
	// Same length: pad the shorter name's hello.
	d := len(sniExt(gwName)) - len(sniExt(srvName))
	pad := 8
	h1 := tls12Hello(append(sniExt(gwName), tlsExt(21, make([]byte, pad))...))
	h2 := tls12Hello(append(sniExt(srvName), tlsExt(21, make([]byte, pad+d))...))
	if len(h1) != len(h2) {
		t.Fatalf("lengths %d %d", len(h1), len(h2))
	}
	file := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(file, h1, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, _ := tc.SyscallConn()
	var serr error
	_ = rc.Control(func(fd uintptr) {
		if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 2); serr != nil {
			return
		}
		var off int64
		_, serr = unix.Sendfile(int(fd), int(f.Fd()), &off, len(h1)) // the skb holds the file's page
	})
	if serr != nil {
		t.Fatal(serr)
	}
	time.Sleep(60 * time.Millisecond) // the gateway passed it; the next hop dropped it
	if _, err := f.WriteAt(h2, 0); err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL, 64) })
	_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
	cn, err := serverCertName(c)
	t.Logf("sent %s (seen by the gateway), sent again %s: the server answered with certificate %q (%v)", gwName, srvName, cn, err)
	return cn
}

// TestFastAttackRetransmitSwap: the fast path checked the first copy of
// the ClientHello and marked the connection passed; the kernel then
// forwarded every later packet, copies sent again included. An
// unprivileged client sent its hello with a TTL that dies one hop past
// the gateway (in production the host forwards the gateway's traffic at
// least once more), from a file's page (sendfile), rewrote the page and
// restored the TTL: the retransmission carried another name, which the
// server read: other.test reached through allowed.test's address, and
// in a session with HTTP rules for other.test, its TLS unterminated.
// Now the connection is marked only when the server acknowledges the
// bytes checked, and a copy with other bytes is refused.
func TestFastAttackRetransmitSwap(t *testing.T) {
	fw := startFastWorld(t)
	dropTTL1(t, fw)
	if cn := swapHello(t, fw, fw.fast, "allowed.test", "other.test"); cn == "other.test" {
		t.Errorf("other.test (not allowed) reached through allowed.test's address by a ClientHello sent again")
	}
	if ev := fw.audit.waitEvent(t, "fast", "l7", "refused", "allowed.test"); !strings.Contains(ev.Reason, "other bytes") {
		t.Errorf("audit %+v; want the copy with other bytes refused", ev)
	}
	rules := addSession(t, fw.p, "rules", &policies.Egress{Allow: []string{"allowed.test", "other.test"}, L7: policies.L7Check,
		HTTP: []policies.HTTPHost{{Host: "other.test", Default: policies.HTTPDeny}}}, fw.audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "rules", nil) })
	if r := query(t, rules, "allowed.test"); len(r.Answer) == 0 {
		t.Fatalf("allowed.test: %v", r)
	}
	if cn := swapHello(t, fw, rules, "allowed.test", "other.test"); cn == "other.test" {
		t.Errorf("other.test, which has HTTP rules, reached with its TLS unterminated by a ClientHello sent again")
	}
	// Without the drop past the gateway, the server reads the first copy.
	plain := startFastWorld(t)
	if cn := swapHello(t, plain, plain.fast, "allowed.test", "other.test"); cn != "allowed.test" {
		t.Errorf("no copy died past the gateway: the server answered %q, want allowed.test", cn)
	}
}
