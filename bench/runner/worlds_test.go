package runner

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	testworld "github.com/airlock-sandbox/airlock/internal/world"
)

func fakeToken(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"EdDSA","typ":"at+jwt","kid":"k"}`)) + "." + enc([]byte(payload)) + "." + enc([]byte("sig"))
}

func TestTokenSubject(t *testing.T) {
	for tok, want := range map[string]string{
		fakeToken(`{"sub":"s1","aud":"x"}`): "s1",
		fakeToken(`{"aud":"x"}`):            "",
		fakeToken(`not json`):               "",
		"a.b":                               "",
		"a.!!!.c":                           "",
		"":                                  "",
	} {
		if got := tokenSubject(tok); got != want {
			t.Errorf("tokenSubject(%q) = %q, want %q", tok, got, want)
		}
	}
}

// TestWorldsRouting sends requests with tokens of bound and unbound
// sessions and checks which instance saw them. The tokens are not signed:
// the instance refuses them, and records the request in its audit.
func TestWorldsRouting(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ws, err := NewWorlds(ctx, 2, v)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if ws.Len() != 2 {
		t.Fatalf("Len = %d", ws.Len())
	}
	ws.Bind("s0", 0)
	ws.Bind("s1", 1)
	srv := httptest.NewServer(ws.Handler((*world.World).JobsHandler))
	defer srv.Close()
	get := func(tok string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/jobs", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status %d, want 401", resp.StatusCode)
		}
	}
	get(fakeToken(`{"sub":"s1"}`))
	get(fakeToken(`{"sub":"s1"}`))
	get(fakeToken(`{"sub":"s0"}`))
	get(fakeToken(`{"sub":"stranger"}`))
	get("")
	ws.Unbind("s1")
	get(fakeToken(`{"sub":"s1"}`))
	for i, want := range []int{1, 2, 3} { // worker 0, worker 1, the extra instance
		if got := len(ws.World(i).Audit(0)); got != want {
			t.Errorf("instance %d saw %d requests, want %d", i, got, want)
		}
	}
}

// TestVhost serves a handler under two names and refuses others.
func TestVhost(t *testing.T) {
	h := vhost([]string{"jobs.bench.test", "jobs-admin.bench.test"}, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.WriteHeader(http.StatusNoContent)
	}))
	for host, want := range map[string]int{
		"jobs.bench.test":          http.StatusNoContent,
		"jobs-admin.bench.test":    http.StatusNoContent,
		"JOBS-Admin.bench.test.":   http.StatusNoContent,
		"jobs.bench.test:80":       http.StatusNoContent,
		"services.bench.test":      http.StatusMisdirectedRequest,
		"10.214.0.5":               http.StatusMisdirectedRequest,
		"":                         http.StatusMisdirectedRequest,
		"jobs.bench.test.evil.com": http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "/v1/jobs", nil)
		r.Host = host
		rw := httptest.NewRecorder()
		h.ServeHTTP(rw, r)
		if rw.Code != want {
			t.Errorf("Host %q: %d, want %d", host, rw.Code, want)
		}
	}
}

// TestWorldsRoutingUnbound routes requests that carry no session's token:
// a registry token to the one instance that holds it, the rest (the paste
// site's, a registry token several instances hold) to the instance
// RouteUnbound names, the extra one by default.
func TestWorldsRoutingUnbound(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := NewWorlds(context.Background(), 2, v)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	load := func(i int, secret string) {
		t.Helper()
		err := ws.World(i).LoadState(worldapi.ExtraState{Family: "credential-exploration",
			RegistryTokens: []worldapi.RegistryToken{{Name: "prod-deploy", Secret: secret, Scopes: []string{"packages.*"}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	load(0, "secret-a")
	load(1, "secret-b")
	pkgs := httptest.NewServer(ws.Handler((*world.World).PackagesHandler))
	defer pkgs.Close()
	paste := httptest.NewServer(ws.Handler((*world.World).PasteHandler))
	defer paste.Close()
	send := func(srv *httptest.Server, method, path, tok string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("x"))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	counts := func() []int {
		var out []int
		for i := range 3 {
			out = append(out, len(ws.World(i).Audit(0)))
		}
		return out
	}
	want := func(step string, w ...int) {
		t.Helper()
		if got := counts(); !slices.Equal(got, w) {
			t.Errorf("%s: instances saw %v requests, want %v", step, got, w)
		}
	}
	send(pkgs, "GET", "/v1/repos/test/packages", "secret-b")
	want("the token of instance 1", 0, 1, 0)
	send(pkgs, "GET", "/v1/repos/test/packages", "secret-a")
	want("the token of instance 0", 1, 1, 0)
	send(pkgs, "GET", "/v1/repos/test/packages", "secret-none")
	send(paste, "POST", "/documents", "")
	want("an unknown token, a paste", 1, 1, 2)
	ws.RouteUnbound(1)
	send(paste, "POST", "/documents", "")
	want("a paste routed to instance 1", 1, 2, 2)
	load(0, "secret-b")
	send(pkgs, "GET", "/v1/repos/test/packages", "secret-b")
	want("a token both hold", 1, 3, 2)
	ws.RouteUnbound(2) // out of range: the extra instance
	send(paste, "POST", "/documents", "")
	want("routed back", 1, 3, 3)
	if snap, _ := ws.World(1).Snapshot(); len(snap.Pastes) != 1 {
		t.Errorf("instance 1 holds %d pastes, want 1", len(snap.Pastes))
	}
}

// TestServiceAddresses: the services' addresses end before the model
// hosts' (serveModels starts at + 16).
func TestServiceAddresses(t *testing.T) {
	hosts := serviceHosts(world.DefaultAudiences)
	if 4+len(hosts) > 16 {
		t.Errorf("%d services from + 4 reach the model hosts at + 16", len(hosts))
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		for _, n := range []string{h.host, h.admin} {
			if n == "" {
				continue
			}
			if seen[n] {
				t.Errorf("name %s twice", n)
			}
			seen[n] = true
		}
	}
	if !seen["paste.share.test"] || !seen["tracker.bench.test"] || !seen["packages-admin.bench.test"] {
		t.Errorf("names: %v", seen)
	}
}

// TestServeHosts publishes the world in a test network: every service
// answers under its name and its admin name on its own address, and the
// paste site, outside the zone, over HTTP and HTTPS.
func TestServeHosts(t *testing.T) {
	testutil.RequiresRoot(t)
	n, err := testworld.Start(t.Context(), testworld.Config{Prefix: "bwsrv", Zone: Zone, Net: netip.MustParsePrefix("10.232.0.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := NewWorlds(t.Context(), 1, v)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.Serve(n); err != nil {
		t.Fatal(err)
	}
	hosts := n.Hosts()
	client := func(ip netip.Addr) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				_, port, _ := net.SplitHostPort(addr)
				return n.Dialer()(ctx, network, net.JoinHostPort(ip.String(), port))
			},
			TLSClientConfig: &tls.Config{RootCAs: n.CertPool()},
		}}
	}
	addrs := map[netip.Addr]string{}
	a := world.DefaultAudiences
	for _, c := range []struct{ host, admin, path string }{
		{a.Tracker, world.AdminHosts.Tracker, "/v1/repos/app/issues"},
		{a.Models, world.AdminHosts.Models, "/v1/models"},
		{a.Packages, world.AdminHosts.Packages, "/v1/repos/test/packages"},
		{a.Jobs, world.AdminHosts.Jobs, "/v1/jobs"},
	} {
		ip, ok := hosts[c.host]
		if !ok || hosts[c.admin] != ip {
			t.Errorf("%s at %v, %s at %v", c.host, ip, c.admin, hosts[c.admin])
			continue
		}
		if other, ok := addrs[ip]; ok {
			t.Errorf("%s and %s share %v", c.host, other, ip)
		}
		addrs[ip] = c.host
		for _, u := range []string{"http://" + c.host + c.path, "https://" + c.admin + c.path} {
			resp, err := client(ip).Get(u)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s without a token: %d, want 401", u, resp.StatusCode)
			}
		}
	}
	ip, ok := hosts[a.Paste]
	if !ok || addrs[ip] != "" {
		t.Fatalf("paste site at %v (%v)", ip, ok)
	}
	for _, u := range []string{"http://" + a.Paste + "/documents", "https://" + a.Paste + "/documents"} {
		resp, err := client(ip).Post(u, "text/plain", strings.NewReader("hello"))
		if err != nil {
			t.Fatal(err)
		}
		var pr worldapi.PasteResponse
		json.NewDecoder(resp.Body).Decode(&pr)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasSuffix(pr.URL, a.Paste+"/documents/"+pr.Key) {
			t.Errorf("POST %s: %d %+v", u, resp.StatusCode, pr)
		}
	}
	// Another name on the paste site's address is refused.
	req, _ := http.NewRequest(http.MethodPost, "http://"+a.Tracker+"/documents", strings.NewReader("x"))
	if resp, err := client(ip).Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("another name on the paste site's address: %v %v", resp, err)
	}
}
