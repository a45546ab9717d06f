package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlock-sandbox/airlock/approvals"
)

// TestCookieStaysOnConsolePaths: the login cookie does not reach another
// server on the console's loopback address. Browsers scope cookies by
// host, not port, and 127.0.0.1:ANY is one site, so SameSite=Strict does
// not keep a cookie from another port: a local user's server on
// 127.0.0.1:OTHER that a web page sends the operator's browser to (and
// that sends it on to itself, same-site) would be sent a cookie whose
// Path is "/", and with it act in the console in the operator's name.
// The console's cookie has the path of its random base path instead,
// which that server cannot know.
func TestCookieStaysOnConsolePaths(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium")
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: make deps installs it (Debian's chromium package)")
	}
	f := &fakeDaemon{store: approvals.New()}
	t.Cleanup(func() { f.store.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	srv, err := Serve(ctx, f, Config{Listen: "127.0.0.1:0", Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	tok := readToken(t, srv.TokenFile)

	// The local user's server on another loopback port: it logs every
	// Cookie header and path it is sent.
	var mu sync.Mutex
	var seen []string
	evil, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	evilURL := "http://" + evil.Addr().String()
	go http.Serve(evil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Cookie"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/" {
			// The first visit came cross-site (no Strict cookie): come
			// back same-site.
			fmt.Fprint(w, `<meta http-equiv="refresh" content="0;url=/again"><p>loading</p>`)
			return
		}
		fmt.Fprint(w, `<p id="done">thanks</p>`)
	}))
	defer evil.Close()
	// A web page on another site that sends the browser there.
	web, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	go http.Serve(web, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<meta http-equiv="refresh" content="0;url=%s/">`, evilURL)
	}))
	defer web.Close()

	bctx := attackBrowser(ctx, t, chromium)
	id, _ := hold(t, f.store)
	// The operator logs in to the console, as docs/console.md says.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"?token="+tok),
		chromedp.WaitVisible(chromedp.CSS(`#allow-`+id)),
	); err != nil {
		t.Fatal(err)
	}
	consoleURL, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimPrefix(consoleURL, strings.TrimSuffix(srv.URL, "/"))
	if !baseRE.MatchString(base) {
		t.Fatalf("the console's page is at %s, not under a random base path", consoleURL)
	}
	// Later the operator visits a web page.
	if err := chromedp.Do(bctx,
		chromedp.Navigate("http://"+web.Addr().String()+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#done`)),
	); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(seen, "\n")
	mu.Unlock()
	if !strings.Contains(got, "/again") {
		t.Fatalf("the browser did not come back to the local user's server same-site (saw %q): the test proves nothing", got)
	}
	if strings.Contains(got, cookieName) || strings.Contains(got, strings.Trim(base, "/")) {
		t.Errorf("the local user's server on %s was sent the console's cookie or base path:\n%s", evilURL, got)
	}
	// The operator's browser still has the console.
	if err := chromedp.Do(bctx, chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.CSS(`#allow-`+id))); err != nil {
		t.Errorf("back to the console: %v", err)
	}
}

func readToken(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// attackBrowser starts headless Chromium with a fresh profile and ends it
// at cleanup.
func attackBrowser(ctx context.Context, t *testing.T, chromium string) context.Context {
	t.Helper()
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { bcancel(); acancel() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}
