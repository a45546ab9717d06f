package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestContainerdKilledSessionsSurvive: kill -9 of the embedded containerd
// while sessions run. The sandboxes keep running under their shim, so the
// daemon must keep reporting them running (never a made-up exit), restart
// containerd, wait on them again, recover the exit code of one that ended
// while containerd was down, and still control and remove everything,
// leaving nothing behind.
func TestContainerdKilledSessionsSurvive(t *testing.T) {
	d, root, ctrd := startFaultDaemon(t)
	ctrdSock := ctrd.Address()

	long := d.create(true, "sleep", "300")
	// Ends while containerd is down: its exit code must be recovered.
	during := d.create(true, "sh", "-c", "sleep 4; exit 5")
	wsHost := t.TempDir()
	wsPolicy := policy("sh", "-c", "echo one > /w/a.txt; sleep 4; echo two > /w/b.txt; sleep 300")
	wsPolicy.Workspaces = []policies.Workspace{{HostPath: wsHost, Target: "/w", Mode: policies.ModeOverlay,
		DefaultDenyRead: true, OnExit: policies.OnExitReview}}
	b, _ := json.Marshal(api.CreateRequest{Policy: wsPolicy, Start: true})
	var ws api.Session
	d.do("POST", "/v1/sessions", bytes.NewReader(b), &ws)
	ids := []string{long.ID, during.ID, ws.ID}

	pid, err := os.ReadFile(ctrd.PidFile())
	if err != nil {
		t.Fatal(err)
	}
	oldPid, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(oldPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	// While containerd is down and comes back, no session is reported
	// ended: their sandboxes run on.
	for time.Since(killed) < 2*time.Second {
		for _, id := range []string{long.ID, ws.ID} {
			if s := d.inspect(id); s.State != api.StateRunning {
				t.Fatalf("%.1fs after containerd was killed, session %s is %s (exit %v, %s), want running", time.Since(killed).Seconds(), id, s.State, s.ExitCode, s.Reason)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	// The daemon restarts containerd.
	var newPid int
	for deadline := time.Now().Add(30 * time.Second); ; {
		if b, err := os.ReadFile(ctrd.PidFile()); err == nil {
			newPid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if newPid != 0 && newPid != oldPid && syscall.Kill(newPid, 0) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd was not restarted within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Until the daemon reaches the new containerd, inspect says so and
	// lists no resources; after, it lists them again.
	for deadline := time.Now().Add(60 * time.Second); ; {
		s := d.inspect(long.ID)
		if len(s.Warnings) == 0 && len(s.Resources) > 0 {
			break
		}
		if len(s.Warnings) > 0 && !strings.Contains(s.Warnings[0], "containerd unavailable, retrying") {
			t.Errorf("inspect while containerd restarts: warnings %q", s.Warnings)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not reach the restarted containerd within 60s: %+v", s)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// The session that ended meanwhile is stopped with its own exit code.
	var w api.WaitResponse
	d.do("GET", "/v1/sessions/"+during.ID+"/wait", nil, &w)
	if w.ExitCode != 5 || w.Reason != "exited" {
		t.Errorf("session that ended while containerd was down: %+v, want exit 5, exited", w)
	}
	if s := d.inspect(long.ID); s.State != api.StateRunning {
		t.Errorf("long session after containerd came back: %s, want running", s.State)
	}
	// Still controlled: a stop reaches the re-waited sandbox, and the
	// workspace holds both files, the second written after the kill.
	time.Sleep(time.Until(killed.Add(5 * time.Second)))
	d.do("POST", "/v1/sessions/"+ws.ID+"/stop", bytes.NewReader([]byte(`{"grace":"100ms"}`)), nil)
	d.do("GET", "/v1/sessions/"+ws.ID+"/wait", nil, &w)
	if w.Reason != "stopped" {
		t.Errorf("workspace session stopped after containerd came back: %+v, want stopped", w)
	}
	var cs api.ChangeSet
	d.do("GET", "/v1/sessions/"+ws.ID+"/diff", nil, &cs)
	var paths []string
	for _, c := range cs.Workspaces[0].Changes {
		paths = append(paths, c.Path)
	}
	if fmt.Sprint(paths) != "[a.txt b.txt]" {
		t.Errorf("workspace changes after containerd came back: %v, want a.txt and b.txt", paths)
	}
	for _, id := range ids {
		if code := d.do("DELETE", "/v1/sessions/"+id+"?force=true", nil, nil); code != 204 {
			t.Errorf("remove %s: %d", id, code)
		}
	}

	// Nothing left of any session, in containerd or on the host.
	if ctrs, ls := sessionObjects(t, ctrdSock); ctrs != 0 || ls != 0 {
		t.Errorf("left in containerd: %d containers, %d leases", ctrs, ls)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("airlockd exit after SIGTERM: %v", err)
	}
	if shims := shimsAfter(ctrdSock, 10*time.Second); len(shims) > 0 {
		t.Errorf("shims left after airlockd stopped: %v", shims)
	}
	for _, pid := range []int{oldPid, newPid} {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") && strings.Contains(string(b), "(containerd)") {
			t.Errorf("containerd %d is still running after --stop-containerd", pid)
		}
	}
	wantNothingLeft(t, root)
}

// TestShimKilledSessionsEnd: kill -9 of the shared shim ends every session
// it served. Each is reported stopped with reason "shim-lost" (not a made-up
// exit code), the shim anchor is replaced, and new sessions start.
func TestShimKilledSessionsEnd(t *testing.T) {
	d, root, ctrd := startFaultDaemon(t)
	ctrdSock := ctrd.Address()

	a := d.create(true, "sleep", "300")
	b := d.create(true, "sleep", "300")
	shims := daemontest.ShimProcesses(ctrdSock)
	if len(shims) != 1 {
		t.Fatalf("shims serving the daemon: %v, want the one shared shim", shims)
	}
	pid, _ := strconv.Atoi(strings.Fields(shims[0])[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, s := range []api.Session{a, b} {
		var w api.WaitResponse
		d.do("GET", "/v1/sessions/"+s.ID+"/wait", nil, &w)
		if w.Reason != "shim-lost" {
			t.Errorf("session %s after its shim was killed: %+v, want reason shim-lost", s.ID, w)
		}
	}
	// A new session starts (on a new shim, kept by a new anchor) and runs.
	c := d.create(true, "sh", "-c", "exit 4")
	var w api.WaitResponse
	d.do("GET", "/v1/sessions/"+c.ID+"/wait", nil, &w)
	if w.ExitCode != 4 || w.Reason != "exited" {
		t.Errorf("session started after the shim was killed: %+v, want exit 4", w)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if shims := daemontest.ShimProcesses(ctrdSock); len(shims) == 1 && !strings.HasPrefix(shims[0], strconv.Itoa(pid)+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new shared shim kept by the anchor: %v", daemontest.ShimProcesses(ctrdSock))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range []api.Session{a, b, c} {
		if code := d.do("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil, nil); code != 204 {
			t.Errorf("remove %s: %d", s.ID, code)
		}
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("airlockd exit after SIGTERM: %v", err)
	}
	if shims := shimsAfter(ctrdSock, 10*time.Second); len(shims) > 0 {
		t.Errorf("shims left after airlockd stopped: %v", shims)
	}
	wantNothingLeft(t, root)
}

// cleanup removes every session of a daemon a failed test left running,
// then stops it (with its containerd, when started so), so that nothing of
// the test outlives it.
func (p *procDaemon) cleanup() {
	if p.cmd.ProcessState != nil {
		return
	}
	if resp, err := p.http.Get("http://airlock/v1/sessions"); err == nil {
		var list []api.Session
		_ = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		for _, s := range list {
			req, _ := http.NewRequest("DELETE", "http://airlock/v1/sessions/"+s.ID+"?force=true", nil)
			if resp, err := p.http.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// shimsAfter waits up to d for the shims of the containerd at address to
// go (containerd's cleanup of a dead shim runs a last "shim delete"), and
// returns those left.
func shimsAfter(address string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		shims := daemontest.ShimProcesses(address)
		if len(shims) == 0 || time.Now().After(deadline) {
			return shims
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestContainerdKilledDuringCreateAndRemove: containerd killed while a
// create, then a remove, is under way. Whichever step the kill lands on,
// the create either made a whole session or left nothing (its rollback
// waits for containerd to come back), the remove either finished or
// answered 503 and finishes when asked again, and at the end nothing of
// either session is left.
func TestContainerdKilledDuringCreateAndRemove(t *testing.T) {
	d, root, ctrd := startFaultDaemon(t)
	ctrdSock := ctrd.Address()

	kill := func() {
		t.Helper()
		b, err := os.ReadFile(ctrd.PidFile())
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	// back waits until the daemon reaches a containerd again.
	back := func() {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; {
			resp, err := d.http.Get("http://airlock/v1/images")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatal("the daemon did not reach a restarted containerd within 60s")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	raw := func(method, path string, body []byte) int {
		req, _ := http.NewRequest(method, "http://airlock"+path, bytes.NewReader(body))
		resp, err := d.http.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	// A create with a workspace and egress, containerd killed part-way.
	wsHost := t.TempDir()
	p := policy("sleep", "300")
	p.Workspaces = []policies.Workspace{{HostPath: wsHost, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitDiscard}}
	body, _ := json.Marshal(api.CreateRequest{Policy: p, Start: true})
	created := make(chan int, 1)
	go func() { created <- raw("POST", "/v1/sessions", body) }()
	time.Sleep(150 * time.Millisecond)
	kill()
	code := <-created
	back()
	var list []api.Session
	// A failed create's rollback may still be waiting for containerd.
	for deadline := time.Now().Add(30 * time.Second); ; {
		list = nil
		d.do("GET", "/v1/sessions", nil, &list)
		entries, _ := os.ReadDir(filepath.Join(root, "sessions"))
		if code == 201 || len(entries) == len(list) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create answered %d; %d session directories left for %d sessions", code, len(entries), len(list))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("create with containerd killed part-way: %d; sessions %d", code, len(list))
	switch {
	case code == 201 && len(list) == 1:
		if s := list[0]; s.State != api.StateRunning {
			t.Errorf("the session the create made is %s, want running", s.State)
		}
	case code >= 500 && len(list) == 0:
	default:
		t.Errorf("create answered %d and left %d sessions: want 201 and one, or a 5xx and none", code, len(list))
	}

	// A remove, containerd killed part-way; asked again until it is done.
	s := d.create(true, "sleep", "300")
	removed := make(chan int, 1)
	go func() { removed <- raw("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil) }()
	time.Sleep(50 * time.Millisecond)
	kill()
	code = <-removed
	t.Logf("remove with containerd killed part-way: %d", code)
	back()
	for _, x := range append(list, s) {
		for deadline := time.Now().Add(30 * time.Second); ; {
			c := raw("DELETE", "/v1/sessions/"+x.ID+"?force=true", nil)
			if c == 204 || c == 404 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("remove of %s still answers %d", x.ID, c)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	if ctrs, ls := sessionObjects(t, ctrdSock); ctrs != 0 || ls != 0 {
		t.Errorf("left in containerd: %d containers, %d leases", ctrs, ls)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("session directories left: %d", len(entries))
	}
	d.cleanup()
	if shims := shimsAfter(ctrdSock, 10*time.Second); len(shims) > 0 {
		t.Errorf("shims left after airlockd stopped: %v", shims)
	}
	wantNothingLeft(t, root)
}

// startFaultDaemon starts airlockd as a child process on a root of its own
// (with --stop-containerd, and the agent image imported), for a test that
// kills it or its containerd; whatever the test leaves is cleaned up after
// it: sessions removed, the daemon and its containerd stopped, the root
// removed.
func startFaultDaemon(t *testing.T, extra ...string) (*procDaemon, string, *runtime.Embedded) {
	t.Helper()
	testutil.RequiresRoot(t)
	root, err := os.MkdirTemp("/tmp", "alc-")
	if err != nil {
		t.Fatal(err)
	}
	return startFaultDaemonAt(t, root, extra...)
}

// startFaultDaemonAt is startFaultDaemon on the given root.
func startFaultDaemonAt(t *testing.T, root string, extra ...string) (*procDaemon, string, *runtime.Embedded) {
	t.Helper()
	ctrd := &runtime.Embedded{Dir: filepath.Join(root, "containerd")}
	t.Cleanup(func() {
		if t.Failed() {
			// containerd's side of what went wrong, before it is removed.
			if b, err := os.ReadFile(filepath.Join(ctrd.Dir, "containerd.log")); err == nil {
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				t.Logf("containerd.log, last lines:\n%s", strings.Join(lines[max(0, len(lines)-80):], "\n"))
			}
		}
		daemontest.RemoveAnchor(context.Background(), ctrd.Address())
		_ = ctrd.Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})
	d := startProcDaemon(t, root, append([]string{"--stop-containerd"}, extra...)...)
	t.Cleanup(d.cleanup)
	f, err := os.Open(h.Env.AgentImage)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d.do("POST", "/v1/images/import?name="+daemontest.AgentImage, f, nil)
	return d, root, ctrd
}

// TestKill9DuringPoolRefill: airlockd killed while it refills a warm pool
// (a session has just taken a prepared sandbox). The next airlockd keeps
// the session that took it, removes every sandbox the dead one had
// prepared or was preparing, fills the pool again, and in the end leaves
// nothing.
func TestKill9DuringPoolRefill(t *testing.T) {
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
	d, root, ctrd := startFaultDaemon(t, "--pool", poolFile)
	ready := func(d *procDaemon) []string {
		for deadline := time.Now().Add(90 * time.Second); ; {
			var pools []api.Pool
			d.do("GET", "/v1/pools", nil, &pools)
			if len(pools) == 1 && pools[0].Ready == 2 {
				return pools[0].ReadyIDs
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool not filled: %+v", pools)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	first := ready(d)
	// Take a prepared sandbox; the refill starts at once.
	p := policies.Policy{Label: "warm", Image: daemontest.AgentImage, Command: []string{"sleep", "300"}}
	b, _ := json.Marshal(api.CreateRequest{Policy: p, Start: true})
	var taken api.Session
	d.do("POST", "/v1/sessions", bytes.NewReader(b), &taken)
	if !taken.Warm {
		t.Fatalf("session %s did not take a prepared sandbox", taken.ID)
	}
	time.Sleep(100 * time.Millisecond)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	before, _ := os.ReadDir(filepath.Join(root, "sessions"))

	d2 := startProcDaemon(t, root, "--stop-containerd", "--pool", poolFile)
	t.Cleanup(d2.cleanup)
	if s := d2.inspect(taken.ID); s.State != api.StateRunning {
		t.Errorf("the session that took a prepared sandbox: %s after the restart, want running", s.State)
	}
	second := ready(d2)
	var list []api.Session
	d2.do("GET", "/v1/sessions", nil, &list)
	if len(list) != 1 {
		t.Errorf("%d sessions after the restart, want the one that was created", len(list))
	}
	// Of what the dead daemon had made, only the session is left.
	for _, e := range before {
		id := e.Name()
		if id == taken.ID || slices.Contains(second, id) {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "sessions", id)); err == nil {
			t.Errorf("sandbox %s the killed daemon was preparing or had prepared survived the restart (first pool %v)", id, first)
		}
	}
	d2.do("DELETE", "/v1/sessions/"+taken.ID+"?force=true", nil, nil)
	d2.cleanup()
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("session directories left after the pool's daemon stopped: %d", len(entries))
	}
	if shims := shimsAfter(ctrd.Address(), 10*time.Second); len(shims) > 0 {
		t.Errorf("shims left after airlockd stopped: %v", shims)
	}
	wantNothingLeft(t, root)
}

// TestRootFullDuringCreate: --root's filesystem full when a session is
// created. The create fails with a clear error (507, "no space left"), no
// half-made session is left (directory, containerd objects, mounts), and
// once there is room again a create succeeds.
func TestRootFullDuringCreate(t *testing.T) {
	root := tmpfsRoot(t)
	d, _, ctrd := startFaultDaemonAt(t, root)
	filler := fillUp(t, root)
	before, _ := os.ReadDir(filepath.Join(root, "sessions"))
	b, _ := json.Marshal(api.CreateRequest{Policy: policy("true"), Start: true})
	req, _ := http.NewRequest("POST", "http://airlock/v1/sessions", bytes.NewReader(b))
	resp, err := d.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(eb.Error.Message, "no space left") {
		t.Errorf("create on a full root: %d %+v, want 507 saying no space left", resp.StatusCode, eb.Error)
	}
	if after, _ := os.ReadDir(filepath.Join(root, "sessions")); len(after) != len(before) {
		t.Errorf("a create on a full root left %d session directories", len(after)-len(before))
	}
	var list []api.Session
	d.do("GET", "/v1/sessions", nil, &list)
	if len(list) != 0 {
		t.Errorf("sessions after a create on a full root: %+v", list)
	}
	if ctrs, ls := sessionObjects(t, ctrd.Address()); ctrs != 0 || ls != 0 {
		t.Errorf("a create on a full root left %d containers, %d leases", ctrs, ls)
	}
	if m, _ := daemontest.MountsUnder(filepath.Join(root, "sessions")); len(m) != 0 {
		t.Errorf("a create on a full root left mounts: %v", m)
	}

	// Room again: a create succeeds.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s := d.create(true, "sh", "-c", "exit 3")
	var w api.WaitResponse
	d.do("GET", "/v1/sessions/"+s.ID+"/wait", nil, &w)
	if w.ExitCode != 3 {
		t.Errorf("create once there is room again: %+v, want exit 3", w)
	}
	d.do("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil, nil)
}

// TestRootFullWhileLogging: --root's filesystem fills up while a session
// writes output. The session is not held up or killed by it (its command
// runs to its own exit), the daemon keeps answering, and once there is
// room again new sessions run and their output is kept.
func TestRootFullWhileLogging(t *testing.T) {
	root := tmpfsRoot(t)
	d, _, _ := startFaultDaemonAt(t, root)
	// A session that waits for the disk to fill, then writes 8 MiB of
	// output and exits 7.
	s := d.create(true, "sh", "-c", "sleep 2; head -c 8388608 /dev/zero | tr '\\0' x; echo; exit 7")
	filler := fillUp(t, root)
	done := make(chan api.WaitResponse, 1)
	go func() {
		var w api.WaitResponse
		d.do("GET", "/v1/sessions/"+s.ID+"/wait", nil, &w)
		done <- w
	}()
	select {
	case w := <-done:
		if w.ExitCode != 7 || w.Reason != "exited" {
			t.Errorf("session writing output onto a full root: %+v, want its own exit 7", w)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a session writing output onto a full root did not end within 60s: held up by its logs")
	}
	var list []api.Session
	d.do("GET", "/v1/sessions", nil, &list)
	if len(list) != 1 {
		t.Errorf("sessions while the root is full: %d, want 1", len(list))
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s2 := d.create(true, "sh", "-c", "echo room again")
	var w api.WaitResponse
	d.do("GET", "/v1/sessions/"+s2.ID+"/wait", nil, &w)
	resp, err := d.http.Get("http://airlock/v1/sessions/" + s2.ID + "/logs?stdout=1")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for {
		_, payload, err := api.ReadFrame(resp.Body)
		if err != nil {
			break
		}
		out.Write(payload)
	}
	resp.Body.Close()
	if w.ExitCode != 0 || !strings.Contains(out.String(), "room again") {
		t.Errorf("session once there is room again: %+v, output %q", w, out.String())
	}
	for _, id := range []string{s.ID, s2.ID} {
		d.do("DELETE", "/v1/sessions/"+id+"?force=true", nil, nil)
	}
}

// tmpfsRoot is a daemon root on a tmpfs of its own (1.5 GiB: room for the
// agent image), so that a test can fill it.
func tmpfsRoot(t *testing.T) string {
	t.Helper()
	testutil.RequiresRoot(t)
	root, err := os.MkdirTemp("/tmp", "alc-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", root, "tmpfs", 0, "size=1536m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
		os.Remove(root)
	})
	return root
}

// fillUp writes a file into dir until its filesystem is full, and returns
// the file's path (remove it to make room again).
func fillUp(t *testing.T, dir string) string {
	t.Helper()
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return filler
		}
	}
}

// wantNothingLeft waits up to 10 s for the census of the stopped daemon
// on root to come out empty (the shims' last cleanup runs a moment after
// containerd stops), and reports what is left.
func wantNothingLeft(t *testing.T, root string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		c := daemontest.TakeCensus(root, "")
		if c.Total() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind after airlockd stopped: %s", c)
			return
		}
	}
}

// sessionObjects counts the session containers and the leases left in the
// containerd at address.
func sessionObjects(t *testing.T, address string) (containers, leases int) {
	t.Helper()
	cc, err := containerd.New(address)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	nctx := namespaces.WithNamespace(context.Background(), "airlock")
	ctrs, _ := cc.Containers(nctx, fmt.Sprintf("labels.%q", runtime.LabelSession))
	ls, _ := cc.LeasesService().List(nctx)
	return len(ctrs), len(ls)
}

// TestCreatesCutShortLeaveNothing: clients that go away part-way through
// their creates (a CLI killed, a connection dropped), at every point from
// before the sandbox exists to after its task started. Each create either
// made a whole session or nothing; once the sessions it made are removed
// and airlockd stops with --stop-containerd, no shim, logger, mount, cgroup,
// namespace or table of it is left.
func TestCreatesCutShortLeaveNothing(t *testing.T) {
	d, root, ctrd := startFaultDaemon(t)
	wsHost := t.TempDir()
	p := policy("sh", "-c", "echo out; sleep 300")
	p.Workspaces = []policies.Workspace{{HostPath: wsHost, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitDiscard}}
	body, _ := json.Marshal(api.CreateRequest{Policy: p, Start: true})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*200*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", "http://airlock/v1/sessions", bytes.NewReader(body))
			if resp, err := d.http.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// Creates whose client left finish or roll back on their own.
	var list []api.Session
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		list = nil
		d.do("GET", "/v1/sessions", nil, &list)
		entries, _ := os.ReadDir(filepath.Join(root, "sessions"))
		if len(entries) == len(list) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session directories for %d sessions 60s after the clients left", len(entries), len(list))
		}
	}
	t.Logf("12 creates cut short: %d sessions made", len(list))
	for _, s := range list {
		if s.State != api.StateRunning {
			t.Errorf("session %s of a create cut short is %s, want running", s.ID, s.State)
		}
		if c := d.do("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil, nil); c != http.StatusNoContent {
			t.Errorf("remove %s: %d", s.ID, c)
		}
	}
	if ctrs, ls := sessionObjects(t, ctrd.Address()); ctrs != 0 || ls != 0 {
		t.Errorf("left in containerd: %d containers, %d leases", ctrs, ls)
	}
	d.cleanup()
	wantNothingLeft(t, root)
}
