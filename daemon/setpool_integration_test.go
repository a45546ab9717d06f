package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestSetPoolRefusedPreparesNothing is the attack on pools declared at
// run time (Daemon.SetPool, which the node agent calls for SessionPools
// that cluster users write): a policy the admission policy refuses
// prepares no sandbox, not even for a moment. Each refusal names the
// rule, and the daemon is left as it was.
func TestSetPoolRefusedPreparesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	cases := []struct {
		name string
		edit func(*policies.Policy)
		want string
	}{
		{"mount /", func(p *policies.Policy) {
			p.Mounts = []policies.Mount{{HostPath: "/", Target: "/host"}}
		}, `mount "/" refused: "/" is a protected host path`},
		{"workspace on /etc", func(p *policies.Policy) {
			p.Workspaces = []policies.Workspace{{HostPath: "/etc", Target: "/workspace", Mode: policies.ModeRW}}
		}, `workspace "/etc" refused`},
		{"CAP_SYS_ADMIN", func(p *policies.Policy) { p.Capabilities = []string{"CAP_SYS_ADMIN"} }, `capability CAP_SYS_ADMIN refused`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateOf(t)
			p := policy()
			p.Label = "refused-pool"
			tc.edit(&p)
			_, _, err := h.Daemon.SetPool(t.Context(), p, 2)
			switch {
			case err == nil:
				t.Cleanup(func() { _, _, _ = h.Daemon.SetPool(context.Background(), p, 0) })
				t.Errorf("SetPool of a refused policy admitted it")
			case !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tc.want):
				t.Errorf("SetPool of a refused policy: %v, want a permission denied error naming the rule %q", err, tc.want)
			}
			// Filling is asynchronous: a pool declared in spite of the
			// refusal would show within a moment.
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if after := stateOf(t); after != before {
					t.Fatalf("refused pool changed the daemon: before %+v, after %+v", before, after)
				}
			}
		})
	}
	t.Run("size out of range", func(t *testing.T) {
		before := stateOf(t)
		if _, _, err := h.Daemon.SetPool(t.Context(), policy(), policies.MaxPoolSize+1); err == nil || !strings.Contains(err.Error(), "want 0 to") {
			t.Errorf("SetPool of size %d: %v, want an error naming the range", policies.MaxPoolSize+1, err)
		}
		if after := stateOf(t); after != before {
			t.Errorf("refused size changed the daemon: before %+v, after %+v", before, after)
		}
	})
}

// TestSetPool declares a pool at run time, resizes it down (the sandbox
// beyond the size is torn down), lets a session take its
// sandbox (warm, whatever its command), and removes it with size 0:
// nothing of it is left.
func TestSetPool(t *testing.T) {
	testutil.RequiresRoot(t)
	before := stateOf(t)
	p := policy()
	p.Label = "run-time-pool"
	key, _, err := h.Daemon.SetPool(t.Context(), p, 2)
	if err != nil {
		t.Fatal(err)
	}
	waitPoolReady(t, key, 2)
	// Resized down: the sandbox beyond the size goes.
	if k2, _, err := h.Daemon.SetPool(t.Context(), p, 1); err != nil || k2 != key {
		t.Fatalf("SetPool size 1: key %q, %v; want %q", k2, err, key)
	}
	if pl := poolOf(t, key); pl.Ready != 1 || pl.Size != 1 {
		t.Fatalf("pool resized from 2 to 1: %+v, want 1 ready", pl)
	}
	s := policy("true")
	s.Label = "run-time-pool"
	v, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: s, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Daemon.Remove(context.Background(), v.ID, true)
	if !v.Warm {
		t.Errorf("session of the pool's policy: not warm, want the pool's sandbox (pool %+v)", poolOf(t, key))
	}
	waitPoolReady(t, key, 1) // refilled
	if err := h.Daemon.Remove(t.Context(), v.ID, true); err != nil {
		t.Fatal(err)
	}
	if k2, _, err := h.Daemon.SetPool(t.Context(), p, 0); err != nil || k2 != key {
		t.Fatalf("SetPool size 0: key %q, %v; want %q", k2, err, key)
	}
	for _, pl := range h.Daemon.Pools() {
		if pl.Key == key {
			t.Fatalf("pool %s still there after size 0: %+v", key, pl)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after := stateOf(t)
		if after == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the pool's removal: %+v, want %+v", after, before)
		}
	}
}
