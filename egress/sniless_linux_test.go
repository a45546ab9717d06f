package egress_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/sessionca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackNamelessToRuledAddress: an address entry of allow that covers
// the address of a host with http rules let TLS without SNI, and HTTP
// with an address (or no name) as Host, to that address pass the gateway
// by the host's rules: `curl -k https://<ip>/secret` reached a path its
// rules deny. A connection that names no name, or a name other than the
// ruled one, to an address the session's DNS pinned for a ruled name is
// now refused; other address-allowed destinations pass as before, except
// TLS without SNI under inspect = "all", which cannot be terminated.
func TestAttackNamelessToRuledAddress(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	ruledIP := netip.MustParseAddr("10.214.0.40")
	plainIP := netip.MustParseAddr("10.214.0.41")
	var mu sync.Mutex
	var saw []string
	handler := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		saw = append(saw, r.URL.Path)
		mu.Unlock()
		io.WriteString(rw, "served "+r.URL.Path)
	})
	if err := w.AddHost("ruled.test", ruledIP, world.WithHandler(handler), world.WithTLS()); err != nil {
		t.Fatal(err)
	}
	if err := w.AddHost("plain.test", plainIP, world.WithHandler(handler), world.WithTLS()); err != nil {
		t.Fatal(err)
	}
	p, err := egress.Open(ctx, prefix, egress.Config{
		Uplink:        "netns:" + w.NetnsName(),
		DNSUpstreams:  []string{w.DNSAddr().String()},
		AllowPrivate:  []netip.Prefix{w.Net()},
		UpstreamRoots: w.CertPool(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close(context.Background())
		_ = netns.CleanupDir(context.Background(), netns.DefaultDir, prefix)
	})
	ca, err := sessionca.New("snl")
	if err != nil {
		t.Fatal(err)
	}
	var audit auditLog
	session := func(id string, eg *policies.Egress) *egress.Session {
		t.Helper()
		// The manifest is accepted: an address entry is not a name, and
		// validation cannot know what it covers.
		pol := &policies.Policy{Label: "t", Image: "i", Command: []string{"true"}, Egress: eg}
		pol.ApplyDefaults()
		if err := pol.Validate(); err != nil {
			t.Fatalf("%s: validate: %v", id, err)
		}
		s, err := p.AddSession(ctx, id, egress.SessionConfig{Egress: eg, Dir: t.TempDir(), Audit: audit.emit, CA: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Remove(context.Background(), id, nil) })
		return s
	}
	insecure := &tls.Config{InsecureSkipVerify: true}
	// fetch GETs url through dst; it reports the status and body, or the
	// error. A URL with an address sends no SNI and the address as Host.
	fetch := func(s *egress.Session, dst netip.AddrPort, url, host string, cfg *tls.Config) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := sessionClient(s, dst, cfg).Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	// noHost sends an HTTP/1.0 request with no Host at all.
	noHost := func(s *egress.Session, dst netip.AddrPort, path string) (int, string) {
		c := dial(t, s, dst)
		defer c.Close()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	served := func(path string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(saw, path)
	}

	eg := &policies.Egress{
		Allow: []string{"ruled.test:80", "ruled.test:443", "plain.test:80", "plain.test:443", "10.214.0.0/24"},
		L7:    policies.L7Check,
		HTTP: []policies.HTTPHost{{Host: "ruled.test", Default: policies.HTTPAllow, Rules: []policies.HTTPRule{
			{Path: "/secret/**", Action: policies.HTTPDeny},
		}}},
	}
	s := session("snl", eg)
	for _, name := range []string{"ruled.test", "plain.test"} {
		if r := query(t, s, name); len(r.Answer) == 0 {
			t.Fatalf("%s: %v", name, r)
		}
	}
	r443, r80 := netip.AddrPortFrom(ruledIP, 443), netip.AddrPortFrom(ruledIP, 80)
	p443, p80 := netip.AddrPortFrom(plainIP, 443), netip.AddrPortFrom(plainIP, 80)

	t.Run("by name, the rules apply", func(t *testing.T) {
		trust := &tls.Config{RootCAs: ca.Pool()}
		if code, body, err := fetch(s, r443, "https://ruled.test/secret/a", "", trust); err != nil || code != 403 {
			t.Errorf("https://ruled.test/secret/a: %d %q %v; want 403", code, body, err)
		}
		if code, body, err := fetch(s, r443, "https://ruled.test/open", "", trust); err != nil || code != 200 {
			t.Errorf("https://ruled.test/open: %d %q %v; want 200", code, body, err)
		}
	})
	t.Run("TLS without SNI to the ruled host's address is refused", func(t *testing.T) {
		code, body, err := fetch(s, r443, "https://10.214.0.40/secret/tls", "", insecure)
		if err == nil || served("/secret/tls") {
			t.Errorf("https://10.214.0.40/secret/tls (no SNI) passed the gateway by ruled.test's rules: %d %q", code, body)
		}
		ev := audit.waitEvent(t, "snl", "l7", "refused", "10.214.0.40:443")
		if !strings.Contains(ev.Reason, "ruled.test") || !strings.Contains(ev.Reason, "no SNI") {
			t.Errorf("reason %q; want it to say no SNI and name ruled.test", ev.Reason)
		}
	})
	t.Run("HTTP with an address or no Host to the ruled host's address is refused", func(t *testing.T) {
		code, body, err := fetch(s, r80, "http://10.214.0.40/secret/ip", "", nil)
		if err != nil || code != 403 || !strings.Contains(body, "ruled.test") || served("/secret/ip") {
			t.Errorf("http://10.214.0.40/secret/ip: %d %q %v; want 403 naming ruled.test", code, body, err)
		}
		audit.waitEvent(t, "snl", "l7", "refused", "10.214.0.40")
		code, body = noHost(s, r80, "/secret/nohost")
		if code != 403 || !strings.Contains(body, "ruled.test") || served("/secret/nohost") {
			t.Errorf("HTTP/1.0 without Host: %d %q; want 403 naming ruled.test", code, body)
		}
	})
	t.Run("another name on the ruled host's address is refused", func(t *testing.T) {
		code, body, err := fetch(s, r80, "http://10.214.0.40/secret/other", "other.test", nil)
		if err != nil || code != 403 || !strings.Contains(body, "ruled.test") || served("/secret/other") {
			t.Errorf("Host other.test to ruled.test's address: %d %q %v; want 403 naming ruled.test", code, body, err)
		}
		code, body, err = fetch(s, r443, "https://other.test/secret/othersni", "", insecure)
		if err == nil || served("/secret/othersni") {
			t.Errorf("SNI other.test to ruled.test's address: %d %q; want refused", code, body)
		}
	})
	t.Run("an address no ruled name is pinned to passes as before", func(t *testing.T) {
		if code, body, err := fetch(s, p443, "https://10.214.0.41/tls", "", insecure); err != nil || code != 200 {
			t.Errorf("https://10.214.0.41/tls (no SNI): %d %q %v; want 200", code, body, err)
		}
		if code, body, err := fetch(s, p80, "http://10.214.0.41/http", "", nil); err != nil || code != 200 {
			t.Errorf("http://10.214.0.41/http: %d %q %v; want 200", code, body, err)
		}
	})

	// A host a secret is injected into is guarded as one with rules.
	sec := &policies.Egress{Allow: []string{"ruled.test:443", "10.214.0.0/24"}, L7: policies.L7Check}
	ss, err := p.AddSession(ctx, "sns", egress.SessionConfig{Egress: sec, Dir: t.TempDir(), Audit: audit.emit, CA: ca,
		Secrets: func() []egress.Secret {
			return []egress.Secret{{Name: "K", Placeholder: "airlock-secret-0123456789abcdef0123456789abcdef", Value: []byte("v"),
				Inject: []egress.Inject{{Host: "ruled.test", Header: "x-k"}}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), "sns", nil) })
	t.Run("TLS without SNI to a secret's host's address is refused", func(t *testing.T) {
		if code, body, err := fetch(ss, r443, "https://10.214.0.40/secret/sec", "", insecure); err != nil || code != 200 {
			// The documented limit: before the session resolves the
			// name, the gateway cannot know whose address it is.
			t.Fatalf("before the session resolved ruled.test: %d %q %v; want 200", code, body, err)
		}
		if r := query(t, ss, "ruled.test"); len(r.Answer) == 0 {
			t.Fatalf("ruled.test: %v", r)
		}
		code, body, err := fetch(ss, r443, "https://10.214.0.40/secret/sec2", "", insecure)
		if err == nil || served("/secret/sec2") {
			t.Errorf("https://10.214.0.40/secret/sec2 (no SNI): %d %q; want refused", code, body)
		}
		audit.waitEvent(t, "sns", "l7", "refused", "10.214.0.40:443")
	})

	// inspect = "all" terminates every TLS connection: one without SNI
	// names nothing to terminate, and is refused everywhere.
	all := &policies.Egress{Allow: []string{"10.214.0.0/24"}, L7: policies.L7Check, Inspect: policies.InspectAll}
	sa := session("sna", all)
	t.Run("inspect all: TLS without SNI to an address-allowed destination is refused", func(t *testing.T) {
		code, body, err := fetch(sa, p443, "https://10.214.0.41/all", "", insecure)
		if err == nil || served("/all") {
			t.Errorf("https://10.214.0.41/all (no SNI, inspect all): %d %q; want refused", code, body)
		}
		ev := audit.waitEvent(t, "sna", "l7", "refused", "10.214.0.41:443")
		if !strings.Contains(ev.Reason, "inspect") {
			t.Errorf("reason %q; want it to name inspect", ev.Reason)
		}
		// Plain HTTP is read request by request there; no rules apply.
		if code, body, err := fetch(sa, p80, "http://10.214.0.41/allhttp", "", nil); err != nil || code != 200 {
			t.Errorf("http://10.214.0.41/allhttp: %d %q %v; want 200", code, body, err)
		}
	})
}
