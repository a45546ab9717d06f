package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// perimeterPolicy runs cmd with every layer: an overlay workspace on host
// (on_exit as given), egress to one world host and one file credential.
func perimeterPolicy(tb testing.TB, host, onExit string, cmd ...string) policies.Policy {
	tb.Helper()
	if err := h.World.AddHost("teardown.corp.test", netip.MustParseAddr("10.214.0.30")); err != nil && !strings.Contains(err.Error(), "exists") {
		tb.Fatalf("world host: %v", err)
	}
	p := credPolicy(cmd...)
	p.Egress = &policies.Egress{Allow: []string{"teardown.corp.test:80"}}
	p.Workspaces = []policies.Workspace{{
		HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: onExit,
	}}
	return p
}

// TestStopTearsDownEverySandboxLayer: when Stop returns, the task, its
// cgroup, the network and the sandbox's mounts are gone, on_exit has run
// and is audited, and the credential is revoked; only the container and
// the session's directory wait for Remove.
func TestStopTearsDownEverySandboxLayer(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	host := t.TempDir()
	writeTree(t, host, map[string]string{"a.txt": "one\n"})
	p := perimeterPolicy(t, host, policies.OnExitCommit, "sh", "-c", "echo two > /workspace/a.txt && exec sleep 300")
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, _ := execOut(t, s.ID, "cat", "/workspace/a.txt"); out == "two\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the session did not write its workspace")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ns := sessionNetns(s.ID)
	if !exists(ns) {
		t.Fatalf("no network namespace %s for a session with egress", ns)
	}

	v, err := h.Daemon.Stop(ctx, s.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != api.StateStopped || v.Reason != "stopped" || v.Review {
		t.Errorf("after stop: state %s, reason %q, review %v", v.State, v.Reason, v.Review)
	}
	res, err := h.Daemon.Runtime().Resources(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if strings.HasPrefix(r, "task/") {
			t.Errorf("task left after stop: %v", res)
		}
	}
	for _, ctl := range []string{"memory", "pids", "cpu", ""} {
		if p := filepath.Join("/sys/fs/cgroup", ctl, h.Daemon.CgroupPath(s.ID)); exists(p) {
			t.Errorf("cgroup %s left after stop", p)
		}
	}
	if exists(ns) {
		t.Errorf("network namespace %s left after stop", ns)
	}
	if got, _ := os.ReadFile(filepath.Join(host, "a.txt")); string(got) != "two\n" {
		t.Errorf("on_exit commit: host a.txt = %q", got)
	}
	if ms := mountsOf(t, filepath.Join(h.Root, "sessions", s.ID, "fs")); len(ms) != 0 {
		t.Errorf("workspace mounts left after stop: %v", ms)
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.Layer+" "+ev.Action] = true
	}
	for _, want := range []string{"fs applied", "session ended"} {
		if !seen[want] {
			t.Errorf("audit lacks %q: %v", want, keys(seen))
		}
	}
	if evs[len(evs)-1].Action != "ended" {
		t.Errorf("last audit event %+v, want the session's end", evs[len(evs)-1])
	}
}

// sessionNetns is the path of session id's network namespace: named after
// the daemon's prefix and a hash of the id (see egress/netns).
func sessionNetns(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join("/run/netns", runtime.Prefix(h.Root)+"-s-"+hex.EncodeToString(sum[:])[:10])
}

// mountsOf lists the mount points at or beneath dir.
func mountsOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// BenchmarkTeardown times Stop (grace 0) and Remove of a running session,
// with no layer and with the full perimeter (12-file overlay workspace
// with nothing to do on exit, egress, a file credential), as
// `hack/perf.sh -only teardown` does through the CLI.
func BenchmarkTeardown(b *testing.B) {
	testutil.RequiresRoot(b)
	host := b.TempDir()
	files := map[string]string{"README.md": "# ws\n"}
	for i := range 11 {
		files[fmt.Sprintf("src/f%d.go", i)] = fmt.Sprintf("package src\n\nconst N%d = %d\n", i, i)
	}
	for name, content := range files {
		p := filepath.Join(host, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		p    policies.Policy
	}{
		{"none", policy("sleep", "3600")},
		{"perimeter", perimeterPolicy(b, host, policies.OnExitReview, "sleep", "3600")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Remove logs its steps through the caller's context.
			ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(h.Log, &slog.HandlerOptions{Level: slog.LevelDebug})))
			logFrom := len(h.Log.String())
			var stop, rm time.Duration
			for b.Loop() {
				b.StopTimer()
				s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: bc.p, Start: true})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				if _, err := h.Daemon.Stop(ctx, s.ID, 0); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := h.Daemon.Remove(ctx, s.ID, false); err != nil {
					b.Fatal(err)
				}
				stop, rm = stop+t1.Sub(t0), rm+time.Since(t1)
			}
			b.ReportMetric(float64(stop.Microseconds())/1e3/float64(b.N), "stop-ms/op")
			b.ReportMetric(float64(rm.Microseconds())/1e3/float64(b.N), "rm-ms/op")
			// The daemon's own account, step by step (median over the runs).
			for _, phase := range []string{"exit", "remove"} {
				for step, d := range teardownStepMedians(h.Log.String()[logFrom:], phase) {
					b.ReportMetric(float64(d.Microseconds())/1e3, phase+"-"+step+"-ms")
				}
			}
		})
	}
}

// teardownStepMedians reads the daemon's "session teardown steps" debug
// lines of phase ("exit" or "remove") and returns each step's median.
func teardownStepMedians(logs, phase string) map[string]time.Duration {
	all := map[string][]time.Duration{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `msg="session teardown steps"`) || !strings.Contains(line, " phase="+phase+" ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			k, v, ok := strings.Cut(f, "=")
			if !ok {
				continue
			}
			if d, err := time.ParseDuration(v); err == nil {
				all[k] = append(all[k], d)
			}
		}
	}
	out := map[string]time.Duration{}
	for k, ds := range all {
		slices.Sort(ds)
		out[k] = ds[len(ds)/2]
	}
	return out
}

// TestFailedPrepareLeavesNothing: the layers of a sandbox are prepared side
// by side; when one of them fails (here the workspace, whose host directory
// does not exist), the others have still been made, and the rollback must
// remove all of them: no session, no containerd container, lease or
// snapshot, no network namespace, no mount and no session directory.
func TestFailedPrepareLeavesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	// Everything is admitted; the rootfs step fails, after the workspace,
	// credential, launch and network steps beside it have made their part.
	p := perimeterPolicy(t, t.TempDir(), policies.OnExitDiscard, "true")
	p.Image = "airlock/no-such-image:latest"

	ownedBefore, err := h.Daemon.Runtime().Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sessionsBefore := len(h.Daemon.List(ctx))
	dirsBefore, _ := os.ReadDir(filepath.Join(h.Root, "sessions"))
	netnsBefore := sessionNamespaces(t)

	_, err = h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err == nil {
		t.Fatal("create with a missing image succeeded")
	}
	if !strings.Contains(err.Error(), "no-such-image") {
		t.Errorf("error does not name the image: %v", err)
	}

	if n := len(h.Daemon.List(ctx)); n != sessionsBefore {
		t.Errorf("%d sessions after the failed create, want %d", n, sessionsBefore)
	}
	owned, err := h.Daemon.Runtime().Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range owned {
		if !ownedBefore[id] {
			t.Errorf("failed create left containerd objects of %s: %v", id, resources(t, id))
		}
	}
	sn := h.Daemon.Runtime().Client().SnapshotService(h.Daemon.Runtime().Snapshotter())
	var snaps []string
	if err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if id := info.Labels["dev.airlock.session"]; id != "" && !ownedBefore[id] {
			snaps = append(snaps, info.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(snaps) > 0 {
		t.Errorf("failed create left snapshots %v", snaps)
	}
	dirs, _ := os.ReadDir(filepath.Join(h.Root, "sessions"))
	if len(dirs) != len(dirsBefore) {
		t.Errorf("%d session directories after the failed create, want %d", len(dirs), len(dirsBefore))
	}
	if after := sessionNamespaces(t); len(after) != len(netnsBefore) {
		t.Errorf("network namespaces %v after the failed create, want %v", after, netnsBefore)
	}
	mounts, err := daemontest.MountsUnder(filepath.Join(h.Root, "sessions"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		inBefore := false
		for _, d := range dirsBefore {
			inBefore = inBefore || strings.Contains(m, d.Name())
		}
		if !inBefore {
			t.Errorf("failed create left mount %s", m)
		}
	}
}

func resources(t *testing.T, id string) []string {
	t.Helper()
	res, _ := h.Daemon.Runtime().Resources(context.Background(), id)
	return res
}

// sessionNamespaces lists the session network namespaces of the test
// daemon.
func sessionNamespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/run/netns")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), runtime.Prefix(h.Root)+"-s-") {
			out = append(out, e.Name())
		}
	}
	return out
}
