package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// The session lifecycle on a fake runtime (fakeruntime_test.go): no root,
// no containerd, but the daemon's real state machine, launch protocol,
// records, audit log, reconcile and pools.

// openFake opens a daemon on rt with its state under root.
func openFake(t *testing.T, root string, rt *fakeRuntime, pools ...policies.Policy) *Daemon {
	t.Helper()
	return openFakeConfig(t, root, rt, Config{Pools: pools})
}

// openFakeConfig is openFake with more of the daemon's configuration.
func openFakeConfig(t *testing.T, root string, rt *fakeRuntime, cfg Config) *Daemon {
	t.Helper()
	bin := filepath.Join(root, "bin")
	for _, dir := range []string{bin, filepath.Join(root, "sessions")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "airlock-init"), []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg.Root, cfg.BinDir, cfg.SelfBinary, cfg.Namespace = root, bin, "/bin/true", "airlock"
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.cgroups.Root = t.TempDir()
	if err := d.open(ctx, rt, nil); err != nil {
		t.Fatal(err)
	}
	closeOnce := sync.OnceValue(func() error { return d.Close(ctx) })
	closers.Store(d, closeOnce)
	t.Cleanup(func() { _ = closeOnce() })
	return d
}

// closers closes each fake daemon once, early in a test or at its end.
var closers sync.Map // *Daemon -> func() error

func closeFake(t *testing.T, d *Daemon) {
	t.Helper()
	f, _ := closers.Load(d)
	if err := f.(func() error)(); err != nil {
		t.Fatal(err)
	}
}

func fakePolicy(cmd ...string) policies.Policy {
	user := "1000:1000"
	if os.Getuid() != 0 {
		// The launch directory's FIFOs are chowned to the user.
		user = fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())
	}
	return policies.Policy{Label: "unit", Image: "example.test/agent:1", Command: cmd, User: user}
}

func create(t *testing.T, d *Daemon, p policies.Policy, start bool) *api.Session {
	t.Helper()
	v, err := d.Create(context.Background(), api.CreateRequest{Policy: p, Start: start})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return v
}

func wait(t *testing.T, d *Daemon, id string) *api.WaitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := d.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return w
}

// sessionEvents returns session id's audit events of layer "session".
func sessionEvents(t *testing.T, d *Daemon, id string) []string {
	t.Helper()
	evs, err := d.Audit(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Layer == "session" {
			out = append(out, ev.Action+":"+ev.Reason)
		}
	}
	return out
}

// A session's command reaches its init through the launch protocol, its
// exit is recorded once, and removal leaves nothing of it.
func TestLifecycleRunExitRemove(t *testing.T) {
	rt := newFakeRuntime()
	d := openFake(t, t.TempDir(), rt)
	p := fakePolicy("sh", "-c", "exit 3")
	p.Env = map[string]string{"GREETING": "hi"}
	v := create(t, d, p, true)
	if v.State != api.StateRunning {
		t.Fatalf("state after create with start: %s", v.State)
	}
	m, ok := rt.launched(v.ID, 10*time.Second)
	if !ok {
		t.Fatal("the sandbox's init never got its command")
	}
	if !reflect.DeepEqual(m.Args, p.Command) || !slices.Contains(m.Env, "GREETING=hi") {
		t.Errorf("launch message %+v, want args %v and GREETING=hi", m, p.Command)
	}
	rt.exit(v.ID, 3)
	if w := wait(t, d, v.ID); w.ExitCode != 3 || w.Reason != "exited" {
		t.Errorf("wait: %+v, want exit 3, exited", w)
	}
	got, _ := d.Inspect(context.Background(), v.ID)
	if got.State != api.StateStopped || got.Finished == nil {
		t.Errorf("after exit: state %s finished %v", got.State, got.Finished)
	}
	if evs := sessionEvents(t, d, v.ID); !reflect.DeepEqual(evs, []string{"started:", "ended:exited"}) {
		t.Errorf("session events %v, want started, ended", evs)
	}
	if err := d.Remove(context.Background(), v.ID, false); err != nil {
		t.Fatal(err)
	}
	if ids := rt.ids(); len(ids) != 0 {
		t.Errorf("runtime objects left after remove: %v", ids)
	}
	if _, err := os.Stat(d.sessionDir(v.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("session directory left after remove: %v", err)
	}
	if _, err := d.Inspect(context.Background(), v.ID); !errdefs.IsNotFound(err) {
		t.Errorf("inspect after remove: %v, want not found", err)
	}
}

// A session stopped before its command ran never launches it, and ends
// as stopped with exit -1.
func TestLifecycleStopBeforeStart(t *testing.T) {
	rt := newFakeRuntime()
	d := openFake(t, t.TempDir(), rt)
	v := create(t, d, fakePolicy("true"), false)
	if v.State != api.StateCreated {
		t.Fatalf("state: %s", v.State)
	}
	if _, err := d.Wait(context.Background(), v.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("wait on a created session: %v, want failed precondition", err)
	}
	got, err := d.Stop(context.Background(), v.ID, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != api.StateStopped || got.ExitCode == nil || *got.ExitCode != -1 || got.Reason != "stopped" {
		t.Errorf("after stop: %s exit %v reason %q, want stopped, -1, stopped", got.State, got.ExitCode, got.Reason)
	}
	if _, ok := rt.launched(v.ID, 100*time.Millisecond); ok {
		t.Error("a session stopped before start launched its command")
	}
	if _, err := d.Start(context.Background(), v.ID); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("start after stop: %v, want failed precondition", err)
	}
}

// A running session past its deadline is asked to stop, then killed when
// it does not, and its end says timeout.
func TestLifecycleTimeoutKills(t *testing.T) {
	rt := newFakeRuntime()
	rt.ignoreTERM = true
	d := openFake(t, t.TempDir(), rt)
	p := fakePolicy("sleep", "300")
	p.Timeout = policies.Duration(200 * time.Millisecond)
	v := create(t, d, p, true)
	w := wait(t, d, v.ID)
	if w.Reason != "timeout" || w.ExitCode != 128+9 {
		t.Errorf("wait: %+v, want timeout with SIGKILL's status", w)
	}
}

// A restarted daemon re-adopts what still runs, finishes what ended
// while it was down exactly as a live exit would be finished, and keeps
// a created session startable.
func TestReconcileAfterRestart(t *testing.T) {
	rt := newFakeRuntime()
	root := t.TempDir()
	d1 := openFake(t, root, rt)
	running := create(t, d1, fakePolicy("sleep", "300"), true)
	endsWhileDown := create(t, d1, fakePolicy("sh", "-c", "exit 5"), true)
	idle := create(t, d1, fakePolicy("echo", "later"), false)
	for _, id := range []string{running.ID, endsWhileDown.ID} {
		if _, ok := rt.launched(id, 10*time.Second); !ok {
			t.Fatalf("%s never launched", id)
		}
	}
	closeFake(t, d1)
	rt.exit(endsWhileDown.ID, 5)

	d2 := openFake(t, root, rt)
	if v, _ := d2.Inspect(context.Background(), running.ID); v.State != api.StateRunning {
		t.Errorf("running session after restart: %s", v.State)
	}
	v, _ := d2.Inspect(context.Background(), endsWhileDown.ID)
	if v.State != api.StateStopped || v.ExitCode == nil || *v.ExitCode != 5 || v.Reason != "exited" {
		t.Errorf("session that ended while down: %s exit %v reason %q, want stopped 5 exited", v.State, v.ExitCode, v.Reason)
	}
	if evs := sessionEvents(t, d2, endsWhileDown.ID); !reflect.DeepEqual(evs, []string{"started:", "ended:exited"}) {
		t.Errorf("its session events %v, want started, ended", evs)
	}
	if ts, _ := rt.Task(context.Background(), endsWhileDown.ID); ts.Exists {
		t.Error("the task of the session that ended while down was not deleted")
	}
	// The re-adopted running session's exit is still seen.
	rt.exit(running.ID, 0)
	if w := wait(t, d2, running.ID); w.ExitCode != 0 || w.Reason != "exited" {
		t.Errorf("re-adopted session's exit: %+v", w)
	}
	// The created one starts under the new daemon.
	if _, err := d2.Start(context.Background(), idle.ID); err != nil {
		t.Fatal(err)
	}
	if m, ok := rt.launched(idle.ID, 10*time.Second); !ok || !reflect.DeepEqual(m.Args, []string{"echo", "later"}) {
		t.Errorf("created session started after restart: launched %v %+v", ok, m)
	}

	// A third daemon finds every session already finished: nothing is
	// recorded twice.
	rt.exit(idle.ID, 0)
	wait(t, d2, idle.ID)
	closeFake(t, d2)
	d3 := openFake(t, root, rt)
	for _, id := range []string{running.ID, endsWhileDown.ID, idle.ID} {
		if evs := sessionEvents(t, d3, id); len(evs) != 2 || evs[1] != "ended:exited" {
			t.Errorf("%s after a second restart: session events %v, want started, ended", id, evs)
		}
	}
}

// A daemon that dies while it finishes an OOM-killed session, after the
// task's deletion took the cgroup (and its OOM count) and before the end
// was recorded: the next daemon still records the session as oom, from
// the exit status persisted first.
func TestReconcileOOMAfterTaskDeleted(t *testing.T) {
	rt := newFakeRuntime()
	root := t.TempDir()
	d1 := openFake(t, root, rt)
	s := create(t, d1, fakePolicy("sleep", "300"), true)
	if _, ok := rt.launched(s.ID, 10*time.Second); !ok {
		t.Fatalf("%s never launched", s.ID)
	}
	memcg := filepath.Join(d1.cgroups.Root, "memory", d1.CgroupPath(s.ID))
	if err := os.MkdirAll(memcg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(memcg, "memory.oom_control"), []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The first daemon's finish: the exit persisted, then the task
	// deleted (runc removes the cgroup), then the daemon dies.
	d1.mu.Lock()
	sess := d1.sessions[s.ID]
	d1.mu.Unlock()
	closeFake(t, d1)
	rt.exit(s.ID, 137)
	sess.mu.Lock()
	rec := sess.rec
	sess.mu.Unlock()
	rec.Exited = &exitStatus{Code: 137, At: time.Now().UTC(), OOM: d1.cgroups.OOMKilled(d1.CgroupPath(s.ID))}
	if err := writeJSONAtomic(filepath.Join(sess.dir, "session.json"), &rec); err != nil {
		t.Fatal(err)
	}
	if err := rt.DeleteTask(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(memcg); err != nil {
		t.Fatal(err)
	}

	d2 := openFake(t, root, rt)
	v, err := d2.Inspect(context.Background(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != api.StateStopped || v.ExitCode == nil || *v.ExitCode != 137 || v.Reason != "oom" {
		t.Errorf("OOM-killed session whose end the dead daemon did not record: %s exit %v reason %q, want stopped 137 oom", v.State, v.ExitCode, v.Reason)
	}
}

// A failed create leaves nothing: no session, no runtime object, no
// directory.
func TestLifecycleFailedCreateLeavesNothing(t *testing.T) {
	rt := newFakeRuntime()
	rt.failCreate = fmt.Errorf("no room: %w", errdefs.ErrResourceExhausted)
	root := t.TempDir()
	d := openFake(t, root, rt)
	if _, err := d.Create(context.Background(), api.CreateRequest{Policy: fakePolicy("true"), Start: true}); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("create: %v, want the runtime's error", err)
	}
	if l := d.List(context.Background()); len(l) != 0 {
		t.Errorf("sessions after a failed create: %+v", l)
	}
	if ids := rt.ids(); len(ids) != 0 {
		t.Errorf("runtime objects after a failed create: %v", ids)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("session directories after a failed create: %d", len(entries))
	}
}

// A warm pool fills to its size, a create takes a prepared sandbox and
// the pool refills; a pooled sandbox whose init dies is dropped and
// replaced; removing the pool tears down what it held.
func TestPoolFillTakeDropRemove(t *testing.T) {
	rt := newFakeRuntime()
	tmpl := fakePolicy("true")
	tmpl.Pool = &policies.Pool{Size: 2}
	d := openFake(t, t.TempDir(), rt, tmpl)
	ready := func(n int) api.Pool {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ps := d.Pools()
			if len(ps) == 1 && ps[0].Ready == n && !ps[0].Preparing {
				return ps[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool never had %d ready: %+v", n, ps)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	first := ready(2)

	p := fakePolicy("echo", "warm")
	p.Pool = &policies.Pool{Size: 2}
	v := create(t, d, p, true)
	if !v.Warm || !slices.Contains(first.ReadyIDs, v.ID) {
		t.Errorf("create took %s (warm %v), want one of the prepared %v", v.ID, v.Warm, first.ReadyIDs)
	}
	if m, ok := rt.launched(v.ID, 10*time.Second); !ok || m.Args[0] != "echo" {
		t.Errorf("the taken sandbox did not run the session's command: %v %+v", ok, m)
	}
	refilled := ready(2)
	if refilled.Hits != 1 {
		t.Errorf("hits %d, want 1", refilled.Hits)
	}

	// A prepared sandbox dies while it waits.
	dead := refilled.ReadyIDs[0]
	rt.exit(dead, 1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ps := d.Pools()
		if ps[0].Discarded == 1 && ps[0].Ready == 2 && !slices.Contains(ps[0].ReadyIDs, dead) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead pooled sandbox not replaced: %+v", ps)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if slices.Contains(rt.ids(), dead) {
		t.Error("the dead pooled sandbox's objects were not removed")
	}

	held := d.Pools()[0].ReadyIDs
	if err := d.RemovePool(context.Background(), refilled.Key); err != nil {
		t.Fatal(err)
	}
	for _, id := range held {
		if slices.Contains(rt.ids(), id) {
			t.Errorf("pooled sandbox %s survived its pool's removal", id)
		}
	}
	if ps := d.Pools(); len(ps) != 0 {
		t.Errorf("pools after removal: %+v", ps)
	}
	// The session that took a sandbox is not affected.
	if got, _ := d.Inspect(context.Background(), v.ID); got.State != api.StateRunning {
		t.Errorf("the warm session after its pool's removal: %s", got.State)
	}
}

// TestLabelsKeptAcrossRestart: a create request's labels come back from
// create, list and inspect, and from a restarted daemon (the Kubernetes
// node agent finds its sessions by them); bad labels create nothing.
func TestLabelsKeptAcrossRestart(t *testing.T) {
	rt := newFakeRuntime()
	root := t.TempDir()
	d1 := openFake(t, root, rt)
	labels := map[string]string{"airlock.dev/session-uid": "2b0c6f3e-8a47-4c1f-9d55-0f5d3b7f2a10"}
	v, err := d1.Create(context.Background(), api.CreateRequest{Policy: fakePolicy("sleep", "300"), Start: true, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.Labels, labels) {
		t.Errorf("create returned labels %v, want %v", v.Labels, labels)
	}
	if _, err := d1.Create(context.Background(), api.CreateRequest{Policy: fakePolicy("true"), Labels: map[string]string{"bad key": "x"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("create with a bad label key: %v, want invalid argument", err)
	}
	if n := len(d1.List(context.Background())); n != 1 {
		t.Errorf("%d sessions after a refused create, want 1", n)
	}
	closeFake(t, d1)
	d2 := openFake(t, root, rt)
	list := d2.List(context.Background())
	if len(list) != 1 || list[0].ID != v.ID || !reflect.DeepEqual(list[0].Labels, labels) || list[0].State != api.StateRunning {
		t.Fatalf("after a restart: %+v, want session %s running with labels %v", list, v.ID, labels)
	}
}
