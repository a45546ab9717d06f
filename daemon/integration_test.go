package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

var h *daemontest.Harness

func TestMain(m *testing.M) {
	flag.Parse()
	if !testutil.RequiresRootM() {
		os.Exit(m.Run())
	}
	ctx := context.Background()
	var err error
	h, err = daemontest.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start daemon:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := h.Close(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "close daemon:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func policy(cmd ...string) policies.Policy {
	return policies.Policy{Label: "test", Image: daemontest.AgentImage, Command: cmd}
}

type result struct {
	id             string
	stdout, stderr string
	exit           int
	reason         string
}

// runSession creates and starts a session, waits for it, and returns its
// output. The session is removed at the end of the test.
func runSession(t *testing.T, p policies.Policy) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	id := startSession(ctx, t, p)
	var out, errb bytes.Buffer
	if err := h.Daemon.Logs(ctx, id, runtime.LogsOptions{Follow: true, Stdout: &out, Stderr: &errb}); err != nil {
		t.Fatalf("logs: %v", err)
	}
	w, err := h.Daemon.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return result{id: id, stdout: out.String(), stderr: errb.String(), exit: w.ExitCode, reason: w.Reason}
}

// startSession creates and starts a session and returns its id. The
// session is removed at the end of the test.
func startSession(ctx context.Context, t *testing.T, p policies.Policy) string {
	t.Helper()
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Daemon.Remove(context.Background(), s.ID, true); err != nil {
			t.Errorf("remove %s: %v", s.ID, err)
		}
		assertGone(t, s.ID)
	})
	return s.ID
}

// assertGone checks that nothing of a removed session is left: containerd
// objects, cgroups, the session directory and mounts.
func assertGone(t *testing.T, id string) {
	t.Helper()
	res, err := h.Daemon.Runtime().Resources(context.Background(), id)
	if err != nil {
		t.Errorf("list resources of %s: %v", id, err)
	}
	if len(res) > 0 {
		t.Errorf("session %s left containerd objects: %v", id, res)
	}
	owned, err := h.Daemon.Runtime().Owned(context.Background())
	if err != nil {
		t.Errorf("owned: %v", err)
	}
	if owned[id] {
		t.Errorf("session %s still owns a labelled container or lease", id)
	}
	for _, ctl := range []string{"memory", "pids", "cpu", ""} {
		p := filepath.Join("/sys/fs/cgroup", ctl, h.Daemon.CgroupPath(id))
		if _, err := os.Stat(p); err == nil {
			t.Errorf("session %s left cgroup %s", id, p)
		}
	}
	if _, err := os.Stat(filepath.Join(h.Root, "sessions", id)); err == nil {
		t.Errorf("session %s left its state directory", id)
	}
	mounts, err := daemontest.MountsUnder(h.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if strings.Contains(m, id) {
			t.Errorf("session %s left mount %s", id, m)
		}
	}
}

func TestRunExitCodeAndOutput(t *testing.T) {
	testutil.RequiresRoot(t)
	r := runSession(t, policy("sh", "-c", "echo out; echo err >&2; exit 7"))
	if r.exit != 7 || r.reason != "exited" {
		t.Errorf("exit = %d (%s), want 7 (exited)", r.exit, r.reason)
	}
	if r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("stdout %q stderr %q, want %q and %q", r.stdout, r.stderr, "out\n", "err\n")
	}
	evs, err := h.Daemon.Audit(t.Context(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, ev := range evs {
		if ev.Session != r.id || ev.Layer != "session" {
			t.Errorf("unexpected audit event %+v", ev)
		}
		actions = append(actions, ev.Action)
	}
	if strings.Join(actions, ",") != "started,ended" {
		t.Errorf("audit actions %v, want started,ended", actions)
	}
}

func TestHardenedSpec(t *testing.T) {
	testutil.RequiresRoot(t)
	script := `
set -u
echo "uid=$(id -u) gid=$(id -g)"
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
if touch /usr/airlock-probe 2>/dev/null; then echo rootfs=rw; else echo rootfs=ro; fi
if touch /tmp/probe 2>/dev/null; then echo tmp=rw; else echo tmp=ro; fi
echo "links=$(ls /sys/class/net | tr '\n' ' ')"
if cat /proc/kcore >/dev/null 2>&1; then echo kcore=readable; else echo kcore=masked; fi
if echo 1 > /proc/sys/kernel/panic 2>/dev/null; then echo procsys=rw; else echo procsys=ro; fi
echo "pidns_init=$(cat /proc/1/comm)"
echo "hostname=$(hostname)"
`
	r := runSession(t, policy("sh", "-c", script))
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	want := []string{
		"uid=65534 gid=65534",
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000",
		"NoNewPrivs:\t1", "Seccomp:\t2",
		"rootfs=ro", "tmp=rw", "links=lo ", "kcore=masked", "procsys=ro",
		"pidns_init=sh", "hostname=test",
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w+"\n") {
			t.Errorf("missing %q in sandbox report:\n%s", w, r.stdout)
		}
	}
}

func TestCapabilitiesFromManifest(t *testing.T) {
	testutil.RequiresRoot(t)
	p := policy("sh", "-c", "grep -E '^(CapEff|CapBnd):' /proc/self/status")
	p.Capabilities = []string{"CAP_NET_BIND_SERVICE"}
	r := runSession(t, p)
	// CAP_NET_BIND_SERVICE is bit 10.
	for _, w := range []string{"CapEff:\t0000000000000400", "CapBnd:\t0000000000000400"} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("want %q, got %q", w, r.stdout)
		}
	}
}

func TestMemoryLimitStopsHog(t *testing.T) {
	testutil.RequiresRoot(t)
	p := policy("python3", "-c", "b = bytearray(512 * 1024 * 1024); print('allocated')")
	p.Resources.Memory = 64 << 20
	r := runSession(t, p)
	if r.exit != 137 || r.reason != "oom" {
		t.Errorf("memory hog: exit %d reason %q, want 137 oom (stdout %q)", r.exit, r.reason, r.stdout)
	}
	if strings.Contains(r.stdout, "allocated") {
		t.Error("hog allocated 512MiB under a 64MiB limit")
	}
	assertDaemonServes(t)
}

func TestPidsLimitStopsForkBomb(t *testing.T) {
	testutil.RequiresRoot(t)
	// Spawn sleepers until fork fails; report how many succeeded.
	script := `
import os, errno, sys
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        n += 1
except OSError as e:
    print("fork failed after", n, errno.errorcode[e.errno]); sys.exit(0)
print("forked", n)
`
	p := policy("python3", "-c", script)
	p.Resources.Pids = 32
	p.Timeout = policies.Duration(20 * time.Second)
	r := runSession(t, p)
	if !strings.Contains(r.stdout, "fork failed after") || !strings.Contains(r.stdout, "EAGAIN") {
		t.Fatalf("fork bomb was not stopped by the pids limit: %q %q", r.stdout, r.stderr)
	}
	var n int
	fmt.Sscanf(strings.TrimPrefix(r.stdout, "fork failed after "), "%d", &n)
	if n >= 32 {
		t.Errorf("forked %d processes under a limit of 32", n)
	}
	assertDaemonServes(t)
}

func TestTimeoutKills(t *testing.T) {
	testutil.RequiresRoot(t)
	p := policy("sleep", "600")
	p.Timeout = policies.Duration(time.Second)
	start := time.Now()
	r := runSession(t, p)
	if r.reason != "timeout" || r.exit != 137 && r.exit != 143 {
		t.Errorf("exit %d reason %q, want killed by timeout", r.exit, r.reason)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("timeout took %v", d)
	}
}

func TestStopGraceThenKill(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	// The script ignores SIGTERM, so only SIGKILL after the grace ends it.
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	waitOutput(t, s.ID, "ready")
	start := time.Now()
	if _, err := h.Daemon.Stop(ctx, s.ID, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Errorf("stop returned after %v, before the grace period", d)
	}
	w, err := h.Daemon.Wait(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if w.ExitCode != 137 || w.Reason != "stopped" {
		t.Errorf("got exit %d reason %q, want 137 stopped", w.ExitCode, w.Reason)
	}
}

// A grace under a millisecond is a kill: no SIGTERM goes first (through
// runc, a process of its own, for a signal no process could act on). The
// script answers SIGTERM at once, between two builtins; before, it printed
// TERM in the moments between runc's SIGTERM and the SIGKILL.
func TestStopKillNowSendsNoTerm(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	for i := range 3 {
		s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sh", "-c", "trap 'echo TERM; exit 3' TERM; echo ready; while :; do :; done"), Start: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
		waitOutput(t, s.ID, "ready")
		if _, err := h.Daemon.Stop(ctx, s.ID, time.Nanosecond); err != nil {
			t.Fatal(err)
		}
		w, err := h.Daemon.Wait(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := h.Daemon.Logs(ctx, s.ID, runtime.LogsOptions{Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		if w.ExitCode != 137 || strings.Contains(out.String(), "TERM") {
			t.Fatalf("run %d: a stop with a 1ns grace: exit %d, output %q; want 137 and no SIGTERM handled", i, w.ExitCode, out.String())
		}
	}
}

func TestExecWithStdin(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	var out, errb bytes.Buffer
	code, err := h.Daemon.Exec(ctx, s.ID, runtime.ExecOptions{
		Args:   []string{"sh", "-c", "tr a-z A-Z; id -u >&2; exit 3"},
		Stdin:  strings.NewReader("hello\n"),
		Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || out.String() != "HELLO\n" || errb.String() != "65534\n" {
		t.Errorf("exec: code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	if err := h.Daemon.Remove(ctx, s.ID, false); err == nil {
		t.Error("removing a running session without force succeeded")
	}
}

func waitOutput(t *testing.T, id, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var out bytes.Buffer
		if err := h.Daemon.Logs(t.Context(), id, runtime.LogsOptions{Stdout: &out}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), want) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("session %s never printed %q", id, want)
}

func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", h.Socket)
	}}}
}

func assertDaemonServes(t *testing.T) {
	t.Helper()
	resp, err := httpClient().Get("http://airlock/v1/version")
	if err != nil {
		t.Fatalf("daemon does not answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("version: %s", resp.Status)
	}
}

func TestAPIErrors(t *testing.T) {
	testutil.RequiresRoot(t)
	before := len(h.Daemon.List(t.Context()))
	cases := []struct {
		name, method, path, body string
		status                   int
		class, contains          string
	}{
		{"malformed json", "POST", "/v1/sessions", `{"policy": `, 400, api.ClassInvalidArgument, "request body"},
		{"unknown field", "POST", "/v1/sessions", `{"policy": {"image": "x"}, "bogus": 1}`, 400, api.ClassInvalidArgument, "bogus"},
		{"invalid policy", "POST", "/v1/sessions", `{"policy": {"label": "x", "image": "", "command": ["true"], "workspaces": [{"host_path": "/tmp", "target": "rel", "mode": "overlayy"}]}}`, 400, api.ClassInvalidArgument, "invalid policy"},
		{"unknown image", "POST", "/v1/sessions", `{"policy": {"label": "x", "image": "nope/nope:1", "command": ["true"]}}`, 404, api.ClassNotFound, "nope/nope:1"},
		{"unknown session", "GET", "/v1/sessions/0123456789ab", "", 404, api.ClassNotFound, "0123456789ab"},
		{"bad id", "GET", "/v1/sessions/..%2f..%2fetc", "", 400, api.ClassInvalidArgument, "not valid"},
		{"bad bool", "DELETE", "/v1/sessions/0123456789ab?force=maybe", "", 400, api.ClassInvalidArgument, "force"},
		{"no route", "GET", "/v2/nothing", "", 404, api.ClassNotFound, "no route"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, "http://airlock"+tc.path, strings.NewReader(tc.body))
			resp, err := httpClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
			var eb api.ErrorBody
			if err := json.Unmarshal(b, &eb); err != nil {
				t.Fatalf("error body %q: %v", b, err)
			}
			msg := eb.Error.Message + strings.Join(eb.Error.Details, ";")
			if eb.Error.Class != tc.class || !strings.Contains(msg, tc.contains) {
				t.Errorf("got %+v, want class %s containing %q", eb.Error, tc.class, tc.contains)
			}
		})
	}
	if after := len(h.Daemon.List(t.Context())); after != before {
		t.Errorf("bad requests changed the session count: %d -> %d", before, after)
	}
}

func TestMissingCommand(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	before := len(h.Daemon.List(ctx))
	_, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("no-such-program"), Start: true})
	status, detail := httpapi.ErrorDetail(err)
	if status != http.StatusBadRequest || !strings.Contains(detail.Message, "no-such-program") {
		t.Errorf("run of a missing program: %d %+v, want 400 naming the program", status, detail)
	}
	if after := len(h.Daemon.List(ctx)); after != before {
		t.Errorf("a failed start left a session: %d -> %d", before, after)
	}

	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	out, code := execOut(t, s.ID, "no-such-program", "x")
	if code != 127 || !strings.Contains(out, "command not found") {
		t.Errorf("exec of a missing program: exit %d %q, want 127 command not found", code, out)
	}
}

// TestExecStdinLeftOpen: a process that exits while the client still holds
// its stdin open ends the exec cleanly, and the client's next requests work.
func TestExecStdinLeftOpen(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := api.NewClient(h.Socket)
	s, err := c.CreateSession(ctx, api.CreateRequest{Policy: policy("sleep", "300"), Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	for i := 0; i < 3; i++ {
		pr, pw := io.Pipe()
		var out bytes.Buffer
		code, err := c.Exec(ctx, s.ID, api.ExecRequest{Command: []string{"sh", "-c", "echo hi; exit 5"}, Stdin: true}, pr, &out, io.Discard)
		pw.Close()
		if err != nil || code != 5 || out.String() != "hi\n" {
			t.Fatalf("exec %d with stdin left open: code %d out %q err %v", i, code, out.String(), err)
		}
		if _, err := c.InspectSession(ctx, s.ID); err != nil {
			t.Fatalf("request after exec %d: %v", i, err)
		}
	}
}
