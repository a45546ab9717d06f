package daemon_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestSessionRunsOnItsRuntime: a session's task is run by the OCI runtime
// the daemon was configured with (AIRLOCK_RUNTIME: `make test` runs the
// daemon's tests on runc, then on crun), with that runtime's own state
// directory, and the other runtime holds no state of it.
func TestSessionRunsOnItsRuntime(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	id := startSession(ctx, t, policy("sleep", "300"))
	c, err := h.Daemon.Runtime().Client().LoadContainer(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := typeurl.UnmarshalAny(info.Runtime.Options)
	if err != nil {
		t.Fatal(err)
	}
	opts, ok := v.(*options.Options)
	if !ok {
		t.Fatalf("runtime options %T, want runc shim options", v)
	}
	rt := h.Env.Runtime
	if want := filepath.Join(h.Env.BinDir, rt); opts.BinaryName != want {
		t.Errorf("binary %q, want %q", opts.BinaryName, want)
	}
	if want := filepath.Join(h.Root, rt); opts.Root != want {
		t.Errorf("state root %q, want %q", opts.Root, want)
	}
	// The shim gives the runtime root/NAMESPACE; the runtime keeps a
	// directory per container there while it exists.
	ns := h.Daemon.Runtime().Namespace()
	if _, err := os.Stat(filepath.Join(h.Root, rt, ns, id)); err != nil {
		t.Errorf("%s has no state for the session: %v", rt, err)
	}
	other := map[string]string{"runc": "crun", "crun": "runc"}[rt]
	if _, err := os.Stat(filepath.Join(h.Root, other, ns, id)); !os.IsNotExist(err) {
		t.Errorf("%s holds state of a session on %s: %v", other, rt, err)
	}
	r := runSession(t, policy("sh", "-c", "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"))
	if r.exit != 0 || r.stdout != "NoNewPrivs:\t1\nSeccomp:\t2\n" {
		t.Errorf("a session on %s: exit %d, %q", rt, r.exit, r.stdout)
	}
}
