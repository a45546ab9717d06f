package egress_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

var (
	sharedHost = netip.MustParseAddr("10.214.0.20") // allowed.test and other.test
	elseHost   = netip.MustParseAddr("10.214.0.21") // elsewhere.test
	svcHost    = netip.MustParseAddr("10.214.0.23") // svc.test: sees its clients
)

// sessionClient is an HTTP client inside session s whose every connection
// goes to addr, whatever the URL says (curl --resolve).
func sessionClient(s *egress.Session, addr netip.AddrPort, pool *tls.Config) *http.Client {
	dial := netns.Dialer(s.NetnsPath())
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx, "tcp", addr.String()) },
			TLSClientConfig:   pool.Clone(),
			DisableKeepAlives: true,
			ForceAttemptHTTP2: false,
		},
	}
}

// get fetches url through addr, with Host host if not empty.
func get(t *testing.T, s *egress.Session, addr netip.AddrPort, w *world.World, url, host string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := sessionClient(s, addr, &tls.Config{RootCAs: w.CertPool()}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// waitEvent waits for an event of session id with layer, action and
// subject, and fields with the given values: the L7 gateway audits a
// passed connection when it ends.
func (a *auditLog) waitEvent(t *testing.T, id, layer, action, subject string, fields ...string) api.AuditEvent {
	t.Helper()
	match := func(ev api.AuditEvent) bool {
		if ev.Session != id || ev.Layer != layer || ev.Action != action || ev.Subject != subject {
			return false
		}
		for i := 0; i+1 < len(fields); i += 2 {
			if ev.Fields[fields[i]] != fields[i+1] {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		a.mu.Lock()
		i := slices.IndexFunc(a.evs, match)
		var ev api.AuditEvent
		if i >= 0 {
			ev = a.evs[i]
		}
		a.mu.Unlock()
		if i >= 0 {
			return ev
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Fatalf("no %s/%s event for %s %v of session %s in %+v", layer, action, subject, fields, id, a.evs)
	return api.AuditEvent{}
}

// tcpEcho reports whether a line sent from session s to dst comes back.
func tcpEcho(t *testing.T, s *egress.Session, dst netip.AddrPort) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	c, err := netns.Dialer(s.NetnsPath())(ctx, "tcp", dst.String())
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "hello echo\n"); err != nil {
		return false
	}
	b := make([]byte, 11)
	_, err = io.ReadFull(c, b)
	return err == nil && string(b) == "hello echo\n"
}

func (a *auditLog) count(id, layer string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, ev := range a.evs {
		if ev.Session == id && ev.Layer == layer {
			n++
		}
	}
	return n
}

// TestL7Gateway runs sessions with and without `l7 = "check"` against a
// world where allowed.test and other.test share an address: the checked
// session reaches the allowed name over HTTP and TLS and is refused, with
// an audit event, when it fronts another name by Host, by SNI or by an
// allowed name pinned to another address; the other session behaves as
// before the gateway, fronting included.
func TestL7Gateway(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	for _, h := range []struct {
		name string
		ip   netip.Addr
	}{{"allowed.test", sharedHost}, {"other.test", sharedHost}, {"elsewhere.test", elseHost}} {
		if err := w.AddHost(h.name, h.ip); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AddUDPEcho(netip.AddrPortFrom(sharedHost, 443)); err != nil {
		t.Fatal(err)
	}
	// svc.test asks the perimeter whose connection it serves, as the
	// daemon's credential endpoint does.
	var perim atomic.Pointer[egress.Perimeter]
	if err := w.AddHost("svc.test", svcHost, world.WithHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		la, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		id, ok := perim.Load().SessionOfConnection(r.Context(), r.RemoteAddr, la.String())
		if !ok {
			id = "none"
		}
		io.WriteString(rw, id)
	}))); err != nil {
		t.Fatal(err)
	}

	p, err := egress.Open(ctx, prefix, egress.Config{
		Uplink:       "netns:" + w.NetnsName(),
		DNSUpstreams: []string{w.DNSAddr().String()},
		AllowPrivate: []netip.Prefix{w.Net()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = perim.Load().Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	perim.Store(p)
	allow := []string{"allowed.test", "elsewhere.test", "svc.test"}
	var audit auditLog
	on := addSession(t, p, "l7on", &policies.Egress{Allow: allow, L7: policies.L7Check}, &audit)
	off := addSession(t, p, "l7off", &policies.Egress{Allow: allow}, &audit)
	for _, s := range []*egress.Session{on, off} {
		for _, name := range []string{"allowed.test", "elsewhere.test", "svc.test"} {
			if r := query(t, s, name); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				t.Fatalf("%s: %v", name, r)
			}
		}
	}
	http80 := netip.AddrPortFrom(sharedHost, 80)
	https443 := netip.AddrPortFrom(sharedHost, 443)

	t.Run("allowed name over HTTP passes and is audited", func(t *testing.T) {
		code, body, err := get(t, on, http80, w, "http://allowed.test/", "")
		if err != nil || code != 200 || strings.TrimSpace(body) != "allowed.test" {
			t.Fatalf("GET http://allowed.test/ = %d %q %v", code, body, err)
		}
		ev := audit.waitEvent(t, "l7on", "l7", "allowed", "allowed.test", "proto", "http")
		if ev.Fields["dst"] != http80.String() || ev.Fields["host"] != "allowed.test" || ev.Fields["kind"] != "request" || ev.Fields["status"] != 200 || ev.Fields["bytes_down"].(int64) == 0 {
			t.Errorf("audit event %+v", ev)
		}
	})
	t.Run("allowed name over TLS passes and is audited", func(t *testing.T) {
		code, body, err := get(t, on, https443, w, "https://allowed.test/", "")
		if err != nil || code != 200 || strings.TrimSpace(body) != "allowed.test" {
			t.Fatalf("GET https://allowed.test/ = %d %q %v", code, body, err)
		}
		ev := audit.waitEvent(t, "l7on", "l7", "allowed", "allowed.test", "proto", "tls")
		if ev.Fields["dst"] != https443.String() || ev.Fields["sni"] != "allowed.test" || ev.Fields["bytes_down"].(int64) == 0 {
			t.Errorf("audit event %+v", ev)
		}
	})
	t.Run("fronting by Host is refused with a JSON reason", func(t *testing.T) {
		code, body, err := get(t, on, http80, w, "http://allowed.test/", "other.test")
		var reason struct{ Error string }
		if err != nil || code != 403 || json.Unmarshal([]byte(body), &reason) != nil || !strings.Contains(reason.Error, "other.test") {
			t.Fatalf("Host other.test = %d %q %v; want 403 with a JSON reason", code, body, err)
		}
		ev := audit.waitEvent(t, "l7on", "l7", "refused", "other.test", "proto", "http")
		if ev.Reason == "" || ev.Fields["dst"] != http80.String() {
			t.Errorf("audit event %+v", ev)
		}
	})
	t.Run("fronting by SNI is refused", func(t *testing.T) {
		// curl --resolve other.test:443:<allowed.test's address>
		if code, _, err := get(t, on, https443, w, "https://other.test/", ""); err == nil {
			t.Fatalf("https://other.test/ through allowed.test's address = %d; want refused", code)
		}
		audit.waitEvent(t, "l7on", "l7", "refused", "other.test", "proto", "tls")
	})
	t.Run("an allowed name is refused on an address pinned for another", func(t *testing.T) {
		if code, _, err := get(t, on, https443, w, "https://elsewhere.test/", ""); err == nil {
			t.Fatalf("https://elsewhere.test/ through allowed.test's address = %d; want refused", code)
		}
		ev := audit.waitEvent(t, "l7on", "l7", "refused", "elsewhere.test")
		if !strings.Contains(ev.Reason, "did not resolve to "+sharedHost.String()) {
			t.Errorf("reason %q", ev.Reason)
		}
	})
	t.Run("Host inside TLS is not seen without termination", func(t *testing.T) {
		// Documented gap of the pass-through slice: the SNI is checked, the
		// Host inside the tunnel is not.
		code, _, err := get(t, on, https443, w, "https://allowed.test/", "other.test")
		if err != nil || code != 200 {
			t.Fatalf("Host other.test inside TLS for allowed.test = %d %v; the pass-through gateway cannot see it", code, err)
		}
	})
	t.Run("l7_ports chooses the ports the gateway checks", func(t *testing.T) {
		// The world echoes TCP on port 7 of allowed.test's address. With
		// l7_ports = [7] the gateway takes the connection, and a first
		// message that is neither TLS nor HTTP gets no echo; on the
		// default ports, port 7 is not the gateway's.
		p7 := addSession(t, p, "l7p7", &policies.Egress{Allow: allow, L7: policies.L7Check, L7Ports: []uint16{7}}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "l7p7", nil) })
		if r := query(t, p7, "allowed.test"); len(r.Answer) == 0 {
			t.Fatalf("allowed.test: %v", r)
		}
		echo7 := netip.AddrPortFrom(sharedHost, 7)
		if tcpEcho(t, p7, echo7) {
			t.Error("port 7 echoed through a session whose gateway checks port 7")
		}
		if !tcpEcho(t, on, echo7) {
			t.Error("port 7 did not echo for a session whose gateway checks 80 and 443 only")
		}
		if code, _, err := get(t, p7, http80, w, "http://allowed.test/", "other.test"); err != nil || code != 200 {
			t.Errorf("Host other.test on port 80, which l7_ports leaves out: %d %v; want 200 (not checked)", code, err)
		}
	})
	t.Run("QUIC to a pinned name is blocked", func(t *testing.T) {
		if udpEcho(t, on, https443) {
			t.Error("UDP 443 reached a pinned address through the L7 session")
		}
		if !udpEcho(t, off, https443) {
			t.Error("UDP 443 to a pinned address failed without the switch")
		}
		subject := https443.String()
		if !slices.ContainsFunc(p.Drops(ctx, "l7on"), func(ev api.AuditEvent) bool { return ev.Subject == subject && ev.Fields["proto"] == "udp" }) {
			t.Errorf("drops of l7on lack udp %s: %v", subject, p.Drops(ctx, "l7on"))
		}
	})
	t.Run("unpinned addresses are still blocked in the kernel", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		dst := netip.AddrPortFrom(deniedHost, 80)
		if c, err := netns.Dialer(on.NetnsPath())(cctx, "tcp", dst.String()); err == nil {
			c.Close()
			t.Fatal("connected to an address no answer pinned")
		}
		if !slices.ContainsFunc(p.Drops(ctx, "l7on"), func(ev api.AuditEvent) bool { return ev.Subject == dst.String() }) {
			t.Errorf("drops of l7on lack %s", dst)
		}
	})
	t.Run("services attribute the gateway's connections to the session", func(t *testing.T) {
		for _, s := range []struct {
			sess *egress.Session
			id   string
		}{{on, "l7on"}, {off, "l7off"}} {
			code, body, err := get(t, s.sess, netip.AddrPortFrom(svcHost, 80), w, "http://svc.test/", "")
			if err != nil || code != 200 || body != s.id {
				t.Errorf("svc.test attributes the connection of %s to %q (%d, %v)", s.id, body, code, err)
			}
		}
	})
	t.Run("a session without the switch behaves as before", func(t *testing.T) {
		if code, _, err := get(t, off, http80, w, "http://allowed.test/", "other.test"); err != nil || code != 200 {
			t.Errorf("Host other.test without the switch = %d %v; want 200 as before", code, err)
		}
		if code, _, err := get(t, off, https443, w, "https://other.test/", ""); err != nil || code != 200 {
			t.Errorf("SNI other.test without the switch = %d %v; want 200 as before", code, err)
		}
		if n := audit.count("l7off", "l7"); n != 0 {
			t.Errorf("%d l7 events for a session without the switch", n)
		}
	})

	t.Run("IPv6", func(t *testing.T) {
		v6 := netip.MustParseAddr("fd0a:214::20")
		for _, name := range []string{"v6.test", "other6.test"} {
			if err := w.AddHost(name, v6); err != nil {
				t.Fatal(err)
			}
		}
		s6 := addSession(t, p, "l7v6", &policies.Egress{Allow: []string{"v6.test"}, AllowPrivate: []string{"fd0a:214::/64"}, IPv6: true, L7: policies.L7Check}, &audit)
		t.Cleanup(func() { _ = p.Remove(context.Background(), "l7v6", nil) })
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		conn, err := netns.Dialer(s6.NetnsPath())(cctx, "udp", resolver(t, s6).String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		m := new(dns.Msg)
		m.SetQuestion("v6.test.", dns.TypeAAAA)
		r, _, err := (&dns.Client{Net: "udp", Timeout: 2 * time.Second}).ExchangeWithConnContext(cctx, m, &dns.Conn{Conn: conn})
		if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("AAAA v6.test: %v %v", r, err)
		}
		dst := netip.AddrPortFrom(v6, 80)
		if code, body, err := get(t, s6, dst, w, "http://v6.test/", ""); err != nil || code != 200 {
			t.Errorf("http://v6.test/ over IPv6 = %d %q %v", code, body, err)
		}
		if code, _, err := get(t, s6, dst, w, "http://v6.test/", "other6.test"); err != nil || code != 403 {
			t.Errorf("Host other6.test over IPv6 = %d %v; want 403", code, err)
		}
		ev := audit.waitEvent(t, "l7v6", "l7", "allowed", "v6.test", "proto", "http")
		if ev.Fields["dst"] != dst.String() {
			t.Errorf("original destination %v, want %v", ev.Fields["dst"], dst)
		}
	})
	t.Run("a restarted perimeter checks the running session again", func(t *testing.T) {
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		p2, err := egress.Open(ctx, prefix, egress.Config{
			Uplink:       "netns:" + w.NetnsName(),
			DNSUpstreams: []string{w.DNSAddr().String()},
			AllowPrivate: []netip.Prefix{w.Net()},
		})
		if err != nil {
			t.Fatal(err)
		}
		p = p2
		perim.Store(p2)
		p2.Reconcile(ctx, func(id string) *egress.SessionConfig {
			if id == "l7on" {
				return &egress.SessionConfig{Egress: &policies.Egress{Allow: allow, L7: policies.L7Check}, Audit: audit.emit}
			}
			return &egress.SessionConfig{Egress: &policies.Egress{Allow: allow}, Audit: audit.emit}
		})
		// Which addresses were pinned for which name is not kept across
		// the restart: refused until the name is resolved again.
		if code, body, err := get(t, on, http80, w, "http://allowed.test/", ""); err != nil || code != 403 || !strings.Contains(body, "did not resolve") {
			t.Errorf("allowed.test after the restart, before resolving it = %d %q %v; want 403", code, body, err)
		}
		if r := query(t, on, "allowed.test"); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("allowed.test: %v", r)
		}
		if code, _, err := get(t, on, http80, w, "http://allowed.test/", ""); err != nil || code != 200 {
			t.Errorf("allowed.test after the restart = %d %v", code, err)
		}
		if code, _, err := get(t, on, http80, w, "http://allowed.test/", "other.test"); err != nil || code != 403 {
			t.Errorf("Host other.test after the restart = %d %v; want 403", code, err)
		}
	})

	if err := p.Remove(ctx, "l7on", audit.emit); err != nil {
		t.Fatal(err)
	}
	if err := p.Remove(ctx, "l7off", audit.emit); err != nil {
		t.Fatal(err)
	}
	if left, err := netns.Leftovers(netns.DefaultDir, prefix, w.NetnsPath()); err != nil || len(left) > 0 && !slices.ContainsFunc(left, func(s string) bool { return strings.Contains(s, "-gw") }) {
		t.Errorf("left after the sessions' removal: %v (%v)", left, err)
	}
}

// udpEcho reports whether a datagram from session s to ap is echoed.
func udpEcho(t *testing.T, s *egress.Session, ap netip.AddrPort) bool {
	t.Helper()
	c, err := netns.Dialer(s.NetnsPath())(t.Context(), "udp", ap.String())
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("quic?")); err != nil {
		return false
	}
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	return err == nil && string(buf[:n]) == "quic?"
}
