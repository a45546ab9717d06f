package sessionca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// handshake runs a TLS handshake between a client that trusts rootsPEM
// and asks for serverName, and a server presenting cert.
func handshake(t *testing.T, rootsPEM []byte, serverName string, cert *tls.Certificate) error {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootsPEM) {
		t.Fatal("no certificate in the CA's PEM")
	}
	// Over TCP: net.Pipe's unbuffered writes deadlock TLS 1.3, where
	// both sides write before they read.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc, err := ln.Accept()
		if err != nil {
			return
		}
		defer sc.Close()
		sc.SetDeadline(time.Now().Add(10 * time.Second))
		_ = tls.Server(sc, &tls.Config{Certificates: []tls.Certificate{*cert}}).Handshake()
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc.SetDeadline(time.Now().Add(10 * time.Second))
	cli := tls.Client(cc, &tls.Config{RootCAs: roots, ServerName: serverName})
	err = cli.Handshake()
	cc.Close()
	<-done
	return err
}

func TestLeafVerifies(t *testing.T) {
	ca, err := New("s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		leaf, dial string
		ok         bool
	}{
		{"api.example.test", "api.example.test", true},
		{"API.Example.Test.", "api.example.test", true},
		{"api.example.test", "other.example.test", false},
		{"api.example.test", "example.test", false},
		{"example.test", "api.example.test", false},
		{"10.1.2.3", "10.1.2.3", true},
		{"10.1.2.3", "10.1.2.4", false},
		{"2001:db8::1", "2001:db8::1", true},
		{"api.example.test", "10.1.2.3", false},
	} {
		t.Run(tc.leaf+"→"+tc.dial, func(t *testing.T) {
			cert, err := ca.Leaf(tc.leaf)
			if err != nil {
				t.Fatal(err)
			}
			err = handshake(t, ca.CertPEM(), tc.dial, cert)
			if tc.ok && err != nil {
				t.Errorf("client asking for %q refused the leaf for %q: %v", tc.dial, tc.leaf, err)
			}
			if !tc.ok && err == nil {
				t.Errorf("client asking for %q accepted the leaf for %q", tc.dial, tc.leaf)
			}
		})
	}
}

// TestLeafOfAnotherSession: a leaf of one session's CA is not trusted by a
// client that trusts another session's CA.
func TestLeafOfAnotherSession(t *testing.T) {
	a, err := New("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("b")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := a.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, b.CertPEM(), "api.example.test", cert); err == nil {
		t.Error("a client trusting session b's CA accepted session a's leaf")
	}
}

func TestCertificates(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ca, err := newCA("sess-1", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	if c.Subject.CommonName != "airlock session sess-1" || ca.Session() != "sess-1" {
		t.Errorf("CA subject %q, session %q", c.Subject.CommonName, ca.Session())
	}
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA %v valid %v maxpath %d zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign {
		t.Errorf("CA key usage %v, want CertSign only", c.KeyUsage)
	}
	if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("CA key %T, want ECDSA", c.PublicKey)
	}
	if !c.NotBefore.Equal(now.Add(-time.Hour)) || !c.NotAfter.Equal(now.Add(30*24*time.Hour)) {
		t.Errorf("CA valid %s..%s", c.NotBefore, c.NotAfter)
	}
	cert, err := ca.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	l := cert.Leaf
	if len(cert.Certificate) != 1 || !bytes.Equal(cert.Certificate[0], l.Raw) {
		t.Error("the tls.Certificate does not carry its leaf alone")
	}
	if l.IsCA || len(l.DNSNames) != 1 || l.DNSNames[0] != "api.example.test" || len(l.IPAddresses) != 0 {
		t.Errorf("leaf IsCA %v DNS %v IPs %v", l.IsCA, l.DNSNames, l.IPAddresses)
	}
	if len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("leaf ext key usage %v, want server auth", l.ExtKeyUsage)
	}
	if !l.NotBefore.Before(now) || l.NotAfter.Sub(l.NotBefore) > 24*time.Hour || l.NotAfter.Before(now.Add(23*time.Hour)) {
		t.Errorf("leaf valid %s..%s at %s", l.NotBefore, l.NotAfter, now)
	}
	if err := l.CheckSignatureFrom(c); err != nil {
		t.Errorf("leaf not signed by the CA: %v", err)
	}
	if pk, ok := l.PublicKey.(*ecdsa.PublicKey); !ok || pk.Curve.Params().Name != "P-256" {
		t.Errorf("leaf key %T, want ECDSA P-256", l.PublicKey)
	}
	ip, err := ca.Leaf("::ffff:10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ip.Leaf.IPAddresses) != 1 || ip.Leaf.IPAddresses[0].String() != "10.0.0.1" || len(ip.Leaf.DNSNames) != 0 {
		t.Errorf("IP leaf: IPs %v DNS %v", ip.Leaf.IPAddresses, ip.Leaf.DNSNames)
	}
}

// TestLeafNotBeyondCA: a leaf minted near the CA's end ends with it.
func TestLeafNotBeyondCA(t *testing.T) {
	now := time.Now()
	ca, err := newCA("s", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(CALifetime - 2*time.Hour)
	cert, err := ca.Leaf("a.test")
	if err != nil {
		t.Fatal(err)
	}
	if cert.Leaf.NotAfter.After(ca.Certificate().NotAfter) {
		t.Errorf("leaf ends %s, after its CA (%s)", cert.Leaf.NotAfter, ca.Certificate().NotAfter)
	}
}

func TestLeafInvalidNames(t *testing.T) {
	ca, err := New("s")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"", ".", "a..b", "*.example.test", "exa mple.test", "-a.test", "a-.test",
		"a/b", "a\x00b", "10.1.2.3.", "1.2.3.4.5", "host.123", "ümlaut.test", "fe80::1%eth0", "[::1]",
		strings.Repeat("a", 64) + ".test",
		strings.Repeat("a.", 127) + "ab",
	} {
		if _, err := ca.Leaf(name); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Leaf(%q) = %v, want an invalid-argument error", name, err)
		}
	}
	for _, name := range []string{"localhost", "_dmarc.example.test", "xn--bcher-kva.test", "a-b.c0.test", strings.Repeat("a", 63) + ".test"} {
		if _, err := ca.Leaf(name); err != nil {
			t.Errorf("Leaf(%q): %v", name, err)
		}
	}
}

func TestLeafCache(t *testing.T) {
	now := time.Now()
	ca, err := newCA("s", func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	a, err := ca.Leaf("a.test")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := ca.Leaf("A.test."); b != a {
		t.Error("the same name in another spelling was minted again")
	}
	now = now.Add(LeafLifetime - LeafRenew - time.Minute)
	if b, _ := ca.Leaf("a.test"); b != a {
		t.Error("a leaf with more than LeafRenew left was minted again")
	}
	now = now.Add(2 * time.Minute)
	b, err := ca.Leaf("a.test")
	if err != nil {
		t.Fatal(err)
	}
	if b == a || !b.Leaf.NotAfter.After(a.Leaf.NotAfter) {
		t.Error("a leaf with less than LeafRenew left was not minted again")
	}
}

func TestLeafCacheBound(t *testing.T) {
	ca, err := New("s")
	if err != nil {
		t.Fatal(err)
	}
	ca.max = 4
	first := map[string]*tls.Certificate{}
	for i := range 4 {
		name := fmt.Sprintf("n%d.test", i)
		first[name], _ = ca.Leaf(name)
	}
	// n0 used again: n1 is now the least recently used.
	if c, _ := ca.Leaf("n0.test"); c != first["n0.test"] {
		t.Fatal("n0 not cached")
	}
	if _, err := ca.Leaf("n4.test"); err != nil {
		t.Fatal(err)
	}
	ca.mu.Lock()
	n, m := ca.lru.Len(), len(ca.leaves)
	_, has1 := ca.leaves["n1.test"]
	ca.mu.Unlock()
	if n != 4 || m != 4 {
		t.Errorf("cache holds %d (list) / %d (map) leaves, want 4", n, m)
	}
	if has1 {
		t.Error("the least recently used leaf was not evicted")
	}
	for _, name := range []string{"n0.test", "n2.test", "n3.test"} {
		if c, _ := ca.Leaf(name); c != first[name] {
			t.Errorf("%s was evicted instead of the least recently used", name)
		}
	}
	for i := range 3 * DefaultCacheSize {
		if _, err := ca.Leaf(fmt.Sprintf("m%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.lru.Len() != 4 || len(ca.leaves) != 4 {
		t.Errorf("after many names the cache holds %d / %d leaves, want 4", ca.lru.Len(), len(ca.leaves))
	}
}

func TestLeafConcurrent(t *testing.T) {
	ca, err := New("s")
	if err != nil {
		t.Fatal(err)
	}
	ca.max = 8
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			for i := range 50 {
				name := fmt.Sprintf("h%d.test", (g+i)%12)
				c, err := ca.Leaf(name)
				if err != nil {
					errs <- err
					return
				}
				if c.Leaf.DNSNames[0] != name {
					errs <- fmt.Errorf("asked for %s, got a leaf for %v", name, c.Leaf.DNSNames)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if ca.lru.Len() > 8 || ca.lru.Len() != len(ca.leaves) {
		t.Errorf("cache list %d, map %d, bound 8", ca.lru.Len(), len(ca.leaves))
	}
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := New("sess-9")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{CertFile: 0o644, KeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s mode %v, want %v", name, st.Mode().Perm(), want)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("Save left %d files, want 2", len(entries))
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.CertPEM(), ca.CertPEM()) || !got.key.Equal(ca.key) || got.Session() != "sess-9" {
		t.Error("Load did not return the saved CA")
	}
	// A leaf of the loaded CA is trusted by a client that has the
	// certificate from before the restart.
	cert, err := got.Leaf("api.example.test")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, ca.CertPEM(), "api.example.test", cert); err != nil {
		t.Errorf("leaf of the loaded CA: %v", err)
	}
	// Saving again replaces both files.
	if err := got.Save(dir); err != nil {
		t.Fatal(err)
	}
}

func TestLoadRefuses(t *testing.T) {
	a, err := New("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := New("b")
	if err != nil {
		t.Fatal(err)
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := a.Save(dirA); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(dirB); err != nil {
		t.Fatal(err)
	}

	t.Run("key mismatch", func(t *testing.T) {
		dir := t.TempDir()
		copyFile(t, filepath.Join(dirA, CertFile), filepath.Join(dir, CertFile))
		copyFile(t, filepath.Join(dirB, KeyFile), filepath.Join(dir, KeyFile))
		if _, err := Load(dir); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("Load of a's certificate with b's key: %v, want a failed-precondition error", err)
		}
	})
	t.Run("missing key", func(t *testing.T) {
		dir := t.TempDir()
		copyFile(t, filepath.Join(dirA, CertFile), filepath.Join(dir, CertFile))
		if _, err := Load(dir); !errdefs.IsNotFound(err) {
			t.Errorf("Load without a key: %v, want not found", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := Load(t.TempDir()); !errdefs.IsNotFound(err) {
			t.Errorf("Load of an empty directory: %v, want not found", err)
		}
	})
	t.Run("leaf as CA", func(t *testing.T) {
		// A certificate that is not a CA, with its own key.
		dir := t.TempDir()
		leaf, err := a.Leaf("x.test")
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, filepath.Join(dir, CertFile), "CERTIFICATE", leaf.Certificate[0])
		der, err := x509.MarshalPKCS8PrivateKey(a.leafKey)
		if err != nil {
			t.Fatal(err)
		}
		writePEM(t, filepath.Join(dir, KeyFile), "PRIVATE KEY", der)
		if _, err := Load(dir); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("Load of a leaf: %v, want a failed-precondition error", err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		dir := t.TempDir()
		copyFile(t, filepath.Join(dirA, KeyFile), filepath.Join(dir, KeyFile))
		if err := os.WriteFile(filepath.Join(dir, CertFile), []byte("not pem"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil {
			t.Error("Load of a certificate file without PEM succeeded")
		}
	})
	t.Run("expired", func(t *testing.T) {
		if _, err := load(dirA, func() time.Time { return time.Now().Add(CALifetime + time.Hour) }); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("Load of an expired CA: %v, want a failed-precondition error", err)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkLeaf(b *testing.B) {
	ca, err := New("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cached", func(b *testing.B) {
		if _, err := ca.Leaf("api.example.test"); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ca.Leaf("api.example.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := ca.Leaf(fmt.Sprintf("h%d.example.test", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
