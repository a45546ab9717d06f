package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestSessionsShareOneShim checks the shared shim: running sessions are
// served by the one shim the anchor keeps alive, a killed anchor is
// replaced without disturbing them, and sessions still start and end
// normally afterwards.
func TestSessionsShareOneShim(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rt := h.Daemon.Runtime()
	if rt.ShimGroup() == "" {
		t.Fatal("the daemon runs without a shim group; sessions should share a shim by default")
	}
	anchor, err := rt.Task(ctx, runtime.AnchorID)
	if err != nil || !anchor.Running {
		t.Fatalf("shim anchor not running: %+v, %v", anchor, err)
	}

	// Started side by side: they join the one shim, none starts its own.
	ids := make([]string, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: policy("sleep", "60"), Start: true})
			if err == nil {
				ids[i] = s.ID
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("create: %v", errs[i])
		}
		t.Cleanup(func() {
			if err := h.Daemon.Remove(context.Background(), id, true); err != nil {
				t.Errorf("remove %s: %v", id, err)
			}
			assertGone(t, id)
		})
	}
	shims := daemontest.ShimProcesses(h.ContainerdAddress())
	if len(shims) != 1 || !strings.Contains(shims[0], "-id "+runtime.AnchorID+" ") {
		t.Fatalf("with the anchor and 3 sessions running, shims are %v; want the anchor's one", shims)
	}
	for _, id := range ids {
		joinedDirectly(t, id)
	}

	// Kill the anchor: the sessions keep the shim alive, and the daemon
	// starts a new anchor, which joins the same shim.
	if err := rt.Signal(ctx, runtime.AnchorID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill anchor: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := rt.Task(ctx, runtime.AnchorID)
		if err == nil && st.Running && st.Pid != anchor.Pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new shim anchor 20 s after the old one was killed: %+v, %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if now := daemontest.ShimProcesses(h.ContainerdAddress()); len(now) != 1 || now[0] != shims[0] {
		t.Errorf("shims after the anchor's restart: %v, want still %v", now, shims)
	}
	for _, id := range ids {
		if s, err := h.Daemon.Inspect(ctx, id); err != nil || s.State != api.StateRunning {
			t.Errorf("session %s after the anchor's restart: %+v, %v", id, s, err)
		}
	}

	// Sessions still run to completion on the shared shim, joining it
	// through the new anchor.
	id := startSession(ctx, t, policy("sleep", "60"))
	joinedDirectly(t, id)
	r := runSession(t, policy("sh", "-c", "echo shared; exit 3"))
	if r.exit != 3 || r.stdout != "shared\n" {
		t.Errorf("session on the shared shim: exit %d, stdout %q", r.exit, r.stdout)
	}
}

// joinedDirectly checks that containerd handed the session's task to the
// anchor's shim as a member of its sandbox, without running the shim's
// start-up process: it writes the sandbox's id into the task's bundle
// only on that path.
func joinedDirectly(t *testing.T, id string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root, "containerd", "state", "io.containerd.runtime.v2.task", h.Daemon.Runtime().Namespace(), id, "sandbox"))
	if err != nil || string(b) != runtime.AnchorID {
		t.Errorf("session %s's task did not join the anchor's sandbox: %q, %v", id, b, err)
	}
}
