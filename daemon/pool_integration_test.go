package daemon_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// poolPolicy is the full perimeter: an overlay workspace, egress to one
// world host, a file credential and an env credential, with a pool.
func poolPolicy(t testing.TB, ws string, size int) policies.Policy {
	p := credPolicy("sleep", "300")
	p.Label = "pooled"
	p.Credentials = append(p.Credentials, policies.Credential{
		Name: "envtok", Issuer: "airlock", Audience: "jobs.world.test", Deliver: policies.DeliverEnv, EnvVar: "JOBS_TOKEN",
		Scopes: []string{"jobs.list"}, TTL: policies.Duration(5 * time.Minute),
	})
	p.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/work", Mode: policies.ModeOverlay,
		DefaultDenyRead: true, OnExit: policies.OnExitDiscard}}
	p.Egress = &policies.Egress{Allow: []string{"pool.corp.test:80"}}
	p.Pool = &policies.Pool{Size: size}
	return p
}

func poolOf(t testing.TB, key string) api.Pool {
	t.Helper()
	for _, p := range h.Daemon.Pools() {
		if p.Key == key {
			return p
		}
	}
	t.Fatalf("no pool %s in %+v", key, h.Daemon.Pools())
	return api.Pool{}
}

func waitPoolReady(t testing.TB, key string, n int) api.Pool {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		p := poolOf(t, key)
		if p.Ready >= n {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s: %d of %d ready after 90s (last error %q)", key, p.Ready, n, p.LastError)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jwtClaims decodes a token's payload without verifying it.
func jwtClaims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(strings.TrimSpace(tok), ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestWarmPoolSandboxesAreFreshAndOwned(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "pool.corp.test", "10.214.0.30")
	ws := t.TempDir()
	writeTree(t, ws, map[string]string{"README": "hello\n", "src/main.go": "package main\n"})
	p := poolPolicy(t, ws, 2)

	// The first session starts cold and declares the pool.
	first, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), first.ID, true); assertGone(t, first.ID) })
	if first.Warm {
		t.Error("the first session of a policy was warm; nothing could have been prepared")
	}
	var key string
	for _, pl := range h.Daemon.Pools() {
		if pl.Label == "pooled" {
			key = pl.Key
		}
	}
	if key == "" {
		t.Fatalf("no pool declared after a create with a pool block: %+v", h.Daemon.Pools())
	}
	t.Cleanup(func() {
		pl := h.Daemon.Pools()
		_ = h.Daemon.RemovePool(context.Background(), key)
		for _, p := range pl {
			if p.Key == key {
				for _, id := range p.ReadyIDs {
					assertGone(t, id)
				}
			}
		}
	})
	prepared := waitPoolReady(t, key, 2).ReadyIDs

	// Two sessions take the two prepared sandboxes, with other commands
	// and timeouts than the one that declared the pool.
	var sess []*api.Session
	for i := range 2 {
		q := p
		q.Command = []string{"sh", "-c", "echo started-" + string(rune('a'+i)) + "; exec sleep 300"}
		q.Timeout = policies.Duration(10 * time.Minute)
		s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: q, Start: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
		if !s.Warm || !slices.Contains(prepared, s.ID) {
			t.Fatalf("session %d: warm=%v id=%s, want a warm session taking one of %v", i, s.Warm, s.ID, prepared)
		}
		if s.State != api.StateRunning || s.Policy.Timeout != q.Timeout || !slices.Equal(s.Command, q.Command) {
			t.Errorf("warm session: state %s, timeout %v, command %v; want running with the request's own", s.State, s.Policy.Timeout, s.Command)
		}
		waitOutput(t, s.ID, "started-"+string(rune('a'+i)))
		sess = append(sess, s)
	}
	a, b := sess[0], sess[1]
	if pl := poolOf(t, key); pl.Hits < 2 {
		t.Errorf("pool hits %d, want >= 2", pl.Hits)
	}

	// The command took over the init: pid 1 is the command (sh exec'd
	// sleep), the launch directory is empty.
	if out, code := execOut(t, a.ID, "sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '; ls -A /run/airlock/init | wc -l"); code != 0 ||
		strings.TrimSpace(out) != "sleep 300 0" {
		t.Errorf("pid 1 and launch directory: %q (exit %d)", out, code)
	}

	// Credentials are minted for the session that took the sandbox.
	for _, s := range sess {
		tok, code := execOut(t, s.ID, "cat", "/run/airlock/credentials/world")
		if code != 0 {
			t.Fatalf("read credential: %q", tok)
		}
		c := jwtClaims(t, tok)
		if c["sid"] != s.ID {
			t.Errorf("file credential of %s names another session: %v", s.ID, c)
		}
		env, code := execOut(t, s.ID, "sh", "-c", "printenv JOBS_TOKEN | grep -c '^eyJ'")
		if code != 0 || strings.TrimSpace(env) == "0" {
			t.Errorf("env credential missing from an exec'd process of %s: %q", s.ID, env)
		}
	}

	// Each sandbox has its own workspace upper layer.
	if out, code := execOut(t, a.ID, "sh", "-c", "echo mine > /work/a.txt && cat /work/README"); code != 0 || out != "hello\n" {
		t.Fatalf("write in a: %q exit %d", out, code)
	}
	if out, code := execOut(t, b.ID, "ls", "/work"); code != 0 || strings.Contains(out, "a.txt") {
		t.Errorf("b sees a's workspace write: %q", out)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Error("a's write reached the host before any commit")
	}

	// Each has its own allow set: a resolves and connects; b, which never
	// resolved the name, cannot reach the address a's pin opened.
	curl := func(id, url string) (string, int) {
		return execOut(t, id, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
	}
	if out, code := curl(a.ID, "http://pool.corp.test/"); code != 0 || out != "200" {
		t.Fatalf("a: allowed name: %q exit %d", out, code)
	}
	if out, code := curl(b.ID, "http://10.214.0.30/"); code == 0 {
		t.Errorf("b reached the address pinned for a: %q", out)
	}
	evs, err := h.Daemon.Audit(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Layer == "dns" {
			t.Errorf("b's audit has a DNS event it never caused: %+v", ev)
		}
	}

	// The pool refills with new sandboxes; a taken one never comes back.
	refilled := waitPoolReady(t, key, 2).ReadyIDs
	for _, id := range refilled {
		if id == a.ID || id == b.ID || id == first.ID {
			t.Errorf("pool holds %s again, a sandbox a session already used", id)
		}
	}

	// A sandbox prepared before the host workspace changed is not used: a
	// new credential file must be masked. (One the pool prepared after the
	// change may be.)
	if err := os.WriteFile(filepath.Join(ws, ".env"), []byte("SECRET=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	q := p
	q.Command = []string{"sleep", "300"}
	c, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: q, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), c.ID, true); assertGone(t, c.ID) })
	if slices.Contains(refilled, c.ID) {
		t.Error("a sandbox prepared before the workspace changed was used")
	}
	if out, code := execOut(t, c.ID, "cat", "/work/.env"); code == 0 || strings.Contains(out, "SECRET") {
		t.Errorf(".env created on the host after the pool was prepared is readable: %q", out)
	}
	if pl := poolOf(t, key); pl.Discarded == 0 {
		t.Errorf("stale sandboxes were not counted as discarded: %+v", pl)
	}
	for _, id := range refilled {
		assertGone(t, id)
	}
}

// A missing program in a warm session is a 400 and leaves nothing behind.
func TestWarmPoolMissingProgram(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	p := policy("true")
	p.Label = "pooled-missing"
	p.Pool = &policies.Pool{Size: 1}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	var key string
	for _, pl := range h.Daemon.Pools() {
		if pl.Label == "pooled-missing" {
			key = pl.Key
		}
	}
	t.Cleanup(func() { _ = h.Daemon.RemovePool(context.Background(), key) })
	id := waitPoolReady(t, key, 1).ReadyIDs[0]
	p.Command = []string{"no-such-program"}
	_, err = h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err == nil || !strings.Contains(err.Error(), "no-such-program") {
		t.Fatalf("warm create of a missing program: %v", err)
	}
	assertGone(t, id)

	// And a warm `true` exits 0 with its output recorded.
	waitPoolReady(t, key, 1)
	p.Command = []string{"sh", "-c", "echo warm-out; echo warm-err >&2"}
	w, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), w.ID, true); assertGone(t, w.ID) })
	if !w.Warm {
		t.Error("not warm")
	}
	var out, errb bytes.Buffer
	if err := h.Daemon.Logs(ctx, w.ID, runtime.LogsOptions{Follow: true, Stdout: &out, Stderr: &errb}); err != nil {
		t.Fatal(err)
	}
	res, err := h.Daemon.Wait(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || out.String() != "warm-out\n" || errb.String() != "warm-err\n" {
		t.Errorf("warm session: exit %d stdout %q stderr %q", res.ExitCode, out.String(), errb.String())
	}
}

// BenchmarkWarmCreate times a warm Create (Start: true) of the full
// perimeter with a pool of 2, from the call to the running session's
// record, as `hack/perf.sh -only warmstart` does through the API; the
// refill each take starts is finished before the next (untimed), so a
// CPU profile of the benchmark (-cpuprofile) holds the creates and their
// refills, apart by their stacks (Daemon.Create, warmPools.fill). On a
// 2-core VM: 9.7 ms a create, of which 3 ms on a core (the credentials
// minted and the broker's state saved, the session's record), the rest
// waiting for the records' fsyncs (2.5 ms each on its disk, strace -T)
// and airlock-init.
//
//	go test ./daemon -run '^$' -bench BenchmarkWarmCreate -benchtime 40x -cpuprofile /tmp/warm.prof
//	go tool pprof -top -cum -focus 'Daemon..Create' daemon.test /tmp/warm.prof
func BenchmarkWarmCreate(b *testing.B) {
	testutil.RequiresRoot(b)
	ctx := b.Context()
	worldHost(b, "pool.corp.test", "10.214.0.30")
	ws := b.TempDir()
	writeTree(b, ws, map[string]string{"README": "hello\n", "src/main.go": "package main\n"})
	p := poolPolicy(b, ws, 2)
	p.Label = "pooled-bench"
	first, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), first.ID, true) })
	var key string
	for _, pl := range h.Daemon.Pools() {
		if pl.Label == p.Label {
			key = pl.Key
		}
	}
	if key == "" {
		b.Fatalf("no pool declared: %+v", h.Daemon.Pools())
	}
	b.Cleanup(func() { _ = h.Daemon.RemovePool(context.Background(), key) })
	q := p
	q.Command = []string{"echo", "x"}
	warm := 0
	for b.Loop() {
		b.StopTimer()
		waitPoolReady(b, key, 2)
		b.StartTimer()
		s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: q, Start: true})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if s.Warm {
			warm++
		}
		if err := h.Daemon.Remove(ctx, s.ID, true); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	if warm != b.N {
		b.Fatalf("%d of %d creates were warm", warm, b.N)
	}
}
