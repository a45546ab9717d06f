package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// daemonState is what a refused request must leave as it was: sessions,
// session directories, containerd objects, session network namespaces and
// prepared sandboxes.
type daemonState struct {
	sessions, dirs, netns, owned, pools, pooled int
}

func stateOf(t *testing.T) daemonState {
	t.Helper()
	ctx := t.Context()
	owned, err := h.Daemon.Runtime().Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dirs, _ := os.ReadDir(filepath.Join(h.Root, "sessions"))
	pooled := 0
	for _, p := range h.Daemon.Pools() {
		pooled += p.Ready
	}
	return daemonState{sessions: len(h.Daemon.List(ctx)), dirs: len(dirs), netns: len(sessionNamespaces(t)), owned: len(owned),
		pools: len(h.Daemon.Pools()), pooled: pooled}
}

// TestAdmissionRefusesHostTakeover sends, through the API socket, each
// request that would hand the host to a session under the built-in
// admission policy, and checks that each is refused with a 403 naming
// the rule, and that nothing was created.
func TestAdmissionRefusesHostTakeover(t *testing.T) {
	testutil.RequiresRoot(t)
	tmp := t.TempDir()
	// A docker.sock-like socket: a service that is root on the host.
	dockerSock := filepath.Join(tmp, "docker.sock")
	l, err := net.Listen("unix", dockerSock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	etcLink := filepath.Join(tmp, "etc-link")
	if err := os.Symlink("/etc", etcLink); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(tmp, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	dotdot := sub + "/../../../../../etc" // sub is /tmp/NAME/NNN/a/b: this is /etc
	// A ".." after a symlink: lexically the temporary directory, really
	// /etc.
	var etcSub string
	entries, _ := os.ReadDir("/etc")
	for _, e := range entries {
		if e.IsDir() {
			etcSub = filepath.Join("/etc", e.Name())
			break
		}
	}
	subLink := filepath.Join(tmp, "etc-sub")
	if err := os.Symlink(etcSub, subLink); err != nil {
		t.Fatal(err)
	}

	// The harness's "static-file" exec issuer: a script airlockd runs as
	// root to mint credentials.
	issuer, err := filepath.Abs(filepath.Join("..", "examples", "issuers", "static-file.sh"))
	if err != nil {
		t.Fatal(err)
	}

	mount := func(host string, ro bool) func(*policies.Policy) {
		return func(p *policies.Policy) {
			p.Mounts = []policies.Mount{{HostPath: host, Target: "/host", ReadOnly: ro}}
		}
	}
	workspace := func(host, mode string) func(*policies.Policy) {
		return func(p *policies.Policy) {
			p.Workspaces = []policies.Workspace{{HostPath: host, Target: "/workspace", Mode: mode, DefaultDenyRead: true}}
		}
	}
	cases := []struct {
		name string
		edit func(*policies.Policy)
		want string
	}{
		{"mount /", mount("/", false), `mount "/" refused: "/" is a protected host path`},
		{"mount / read-only", mount("/", true), `mount "/" refused: "/" is a protected host path`},
		{"mount the daemon root", mount(h.Root, true), `mount "` + h.Root + `" refused: "` + h.Root + `" is a protected host path`},
		{"mount the daemon's keys", mount(filepath.Join(h.Root, "keys"), true), `is beneath the protected host path "` + h.Root + `"`},
		{"mount the directory holding the daemon root", mount(filepath.Dir(h.Root), true), `contains the protected host path`},
		{"mount the API socket", mount(h.Socket, false), `refused: "` + h.Socket + `"`},
		{"mount containerd's socket", mount(h.ContainerdAddress(), false), `is beneath the protected host path "` + h.Root + `"`},
		{"mount /var/run/docker.sock", mount("/var/run/docker.sock", false), `is beneath the protected host path "/var/run"`},
		{"mount a docker.sock-like socket", mount(dockerSock, false), `is a unix socket`},
		{"mount /proc/1/root", mount("/proc/1/root", false), `is beneath the protected host path "/proc"`},
		{"mount an exec issuer writable", mount(issuer, false), `mount "` + issuer + `" refused: "` + issuer + `" is a protected host path (read-only use is admitted)`},
		{"rw workspace holding an exec issuer", workspace(filepath.Dir(issuer), policies.ModeRW), `contains the protected host path "` + issuer + `"`},
		{"rw workspace on /etc", workspace("/etc", policies.ModeRW), `workspace "/etc" refused: "/etc" is a protected host path`},
		{"overlay workspace on /etc", workspace("/etc", policies.ModeOverlay), `"/etc" is a protected host path`},
		{"workspace through a symlink to /etc", workspace(etcLink, policies.ModeRO), `workspace "` + etcLink + `" refused: "/etc" is a protected host path`},
		{"workspace through ..", workspace(dotdot, policies.ModeRO), `"/etc" is a protected host path`},
		{"workspace through a symlink and ..", workspace(subLink+"/..", policies.ModeRO), `workspace "` + subLink + `/.." refused: "/etc" is a protected host path`},
		{"user 0", func(p *policies.Policy) { p.User = "0" }, `user "0" refused: uid 0 is not among the admitted users`},
		{"group 0", func(p *policies.Policy) { p.User = "1000:0" }, `user "1000:0" refused: gid 0 is not among the admitted groups`},
		{"CAP_SYS_ADMIN", func(p *policies.Policy) { p.Capabilities = []string{"CAP_SYS_ADMIN"} }, `capability CAP_SYS_ADMIN refused`},
		{"CAP_DAC_READ_SEARCH", func(p *policies.Policy) { p.Capabilities = []string{"CAP_DAC_READ_SEARCH"} }, `capability CAP_DAC_READ_SEARCH refused`},
		{"CAP_NET_ADMIN", func(p *policies.Policy) { p.Capabilities = []string{"CAP_NET_ADMIN"} }, `capability CAP_NET_ADMIN refused`},
		{"memory above the built-in bound", func(p *policies.Policy) { p.Resources.Memory = 1 << 40 }, `resources.memory 1TiB refused: the limit is 64GiB`},
		{"warm pool mounting /", func(p *policies.Policy) {
			mount("/", true)(p)
			p.Pool = &policies.Pool{Size: 2}
		}, `mount "/" refused`},
	}
	cl := api.NewClient(h.Socket)
	defer cl.Close()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stateOf(t)
			p := policy("sh", "-c", "id; ls /host /workspace")
			tc.edit(&p)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, err := cl.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
			if err == nil {
				_ = h.Daemon.Remove(context.Background(), s.ID, true)
				t.Fatalf("admitted: session %s", s.ID)
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != 403 || !api.IsPermissionDenied(err) {
				t.Fatalf("error %v (%T), want a 403 permission_denied", err, err)
			}
			if !strings.HasPrefix(err.Error(), "admission: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not name the rule %q", err, tc.want)
			}
			if after := stateOf(t); after != before {
				t.Errorf("refused request changed the daemon: before %+v, after %+v", before, after)
			}
		})
	}
}

// TestAdmissionResolvesHostPaths checks that an admitted workspace named
// through a symlink is mounted from where the link pointed when it was
// admitted: the resolved path is what the session records.
func TestAdmissionResolvesHostPaths(t *testing.T) {
	testutil.RequiresRoot(t)
	real := t.TempDir()
	if err := os.WriteFile(filepath.Join(real, "f"), []byte("real\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	p := policy("cat", "/workspace/f")
	p.Workspaces = []policies.Workspace{{HostPath: link, Target: "/workspace", Mode: policies.ModeRO, DefaultDenyRead: true}}
	r := runSession(t, p)
	if r.exit != 0 || r.stdout != "real\n" {
		t.Fatalf("exit %d stdout %q stderr %q", r.exit, r.stdout, r.stderr)
	}
	s, err := h.Daemon.Inspect(t.Context(), r.id)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Policy.Workspaces[0].HostPath; got != real {
		t.Errorf("recorded host path %q, want the resolved %q", got, real)
	}
}

// TestWarningsReachTheCaller checks that what the daemon accepts with a
// warning is reported in the create response.
func TestWarningsReachTheCaller(t *testing.T) {
	testutil.RequiresRoot(t)
	ws := t.TempDir()
	p := policy("true")
	p.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/workspace", Mode: policies.ModeRW, DefaultDenyRead: true}}
	cl := api.NewClient(h.Socket)
	defer cl.Close()
	s, err := cl.CreateSession(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Daemon.Remove(context.Background(), s.ID, true); err != nil {
			t.Error(err)
		}
	})
	if len(s.Warnings) != 1 || !strings.HasPrefix(s.Warnings[0], "workspaces[0].mode: ") || !strings.Contains(s.Warnings[0], "reach the host directory") {
		t.Errorf("warnings %q, want the writable-workspace warning", s.Warnings)
	}
	// Inspect does not repeat them.
	v, err := cl.InspectSession(t.Context(), s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Warnings) != 0 {
		t.Errorf("inspect carries warnings %q", v.Warnings)
	}
}

// TestAdmissionPolicyBounds swaps in an operator policy on the running
// daemon and checks its bounds: resources above them and a session beyond
// the session limit are refused and leave nothing; a host path outside
// host_paths is refused; what the policy allows runs.
func TestAdmissionPolicyBounds(t *testing.T) {
	testutil.RequiresRoot(t)
	allowed := t.TempDir()
	readOnly := t.TempDir()
	outside := t.TempDir()
	st := stateOf(t)
	n := st.sessions + st.pooled
	a, diags := policies.DecodeAdmission("admission.hcl", []byte(`admission {
  host_paths      = ["`+allowed+`"]
  read_only_paths = ["`+readOnly+`"]
  users           = ["1000-1999"]
  capabilities    = ["CAP_NET_BIND_SERVICE", "CAP_SYS_ADMIN"]
  limits {
    memory   = "256MiB"
    sessions = `+strconv.Itoa(n+1)+`
  }
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })
	cl := api.NewClient(h.Socket)
	defer cl.Close()

	refused := func(p policies.Policy, want string) {
		t.Helper()
		before := stateOf(t)
		s, err := cl.CreateSession(t.Context(), api.CreateRequest{Policy: p})
		if err == nil {
			_ = h.Daemon.Remove(context.Background(), s.ID, true)
			t.Errorf("admitted %+v", p)
			return
		}
		if !api.IsPermissionDenied(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want a 403 saying %q", err, want)
		}
		if after := stateOf(t); after != before {
			t.Errorf("refused request changed the daemon: before %+v, after %+v", before, after)
		}
	}
	p := policy("sleep", "60")
	p.User = "1000"
	p.Resources.Memory = 512 << 20
	refused(p, "resources.memory 512MiB refused: the limit is 256MiB")
	p.Resources.Memory = 0
	p.User = "65534"
	refused(p, `user "65534" refused: uid 65534 is not among the admitted users (1000-1999)`)
	p.User = "1000"
	p.Workspaces = []policies.Workspace{{HostPath: outside, Target: "/w", Mode: policies.ModeRO, DefaultDenyRead: true}}
	refused(p, `is not under an admitted host path`)
	p.Workspaces = []policies.Workspace{{HostPath: readOnly, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true}}
	refused(p, `is under a read-only host path`)

	// Within the policy: a read-only use of a read-only root, a writable
	// workspace under host_paths, a capability the policy lists, and the
	// memory left out (the bound, lower than the default, applies).
	p.Workspaces = []policies.Workspace{
		{HostPath: readOnly, Target: "/r", Mode: policies.ModeRO, DefaultDenyRead: true},
		{HostPath: allowed, Target: "/w", Mode: policies.ModeOverlay, DefaultDenyRead: true},
	}
	p.Capabilities = []string{"CAP_SYS_ADMIN"}
	s, err := cl.CreateSession(t.Context(), api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatalf("create within the policy: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Daemon.Remove(context.Background(), s.ID, true); err != nil {
			t.Error(err)
		}
		assertGone(t, s.ID)
	})
	if s.Policy.Resources.Memory != 256<<20 {
		t.Errorf("memory %d, want the bound 256MiB", s.Policy.Resources.Memory)
	}
	if len(s.Warnings) == 0 || !strings.Contains(strings.Join(s.Warnings, "\n"), "CAP_SYS_ADMIN") {
		t.Errorf("warnings %q, want the one about CAP_SYS_ADMIN", s.Warnings)
	}
	// The session limit is reached: the next one is refused.
	p.Capabilities = nil
	refused(p, "session refused: the daemon holds")
}

// TestAirlockdAdmissionFlags runs the airlockd binary: a bad --admission
// file and --socket-group without --admission stop it before it touches
// anything, with file:line or the reason; with a policy file it serves the
// group and enforces the file's bounds through the API.
func TestAirlockdAdmissionFlags(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := filepath.Join(h.Env.BinDir, "airlockd")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("admission {\n  host_paths = [\"/srv\"]\n  users = [\"root\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.hcl")
	if err := os.WriteFile(good, []byte("admission {\n  host_paths = [\""+dir+"\"]\n  limits {\n    memory = \"256MiB\"\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp("/tmp", "ala-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = (&runtime.Embedded{Dir: filepath.Join(root, "containerd")}).Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})
	pool := filepath.Join(dir, "pool.hcl")
	if err := os.WriteFile(pool, []byte("session \"p\" {\n  image = \"x\"\n  mount \"/\" {\n    target = \"/host\"\n  }\n  pool {\n    size = 1\n  }\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badConfig := filepath.Join(dir, "airlockd.hcl")
	if err := os.WriteFile(badConfig, []byte("log_level = \"info\"\nuplnk = \"host\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refusedConfig := filepath.Join(dir, "refused.hcl")
	if err := os.WriteFile(refusedConfig, []byte("allow_private = [\"10.9.0.0/16\", \"8.8.8.0/24\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"--admission", bad}, "bad.hcl line 3", 2},
		{[]string{"--config", badConfig}, "airlockd.hcl line 2:\n   2: uplnk = \"host\"\n\nAn argument named \"uplnk\" is not expected here. Did you mean \"uplink\"?", 2},
		{[]string{"--config", refusedConfig}, "refused.hcl line 1", 2},
		{[]string{"--socket-group", "0"}, "give an explicit policy with --admission FILE", 2},
		{[]string{"--pool", pool}, `admission: mount \"/\" refused`, 1},
	} {
		state := filepath.Join(root, "refused")
		cmd := exec.Command(bin, append([]string{"--root", state, "--socket", filepath.Join(root, "r.sock"), "--bin-dir", h.Env.BinDir}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("airlockd %v: %v, output %q; want exit %d saying %q", tc.args, err, out, tc.code, tc.want)
		}
		if _, err := os.Stat(filepath.Join(state, "containerd")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("airlockd %v started containerd before refusing", tc.args)
		}
	}
	// A start that fails after it made its containerd (the uplink is
	// missing) ends that containerd: nothing of it runs on.
	state := filepath.Join(root, "failed")
	t.Cleanup(func() {
		_ = (&runtime.Embedded{Dir: filepath.Join(state, "containerd")}).Stop(context.Background(), 10*time.Second)
	})
	out, err := exec.Command(bin, "--root", state, "--socket", filepath.Join(root, "f.sock"), "--bin-dir", h.Env.BinDir,
		"--uplink", "netns:airlock-no-such-namespace").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "started containerd") || !strings.Contains(string(out), "uplink namespace") {
		t.Errorf("airlockd with a missing uplink: %v, output %q", err, out)
	}
	if e := (runtime.Embedded{Dir: filepath.Join(state, "containerd")}); e.Alive(t.Context()) {
		t.Errorf("the containerd of a failed start still answers at %s", e.Address())
	}
	if pid, err := os.ReadFile(filepath.Join(state, "containerd", "containerd.pid")); err == nil {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(pid))); n > 0 && syscall.Kill(n, 0) == nil {
			t.Errorf("the containerd of a failed start (pid %d) still runs", n)
		}
	}

	d := startProcDaemon(t, root, "--admission", good, "--socket-group", "0", "--stop-containerd")
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		_ = d.cmd.Wait()
	})
	fi, err := os.Stat(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Gid != 0 {
		t.Errorf("group socket mode %v gid %d, want 0660 and gid 0", fi.Mode(), st.Gid)
	}
	p := policy("true")
	p.User = "1000"
	p.Resources.Memory = 512 << 20
	b, _ := json.Marshal(api.CreateRequest{Policy: p})
	resp, err := d.http.Post("http://airlock/v1/sessions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 403 || eb.Error.Class != api.ClassPermissionDenied || eb.Error.Message != "admission" ||
		len(eb.Error.Details) != 1 || eb.Error.Details[0] != "resources.memory 512MiB refused: the limit is 256MiB" {
		t.Errorf("create above the memory bound: %d %+v", resp.StatusCode, eb.Error)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("refused create left %v", entries)
	}
}

// limitSessions has the test daemon admit at most n sessions and
// prepared sandboxes until the test ends.
func limitSessions(t *testing.T, n int) {
	t.Helper()
	a, diags := policies.DecodeAdmission("admission.hcl", []byte("admission {\n  host_paths = [\"/\"]\n  limits {\n    sessions = "+strconv.Itoa(n)+"\n  }\n}\n"))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })
}

// TestPoolFillsWithinSessionLimit checks that a warm pool asked for by a
// create fills only up to the session limit, and says why it stopped.
func TestPoolFillsWithinSessionLimit(t *testing.T) {
	testutil.RequiresRoot(t)
	st := stateOf(t)
	// Room for the session and one prepared sandbox.
	limitSessions(t, st.sessions+st.pooled+2)
	p := policy("sleep", "60")
	p.Label = "limited-pool"
	p.Pool = &policies.Pool{Size: 3}
	s, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Daemon.Remove(context.Background(), s.ID, true); err != nil {
			t.Error(err)
		}
	})
	var pl api.Pool
	for deadline := time.Now().Add(90 * time.Second); ; {
		for _, x := range h.Daemon.Pools() {
			if x.Label == "limited-pool" {
				pl = x
			}
		}
		if pl.Key != "" && !pl.Preparing && strings.Contains(pl.LastError, "session refused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool did not stop at the session limit: %+v", pl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() {
		if err := h.Daemon.RemovePool(context.Background(), pl.Key); err != nil {
			t.Error(err)
		}
	})
	if pl.Ready != 1 {
		t.Errorf("pool holds %d prepared sandboxes, want 1 (the limit leaves room for one)", pl.Ready)
	}
	if after := stateOf(t); after.sessions+after.pooled != st.sessions+st.pooled+2 {
		t.Errorf("sessions and prepared sandboxes: %+v, want %d in all", after, st.sessions+st.pooled+2)
	}
}

// TestWarmClaimStaysWithinSessionLimit takes a prepared sandbox from a
// pool when the session limit is reached: while the sandbox passes from
// the pool to the sessions it must keep its place under the limit, or the
// pool's filler (or another create) takes that place and the daemon ends
// up holding more than the limit.
func TestWarmClaimStaysWithinSessionLimit(t *testing.T) {
	testutil.RequiresRoot(t)
	st := stateOf(t)
	limit := st.sessions + st.pooled + 2
	limitSessions(t, limit)
	p := policy("sleep", "60")
	p.Label = "claim-limit"
	p.Pool = &policies.Pool{Size: 1}
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			if err := h.Daemon.Remove(context.Background(), id, true); err != nil {
				t.Error(err)
			}
		}
	})
	settled := func() api.Pool {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; {
			for _, x := range h.Daemon.Pools() {
				if x.Label == "claim-limit" && !x.Preparing {
					return x
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("pool did not settle: %+v", h.Daemon.Pools())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, s.ID)
	pl := settled()
	t.Cleanup(func() { _ = h.Daemon.RemovePool(context.Background(), pl.Key) })
	if pl.Ready != 1 {
		t.Fatalf("pool holds %d, want 1: %+v", pl.Ready, pl)
	}
	// The limit is reached (one session, one prepared sandbox): the
	// next create takes the prepared sandbox.
	s, err = h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, s.ID)
	if !s.Warm {
		t.Fatalf("session %s is not warm", s.ID)
	}
	settled()
	if after := stateOf(t); after.sessions+after.pooled > limit {
		t.Errorf("the daemon holds %d sessions and %d prepared sandboxes, over the limit of %d", after.sessions, after.pooled, limit)
	}
}

// TestColdCreateTakesAPreparedSandboxesPlace: at the session limit, with
// a place held by another policy's prepared sandbox, a cold create is
// admitted: the prepared sandbox is torn down and its place given to the
// session, and the daemon stays within the limit.
func TestColdCreateTakesAPreparedSandboxesPlace(t *testing.T) {
	testutil.RequiresRoot(t)
	st := stateOf(t)
	limit := st.sessions + st.pooled + 2
	limitSessions(t, limit)
	pooled := policy("sleep", "60")
	pooled.Label = "yielding-pool"
	pooled.Pool = &policies.Pool{Size: 1}
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			if err := h.Daemon.Remove(context.Background(), id, true); err != nil {
				t.Error(err)
			}
		}
	})
	s, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: pooled})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, s.ID)
	pool := func() api.Pool {
		for _, x := range h.Daemon.Pools() {
			if x.Label == "yielding-pool" {
				return x
			}
		}
		return api.Pool{}
	}
	for deadline := time.Now().Add(90 * time.Second); pool().Ready != 1 || pool().Preparing; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool did not fill: %+v", pool())
		}
	}
	t.Cleanup(func() { _ = h.Daemon.RemovePool(context.Background(), pool().Key) })

	// The limit is reached (one session, one prepared sandbox); another
	// policy's create takes the prepared sandbox's place.
	cold := policy("sleep", "60")
	cold.Label = "cold-at-limit"
	s, err = h.Daemon.Create(t.Context(), api.CreateRequest{Policy: cold})
	if err != nil {
		t.Fatalf("a cold create at the limit with a prepared sandbox waiting: %v", err)
	}
	ids = append(ids, s.ID)
	if s.Warm {
		t.Errorf("session %s took another policy's sandbox", s.ID)
	}
	if pl := pool(); pl.Ready != 0 || !strings.Contains(pl.LastError, "gave its place") {
		t.Errorf("pool after the create: %+v, want its sandbox gone, saying why", pl)
	}
	if after := stateOf(t); after.sessions+after.pooled > limit {
		t.Errorf("the daemon holds %d sessions and %d prepared sandboxes, over the limit of %d", after.sessions, after.pooled, limit)
	}
	// With nothing prepared left, the limit refuses as before.
	_, err = h.Daemon.Create(t.Context(), api.CreateRequest{Policy: cold})
	if err == nil || !strings.Contains(err.Error(), "session refused") {
		t.Errorf("a create over the limit with nothing prepared: %v, want the limit's refusal", err)
	}
	// The cold session removed: its place comes free and the pool fills
	// again by itself.
	if err := h.Daemon.Remove(t.Context(), s.ID, true); err != nil {
		t.Fatal(err)
	}
	ids = ids[:len(ids)-1]
	for deadline := time.Now().Add(90 * time.Second); pool().Ready != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool did not fill again once a place came free: %+v", pool())
		}
	}
}

// TestAdmissionCapabilitiesCannotLeaveTheUsers asks, under a policy that
// admits only uids and gids 1000-1999 but lists CAP_SETUID, CAP_SETGID,
// CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_MKNOD, for a session
// that uses one to act as root on a writable host path: with CAP_SETUID a uid-1000
// process becomes uid 0, with CAP_CHOWN it gives its files to root, with
// CAP_FOWNER it makes root's program setuid, with CAP_DAC_OVERRIDE it
// rewrites root's program, with CAP_MKNOD it makes a block device on the
// host. Each must be refused.
func TestAdmissionCapabilitiesCannotLeaveTheUsers(t *testing.T) {
	testutil.RequiresRoot(t)
	allowed := t.TempDir()
	if err := os.Chown(allowed, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	// Writable by uid 0 without capabilities too.
	if err := os.Chmod(allowed, 0o777); err != nil {
		t.Fatal(err)
	}
	// Root's files on the writable host path.
	for _, name := range []string{"fowner", "dac_override"} {
		if err := os.WriteFile(filepath.Join(allowed, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, diags := policies.DecodeAdmission("admission.hcl", []byte(`admission {
  host_paths   = ["`+allowed+`"]
  users        = ["1000-1999"]
  groups       = ["1000-1999"]
  capabilities = ["CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_MKNOD", "CAP_KILL"]
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })
	cl := api.NewClient(h.Socket)
	defer cl.Close()
	for _, tc := range []struct{ cap, name, script string }{
		{"CAP_SETUID", "setuid", "import os; os.setuid(0); open('/w/setuid', 'w').write('root')"},
		{"CAP_SETGID", "setgid", "import os; os.setgid(0); open('/w/setgid', 'w').write('root')"},
		{"CAP_CHOWN", "chown", "import os; open('/w/chown', 'w').write('root'); os.chown('/w/chown', 0, 0)"},
		// A setuid-root program on the host while the session runs (the
		// rw workspace's mode normalisation clears it at the end).
		{"CAP_FOWNER", "fowner", "import os; os.chmod('/w/fowner', 0o4755)"},
		// A block device node on the host, open to every host user.
		{"CAP_MKNOD", "mknod", "import os, stat; os.mknod('/w/mknod', 0o666 | stat.S_IFBLK, os.makedev(7, 0))"},
		{"CAP_DAC_OVERRIDE", "dac_override", "open('/w/dac_override', 'a').write('id\\n')"},
	} {
		t.Run(tc.cap, func(t *testing.T) {
			p := policy("python3", "-c", tc.script)
			p.User = "1000:1000"
			p.Capabilities = []string{tc.cap}
			p.Workspaces = []policies.Workspace{{HostPath: allowed, Target: "/w", Mode: policies.ModeRW, DefaultDenyRead: true}}
			s, err := cl.CreateSession(t.Context(), api.CreateRequest{Policy: p, Start: true})
			if err == nil {
				if _, err := h.Daemon.Wait(t.Context(), s.ID); err != nil {
					t.Error(err)
				}
				_ = h.Daemon.Remove(context.Background(), s.ID, true)
				var st syscall.Stat_t
				if err := syscall.Stat(filepath.Join(allowed, tc.name), &st); err == nil && (st.Uid == 0 || st.Gid == 0 || st.Mode&syscall.S_IFMT == syscall.S_IFBLK) {
					b, _ := os.ReadFile(filepath.Join(allowed, tc.name))
					t.Fatalf("admitted, and %s on the host is %d:%d mode %o: %q", tc.name, st.Uid, st.Gid, st.Mode&0o7777, b)
				}
				t.Fatalf("admitted %s for a uid-1000 session", tc.cap)
			}
			if !api.IsPermissionDenied(err) || !strings.Contains(err.Error(), "capability "+tc.cap+" refused") {
				t.Errorf("error %v, want a 403 refusing %s", err, tc.cap)
			}
		})
	}
	// Listed capabilities that leave the uid alone are still admitted.
	p := policy("true")
	p.User = "1000:1000"
	p.Capabilities = []string{"CAP_KILL"}
	s, err := cl.CreateSession(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatalf("CAP_KILL: %v", err)
	}
	_ = h.Daemon.Remove(context.Background(), s.ID, true)
}

// shockerScript opens the root directory of /w's filesystem by its file
// handle (open_by_handle_at, inode 2 of ext4) and reads /etc/shadow from
// there: a path admission refuses whatever the policy says.
const shockerScript = `
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
mfd = os.open('/w', os.O_RDONLY | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(struct.pack('Ii', 8, 1) + struct.pack('II', 2, 0))
fd = libc.open_by_handle_at(mfd, buf, os.O_RDONLY | os.O_DIRECTORY)
if fd < 0:
    raise OSError(ctypes.get_errno(), 'open_by_handle_at')
print(open(os.open('etc/shadow', os.O_RDONLY, dir_fd=fd)).read().splitlines()[0])
`

// TestDACReadSearchReachesNoOtherFile runs, under a policy that admits
// every uid and gid and CAP_DAC_READ_SEARCH, sessions that call
// open_by_handle_at through a writable mount of an admitted directory and
// through the daemon's own bind of the launch directory (every sandbox has
// it): a file handle names any inode of the filesystem, so /etc/shadow
// (and the daemon's signing keys) would be read. The call must be refused.
func TestDACReadSearchReachesNoOtherFile(t *testing.T) {
	testutil.RequiresRoot(t)
	allowed := t.TempDir()
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(allowed, &sfs); err != nil || sfs.Type != 0xEF53 {
		t.Fatalf("%s is not on ext4 (statfs type %x, %v): the attack needs ext4's root inode", allowed, sfs.Type, err)
	}
	a, diags := policies.DecodeAdmission("admission.hcl", []byte(`admission {
  host_paths   = ["`+allowed+`"]
  users        = ["0-4294967294"]
  groups       = ["0-4294967294"]
  capabilities = ["CAP_DAC_READ_SEARCH", "CAP_KILL"]
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })
	for _, dir := range []string{"/w", "/run/airlock/init"} {
		p := policy("python3", "-c", strings.ReplaceAll(shockerScript, "'/w'", "'"+dir+"'"))
		p.User = "1000:1000"
		p.Capabilities = []string{"CAP_DAC_READ_SEARCH"}
		p.Mounts = []policies.Mount{{HostPath: allowed, Target: "/w", DefaultDenyRead: true}}
		r := runSession(t, p)
		if strings.HasPrefix(r.stdout, "root:") {
			t.Errorf("through %s the session read /etc/shadow: %q", dir, r.stdout)
		}
		if !strings.Contains(r.stderr, "[Errno 1] open_by_handle_at") {
			t.Errorf("through %s: stderr %q, want open_by_handle_at refused with EPERM", dir, r.stderr)
		}
	}
}
