package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// procDaemon is airlockd running as a child process, so the test can kill -9 it.
type procDaemon struct {
	t      *testing.T
	root   string
	socket string
	cmd    *exec.Cmd
	http   *http.Client
}

func startProcDaemon(t *testing.T, root string, extra ...string) *procDaemon {
	t.Helper()
	env := h.Env
	p := &procDaemon{t: t, root: root, socket: filepath.Join(root, "airlock.sock")}
	args := append([]string{"--root", root, "--socket", p.socket, "--bin-dir", env.BinDir, "--runtime", env.Runtime, "--log-level", "warn"}, extra...)
	p.cmd = exec.Command(filepath.Join(env.BinDir, "airlockd"), args...)
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.http = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p.socket)
	}}}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := p.http.Get("http://airlock/v1/version"); err == nil {
			resp.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			p.cmd.Process.Kill()
			t.Fatal("airlockd did not come up")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *procDaemon) do(method, path string, body io.Reader, out any) int {
	p.t.Helper()
	req, _ := http.NewRequest(method, "http://airlock"+path, body)
	resp, err := p.http.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		p.t.Fatalf("%s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func (p *procDaemon) create(start bool, cmd ...string) api.Session {
	b, _ := json.Marshal(api.CreateRequest{Policy: policy(cmd...), Start: start})
	var s api.Session
	p.do("POST", "/v1/sessions", bytes.NewReader(b), &s)
	return s
}

func (p *procDaemon) inspect(id string) api.Session {
	var s api.Session
	p.do("GET", "/v1/sessions/"+id, nil, &s)
	return s
}

func TestKill9RestartReadoptsAndLeavesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	root, err := os.MkdirTemp("/tmp", "alc-")
	if err != nil {
		t.Fatal(err)
	}
	ctrdSock := filepath.Join(root, "containerd", "containerd.sock")
	t.Cleanup(func() {
		// A test that failed half-way leaves the shim anchor behind.
		daemontest.RemoveAnchor(context.Background(), ctrdSock)
		_ = (&runtime.Embedded{Dir: filepath.Join(root, "containerd")}).Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})

	// d1 also keeps a warm pool of two prepared sandboxes.
	poolFile := filepath.Join(t.TempDir(), "pool.hcl")
	if err := os.WriteFile(poolFile, []byte(`session "warm" {
  image   = "`+daemontest.AgentImage+`"
  command = ["true"]
  pool {
    size = 2
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	d1 := startProcDaemon(t, root, "--pool", poolFile)
	f, err := os.Open(h.Env.AgentImage)
	if err != nil {
		t.Fatal(err)
	}
	d1.do("POST", "/v1/images/import?name="+daemontest.AgentImage, f, nil)
	f.Close()

	long := d1.create(true, "sleep", "300")
	// A session with an overlay workspace, mid-work when the daemon dies.
	wsHost := t.TempDir()
	if err := os.WriteFile(filepath.Join(wsHost, "a.txt"), []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wsPolicy := policy("sh", "-c", "echo new > /w/b.txt; sleep 300")
	wsPolicy.Workspaces = []policies.Workspace{{HostPath: wsHost, Target: "/w", Mode: policies.ModeOverlay,
		DefaultDenyRead: true, OnExit: policies.OnExitReview}}
	b, _ := json.Marshal(api.CreateRequest{Policy: wsPolicy, Start: true})
	var ws api.Session
	d1.do("POST", "/v1/sessions", bytes.NewReader(b), &ws)
	short := d1.create(true, "sh", "-c", "sleep 1; exit 3")
	idle := d1.create(false, "sh", "-c", "echo started after restart")
	var pooled []string
	for deadline := time.Now().Add(60 * time.Second); ; {
		var pools []api.Pool
		d1.do("GET", "/v1/pools", nil, &pools)
		if len(pools) == 1 && pools[0].Ready == 2 {
			pooled = pools[0].ReadyIDs
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not filled: %+v", pools)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// kill -9: no chance to clean up or record anything.
	if err := d1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d1.cmd.Wait()

	// While the daemon is down: the short session exits, a create is left
	// half-done, and containerd holds objects of a session nobody recorded.
	half := filepath.Join(root, "sessions", "halfdone0001")
	if err := os.MkdirAll(half, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "session.json"), []byte(`{"id":"halfdone0001","state":"creating"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// A session whose exit the dead daemon had seen and persisted, and whose
	// task it had deleted, before it could record the session as stopped.
	seen := filepath.Join(root, "sessions", "exitseen0001")
	if err := os.MkdirAll(seen, 0o700); err != nil {
		t.Fatal(err)
	}
	seenRec, _ := json.Marshal(map[string]any{
		"id": "exitseen0001", "label": "test", "state": api.StateRunning, "created": time.Now().UTC(),
		"policy": policy("sh", "-c", "exit 7"),
		"exited": map[string]any{"code": 7, "at": time.Now().UTC()},
	})
	if err := os.WriteFile(filepath.Join(seen, "session.json"), seenRec, 0o600); err != nil {
		t.Fatal(err)
	}
	cc, err := containerd.New(ctrdSock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	nctx := namespaces.WithNamespace(context.Background(), "airlock")
	for _, id := range []string{"halfdone0001", "orphan000001"} {
		if _, err := cc.LeasesService().Create(nctx, leases.WithID(id), leases.WithLabel(runtime.LabelSession, id)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second)

	d2 := startProcDaemon(t, root, "--stop-containerd")
	if s := d2.inspect(long.ID); s.State != api.StateRunning {
		t.Errorf("long session after restart: %s, want running", s.State)
	}
	s := d2.inspect(short.ID)
	if s.State != api.StateStopped || s.ExitCode == nil || *s.ExitCode != 3 {
		t.Errorf("short session after restart: %s exit %v, want stopped with 3", s.State, s.ExitCode)
	}
	// Its end is recorded as a live one is: one "ended" event with its
	// exit code.
	var shortAudit []api.AuditEvent
	d2.do("GET", "/v1/sessions/"+short.ID+"/audit", nil, &shortAudit)
	var ended []api.AuditEvent
	for _, ev := range shortAudit {
		if ev.Layer == "session" && ev.Action == "ended" {
			ended = append(ended, ev)
		}
	}
	if len(ended) != 1 || ended[0].Reason != "exited" || fmt.Sprint(ended[0].Fields["exit_code"]) != "3" {
		t.Errorf("audit of the session that ended while the daemon was down: ended events %+v, want one, exited, exit_code 3", ended)
	}
	if s := d2.inspect("exitseen0001"); s.State != api.StateStopped || s.ExitCode == nil || *s.ExitCode != 7 || s.Reason != "exited" {
		t.Errorf("session whose exit was persisted before its task was deleted: %s reason %q exit %v, want stopped, exited, 7", s.State, s.Reason, s.ExitCode)
	}
	if s := d2.inspect(idle.ID); s.State != api.StateCreated {
		t.Errorf("idle session after restart: %s, want created", s.State)
	}
	// The sandboxes the dead daemon had prepared for its pool are gone.
	for _, id := range pooled {
		if _, err := os.Stat(filepath.Join(root, "sessions", id)); err == nil {
			t.Errorf("pooled sandbox %s survived the restart", id)
		}
		if _, err := cc.LoadContainer(nctx, id); err == nil {
			t.Errorf("container of pooled sandbox %s survived the restart", id)
		}
	}
	// A session created before the crash starts under the new daemon.
	d2.do("POST", "/v1/sessions/"+idle.ID+"/start", nil, nil)
	var iw api.WaitResponse
	d2.do("GET", "/v1/sessions/"+idle.ID+"/wait", nil, &iw)
	var logs bytes.Buffer
	{
		resp, err := d2.http.Get("http://airlock/v1/sessions/" + idle.ID + "/logs?stdout=1")
		if err != nil {
			t.Fatal(err)
		}
		for {
			_, payload, err := api.ReadFrame(resp.Body)
			if err != nil {
				break
			}
			logs.Write(payload)
		}
		resp.Body.Close()
	}
	if iw.ExitCode != 0 || !bytes.Contains(logs.Bytes(), []byte("started after restart")) {
		t.Errorf("session created before the crash, started after: exit %d, output %q", iw.ExitCode, logs.String())
	}
	var list []api.Session
	d2.do("GET", "/v1/sessions", nil, &list)
	if len(list) != 5 {
		t.Errorf("%d sessions after restart, want 5", len(list))
	}
	if s := d2.inspect(ws.ID); s.State != api.StateRunning {
		t.Errorf("workspace session after restart: %s, want running", s.State)
	}
	d2.do("POST", "/v1/sessions/"+ws.ID+"/stop", bytes.NewReader([]byte(`{"grace":"100ms"}`)), nil)
	d2.do("GET", "/v1/sessions/"+ws.ID+"/wait", nil, nil)
	var cs api.ChangeSet
	d2.do("GET", "/v1/sessions/"+ws.ID+"/diff", nil, &cs)
	if len(cs.Workspaces) != 1 || len(cs.Workspaces[0].Changes) != 1 || cs.Workspaces[0].Changes[0].Path != "b.txt" {
		t.Errorf("diff of the re-adopted workspace session: %+v", cs)
	}
	if _, err := os.Stat(filepath.Join(wsHost, "b.txt")); err == nil {
		t.Error("the host workspace changed before commit")
	}
	ls, err := cc.LeasesService().List(nctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.ID == "orphan000001" || l.ID == "halfdone0001" {
			t.Errorf("lease %s of an unrecorded session survived the restart", l.ID)
		}
	}
	if _, err := os.Stat(half); err == nil {
		t.Error("half-created session directory survived the restart")
	}

	// The re-adopted session is still controlled: stop it, then remove all.
	var stopped api.Session
	d2.do("POST", "/v1/sessions/"+long.ID+"/stop", bytes.NewReader([]byte(`{"grace":"100ms"}`)), &stopped)
	var w api.WaitResponse
	d2.do("GET", "/v1/sessions/"+long.ID+"/wait", nil, &w)
	if w.Reason != "stopped" {
		t.Errorf("re-adopted session ended with %+v, want stopped", w)
	}
	for _, id := range []string{long.ID, short.ID, idle.ID, ws.ID, "exitseen0001"} {
		if code := d2.do("DELETE", "/v1/sessions/"+id+"?force=true", nil, nil); code != http.StatusNoContent {
			t.Errorf("remove %s: %d", id, code)
		}
	}

	// Nothing left: containerd objects, cgroups, mounts, session state.
	// The shim anchor is the daemon's own, not a session's.
	ctrs, _ := cc.Containers(nctx, fmt.Sprintf("labels.%q", runtime.LabelSession))
	if anchors, _ := cc.Containers(nctx, fmt.Sprintf("labels.%q", runtime.LabelAnchor)); len(anchors) != 1 {
		t.Errorf("%d shim anchors while the daemon runs, want 1", len(anchors))
	}
	ls, _ = cc.LeasesService().List(nctx)
	var snaps []string
	_ = cc.SnapshotService("overlayfs").Walk(nctx, func(_ context.Context, i snapshots.Info) error {
		if i.Kind != snapshots.KindCommitted {
			snaps = append(snaps, i.Name)
		}
		return nil
	})
	if len(ctrs) != 0 || len(ls) != 0 || len(snaps) != 0 {
		t.Errorf("left behind: %d containers, %d leases, active snapshots %v", len(ctrs), len(ls), snaps)
	}
	prefix := runtime.Prefix(root)
	for _, ctl := range []string{"memory", "pids", "cpu", "cpuacct", "unified"} {
		p := filepath.Join("/sys/fs/cgroup", ctl, "airlock-"+prefix)
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup %s left behind", p)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("session directories left: %d", len(entries))
	}
	if m, _ := daemontest.MountsUnder(root); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}

	// SIGTERM with --stop-containerd: the daemon and its containerd exit.
	if err := d2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d2.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlockd exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		d2.cmd.Process.Kill()
		t.Fatal("airlockd did not exit on SIGTERM")
	}
	if _, err := os.Stat(ctrdSock); err == nil {
		t.Errorf("containerd socket %s still exists after --stop-containerd", ctrdSock)
	}
	// With no session left, the anchor and the shared shim went too.
	if shims := daemontest.ShimProcesses(ctrdSock); len(shims) > 0 {
		t.Errorf("runc shims left after airlockd stopped with no session: %v", shims)
	}
}

// TestStartedButRecordedCreated: airlockd killed after it handed a
// created session's command over (the sandbox runs it) and before it
// recorded the session as running. The next daemon finds it started, as
// the sandbox is: running, stoppable, its exit recorded;
// a start asked again (the client never heard the answer) is refused as
// the session is running, not failed for a launch directory that is gone.
// Both windows: after the launch cleaned its FIFOs, and before.
func TestStartedButRecordedCreated(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	for _, cleaned := range []bool{true, false} {
		s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sh", "-c", "echo started > /tmp/started; sleep 300")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
		// What the killed daemon's start did, but for recording it.
		ld := launch.Open(filepath.Join(h.Root, "sessions", s.ID, "init"))
		if err := ld.Launch(ctx, launch.Message{Args: []string{"sh", "-c", "echo started > /tmp/started; sleep 300"}, Env: []string{"PATH=/usr/bin:/bin"}}); err != nil {
			t.Fatal(err)
		}
		if cleaned {
			if err := ld.Clean(); err != nil {
				t.Fatal(err)
			}
		} else {
			ld.Close()
			// The command makes itself look unstarted: airlock-init
			// again, as its init. The record says a launch was under
			// way, and that decides.
			rec := filepath.Join(h.Root, "sessions", s.ID, "session.json")
			b, err := os.ReadFile(rec)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(rec, bytes.Replace(b, []byte(`"state":`), []byte(`"launching":true,"state":`), 1), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := h.Daemon.Inspect(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != api.StateRunning || got.Started == nil || got.Pid == 0 {
			t.Errorf("cleaned=%v: after the restart the session is %s (started %v, pid %d), want running", cleaned, got.State, got.Started, got.Pid)
		}
		if _, err := h.Daemon.Start(ctx, s.ID); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "running") {
			t.Errorf("cleaned=%v: start again: %v, want refused: the session is running", cleaned, err)
		}
		if out, code := execOut(t, s.ID, "cat", "/tmp/started"); code != 0 || strings.TrimSpace(out) != "started" {
			t.Errorf("cleaned=%v: the command did not run: %q (exit %d)", cleaned, out, code)
		}
		if _, err := h.Daemon.Stop(ctx, s.ID, time.Second); err != nil {
			t.Fatal(err)
		}
		wr, err := h.Daemon.Wait(ctx, s.ID)
		if err != nil || wr.ExitCode != 137 && wr.ExitCode != 143 {
			t.Errorf("cleaned=%v: wait after stop: %+v %v", cleaned, wr, err)
		}
	}
}
