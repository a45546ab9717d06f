package egress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestL7FastPath runs the L7 gateway's checks of TLS passed through with
// the kernel fast path (egress.Config.FastPath): the ClientHello held in
// the gateway's queue and checked, the connection then forwarded by the
// kernel. The same attacks fail as through the listener (fronting by
// SNI, a name on an address pinned for another, no SNI, plain HTTP on
// the TLS port); an allowed name's bodies arrive whole; every decision is
// audited as the kernel's; plain HTTP on port 80 and a session whose
// gateway terminates all TLS still go through the listener, and so do the
// addresses of names with HTTP rules (pinned in the session's terminate
// sets by DNS answers and revisions, or put there by the fast path's
// refusal of a connection that reached one by address); with no gateway
// reading the queue, no new connection passes, and one passed before
// goes on.
func TestL7FastPath(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	bulk := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if n == 0 {
			io.WriteString(rw, r.Host)
			return
		}
		rw.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("fastpath"), 8192)
		for n > 0 {
			k := min(n, len(chunk))
			if _, err := rw.Write(chunk[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	for _, h := range []struct {
		name string
		ip   netip.Addr
	}{{"allowed.test", sharedHost}, {"other.test", sharedHost}, {"elsewhere.test", elseHost}, {"denied.test", deniedHost}} {
		if err := w.AddHost(h.name, h.ip, world.WithHandler(bulk), world.WithTLS()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := egress.Config{
		Uplink:        "netns:" + w.NetnsName(),
		DNSUpstreams:  []string{w.DNSAddr().String()},
		AllowPrivate:  []netip.Prefix{w.Net()},
		UpstreamRoots: w.CertPool(),
		FastPath:      true,
	}
	p, err := egress.Open(ctx, prefix, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	allow := []string{"allowed.test", "elsewhere.test"}
	var audit auditLog
	fast := addSession(t, p, "fast", &policies.Egress{Allow: allow, L7: policies.L7Check}, &audit)
	for _, name := range []string{"allowed.test", "elsewhere.test"} {
		if r := query(t, fast, name); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("%s: %v", name, r)
		}
	}
	https := netip.AddrPortFrom(sharedHost, 443)
	http80 := netip.AddrPortFrom(sharedHost, 80)

	t.Run("an allowed name passes, decided once and forwarded by the kernel", func(t *testing.T) {
		code, body, err := get(t, fast, https, w, "https://allowed.test/", "")
		if err != nil || code != 200 || body != "allowed.test" {
			t.Fatalf("GET https://allowed.test/ = %d %q %v", code, body, err)
		}
		// Audited when decided, with its conntrack entry, and again when
		// it ends (the client closed it), with the bytes the kernel
		// counted each way.
		dec := audit.waitEvent(t, "fast", "l7", "allowed", "allowed.test", "proto", "tls", "sni", "allowed.test")
		id, _ := dec.Fields["conntrack_id"].(uint32)
		if dec.Fields["kernel"] != true || dec.Fields["dst"] != https.String() || id == 0 {
			t.Errorf("decision's audit event %+v; want the kernel's, with its conntrack id", dec)
		}
		ev := audit.waitEvent(t, "fast", "l7", "closed", "allowed.test", "proto", "tls", "sni", "allowed.test")
		up, _ := ev.Fields["bytes_up"].(int64)
		down, _ := ev.Fields["bytes_down"].(int64)
		if ev.Fields["kernel"] != true || ev.Fields["dst"] != https.String() || ev.Fields["conntrack_id"] != id || up < 300 || down < 1000 {
			t.Errorf("end's audit event %+v; want the kernel's, with its bytes each way and the decision's conntrack id %d", ev, id)
		}
	})
	t.Run("a body of 32 MiB arrives whole", func(t *testing.T) {
		const n = 32 << 20
		before := p.FastPackets()
		c := sessionClient(fast, https, &tls.Config{RootCAs: w.CertPool()})
		c.Timeout = 60 * time.Second
		resp, err := c.Get(fmt.Sprintf("https://allowed.test/?n=%d", n))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if got, err := io.Copy(io.Discard, resp.Body); err != nil || got != n {
			t.Fatalf("read %d of %d bytes: %v", got, n, err)
		}
		// The client acknowledged thousands of segments; the gateway saw
		// its SYN, handshake ACK and ClientHello only.
		if seen := p.FastPackets() - before; seen == 0 || seen > 16 {
			t.Errorf("the gateway was given %d packets of a 32 MiB download; want its first few only", seen)
		}
		resp.Body.Close()
		c.CloseIdleConnections()
		// Its end is audited with the bytes the kernel forwarded: at its
		// last state change, or, when that change's event is not
		// delivered (the kernel sends a connection's cached events with
		// its next packet that leaves the hooks, and the last may be
		// dropped), at its destroy event, once its closed entry times out
		// (10 s).
		var down int64
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && down < n; time.Sleep(20 * time.Millisecond) {
			audit.mu.Lock()
			for _, ev := range audit.evs {
				if b, _ := ev.Fields["bytes_down"].(int64); ev.Session == "fast" && ev.Layer == "l7" && b > down {
					down = b
				}
			}
			audit.mu.Unlock()
		}
		if down < n {
			t.Errorf("the download's audit counts %d bytes down, want at least %d", down, n)
		}
	})
	t.Run("fronting by SNI is refused", func(t *testing.T) {
		if code, _, err := get(t, fast, https, w, "https://other.test/", ""); err == nil {
			t.Fatalf("https://other.test/ through allowed.test's address = %d; want refused", code)
		}
		ev := audit.waitEvent(t, "fast", "l7", "refused", "other.test", "proto", "tls")
		if ev.Fields["kernel"] != true {
			t.Errorf("audit event %+v", ev)
		}
	})
	t.Run("an allowed name is refused on an address pinned for another", func(t *testing.T) {
		if code, _, err := get(t, fast, https, w, "https://elsewhere.test/", ""); err == nil {
			t.Fatalf("https://elsewhere.test/ through allowed.test's address = %d; want refused", code)
		}
		ev := audit.waitEvent(t, "fast", "l7", "refused", "elsewhere.test")
		if !strings.Contains(ev.Reason, "did not resolve to "+sharedHost.String()) {
			t.Errorf("reason %q", ev.Reason)
		}
	})
	t.Run("TLS without SNI is refused", func(t *testing.T) {
		// Go sends no SNI for an address.
		if code, _, err := get(t, fast, https, w, "https://"+sharedHost.String()+"/", ""); err == nil {
			t.Fatalf("TLS without SNI = %d; want refused", code)
		}
		audit.waitEvent(t, "fast", "l7", "refused", https.String(), "proto", "tls")
	})
	t.Run("an address nothing pinned is not reached on 443", func(t *testing.T) {
		// The gateway lets a SYN go on from the queue; the session's
		// own rules must still decide the address (never an accept that
		// skips them).
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		unpinned := netip.AddrPortFrom(deniedHost, 443)
		if c, err := netns.Dialer(fast.NetnsPath())(cctx, "tcp", unpinned.String()); err == nil {
			c.Close()
			t.Fatalf("a TCP handshake with %v, which no answer pinned", unpinned)
		}
	})
	t.Run("plain HTTP on the TLS port is refused", func(t *testing.T) {
		if code, _, err := get(t, fast, https, w, "http://allowed.test:443/", ""); err == nil {
			t.Fatalf("plain HTTP on 443 = %d; want refused", code)
		}
		ev := audit.waitEvent(t, "fast", "l7", "refused", https.String(), "proto", "http")
		if !strings.Contains(ev.Reason, "not a TLS ClientHello") {
			t.Errorf("reason %q", ev.Reason)
		}
	})
	t.Run("plain HTTP on port 80 is still served by the gateway", func(t *testing.T) {
		code, body, err := get(t, fast, http80, w, "http://allowed.test/", "other.test")
		if err != nil || code != 403 || !strings.Contains(body, "other.test") {
			t.Fatalf("Host other.test on port 80 = %d %q %v; want 403", code, body, err)
		}
	})
	t.Run("a session whose gateway terminates TLS goes through the listener", func(t *testing.T) {
		term := addSession(t, p, "term", &policies.Egress{Allow: allow, L7: policies.L7Check, Inspect: policies.InspectAll}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "term", nil) })
		if r := query(t, term, "allowed.test"); len(r.Answer) == 0 {
			t.Fatalf("allowed.test: %v", r)
		}
		// The session has no CA: the listener refuses TLS it must
		// terminate, with a TLS alert (the fast path would reset).
		if _, _, err := get(t, term, https, w, "https://allowed.test/", ""); err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Fatalf("https://allowed.test/ on a terminating session: %v; want the listener's access_denied alert", err)
		}
		ev := audit.waitEvent(t, "term", "l7", "refused", "allowed.test", "proto", "tls")
		if _, ok := ev.Fields["kernel"]; ok || !strings.Contains(ev.Reason, "must be terminated") {
			t.Errorf("audit event %+v; want the listener's refusal", ev)
		}
	})
	t.Run("a session with HTTP rules for one host: its address goes to the listener, another's to the fast path", func(t *testing.T) {
		rules := []policies.HTTPHost{{Host: "allowed.test", Default: policies.HTTPAllow}}
		mixed := addSession(t, p, "mixed", &policies.Egress{Allow: allow, L7: policies.L7Check, HTTP: rules}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "mixed", nil) })
		for _, name := range []string{"allowed.test", "elsewhere.test"} {
			if r := query(t, mixed, name); len(r.Answer) == 0 {
				t.Fatalf("%s: %v", name, r)
			}
		}
		if code, body, err := get(t, mixed, netip.AddrPortFrom(elseHost, 443), w, "https://elsewhere.test/", ""); err != nil || code != 200 || body != "elsewhere.test" {
			t.Fatalf("https://elsewhere.test/ = %d %q %v", code, body, err)
		}
		if ev := audit.waitEvent(t, "mixed", "l7", "allowed", "elsewhere.test", "proto", "tls"); ev.Fields["kernel"] != true {
			t.Errorf("elsewhere.test: %+v; want passed on the fast path", ev)
		}
		// The session has no CA: the listener refuses TLS it must
		// terminate with a TLS alert; the fast path would have reset it,
		// asking the client to connect again.
		if _, _, err := get(t, mixed, https, w, "https://allowed.test/", ""); err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Fatalf("https://allowed.test/ (HTTP rules) = %v; want the listener's access_denied alert", err)
		}
		ev := audit.waitEvent(t, "mixed", "l7", "refused", "allowed.test", "proto", "tls")
		if _, ok := ev.Fields["kernel"]; ok {
			t.Errorf("allowed.test: %+v; want the listener's refusal, not the fast path's", ev)
		}
	})
	t.Run("a revision giving a host HTTP rules sends its address to the listener", func(t *testing.T) {
		gains := addSession(t, p, "gains", &policies.Egress{Allow: allow, L7: policies.L7Check}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "gains", nil) })
		if r := query(t, gains, "allowed.test"); len(r.Answer) == 0 {
			t.Fatalf("allowed.test: %v", r)
		}
		if code, _, err := get(t, gains, https, w, "https://allowed.test/", ""); err != nil || code != 200 {
			t.Fatalf("https://allowed.test/ before = %d %v", code, err)
		}
		rules := []policies.HTTPHost{{Host: "allowed.test", Default: policies.HTTPAllow}}
		if _, err := p.Revise(ctx, "gains", egress.SessionConfig{Egress: &policies.Egress{Allow: allow, L7: policies.L7Check, HTTP: rules}, Audit: audit.emit, PolicyVersion: 2}); err != nil {
			t.Fatal(err)
		}
		// No new answer: the revision put the pinned address there.
		if _, _, err := get(t, gains, https, w, "https://allowed.test/", ""); err == nil || !strings.Contains(err.Error(), "access denied") {
			t.Errorf("https://allowed.test/ after it gained rules: %v; want the listener's access_denied alert (no CA)", err)
		}
	})
	t.Run("reached by address, a host with HTTP rules is refused once on the fast path, then sent to the listener", func(t *testing.T) {
		rules := []policies.HTTPHost{{Host: "allowed.test", Default: policies.HTTPAllow}}
		byaddr := addSession(t, p, "byaddr", &policies.Egress{Allow: []string{sharedHost.String() + "/32"}, AllowPrivate: []string{w.Net().String()},
			L7: policies.L7Check, HTTP: rules}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "byaddr", nil) })
		_, _, err := get(t, byaddr, https, w, "https://allowed.test/", "")
		if err == nil || strings.Contains(err.Error(), "access denied") {
			t.Fatalf("the first connection: %v; want it reset by the fast path", err)
		}
		ev := audit.waitEvent(t, "byaddr", "l7", "refused", "allowed.test", "proto", "tls")
		if ev.Fields["kernel"] != true || !strings.Contains(ev.Reason, "connect again") {
			t.Errorf("the first connection: %+v; want the fast path's refusal", ev)
		}
		// The address is added off the queue's path: the next connection,
		// or the one after, goes to the listener.
		var lerr error
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, _, lerr = get(t, byaddr, https, w, "https://allowed.test/", ""); lerr != nil && strings.Contains(lerr.Error(), "access denied") {
				break
			}
		}
		if lerr == nil || !strings.Contains(lerr.Error(), "access denied") {
			t.Errorf("the next connections: %v; want the listener's access_denied alert", lerr)
		}
	})
	t.Run("a revision withdrawing the name cuts a passed connection on an address still allowed", func(t *testing.T) {
		// other.test keeps sharedHost allowed (pinned for it); the open
		// connection asked for allowed.test, which the revision withdraws.
		rev := addSession(t, p, "rev", &policies.Egress{Allow: []string{"allowed.test", "other.test"}, L7: policies.L7Check}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "rev", nil) })
		for _, name := range []string{"allowed.test", "other.test"} {
			if r := query(t, rev, name); len(r.Answer) == 0 {
				t.Fatalf("%s: %v", name, r)
			}
		}
		conn, err := netns.Dialer(rev.NetnsPath())(ctx, "tcp", https.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{RootCAs: w.CertPool(), ServerName: "allowed.test"})
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Revise(ctx, "rev", egress.SessionConfig{Egress: &policies.Egress{Allow: []string{"other.test"}, L7: policies.L7Check}, Audit: audit.emit, PolicyVersion: 2}); err != nil {
			t.Fatal(err)
		}
		ev := audit.waitEvent(t, "rev", "l7", "closed", "allowed.test", "proto", "tls")
		if !strings.Contains(ev.Reason, "revised") {
			t.Errorf("audit of the cut connection: %+v", ev)
		}
		_ = tc.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		if b, err := io.ReadAll(io.LimitReader(tc, 512)); err == nil || bytes.Contains(b, []byte("allowed.test")) {
			t.Errorf("the cut connection still answered: %q %v", b, err)
		}
	})
	t.Run("a sandbox that writes its own packets goes through the listener", func(t *testing.T) {
		dir := t.TempDir()
		raw, err := p.AddSession(ctx, "raw", egress.SessionConfig{Egress: &policies.Egress{Allow: allow, L7: policies.L7Check}, Dir: dir, Audit: audit.emit, RawPackets: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Remove(context.Background(), "raw", nil) })
		if r := query(t, raw, "allowed.test"); len(r.Answer) == 0 {
			t.Fatalf("allowed.test: %v", r)
		}
		before := p.FastPackets()
		if code, body, err := get(t, raw, https, w, "https://allowed.test/", ""); err != nil || code != 200 || body != "allowed.test" {
			t.Fatalf("GET https://allowed.test/ = %d %q %v", code, body, err)
		}
		ev := audit.waitEvent(t, "raw", "l7", "allowed", "allowed.test", "proto", "tls")
		if _, ok := ev.Fields["kernel"]; ok || p.FastPackets() != before {
			t.Errorf("a session with raw packets took the fast path: %+v", ev)
		}
	})
	t.Run("IPv6", func(t *testing.T) {
		v6 := netip.MustParseAddr("fd0a:214::30")
		for _, name := range []string{"fast6.test", "other6.test"} {
			if err := w.AddHost(name, v6, world.WithHandler(bulk), world.WithTLS()); err != nil {
				t.Fatal(err)
			}
		}
		s6 := addSession(t, p, "fast6", &policies.Egress{Allow: []string{"fast6.test"}, AllowPrivate: []string{"fd0a:214::/64"}, IPv6: true, L7: policies.L7Check}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "fast6", nil) })
		conn, err := netns.Dialer(s6.NetnsPath())(ctx, "udp", resolver(t, s6).String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := new(dns.Msg)
		m.SetQuestion("fast6.test.", dns.TypeAAAA)
		if r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).ExchangeWithConnContext(ctx, m, &dns.Conn{Conn: conn}); err != nil || len(r.Answer) != 1 {
			t.Fatalf("AAAA fast6.test: %v %v", r, err)
		}
		dst := netip.AddrPortFrom(v6, 443)
		if code, body, err := get(t, s6, dst, w, "https://fast6.test/", ""); err != nil || code != 200 || body != "fast6.test" {
			t.Fatalf("https://fast6.test/ over IPv6 = %d %q %v", code, body, err)
		}
		if ev := audit.waitEvent(t, "fast6", "l7", "allowed", "fast6.test", "proto", "tls"); ev.Fields["kernel"] != true || ev.Fields["dst"] != dst.String() {
			t.Errorf("audit event %+v", ev)
		}
		if code, _, err := get(t, s6, dst, w, "https://other6.test/", ""); err == nil {
			t.Fatalf("https://other6.test/ through fast6.test's address = %d; want refused", code)
		}
		audit.waitEvent(t, "fast6", "l7", "refused", "other6.test", "proto", "tls")
	})
	t.Run("with no gateway on the queue nothing new passes; a passed connection goes on", func(t *testing.T) {
		dial := netns.Dialer(fast.NetnsPath())
		conn, err := dial(ctx, "tcp", https.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{RootCAs: w.CertPool(), ServerName: "allowed.test"})
		if err := tc.HandshakeContext(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(io.LimitReader(tc, 512)); !bytes.Contains(b, []byte("allowed.test")) {
			t.Errorf("a passed connection after the gateway closed: %q %v", b, err)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if c, err := dial(cctx, "tcp", https.String()); err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			tc := tls.Client(c, &tls.Config{RootCAs: w.CertPool(), ServerName: "allowed.test"})
			if err := tc.Handshake(); err == nil {
				t.Error("a TLS handshake completed with no gateway reading the queue")
			}
			c.Close()
		}
		p2, err := egress.Open(ctx, prefix, cfg)
		if err != nil {
			t.Fatal(err)
		}
		p = p2
		p2.Reconcile(ctx, func(id string) *egress.SessionConfig {
			if id == "fast" {
				return &egress.SessionConfig{Egress: &policies.Egress{Allow: allow, L7: policies.L7Check}, Audit: audit.emit}
			}
			return nil
		})
		if r := query(t, fast, "allowed.test"); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("allowed.test: %v", r)
		}
		if code, body, err := get(t, fast, https, w, "https://allowed.test/", ""); err != nil || code != 200 || body != "allowed.test" {
			t.Errorf("https://allowed.test/ after the gateway came back = %d %q %v", code, body, err)
		}
	})
	if err := p.Remove(ctx, "fast", audit.emit); err != nil {
		t.Fatal(err)
	}
}
