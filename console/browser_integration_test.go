package console_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/console"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// hostileName is a file name the sandbox writes: markup and a script
// handler that must reach the page as text.
const hostileName = `<img src=x onerror=document.title='owned'>.txt`

// TestConsoleInChromium runs airlockd with --console-listen on loopback and
// drives its console in headless Chromium: a session's HTTP request held
// by an ask rule is allowed by clicking, and the session's request then
// completes; another session's diff is reviewed in the page (its files
// shown, a file name of markup shown inert) and committed by clicking,
// which changes the host's file. Screenshots go to the directory the log
// names.
func TestConsoleInChromium(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: apt-get install chromium (hack/install-deps.sh installs it; make test runs it)")
	}
	shots := screenshotDir(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	root, err := os.MkdirTemp("/tmp", "alw-")
	if err != nil {
		t.Fatal(err)
	}
	w, err := world.Start(ctx, world.Config{Prefix: "c" + runtime.Prefix(root)[2:]})
	if err != nil {
		os.RemoveAll(root)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("world: %v", err)
		}
		if err := mountinfo.UnmountAll(root); err != nil {
			t.Errorf("unmount %s: %v", root, err)
		}
		if err := os.RemoveAll(root); err != nil {
			t.Errorf("remove %s: %v", root, err)
		}
	})

	// The service a session calls; POST /deploy/** is held for approval.
	var mu sync.Mutex
	var saw []string
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		saw = append(saw, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		io.WriteString(rw, "deployed")
	})
	if err := w.AddHost("api.console.test", w.Net().Addr().Next().Next().Next().Next(), world.WithHandler(svc)); err != nil {
		t.Fatal(err)
	}

	d := startAirlockd(t, env, root, w)
	cl := api.NewClient(d.socket)
	defer cl.Close()

	// A session whose changes wait for review.
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("before\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dp := policies.Policy{Label: "review", Image: daemontest.AgentImage, Command: []string{"sh", "-c",
		`echo after > /workspace/hello.txt && echo markup > "/workspace/` + hostileName + `"`}}
	dp.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/workspace", Mode: policies.ModeOverlay, OnExit: policies.OnExitReview}}
	ds := create(ctx, t, cl, dp)
	if wr, err := cl.WaitSession(ctx, ds.ID); err != nil || wr.ExitCode != 0 {
		t.Fatalf("review session: %+v, %v", wr, err)
	}

	// A session whose request is held until someone decides.
	ap := policies.Policy{Label: "deploy", Image: daemontest.AgentImage, Command: []string{"sh", "-c",
		`curl -sS --max-time 300 -w ' %{http_code}' --data-raw 'names=billing-api' http://api.console.test/deploy/prod`}}
	ap.Egress = &policies.Egress{Allow: []string{"api.console.test:80"}, L7: policies.L7Check,
		HTTP: []policies.HTTPHost{{Host: "api.console.test", Rules: []policies.HTTPRule{
			{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk}}}}}
	ap.Approval = &policies.Approval{Timeout: policies.Duration(5 * time.Minute), OnTimeout: policies.OnTimeoutDeny}
	as := create(ctx, t, cl, ap)
	held := waitHeld(ctx, t, cl, as.ID)

	// The browser.
	bctx := browser(ctx, t, chromium)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	tok, err := os.ReadFile(filepath.Join(root, console.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}

	// Log in with the token, which the console takes off the address.
	allow := chromedp.CSS(`#allow-` + held.ID)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(d.url+"?token="+strings.TrimSpace(string(tok))),
		chromedp.WaitVisible(allow),
	); err != nil {
		t.Fatalf("open the console: %v", err)
	}
	// The token is off the address bar; the pages live under the
	// console's random base path, the login cookie's path.
	loc, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil || strings.Contains(loc, "token") || !strings.HasPrefix(loc, d.url+"c/") {
		t.Fatalf("the address bar shows %q (%v) after login, want %sc/RANDOM/", loc, err, d.url)
	}
	base := loc
	row := text(`#approval-` + held.ID)
	if !strings.Contains(row, "POST api.console.test/deploy/prod") || !strings.Contains(row, "names=billing-api") {
		t.Errorf("the held request's row reads %q; want its method, host, path and body", row)
	}
	shot("1-held-request.png")

	// Allow it, with a reason, by clicking.
	if err := chromedp.Do(bctx,
		chromedp.SendKeys(chromedp.CSS(`#approval-`+held.ID+` input[name=reason]`), "release approved in the console"),
		chromedp.Click(allow),
		chromedp.WaitNotPresent(allow),
		chromedp.WaitVisible(chromedp.CSS(`table.sessions`)),
	); err != nil {
		t.Fatalf("allow: %v", err)
	}
	shot("2-after-allow.png")
	wr, err := cl.WaitSession(ctx, as.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if err := cl.Logs(ctx, as.ID, api.LogsOptions{}, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if wr.ExitCode != 0 || out.String() != "deployed 200" {
		t.Errorf("the held request, once allowed: exit %d, stdout %q, stderr %q; want the service's answer", wr.ExitCode, out.String(), errb.String())
	}
	mu.Lock()
	if strings.Join(saw, "|") != "POST /deploy/prod names=billing-api" {
		t.Errorf("the service saw %q", saw)
	}
	mu.Unlock()
	evs, err := cl.Audit(ctx, as.ID)
	if err != nil {
		t.Fatal(err)
	}
	decided := false
	for _, ev := range evs {
		if ev.Layer == "approval" && ev.Action == "allowed" {
			decided = ev.Fields["by"] == console.By && ev.Reason == "release approved in the console"
		}
	}
	if !decided {
		t.Errorf("no approval/allowed event by %q with the reason in the audit: %+v", console.By, evs)
	}
	// The session's page shows the decision in its audit timeline.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"sessions/"+as.ID),
		chromedp.WaitVisible(chromedp.CSS(`#audit`)),
	); err != nil {
		t.Fatal(err)
	}
	if audit := text(`#audit`); !strings.Contains(audit, "allowed") || !strings.Contains(audit, `by="console"`) {
		t.Errorf("the audit timeline reads %q; want the decision by the console", audit)
	}
	shot("3-audit.png")

	// Review the diff in the page, then commit it by clicking.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"sessions/"+ds.ID),
		chromedp.WaitVisible(chromedp.CSS(`#diff`)),
	); err != nil {
		t.Fatalf("review: %v", err)
	}
	changes, diff := text(`table.changes`), text(`#diff`)
	if !strings.Contains(changes, "hello.txt") || !strings.Contains(changes, hostileName) {
		t.Errorf("the change list reads %q; want hello.txt and the markup file's name as text", changes)
	}
	if !strings.Contains(diff, "-before") || !strings.Contains(diff, "+after") || !strings.Contains(diff, hostileName) {
		t.Errorf("the diff reads %q; want hello.txt's change and the markup file", diff)
	}
	imgs, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))
	if err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(bctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if imgs != 0 || strings.Contains(title, "owned") {
		t.Errorf("the sandbox's file name became markup: %d img elements, title %q", imgs, title)
	}
	shot("4-diff.png")
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`#commit`)),
		chromedp.WaitVisible(chromedp.CSS(`#committed`)),
	); err != nil {
		t.Fatalf("commit: %v", err)
	}
	shot("5-committed.png")
	if b, err := os.ReadFile(filepath.Join(ws, "hello.txt")); err != nil || string(b) != "after\n" {
		t.Errorf("host hello.txt after the commit: %q, %v; want the session's", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, hostileName)); err != nil || string(b) != "markup\n" {
		t.Errorf("host %s after the commit: %q, %v", hostileName, b, err)
	}
}

// screenshotDir is $AIRLOCK_TEST_ARTIFACTS/console-NAME, or a directory
// under the system's temporary directory, kept after the test.
func screenshotDir(t *testing.T) string {
	t.Helper()
	var dir string
	var err error
	if a := os.Getenv("AIRLOCK_TEST_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "console-"+t.Name())
		err = os.MkdirAll(dir, 0o755)
	} else {
		dir, err = os.MkdirTemp("", "airlock-console-screenshots-")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots go to %s", dir)
	return dir
}

type airlockd struct {
	socket string
	url    string
}

var consoleURL = regexp.MustCompile(`msg="serving console" .*url=(http://\S+/)`)

// startAirlockd runs the airlockd binary with the world as its uplink and
// a console on loopback, and stops it (and its containerd) at cleanup.
func startAirlockd(t *testing.T, env daemontest.Env, root string, w *world.World) *airlockd {
	t.Helper()
	d := &airlockd{socket: filepath.Join(root, "airlock.sock")}
	cmd := exec.Command(filepath.Join(env.BinDir, "airlockd"), "--root", root, "--socket", d.socket,
		"--bin-dir", env.BinDir, "--stop-containerd", "--image", env.AgentImage,
		"--uplink", "netns:"+w.NetnsName(), "--dns-upstream", w.DNSAddr().String(), "--allow-private", w.Net().String(),
		"--console-listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := consoleURL.FindStringSubmatch(line); m != nil {
				urls <- m[1]
			}
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "console") {
				t.Logf("airlockd: %s", line)
			}
		}
	}()
	ctrd := filepath.Join(root, "containerd")
	t.Cleanup(func() {
		ctx := context.Background()
		cl := api.NewClient(d.socket)
		if ss, err := cl.ListSessions(ctx); err == nil {
			for _, s := range ss {
				if err := cl.RemoveSession(ctx, s.ID, true); err != nil {
					t.Errorf("remove session %s: %v", s.ID, err)
				}
			}
		}
		cl.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("airlockd: %v", err)
		}
		<-logged
		if _, err := os.Stat(filepath.Join(root, console.TokenFileName)); !os.IsNotExist(err) {
			t.Errorf("the generated token file is left after airlockd stopped: %v", err)
		}
		// After a failure half-way: no shim anchor, no containerd.
		daemontest.RemoveAnchor(ctx, runtime.Embedded{Dir: ctrd}.Address())
		_ = (&runtime.Embedded{Dir: ctrd}).Stop(ctx, 10*time.Second)
	})
	select {
	case d.url = <-urls:
	case <-logged:
		t.Fatal("airlockd exited before serving its console")
	case <-time.After(3 * time.Minute):
		t.Fatal("airlockd did not serve its console within 3 minutes")
	}
	cl := api.NewClient(d.socket)
	defer cl.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if _, err := cl.Version(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("airlockd's API: %v", err)
		}
	}
	return d
}

func create(ctx context.Context, t *testing.T, cl *api.Client, p policies.Policy) *api.Session {
	t.Helper()
	s, err := cl.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatalf("create %s: %v", p.Label, err)
	}
	return s
}

// waitHeld waits for the session's request to be held.
func waitHeld(ctx context.Context, t *testing.T, cl *api.Client, session string) api.Approval {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, err := cl.ListApprovals(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		if len(l) > 0 {
			return l[0]
		}
	}
	t.Fatal("the session's request was not held within 2 minutes")
	return api.Approval{}
}

// browser starts headless Chromium with a fresh profile; at cleanup it
// ends it and checks that no process of it is left.
func browser(ctx context.Context, t *testing.T, chromium string) context.Context {
	t.Helper()
	profile := t.TempDir()
	actx, acancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
	)
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		bcancel()
		acancel()
		// Every process of this browser names its profile.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			left := processesNaming(profile)
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Errorf("chromium processes left after the browser closed: %v", left)
				return
			}
		}
	})
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// processesNaming lists the processes whose command line holds s.
func processesNaming(s string) []int {
	var pids []int
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
