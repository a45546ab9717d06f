package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/hostcgroup"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestCgroupParentAndStopSessionsOnExit runs airlockd as a process with
// --cgroup-parent (an absolute path, on a host), --stop-sessions-on-exit
// and --stop-containerd: a session's processes, its containerd and the
// shims are in cgroups under the parent in every hierarchy; on SIGTERM the
// running session is stopped (its processes end, its state recorded as
// stopped for the next airlockd), containerd stops, and no cgroup is left
// under the parent, nor the parent itself.
func TestCgroupParentAndStopSessionsOnExit(t *testing.T) {
	testutil.RequiresRoot(t)
	root, err := os.MkdirTemp("/tmp", "alc-")
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	parent := "/airlock-parent-test-" + hex.EncodeToString(b)
	ctrdSock := filepath.Join(root, "containerd", "containerd.sock")
	hierarchies := hostcgroup.Hierarchies("")
	t.Cleanup(func() {
		daemontest.RemoveAnchor(context.Background(), ctrdSock)
		_ = (&runtime.Embedded{Dir: filepath.Join(root, "containerd")}).Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
		for _, h := range hierarchies {
			removeTree(filepath.Join(h, parent))
			removeTree(filepath.Join(h, parent+"-other"))
			removeTree(filepath.Join(h, parent+"-third"))
		}
	})

	d := startProcDaemon(t, root, "--cgroup-parent", parent, "--stop-sessions-on-exit", "--stop-containerd", "--image", h.Env.AgentImage)
	// A failed test's airlockd, its sessions and containerd are stopped.
	t.Cleanup(d.cleanup)
	s := d.create(true, "sh", "-c", "sleep 300")
	if s.State != api.StateRunning || s.Pid == 0 {
		t.Fatalf("session %+v, want running with its pid", s)
	}
	// Created, not started: its sandbox's first process waits.
	idle := d.create(false, "true")
	inParent := func(pid int, want string) {
		t.Helper()
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) != 3 || !strings.HasPrefix(parts[2], want) {
				t.Errorf("process %d in %q, want %s... in every hierarchy", pid, l, want)
			}
		}
	}
	inParent(int(s.Pid), parent+"/airlock-")
	ctrdPid, err := os.ReadFile(filepath.Join(root, "containerd", "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	cpid, _ := strconv.Atoi(strings.TrimSpace(string(ctrdPid)))
	inParent(cpid, parent+"/airlock-")
	for _, sh := range daemontest.ShimProcesses(ctrdSock) {
		pid, _ := strconv.Atoi(strings.Fields(sh)[0])
		inParent(pid, parent+"/airlock-")
	}

	began := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("airlockd exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		d.cmd.Process.Kill()
		t.Fatal("airlockd did not exit on SIGTERM")
	}
	t.Logf("airlockd stopped its session and containerd and exited %s after SIGTERM", time.Since(began).Round(time.Millisecond))
	if err := syscall.Kill(int(s.Pid), 0); err == nil {
		t.Errorf("the session's process %d outlived airlockd's --stop-sessions-on-exit", s.Pid)
	}
	if _, err := os.Stat(ctrdSock); err == nil {
		t.Errorf("containerd socket %s still exists after --stop-containerd", ctrdSock)
	}
	if shims := shimsAfter(ctrdSock, 10*time.Second); len(shims) > 0 {
		t.Errorf("shims left: %v", shims)
	}
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, parent)); err == nil {
			t.Errorf("cgroup %s left", filepath.Join(h, parent))
		}
	}
	// The next airlockd, under another parent, finds both sessions
	// stopped; once everything is removed and the last airlockd stopped,
	// nothing is left under any of the parents, all made by airlockd.
	other := parent + "-other"
	d2 := startProcDaemon(t, root, "--cgroup-parent", other, "--stop-containerd")
	for _, id := range []string{s.ID, idle.ID} {
		if got := d2.inspect(id); got.State != api.StateStopped {
			t.Errorf("session %s after the restart: %s, want stopped", id, got.State)
		}
	}
	// A session running when its airlockd is killed keeps the cgroup it
	// was made in under the next one, whatever that one's parent: its
	// kill by pidfd checks that cgroup, its removal removes it.
	run := d2.create(true, "sh", "-c", "sleep 300")
	inParent(int(run.Pid), other+"/airlock-")
	if err := d2.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	d2.cmd.Wait()
	third := parent + "-third"
	d3 := startProcDaemon(t, root, "--cgroup-parent", third, "--stop-containerd")
	t.Cleanup(d3.cleanup)
	if got := d3.inspect(run.ID); got.State != api.StateRunning {
		t.Fatalf("session %s after the kill and restart: %s, want running", run.ID, got.State)
	}
	d3.do("POST", "/v1/sessions/"+run.ID+"/stop", strings.NewReader(`{"grace":"100ms"}`), nil)
	if got := d3.inspect(run.ID); got.State != api.StateStopped || got.Reason != "stopped" {
		t.Errorf("session %s after its stop: %s (%s), want stopped", run.ID, got.State, got.Reason)
	}
	if err := syscall.Kill(int(run.Pid), 0); err == nil {
		t.Errorf("the session's process %d outlived its stop", run.Pid)
	}
	for _, id := range []string{s.ID, idle.ID, run.ID} {
		d3.do("DELETE", "/v1/sessions/"+id, nil, nil)
	}
	d3.cleanup()
	for _, h := range hierarchies {
		for _, p := range []string{parent, other, third} {
			if _, err := os.Stat(filepath.Join(h, p)); err == nil {
				var left []string
				filepath.WalkDir(filepath.Join(h, p), func(q string, e os.DirEntry, err error) error {
					if err == nil && e.IsDir() {
						procs, _ := os.ReadFile(filepath.Join(q, "cgroup.procs"))
						left = append(left, fmt.Sprintf("%s [%s]", q, strings.Join(strings.Fields(string(procs)), " ")))
					}
					return nil
				})
				rec, _ := os.ReadFile(filepath.Join(root, "cgroup-parents.json"))
				t.Errorf("cgroups left after the last airlockd: %v (record %s)", left, rec)
			}
		}
	}
}

// removeTree removes a cgroup directory tree, children first.
func removeTree(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}
