package egress_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/l7"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/egress/sessionca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

var (
	apiHost   = netip.MustParseAddr("10.214.0.30") // api.test and mirror.test: TLS, checks the secret
	forgeHost = netip.MustParseAddr("10.214.0.31") // forge.test: git over HTTPS
	opsHost   = netip.MustParseAddr("10.214.0.32") // ops.test: HTTP rules
)

const (
	worldSecret      = "world-real-secret-3b1f9e"
	worldPlaceholder = "airlock-secret-5e0c2b8d4a6f41e3a9b07c1d2e3f4a5b"
)

// TestL7Terminating runs a session whose gateway terminates TLS, against
// a world with an API that checks a secret, a git forge, and a service
// with HTTP rules, all over HTTPS with the world's own CA.
func TestL7Terminating(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	prefix := "t" + strings.ToLower(rand.Text()[:5])
	w, err := world.Start(ctx, world.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })

	// api.test answers whether it got the real secret, never the value.
	var apiMu sync.Mutex
	var apiSaw []string
	api := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Header.Get("x-api-key")
		r.Header.Del("x-api-key")
		apiMu.Lock()
		apiSaw = append(apiSaw, fmt.Sprintf("%s %s %v %s", r.Host, r.URL, r.Header, b))
		if key != "" && key != worldSecret {
			apiSaw = append(apiSaw, "x-api-key "+key)
		}
		apiMu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/events") {
			rw.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(rw, "data: %d\n\n", i)
				rw.(http.Flusher).Flush()
				time.Sleep(50 * time.Millisecond)
			}
			return
		}
		fmt.Fprintf(rw, "%s key=%v", r.Proto, key == worldSecret)
	})
	for _, name := range []string{"api.test", "mirror.test"} {
		if err := w.AddHost(name, apiHost, world.WithHandler(api), world.WithTLS()); err != nil {
			t.Fatal(err)
		}
	}
	forgeRoot := t.TempDir()
	bare := filepath.Join(forgeRoot, "repo.git")
	git(t, "", "init", "-q", "--bare", bare)
	git(t, bare, "config", "http.receivepack", "true")
	forge := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + forgeRoot, "GIT_HTTP_EXPORT_ALL=1"}}
	if err := w.AddHost("forge.test", forgeHost, world.WithHandler(forge), world.WithTLS()); err != nil {
		t.Fatal(err)
	}
	var opsMu sync.Mutex
	var opsSaw []string
	if err := w.AddHost("ops.test", opsHost, world.WithHandler(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		opsMu.Lock()
		opsSaw = append(opsSaw, r.Method+" "+r.URL.Path)
		opsMu.Unlock()
		io.WriteString(rw, "done")
	})), world.WithTLS()); err != nil {
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

	ca, err := sessionca.New("term")
	if err != nil {
		t.Fatal(err)
	}
	var audit auditLog
	asks := make(chan l7.Ask, 4)
	answers := make(chan l7.AskDecision, 4)
	eg := &policies.Egress{
		Allow: []string{"api.test", "mirror.test", "forge.test", "ops.test"},
		L7:    policies.L7Check,
		HTTP: []policies.HTTPHost{
			{Host: "forge.test", Rules: []policies.HTTPRule{
				{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/*"}, Action: policies.HTTPAllow},
				{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Action: policies.HTTPDeny},
			}},
			{Host: "ops.test", Rules: []policies.HTTPRule{
				{Methods: []string{"DELETE"}, Action: policies.HTTPDeny},
				{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk},
			}},
		},
	}
	sc := egress.SessionConfig{
		Egress: eg, Dir: t.TempDir(), Audit: audit.emit, CA: ca,
		Secrets: func() []egress.Secret {
			return []egress.Secret{{Name: "API_KEY", Placeholder: worldPlaceholder, Value: []byte(worldSecret),
				Inject: []egress.Inject{{Host: "api.test", Header: "x-api-key"}}}}
		},
		Ask: func(ctx context.Context, a l7.Ask) l7.AskDecision {
			asks <- a
			select {
			case d := <-answers:
				return d
			case <-ctx.Done():
				return l7.AskDecision{By: "cancelled"}
			}
		},
	}
	s, err := p.AddSession(ctx, "term", sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Remove(context.Background(), "term", nil) })
	for _, name := range []string{"api.test", "mirror.test", "forge.test", "ops.test"} {
		if r := query(t, s, name); len(r.Answer) == 0 {
			t.Fatalf("%s: %v", name, r)
		}
	}
	trust := &tls.Config{RootCAs: ca.Pool()}
	api443 := netip.AddrPortFrom(apiHost, 443)
	do := func(t *testing.T, h2 bool, dst netip.AddrPort, method, url, host string, hdr map[string]string) (int, string) {
		t.Helper()
		c := sessionClient(s, dst, trust)
		c.Transport.(*http.Transport).ForceAttemptHTTP2 = h2
		req, _ := http.NewRequestWithContext(ctx, method, url, nil)
		if host != "" {
			req.Host = host
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("the placeholder becomes the secret on TLS to the bound host, over HTTP/1.1 and HTTP/2", func(t *testing.T) {
		for _, h2 := range []bool{false, true} {
			code, body := do(t, h2, api443, "GET", "https://api.test/v1/models", "", map[string]string{"x-api-key": worldPlaceholder})
			// Upstream, the gateway speaks the client's HTTP version.
			if want := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2] + " key=true"; code != 200 || body != want {
				t.Errorf("h2=%v: %d %q", h2, code, body)
			}
		}
		ev := audit.waitEvent(t, "term", "l7", "allowed", "api.test", "path", "/v1/models")
		if ev.Fields["terminated"] != true || ev.Fields["status"] != 200 {
			t.Errorf("event %+v", ev)
		}
	})
	t.Run("server-sent events stream through", func(t *testing.T) {
		c := sessionClient(s, api443, trust)
		c.Timeout = 0
		resp, err := c.Get("https://api.test/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		var gaps []time.Duration
		last := time.Now()
		for range 3 {
			if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
				t.Fatalf("event line %q %v", line, err)
			}
			br.ReadString('\n')
			gaps = append(gaps, time.Since(last))
			last = time.Now()
		}
		// Each event arrives as the server sends it, 50ms apart; a gateway
		// that buffered would deliver them together at the end.
		if gaps[1] < 25*time.Millisecond || gaps[2] < 25*time.Millisecond {
			t.Errorf("events arrived together: %v", gaps)
		}
	})
	t.Run("fronting by Host inside terminated TLS is refused", func(t *testing.T) {
		code, body := do(t, false, api443, "GET", "https://api.test/", "mirror.test", nil)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, "differs from SNI") {
			t.Errorf("Host mirror.test over SNI api.test: %d %q", code, body)
		}
	})
	t.Run("the placeholder anywhere else is blocked and audited", func(t *testing.T) {
		// Where the gateway sees the request, the placeholder goes only in
		// the bound header, over TLS, to the bound host.
		cases := []struct {
			name, url string
			hdr       map[string]string
		}{
			{"query", "https://api.test/?k=" + worldPlaceholder, nil},
			{"other header", "https://api.test/", map[string]string{"x-debug": worldPlaceholder}},
			{"plain HTTP to the bound host", "http://api.test/", map[string]string{"x-api-key": worldPlaceholder}},
		}
		for _, c := range cases {
			dst := api443
			if strings.HasPrefix(c.url, "http:") {
				dst = netip.AddrPortFrom(apiHost, 80)
			}
			code, body := do(t, false, dst, "GET", c.url, "", c.hdr)
			if code != 403 || !strings.Contains(body, "placeholder of secret API_KEY") {
				t.Errorf("%s: %d %q", c.name, code, body)
			}
		}
		audit.waitEvent(t, "term", "l7", "exfiltration", "api.test")
		apiMu.Lock()
		defer apiMu.Unlock()
		for _, saw := range apiSaw {
			if strings.Contains(saw, worldPlaceholder) || strings.Contains(saw, worldSecret) || strings.HasPrefix(saw, "x-api-key") {
				t.Errorf("api.test saw %q", saw)
			}
		}
	})
	t.Run("HTTP rules deny and ask", func(t *testing.T) {
		ops := netip.AddrPortFrom(opsHost, 443)
		code, body := do(t, true, ops, "DELETE", "https://ops.test/jobs/7", "", nil)
		var refused struct{ Error, Rule string }
		if json.Unmarshal([]byte(body), &refused); code != 403 || refused.Rule == "" {
			t.Errorf("DELETE: %d %q", code, body)
		}
		for _, approve := range []bool{false, true} {
			res := make(chan int, 1)
			go func() {
				c := sessionClient(s, ops, trust)
				req, _ := http.NewRequestWithContext(ctx, "POST", "https://ops.test/deploy/prod", strings.NewReader(`{"names":["billing-api"]}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					res <- 0
					return
				}
				resp.Body.Close()
				res <- resp.StatusCode
			}()
			a := <-asks
			if a.Host != "ops.test" || a.Path != "/deploy/prod" || a.Method != "POST" ||
				string(a.Body) != `{"names":["billing-api"]}` || a.BodyTruncated || a.ContentType != "application/json" {
				t.Errorf("ask %+v", a)
			}
			answers <- l7.AskDecision{Allow: approve, By: "test", ID: "x"}
			want := map[bool]int{true: 200, false: 403}[approve]
			if code := <-res; code != want {
				t.Errorf("approve=%v: %d, want %d", approve, code, want)
			}
		}
		opsMu.Lock()
		defer opsMu.Unlock()
		if strings.Join(opsSaw, ",") != "POST /deploy/prod" {
			t.Errorf("ops.test saw %v; want only the approved POST", opsSaw)
		}
	})
	t.Run("git push: an agent ref passes, main is refused, the forge's refs say so", func(t *testing.T) {
		work := t.TempDir()
		git(t, "", "init", "-q", "-b", "main", work)
		os.WriteFile(filepath.Join(work, "f"), []byte("x\n"), 0o644)
		git(t, work, "add", "f")
		git(t, work, "-c", "user.name=a", "-c", "user.email=a@test", "commit", "-qm", "c")
		caFile := filepath.Join(t.TempDir(), "ca.pem")
		os.WriteFile(caFile, ca.CertPEM(), 0o644)
		push := func(ref string) error {
			cmd := exec.CommandContext(ctx, "nsenter", "--net="+s.NetnsPath(), "git", "-C", work,
				"-c", "http.sslCAInfo="+caFile, "-c", "http.curloptResolve=forge.test:443:"+forgeHost.String(),
				"push", "https://forge.test/repo.git", "HEAD:"+ref)
			cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_SSL_CAINFO="+caFile)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}
		if err := push("refs/heads/agent/fix"); err != nil {
			t.Fatalf("push to agent/fix: %v", err)
		}
		if err := push("refs/heads/main"); err == nil {
			t.Fatal("push to main passed")
		}
		refs := git(t, bare, "for-each-ref", "--format=%(refname)")
		if strings.TrimSpace(refs) != "refs/heads/agent/fix" {
			t.Errorf("the forge's refs: %q", refs)
		}
		ev := audit.waitEvent(t, "term", "l7", "denied", "forge.test")
		if refs, _ := ev.Fields["refs"].([]string); len(refs) != 1 || refs[0] != "refs/heads/main" {
			t.Errorf("denied push event %+v", ev)
		}
	})
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return string(out)
}
