package egress_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/l7"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/policies"
)

// Two servers that have every client send a second ClientHello (a TLS
// 1.3 HelloRetryRequest): lax.test's reads the second anew and serves the
// name it asks for (stacks that do not compare it with the first), and
// strict.test's is crypto/tls's with a group no client offers a key share
// for first.
var (
	laxHost    = netip.MustParseAddr("10.214.0.22")
	strictHost = netip.MustParseAddr("10.214.0.23")
)

// helloRetryRequest is the start of a HelloRetryRequest record: what a
// client reads as one.
func helloRetryRequest() []byte {
	random := []byte{
		0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
		0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
	}
	body := append([]byte{2, 0, 0, 46, 3, 3}, random...)
	body = append(body, 0, 0x13, 0x01, 0, 0, 6, 0, 0x2b, 0, 2, 3, 4) // no session id, a suite, supported_versions 1.3
	return append([]byte{0x16, 3, 3, 0, byte(len(body))}, body...)
}

// serveLax answers each connection's first ClientHello with a retry
// request, then serves the name its second asks for; names gets each
// second ClientHello's name.
func serveLax(l net.Listener, names chan<- string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			r := &recordReader{r: c}
			if _, _, err := l7.Peek(r.next()); err != nil {
				return
			}
			if _, err := c.Write(helloRetryRequest()); err != nil {
				return
			}
			h, _, err := l7.Peek(r.next())
			if err != nil {
				return
			}
			names <- h.SNI
			io.WriteString(c, "served "+h.SNI)
		}()
	}
}

// recordReader reads a connection's TLS records one at a time, skipping
// change cipher spec records, so that each Peek sees one ClientHello.
type recordReader struct{ r io.Reader }

func (rr *recordReader) next() io.Reader {
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(rr.r, hdr[:]); err != nil {
			return bytes.NewReader(nil)
		}
		body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
		if _, err := io.ReadFull(rr.r, body); err != nil {
			return bytes.NewReader(nil)
		}
		if hdr[0] != 0x14 {
			return bytes.NewReader(append(hdr[:], body...))
		}
	}
}

// TestFastAttackHelloRetry: a second ClientHello, sent after the
// server's HelloRetryRequest or at once behind the first, was read by
// the server unchecked on the fast path (the connection marked passed
// when the server acknowledged the first): a server that serves the name
// of the second served one the session may not reach. Refused now, on the
// fast path and through the listener, and a client whose second hello
// repeats the first's name completes its handshake.
func TestFastAttackHelloRetry(t *testing.T) { testHelloRetry(t, true) }

// TestListenerHelloRetry: the same through the listener.
func TestListenerHelloRetry(t *testing.T) { testHelloRetry(t, false) }

func testHelloRetry(t *testing.T, fastPath bool) {
	fw := startWorld(t, fastPath)
	ctx := t.Context()
	names := make(chan string, 16)
	for _, h := range []struct {
		name string
		ip   netip.Addr
	}{{"lax.test", laxHost}, {"strict.test", strictHost}} {
		// The echo assigns the address in the world.
		if err := fw.w.AddTCPEcho(netip.AddrPortFrom(h.ip, 7)); err != nil {
			t.Fatal(err)
		}
		if err := fw.w.AddRecord(h.name, h.ip); err != nil {
			t.Fatal(err)
		}
	}
	lax, err := netns.Listen(fw.w.NetnsPath(), "tcp", netip.AddrPortFrom(laxHost, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	defer lax.Close()
	go serveLax(lax, names)
	cert, pool := selfSigned(t, "strict.test")
	strict, err := netns.Listen(fw.w.NetnsPath(), "tcp", netip.AddrPortFrom(strictHost, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	go func() {
		tl := tls.NewListener(strict, &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: []tls.CurveID{tls.CurveP384}, MinVersion: tls.VersionTLS13})
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 5)
				if _, err := io.ReadFull(c, b); err == nil {
					c.Write(bytes.ToUpper(b))
				}
			}()
		}
	}()
	audit := &auditLog{}
	sess := addSession(t, fw.p, "retry", &policies.Egress{Allow: []string{"lax.test", "strict.test"}, L7: policies.L7Check}, audit)
	t.Cleanup(func() { _ = fw.p.Remove(context.Background(), "retry", nil) })
	for _, name := range []string{"lax.test", "strict.test"} {
		if r := query(t, sess, name); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("%s: %v", name, r)
		}
	}
	dial := func(dst netip.Addr) *net.TCPConn {
		t.Helper()
		c, err := netns.Dialer(sess.NetnsPath())(ctx, "tcp", netip.AddrPortFrom(dst, 443).String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		return c.(*net.TCPConn)
	}
	first, second := tls12Hello(sniExt("lax.test")), tls12Hello(sniExt("evil.test"))
	served := func() string {
		select {
		case n := <-names:
			return n
		case <-time.After(500 * time.Millisecond):
			return ""
		}
	}

	t.Run("the legitimate retry completes", func(t *testing.T) {
		c := dial(strictHost)
		defer c.Close()
		// X25519 first: the client's key share is for it alone, and the
		// server, P-384 only, asks for another.
		tc := tls.Client(c, &tls.Config{ServerName: "strict.test", RootCAs: pool, CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP384}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("a handshake with a retry request: %v", err)
		}
		if st := tc.ConnectionState(); st.CurveID != tls.CurveP384 {
			t.Fatalf("negotiated %v, want P-384 (after a retry request)", st.CurveID)
		}
		io.WriteString(tc, "hello")
		b := make([]byte, 5)
		if _, err := io.ReadFull(tc, b); err != nil || string(b) != "HELLO" {
			t.Fatalf("through the connection: %q %v", b, err)
		}
	})
	t.Run("a second hello for another name after the retry request", func(t *testing.T) {
		c := dial(laxHost)
		defer c.Close()
		c.Write(first)
		hrr := make([]byte, len(helloRetryRequest()))
		if _, err := io.ReadFull(c, hrr); err != nil {
			t.Fatalf("the server's retry request: %v", err)
		}
		c.Write(second)
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), "served") {
			t.Errorf("the server answered the second ClientHello: %q", b)
		}
		if n := served(); n != "" {
			t.Errorf("the server read a second ClientHello for %q", n)
		}
		ev := audit.waitEvent(t, "retry", "l7", "refused", "lax.test")
		if !strings.Contains(ev.Reason, "HelloRetryRequest") {
			t.Errorf("refusal's audit event %+v: want why", ev)
		}
	})
	t.Run("a second hello sent at once", func(t *testing.T) {
		c := dial(laxHost)
		defer c.Close()
		_ = c.SetNoDelay(true)
		c.Write(first)
		c.Write(second)
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), "served") {
			t.Errorf("the server answered a second ClientHello sent at once: %q", b)
		}
		if n := served(); n != "" {
			t.Errorf("the server read a second ClientHello for %q", n)
		}
	})
}

// selfSigned is a certificate for name and a pool that trusts it.
func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: c}, pool
}
