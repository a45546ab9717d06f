package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/approvals"
)

// forward copies each loopback TCP connection to the unix socket sock, as
// `ssh -L 8443:/run/airlock/console.sock host` or `socat
// TCP-LISTEN:8443,bind=127.0.0.1 UNIX-CONNECT:...` does for an operator
// whose browser cannot speak to a unix socket. It returns the port.
func forward(t *testing.T, sock string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, u)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer wg.Done(); io.Copy(c, u); c.Close() }()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// TestUnixConsoleRefusesForeignHosts: a console on a unix socket, which
// a browser reaches through a forwarded loopback port, answers only to a
// Host that names loopback. A web page whose name rebinds to 127.0.0.1
// sends its own name, and was let in without a token (the peer is the
// forwarder, root), learned the base path and allowed a held request.
func TestUnixConsoleRefusesForeignHosts(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "alcon-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "console.sock")
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	s, err := Serve(t.Context(), f, Config{Listen: "unix:" + sock, Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	port := forward(t, sock)

	// The rebinding page: its requests go to 127.0.0.1:port but carry its
	// own name, as a browser's do after the DNS answer changed.
	evil := "attacker.example:" + port
	jar, _ := cookiejar.New(nil)
	page := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", "127.0.0.1:"+port)
		}}}
	for _, u := range []string{"/", "/c/x/", "/console.css"} {
		if resp, _ := get(t, page, "http://"+evil+u); resp.StatusCode != http.StatusMisdirectedRequest || resp.Header.Get("Location") != "" {
			t.Errorf("the rebinding page's GET %s: %s, want 421", u, resp.Status)
		}
	}
	// The operator's browser, at the forwarded port's loopback names.
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port} {
		resp, _ := get(t, page, "http://"+host+"/")
		if resp.StatusCode != http.StatusSeeOther || !baseRE.MatchString(resp.Header.Get("Location")) {
			t.Errorf("the operator at %s: %s, want 303 to the base path", host, resp.Status)
		}
	}
}

// TestUnauthenticatedRequestsCloseConnections: a request that needs no
// login (the style sheet, the way in) or fails one gets an answer that
// closes its connection. A local user kept every one of the console's
// connections (256) with keep-alive requests for the style sheet, and
// the operator's way in waited in the accept queue for ever.
func TestUnauthenticatedRequestsCloseConnections(t *testing.T) {
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	srv, err := Serve(t.Context(), f, Config{Listen: "127.0.0.1:0", Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	addr := srv.Addr().String()
	for _, req := range []string{
		"GET /console.css HTTP/1.1\r\nHost: %s\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: %s\r\n\r\n",
		"GET /c/x/ HTTP/1.1\r\nHost: %s\r\n\r\n",
		"GET /?token=wrong HTTP/1.1\r\nHost: %s\r\n\r\n",
		"POST /login HTTP/1.1\r\nHost: %s\r\nContent-Length: 11\r\nContent-Type: application/x-www-form-urlencoded\r\n\r\ntoken=wrong",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, req, addr)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", req, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if n, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%q: %s, then the connection stayed open (%v, %v)", strings.SplitN(req, " HTTP", 2)[0], resp.Status, n, err)
		}
		c.Close()
	}
}

// TestBearerRequestsKeepNoLogin: requests that carry the bearer token
// (a script, curl -H "Authorization: Bearer ...") get no cookie and keep
// no login, so any number of them leaves a browser's login alone (the
// 257th evicted it), and their forms work with a CSRF token bound to the
// token.
func TestBearerRequestsKeepNoLogin(t *testing.T) {
	srv, f := start(t)
	browser, _, base := login(t, srv)
	script := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	id, done := hold(t, f.store)
	var body string
	for range maxLogins + 1 {
		var resp *http.Response
		resp, body = get(t, script, base+"/", "Authorization", "Bearer "+testToken)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("script: %s, Set-Cookie %q; want 200 and no cookie", resp.Status, resp.Header.Get("Set-Cookie"))
		}
	}
	if resp, _ := get(t, browser, base+"/"); resp.StatusCode != http.StatusOK {
		t.Errorf("browser after %d scripted requests: %s, want its login kept", maxLogins+1, resp.Status)
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the script's page")
	}
	resp, _ := post(t, script, base+"/approvals/"+id, url.Values{"csrf": {m[1]}, "decision": {"deny"}, "reason": {"scripted"}},
		"Origin", srv.URL, "Authorization", "Bearer "+testToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the script's decision: %s", resp.Status)
	}
	if d := <-done; d.Allow || d.Reason != "scripted" {
		t.Errorf("decision %+v", d)
	}
}

// TestDiffLinesClassedByStructure: inside a hunk, the lines its header
// counts are content, whatever they look like: an added file line
// "++ b/workspace/README.md" reads "+++ b/workspace/README.md", and was
// styled as a file header.
func TestDiffLinesClassedByStructure(t *testing.T) {
	diff := []string{
		"diff --airlock a/workspace/evil.sh b/workspace/evil.sh",
		"--- a/workspace/evil.sh",
		"+++ b/workspace/evil.sh",
		"@@ -1,2 +1,4 @@",
		" #!/bin/sh",
		"-echo hi",
		"+++ b/workspace/README.md",
		"+--- a/workspace/README.md",
		"+@@ -1 +1 @@",
		"\\ No newline at end of file",
		"diff --airlock a/workspace/x b/workspace/x",
		"--- a/workspace/x",
		"+++ b/workspace/x",
		"@@ -0,0 +1 @@",
		"+x",
	}
	want := []string{"meta", "meta", "meta", "hunk", "ctx", "del", "add", "add", "add", "meta", "meta", "meta", "meta", "hunk", "add"}
	for i, l := range classifyDiff(diff) {
		if l.Class != want[i] || l.Text != diff[i] {
			t.Errorf("line %d %q: %s, want %s", i, diff[i], l.Class, want[i])
		}
	}
}
