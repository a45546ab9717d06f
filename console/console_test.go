package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/fsscope/change"
	"github.com/airlock-sandbox/airlock/internal/httpserve"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// hostile is what a sandbox writes where the console shows it: a file
// name, a diff line, a request path, an audit subject.
const hostile = `<script>document.title="owned"</script><img src=x onerror=alert(1)>"'&`

// fakeDaemon serves one stopped session with changes waiting, whose
// names and contents are the sandbox's hostile text.
type fakeDaemon struct {
	store     *approvals.Store
	committed []string
	discarded []string
}

const sid = "0123456789ab"

func (f *fakeDaemon) List(context.Context) []api.Session {
	s, _ := f.Inspect(context.Background(), sid)
	return []api.Session{*s}
}

func (f *fakeDaemon) Inspect(_ context.Context, id string) (*api.Session, error) {
	if id != sid {
		return nil, fmt.Errorf("session %q: %w", id, errdefs.ErrNotFound)
	}
	code := 0
	return &api.Session{ID: sid, Label: hostile, State: "stopped", Image: "airlock/agent:bookworm", ExitCode: &code,
		Command: []string{"sh", "-c", hostile}, Created: time.Now(), Review: true}, nil
}

func (f *fakeDaemon) AuditEach(_ context.Context, id string, fn func(json.RawMessage) error) error {
	for i := range 3 {
		b, _ := json.Marshal(api.AuditEvent{Time: time.Now(), Session: id, Layer: "l7", Action: "refused",
			Subject: hostile, Reason: hostile, Fields: map[string]any{hostile: hostile, "n": i}})
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeDaemon) Diff(context.Context, string) (*api.ChangeSet, error) {
	return &api.ChangeSet{Workspaces: []change.Workspace{{HostPath: "/srv/app", Target: "/workspace",
		Changes: []change.Change{{Path: hostile + ".txt", Kind: change.KindAdded, Type: change.TypeFile, Mode: 0o644, Size: 5}}}}}, nil
}

func (f *fakeDaemon) UnifiedDiff(string) (func(context.Context, io.Writer) error, error) {
	return func(_ context.Context, w io.Writer) error {
		_, err := fmt.Fprintf(w, "--- /dev/null\n+++ b/%s.txt\n@@ -0,0 +1 @@\n+%s\u202e\n", hostile, hostile)
		return err
	}, nil
}

func (f *fakeDaemon) Commit(_ context.Context, id string, _ api.CommitRequest) (*api.CommitResult, error) {
	f.committed = append(f.committed, id)
	return &api.CommitResult{Committed: true, Applied: []string{"/workspace/" + hostile + ".txt"}}, nil
}

func (f *fakeDaemon) Discard(_ context.Context, id string) error {
	f.discarded = append(f.discarded, id)
	return nil
}

func (f *fakeDaemon) Approvals() *approvals.Store { return f.store }

// hold holds a request with a hostile path and body, and returns its id
// and the channel its decision arrives on.
func hold(t *testing.T, s *approvals.Store) (string, <-chan approvals.Decision) {
	t.Helper()
	done := make(chan approvals.Decision, 1)
	go func() {
		done <- s.Ask(context.Background(), approvals.Request{Session: sid, Method: "POST", Host: "api.test",
			Path: "/deploy/" + hostile, Query: "env=" + hostile + "\u202e", Rule: "ask POST /deploy/**",
			Headers: []api.HeaderField{{Name: "Authorization", Value: "Bearer airlock-secret-0123", Secret: "TOKEN"},
				{Name: "X-Hostile", Value: hostile + "\x1b[2J"}, {Name: "X-Http-Method-Override", Value: "DELETE"}},
			Body: []byte(hostile + "\x1b[2J"), ContentType: "text/html",
			Repair: &policies.Repair{Revisable: true, Changes: []policies.RepairChange{{Field: policies.RepairEgressHTTP, Block: "api.test", Op: policies.RepairInsert, Before: 1,
				Rule: &policies.HTTPRule{Methods: []string{"POST"}, Path: "/deploy/" + hostile, Action: policies.HTTPAllow}}}}})
	}()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if l := s.List(sid); len(l) == 1 {
			return l[0].ID, done
		}
	}
	t.Fatal("the request was not held")
	return "", nil
}

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef"

// client is a browser of the console at srv: cookies kept, redirects not
// followed.
func client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func get(t *testing.T, c *http.Client, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func start(t *testing.T) (*httptest.Server, *fakeDaemon) {
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	srv := httptest.NewServer(nil)
	srv.Config.Handler = New(f, WithToken(testToken), WithHosts(strings.TrimPrefix(srv.URL, "http://")))
	t.Cleanup(srv.Close)
	return srv, f
}

func TestTokenLogin(t *testing.T) {
	srv, _ := start(t)
	c := client(t)
	for _, tc := range []struct {
		name string
		url  string
		hdr  []string
	}{
		{"no token", "/", nil},
		{"wrong token", "/?token=" + testToken[1:], nil},
		{"wrong bearer", "/", []string{"Authorization", "Bearer " + testToken + "x"}},
		{"token in a cookie of its own", "/", []string{"Cookie", cookieName + "=" + testToken}},
	} {
		if resp, body := get(t, c, srv.URL+tc.url, tc.hdr...); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `id="login"`) {
			t.Errorf("%s: %s, want 401 with the login form", tc.name, resp.Status)
		}
	}
	// The token in the query: a cookie for the console's random base
	// path, and a redirect there, without the token. The path asked for
	// is not followed: the way in leads to the base path alone.
	resp, _ := get(t, c, srv.URL+"/sessions/"+sid+"?token="+testToken+"&x=1")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !baseRE.MatchString(loc) {
		t.Fatalf("login: %s to %q, want 303 to /c/RANDOM/", resp.Status, loc)
	}
	sc := resp.Header.Get("Set-Cookie")
	for _, want := range []string{cookieName + "=", "HttpOnly", "SameSite=Strict", "Path=" + loc + ";"} {
		if !strings.Contains(sc+";", want) {
			t.Errorf("Set-Cookie %q lacks %s", sc, want)
		}
	}
	if strings.Contains(sc, testToken) {
		t.Errorf("the cookie holds the token: %q", sc)
	}
	if resp, _ := get(t, c, srv.URL+loc+"sessions/"+sid); resp.StatusCode != http.StatusOK {
		t.Errorf("with the cookie: %s, want 200", resp.Status)
	}
	// Outside the base path the cookie does not count: no page is served
	// there, only the way in.
	if resp, _ := get(t, c, srv.URL+"/sessions/"+sid); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a page outside the base path: %s, want 401", resp.Status)
	}
	// Inside it, a token in the address is no way in: it would stay in
	// the address bar and the history.
	if resp, _ := get(t, client(t), srv.URL+loc+"?token="+testToken); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("token in a base path address: %s, want 401", resp.Status)
	}
	// Every way in leads to the same base path.
	if resp, _ := get(t, client(t), srv.URL+"//evil.example/x?token="+testToken); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != loc {
		t.Errorf("login through //evil.example: %s to %q, want 303 to %s", resp.Status, resp.Header.Get("Location"), loc)
	}
	// A bearer header serves the page at once, without a cookie.
	resp, _ = get(t, client(t), srv.URL+loc, "Authorization", "Bearer "+testToken)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("bearer: %s, cookie %q; want 200 and no cookie", resp.Status, resp.Header.Get("Set-Cookie"))
	}
	// Another name for the address (DNS rebinding) is refused, token or not.
	if resp, _ := get(t, client(t), srv.URL+"/?token="+testToken, "Host", "rebind.example:80"); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %s, want 421", resp.Status)
	}
}

// baseRE matches the console's base path.
var baseRE = regexp.MustCompile(`^/c/[A-Z2-7]{26}/$`)

// login returns a logged-in client, the CSRF token of its pages and the
// console's base URL (with no slash at its end).
func login(t *testing.T, srv *httptest.Server) (*http.Client, string, string) {
	c := client(t)
	resp, _ := get(t, c, srv.URL+"/?token="+testToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	base := srv.URL + strings.TrimSuffix(resp.Header.Get("Location"), "/")
	resp, body := get(t, c, base+"/sessions/"+sid)
	m := csrfRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("session page: %s, no csrf token in it", resp.Status)
	}
	return c, m[1], base
}

func TestDecideNeedsCSRFAndOrigin(t *testing.T) {
	srv, f := start(t)
	c, csrf, base := login(t, srv)
	_, other, _ := login(t, srv)
	id, done := hold(t, f.store)
	origin := []string{"Origin", srv.URL}
	form := func(tok string) url.Values {
		return url.Values{"csrf": {tok}, "decision": {"allow"}, "reason": {"checked it"}, "back": {"/sessions/" + sid}}
	}
	for _, tc := range []struct {
		name string
		c    *http.Client
		form url.Values
		hdr  []string
		want int
	}{
		{"no csrf token", c, form(""), origin, http.StatusForbidden},
		{"another login's csrf token", c, form(other), origin, http.StatusForbidden},
		{"no Origin nor Referer", c, form(csrf), nil, http.StatusForbidden},
		{"a foreign Origin", c, form(csrf), []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"a foreign Referer", c, form(csrf), []string{"Referer", "http://evil.example/"}, http.StatusForbidden},
		{"no cookie", client(t), form(csrf), origin, http.StatusUnauthorized},
	} {
		if resp, _ := post(t, tc.c, base+"/approvals/"+id, tc.form, tc.hdr...); resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.want)
		}
	}
	if l := f.store.List(sid); len(l) != 1 {
		t.Fatalf("a refused form decided the request: %+v", l)
	}
	// The console's own form, from its page (a Referer will do too).
	resp, _ := post(t, c, base+"/approvals/"+id, form(csrf), "Referer", base+"/sessions/"+sid)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != strings.TrimPrefix(base, srv.URL)+"/sessions/"+sid {
		t.Fatalf("decision: %s to %q, want 303 back to the session", resp.Status, resp.Header.Get("Location"))
	}
	d := <-done
	if !d.Allow || d.By != By || d.Reason != "checked it" {
		t.Errorf("decision %+v, want allowed by %q with the reason", d, By)
	}
	// Deciding again: the console says who decided first.
	if resp, body := post(t, c, base+"/approvals/"+id, form(csrf), origin...); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "already allowed by console") {
		t.Errorf("second decision: %s %q, want 409 naming the first", resp.Status, body)
	}
	// Commit and discard need the same.
	for _, action := range []string{"commit", "discard"} {
		if resp, _ := post(t, c, base+"/sessions/"+sid+"/"+action, url.Values{"csrf": {other}}, origin...); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s with another login's token: %s, want 403", action, resp.Status)
		}
	}
	if len(f.committed)+len(f.discarded) != 0 {
		t.Fatalf("a refused form committed %v, discarded %v", f.committed, f.discarded)
	}
	if resp, body := post(t, c, base+"/sessions/"+sid+"/commit", url.Values{"csrf": {csrf}}, origin...); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="committed"`) {
		t.Errorf("commit: %s, want 200 and the result", resp.Status)
	}
	if resp, _ := post(t, c, base+"/sessions/"+sid+"/discard", url.Values{"csrf": {csrf}}, origin...); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("discard: %s, want 303", resp.Status)
	}
	if len(f.committed) != 1 || len(f.discarded) != 1 {
		t.Errorf("committed %v, discarded %v; want one each", f.committed, f.discarded)
	}
}

// TestSandboxTextIsInert renders every page that shows what the sandbox
// chose (file names, diff lines, request paths and bodies, audit
// subjects and fields, session labels and commands): no tag or attribute
// of it survives, only its escaped text, and no control or bidi
// character reaches the page raw.
func TestSandboxTextIsInert(t *testing.T) {
	srv, f := start(t)
	c, csrf, base := login(t, srv)
	_, _ = hold(t, f.store)
	pages := map[string]string{}
	for _, p := range []string{"/", "/sessions/" + sid} {
		resp, body := get(t, c, base+p)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", p, resp.Status)
		}
		pages[p] = body
	}
	_, pages["commit"] = post(t, c, base+"/sessions/"+sid+"/commit", url.Values{"csrf": {csrf}}, "Origin", srv.URL)
	escaped := `&lt;script&gt;document.title=&#34;owned&#34;&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;`
	for name, body := range pages {
		for _, raw := range []string{"<script", "<img", "onerror=alert(1)>", "\x1b", "\u202e"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s holds %q raw", name, raw)
			}
		}
		if !strings.Contains(body, escaped) {
			t.Errorf("%s does not show the sandbox's text escaped", name)
		}
	}
	for _, want := range []string{
		hostileEsc(".txt</code>"),                                     // the file name in the change list
		`<span class="add">&#43;` + hostileEsc(`\u202e`),              // the diff line, its bidi override shown as text
		"/deploy/" + hostileEsc("?env="+hostileEsc(`\u202e</code>`)),  // the held request's path and query
		`<th>X-Http-Method-Override</th><td><code>DELETE</code></td>`, // its headers
		`<th>X-Hostile</th><td><code>` + hostileEsc(`\x1b[2J</code>`),
		`<th>Authorization</th><td><code>Bearer airlock-secret-0123</code> (secret TOKEN)</td>`,
		hostileEsc(`\x1b[2J`), // its body, the escape character as text
		`repair: <code>egress.http[&#34;api.test&#34;]: insert rule POST /deploy/` + hostileEsc(` -&gt; allow before rule 1</code>`), // its repair
	} {
		if !strings.Contains(pages["/sessions/"+sid], want) {
			t.Errorf("the session page lacks %q", want)
		}
	}
}

func hostileEsc(suffix string) string {
	return `&lt;script&gt;document.title=&#34;owned&#34;&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&#34;&#39;&amp;` + suffix
}

func TestSecurityHeaders(t *testing.T) {
	srv, _ := start(t)
	c, _, base := login(t, srv)
	for _, u := range []string{"/", "/sessions/" + sid, "/sessions/nope", "/console.css"} {
		resp, _ := get(t, c, base+u)
		for k, v := range securityHeaders {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", u, k, got, v)
			}
		}
	}
	resp, _ := get(t, client(t), srv.URL+"/")
	if resp.Header.Get("Content-Security-Policy") == "" || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unauthenticated: %s without the headers", resp.Status)
	}
}

func TestListenAddress(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:0", false, true},
		{"[::1]:8080", false, true},
		{"localhost:0", false, true},
		{"127.0.0.2:0", false, true},
		{":8080", false, false},
		{"0.0.0.0:8080", false, false},
		{"[::]:8080", false, false},
		{"10.0.0.1:8080", false, false},
		{"console.example:8080", false, false},
		// Remote: one address, never every interface, a name or a
		// session's.
		{"192.0.2.1:8080", true, true},
		{"0.0.0.0:8080", true, false},
		{"[::]:8080", true, false},
		{":8080", true, false},
		{"console.example:8080", true, false},
		{"10.213.0.1:8080", true, false},
		{"127.0.0.1", false, false},
		{"127.0.0.1:http", false, false},
	} {
		_, err := checkTCP(tc.addr, tc.remote, []netip.Prefix{netip.MustParsePrefix("10.213.0.0/16")})
		if (err == nil) != tc.ok {
			t.Errorf("checkTCP(%q, %v) = %v, want ok %v", tc.addr, tc.remote, err, tc.ok)
		}
	}
}

func TestTokenFile(t *testing.T) {
	dir := t.TempDir()
	tok, file, generated, err := loadToken(Config{Root: dir})
	if err != nil || !generated || file != filepath.Join(dir, TokenFileName) || len(tok) != 64 {
		t.Fatalf("generated token %q in %q (%v): %v", tok, file, generated, err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, st.Mode())
	}
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != tok {
		t.Errorf("the file holds %q, want the token", b)
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		ok            bool
	}{
		{"good", testToken + "\n", 0o600, true},
		{"readable", testToken, 0o640, false},
		{"short", "secret", 0o600, false},
		{"two words", testToken + " " + testToken, 0o600, false},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		got, _, gen, err := loadToken(Config{TokenFile: p, Root: dir})
		if (err == nil) != tc.ok || (tc.ok && (got != testToken || gen)) {
			t.Errorf("%s: token %q, generated %v, error %v; want ok %v", tc.name, got, gen, err, tc.ok)
		}
	}
}

func TestPeerCheck(t *testing.T) {
	for _, tc := range []struct {
		p   Peer
		gid int
		ok  bool
	}{
		{Peer{UID: 0, GID: 0}, -1, true},
		{Peer{UID: uint32(os.Geteuid()), GID: 1}, -1, true},
		{Peer{UID: 54321, GID: 54321}, -1, os.Geteuid() == 54321},
		{Peer{UID: 54321, GID: 54322}, 54322, true},
		{Peer{UID: 54321, GID: 54321}, 54322, false},
	} {
		if err := allowPeer(tc.p, tc.gid); (err == nil) != tc.ok {
			t.Errorf("allowPeer(%+v, %d) = %v, want ok %v", tc.p, tc.gid, err, tc.ok)
		}
	}
}

// TestServeUnixSocket serves the console on a unix socket: mode 0600, no
// token asked of a peer the check admits (this test's user, who is
// airlockd's), and decisions taken in the peer's name.
func TestServeUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "alcon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "console.sock")
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	for _, bad := range []Config{
		{Listen: "unix:console.sock"},
		{Listen: "unix:" + sock, TokenFile: "/x"},
		{Listen: "0.0.0.0:0", Root: dir},
	} {
		if s, err := Serve(t.Context(), f, bad); err == nil {
			s.Close()
			t.Errorf("Serve(%+v) served", bad)
		}
	}
	s, err := Serve(t.Context(), f, Config{Listen: "unix:" + sock, Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v, mode %v; want 0600", err, st.Mode())
	}
	if _, err := os.Stat(filepath.Join(dir, TokenFileName)); !os.IsNotExist(err) {
		t.Errorf("a unix socket console made a token file: %v", err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}}
	// The peer is checked; the way in needs no token and leads to the
	// base path.
	resp, _ := get(t, c, "http://localhost/")
	base := "http://localhost" + strings.TrimSuffix(resp.Header.Get("Location"), "/")
	if resp.StatusCode != http.StatusSeeOther || !baseRE.MatchString(resp.Header.Get("Location")) {
		t.Fatalf("way in over the socket: %s to %q", resp.Status, resp.Header.Get("Location"))
	}
	resp, body := get(t, c, base+"/sessions/"+sid)
	m := csrfRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("session page over the socket: %s", resp.Status)
	}
	id, done := hold(t, f.store)
	resp, _ = post(t, c, base+"/approvals/"+id, url.Values{"csrf": {m[1]}, "decision": {"deny"}}, "Origin", "http://localhost")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("decision over the socket: %s", resp.Status)
	}
	if d := <-done; d.Allow || d.By != By+": "+(Peer{UID: uint32(os.Geteuid())}).Name() {
		t.Errorf("decision %+v, want denied by the console in the peer's name", d)
	}
}

func TestFieldsText(t *testing.T) {
	got := fieldsText(map[string]any{"rule": `http "a.test" rule 1 (POST /x -> ask)`, "name": "evil\u202etxt.exe", "n": 3})
	want := `n=3 name="evil\u202etxt.exe" rule="http \"a.test\" rule 1 (POST /x -> ask)"`
	if got != want {
		t.Errorf("fieldsText = %s, want %s", got, want)
	}
}

// TestTokenFileOwner: a token file someone else could have planted (owned
// by another user, or reached through a symlink) is refused: its owner
// would know the token.
func TestTokenFileOwner(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "console.token")
	const planted = "attacker-chosen-token-0123456789abcdef"
	if err := os.WriteFile(p, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if tok, _, _, err := loadToken(Config{TokenFile: p, Root: dir}); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("a token file owned by uid 65534: token %q, %v; want refused", tok, err)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.token")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := loadToken(Config{TokenFile: link, Root: dir}); err == nil {
		t.Error("a token file reached through a symlink was read")
	}
	if tok, _, _, err := loadToken(Config{TokenFile: p, Root: dir}); err != nil || tok != planted {
		t.Errorf("root's own token file: %q, %v", tok, err)
	}
}

// TestConnectionsEnd: unauthenticated connections that idle, or announce
// a body they never send, are closed by the console after its limits.
func TestConnectionsEnd(t *testing.T) {
	saved := limits
	limits = httpserve.Limits{ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxHeaderBytes: 4096, MaxConns: 64}
	t.Cleanup(func() { limits = saved })
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	srv, err := Serve(t.Context(), f, Config{Listen: "127.0.0.1:0", Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if left := testutil.HeldConnections(t, srv.Addr().String(), "/approvals/x", 50, time.Minute); left != 0 {
		t.Errorf("%d of 50 held connections still open a minute after the console's 1 s limits", left)
	}
}
