package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestDenyReadInSandbox runs a real sandbox with an overlay workspace (a
// git repository that tracks a secret), a read-only and a read-write extra
// mount. While it runs, secrets appear on the host in the workspace and
// the read-only mount; none of them, nor the secrets present at the start,
// can be read from inside. The audit records every mask, the masked path
// git tracks, and every refused read.
func TestDenyReadInSandbox(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	writeTree(t, host, map[string]string{".env": "TRACKED_SECRET\n", "README.md": "readme\n", "web/.npmrc": "NPM_SECRET\n"})
	git := exec.Command("sh", "-c", "git init -q && git add .env README.md && git -c user.name=t -c user.email=t@t commit -q -m init")
	git.Dir = host
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git: %v\n%s", err, out)
	}
	ro, rw := t.TempDir(), t.TempDir()
	writeTree(t, ro, map[string]string{".npmrc": "RO_NPM_SECRET\n", "data.txt": "data\n", "sub/.kube/config": "RO_KUBE_SECRET\n"})
	writeTree(t, rw, map[string]string{".env": "RW_SECRET\n", "out.txt": "out\n"})
	for _, d := range []string{ro, rw} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := policy("sleep", "300")
	p.Workspaces = []policies.Workspace{{HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitDiscard}}
	p.Mounts = []policies.Mount{
		{HostPath: ro, Target: "/ro", ReadOnly: true, DefaultDenyRead: true},
		{HostPath: rw, Target: "/rw", DefaultDenyRead: true},
	}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	// The session is running: the host now gets new secrets.
	writeTree(t, host, map[string]string{".env.local": "LATER_SECRET\n", "svc/.env.production": "LATER_SVC_SECRET\n"})
	writeTree(t, ro, map[string]string{".env.later": "LATER_RO_SECRET\n"})

	for _, path := range []string{"/workspace/.env", "/workspace/web/.npmrc", "/workspace/.env.local", "/workspace/svc/.env.production",
		"/ro/.npmrc", "/ro/sub/.kube/config", "/ro/.env.later", "/rw/.env"} {
		out, code := execOut(t, s.ID, "cat", path)
		if code == 0 || strings.Contains(out, "SECRET") {
			t.Errorf("cat %s: exit %d %q", path, code, out)
		}
	}
	if out, _ := execOut(t, s.ID, "sh", "-c", "ls -a /workspace /workspace/svc /ro; grep -rs SECRET /workspace /ro /rw --exclude-dir=.git; true"); strings.Contains(out, "SECRET") || strings.Contains(out, ".env.local") || strings.Contains(out, ".env.later") {
		t.Errorf("the sandbox sees what appeared on the host:\n%s", out)
	}
	for path, want := range map[string]string{"/workspace/README.md": "readme\n", "/ro/data.txt": "data\n", "/rw/out.txt": "out\n"} {
		if out, code := execOut(t, s.ID, "cat", path); code != 0 || out != want {
			t.Errorf("cat %s: exit %d %q, want %q", path, code, out, want)
		}
	}

	// Each refused read is audited (asynchronously: wait a bounded time).
	want := map[string]string{
		"masked /workspace/.env": ".env*", "masked /workspace/web/.npmrc": ".npmrc", "masked /ro/.npmrc": ".npmrc",
		"masked /ro/sub/.kube/config": "**/.kube/config", "masked /rw/.env": ".env*", "masked_tracked /workspace/.env": "",
		"read_denied /workspace/.env": ".env*", "read_denied /workspace/web/.npmrc": ".npmrc", "read_denied /ro/.npmrc": ".npmrc",
		"read_denied /ro/sub/.kube/config": "**/.kube/config", "read_denied /rw/.env": ".env*",
	}
	var got map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		evs, err := h.Daemon.Audit(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]string{}
		for _, ev := range evs {
			if ev.Layer == "fs" && (ev.Action == "masked" || ev.Action == "masked_tracked" || ev.Action == "read_denied") {
				rule, _ := ev.Fields["rule"].(string)
				got[ev.Action+" "+ev.Subject] = rule
				if ev.Action == "read_denied" && ev.Fields["pid"] == nil {
					t.Errorf("no pid in %+v", ev)
				}
			}
		}
		if _, ok := got["read_denied /rw/.env"]; ok || time.Now().After(deadline) {
			break
		}
	}
	for ev, rule := range want {
		if r, ok := got[ev]; !ok || r != rule {
			t.Errorf("audit event %q (rule %q) missing; fs events: %v", ev, rule, got)
		}
	}
	if _, ok := got["masked_tracked /workspace/web/.npmrc"]; ok {
		t.Errorf("an untracked masked file is reported as tracked: %v", got)
	}
}
