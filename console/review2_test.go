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
	"github.com/airlock-sandbox/airlock/internal/httpserve"
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

// TestReview2UnixConsoleRebinding: a console on a unix socket (the mode
// threat-model.md prefers on a shared host) checks no Host: once the
// operator forwards it to a loopback port for a browser, a web page whose
// name rebinds to 127.0.0.1 (it sends Host and Origin
// "attacker.example:PORT", its own) is let in without a token, learns the
// base path from the redirect, reads a CSRF token from the page and
// allows a held request. A TCP console answers the same page 421.
func TestReview2UnixConsoleRebinding(t *testing.T) {
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
	resp, _ := get(t, page, "http://"+evil+"/")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !baseRE.MatchString(loc) {
		t.Fatalf("the rebinding page was refused: %s (the attack failed)", resp.Status)
	}
	id, done := hold(t, f.store)
	resp, body := get(t, page, "http://"+evil+loc)
	m := csrfRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("index: %s", resp.Status)
	}
	resp, _ = post(t, page, "http://"+evil+loc+"approvals/"+id,
		url.Values{"csrf": {m[1]}, "decision": {"allow"}, "reason": {"rebinding"}}, "Origin", "http://"+evil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("decision: %s (the attack failed)", resp.Status)
	}
	d := <-done
	if !d.Allow {
		t.Fatalf("decision %+v", d)
	}
	t.Logf("a page at http://%s allowed held request %s: %+v (base path %s)", evil, id, d, loc)
}

// TestReview2ConsoleSlotsHeld: any local user holds every one of the
// console's MaxConns connections for as long as it likes: the style sheet
// is served without a login on a keep-alive connection, and asking for it
// again before IdleTimeout keeps the connection. The operator's way in
// (with the token) then waits in the accept queue and never gets an
// answer. (Limits shortened: 8 connections, 1 s idle; the same holds at
// 256 and a minute.)
func TestReview2ConsoleSlotsHeld(t *testing.T) {
	saved := limits
	limits = httpserve.Limits{ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxHeaderBytes: 4096, MaxConns: 8}
	t.Cleanup(func() { limits = saved })
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	root := t.TempDir()
	srv, err := Serve(t.Context(), f, Config{Listen: "127.0.0.1:0", Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	addr := srv.Addr().String()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ready := make(chan struct{}, limits.MaxConns)
	for range limits.MaxConns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			br := bufio.NewReader(c)
			for first := true; ; first = false {
				fmt.Fprintf(c, "GET /console.css HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Errorf("holder: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if first {
					ready <- struct{}{}
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(limits.IdleTimeout / 2):
				}
			}
		}()
	}
	for range limits.MaxConns {
		<-ready
	}
	time.Sleep(3 * limits.IdleTimeout) // well past every timeout
	tok, err := os.ReadFile(filepath.Join(root, TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	op := &http.Client{Timeout: 3 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := op.Get("http://" + addr + "/?token=" + strings.TrimSpace(string(tok)))
	if err == nil {
		resp.Body.Close()
		t.Fatalf("the operator got in (%s): the attack failed", resp.Status)
	}
	t.Logf("the operator, with the token, %s after the holders' connections passed every timeout: %v", "got no answer", err)
}

// TestReview2BearerLoginsEvictOperator: every request with the bearer
// header and no cookie (a script, curl -H "Authorization: Bearer ...")
// makes a new login; the 257th evicts the operator's browser login.
func TestReview2BearerLoginsEvictOperator(t *testing.T) {
	srv, _ := start(t)
	browser, _, base := login(t, srv)
	if resp, _ := get(t, browser, base+"/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("browser: %s", resp.Status)
	}
	script := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for range maxLogins {
		if resp, _ := get(t, script, base+"/", "Authorization", "Bearer "+testToken); resp.StatusCode != http.StatusOK {
			t.Fatalf("script: %s", resp.Status)
		}
	}
	resp, _ := get(t, browser, base+"/")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("browser after %d scripted requests: %s (still logged in)", maxLogins, resp.Status)
	}
	t.Logf("the operator's browser login is gone after %d bearer requests: %s", maxLogins, resp.Status)
}

// TestReview2DiffContentStyledAsHeader: a file whose line is
// "++ b/workspace/README.md" is, added, the diff line
// "+++ b/workspace/README.md", which the console styles as a file header
// ("meta"), as it does the real one; the lines after it read as README's.
func TestReview2DiffContentStyledAsHeader(t *testing.T) {
	real, forged := "+++ b/workspace/evil.sh", "+"+"++ b/workspace/README.md"
	if diffClass(forged) != diffClass(real) || diffClass(forged) != "meta" {
		t.Fatalf("forged %q is %q, real header %q", forged, diffClass(forged), diffClass(real))
	}
}
