package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

const helloHCL = `session "hello" {
  image   = "airlock/agent:bookworm"
  command = ["echo", "hello from airlock"]
  timeout = "1m"
}
`

// result is one CLI invocation's outcome.
type result struct {
	stdout, stderr string
	code           int
}

// harness runs the CLI against a fake daemon and delivers fake signals.
type harness struct {
	t      *testing.T
	d      *fakeDaemon
	socket string

	// self is the running airlock's path and path the directories of
	// $PATH, for finding airlock-bench; execs records its exec calls, and
	// execErr is what they return.
	self    string
	path    []string
	execs   [][]string
	execErr error

	mu   sync.Mutex
	sigs chan<- os.Signal
}

func newHarness(t *testing.T) *harness {
	d := newFakeDaemon(t)
	return &harness{t: t, d: d, socket: d.sock}
}

// run executes the CLI with args and stdin.
func (h *harness) run(stdin string, args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	c := &cli{
		stdin:  strings.NewReader(stdin),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string {
			if k == "AIRLOCK_SOCKET" {
				return h.socket
			}
			return ""
		},
		notify: func(ch chan<- os.Signal) {
			h.mu.Lock()
			h.sigs = ch
			h.mu.Unlock()
		},
		stopNotify: func(chan<- os.Signal) {
			h.mu.Lock()
			h.sigs = nil
			h.mu.Unlock()
		},
		now: func() time.Time { return testNow },
		executable: func() (string, error) {
			if h.self == "" {
				return "", errors.New("no executable")
			}
			return h.self, nil
		},
		lookPath: func(file string) (string, error) {
			for _, dir := range h.path {
				if p := filepath.Join(dir, file); exists(p) {
					return p, nil
				}
			}
			return "", exec.ErrNotFound
		},
		exec: func(argv0 string, argv, envv []string) error {
			if argv0 != argv[0] {
				h.t.Errorf("exec %q with argv[0] %q", argv0, argv[0])
			}
			if !slices.Contains(envv, "AIRLOCK_TEST_ENV=1") {
				h.t.Errorf("exec %q without the environment: %q", argv0, envv)
			}
			h.execs = append(h.execs, argv)
			return h.execErr
		},
		environ: func() []string { return []string{"AIRLOCK_TEST_ENV=1"} },
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	code := c.execute(ctx, args)
	return result{out.String(), errb.String(), code}
}

// signal delivers sig to the running CLI.
func (h *harness) signal(sig os.Signal) {
	h.t.Helper()
	h.mu.Lock()
	ch := h.sigs
	h.mu.Unlock()
	if ch == nil {
		h.t.Fatal("the CLI is not listening for signals")
	}
	ch <- sig
}

func (r result) check(t *testing.T, wantCode int, wantStdout, wantStderr string) {
	t.Helper()
	if r.code != wantCode || r.stdout != wantStdout || r.stderr != wantStderr {
		t.Errorf("got exit %d\nstdout %q\nstderr %q\nwant exit %d\nstdout %q\nstderr %q",
			r.code, r.stdout, r.stderr, wantCode, wantStdout, wantStderr)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRun(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	tests := []struct {
		name    string
		args    []string
		want    result
		wantCmd []string
		kept    bool // the session still exists afterwards
	}{
		{
			name:    "manifest command",
			args:    []string{"run", "-f", manifest},
			want:    result{stdout: "hello from airlock\n"},
			wantCmd: []string{"echo", "hello from airlock"},
			kept:    true,
		},
		{
			name:    "override, streams apart, exit code",
			args:    []string{"run", "--rm", "-f", manifest, "--", "emit", "out=one", "err=warning", "out=two", "exit=3"},
			want:    result{stdout: "one\ntwo\n", stderr: "warning\n", code: 3},
			wantCmd: []string{"emit", "out=one", "err=warning", "out=two", "exit=3"},
		},
		{
			name:    "command flags after --",
			args:    []string{"run", "--rm", "-f", manifest, "--", "echo", "-n", "--rm"},
			want:    result{stdout: "-n --rm\n"},
			wantCmd: []string{"echo", "-n", "--rm"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			r := h.run("", tt.args...)
			r.check(t, tt.want.code, tt.want.stdout, tt.want.stderr)
			creates, _, _ := h.d.recorded()
			if len(creates) != 1 {
				t.Fatalf("%d create requests, want 1", len(creates))
			}
			req := creates[0]
			if !req.Start {
				t.Error("create request without start=true")
			}
			if !reflect.DeepEqual(req.Policy.Command, tt.wantCmd) {
				t.Errorf("command = %q, want %q", req.Policy.Command, tt.wantCmd)
			}
			if _, ok := h.d.session("s1"); ok != tt.kept {
				t.Errorf("session exists = %v, want %v", ok, tt.kept)
			}
		})
	}
}

func TestRunPolicyOverrides(t *testing.T) {
	manifest := writeFile(t, "vars.hcl", `
variable "msg" {
  default = "default message"
}
session "vars" {
  image   = "airlock/agent:bookworm"
  command = ["echo", var.msg]
}
`)
	h := newHarness(t)
	h.run("", "run", "-f", manifest, "-var", "msg=from the flag", "--name", "renamed").
		check(t, 0, "from the flag\n", "")
	creates, _, _ := h.d.recorded()
	if got := creates[0].Policy.Label; got != "renamed" {
		t.Errorf("label = %q, want renamed", got)
	}
	// Defaults applied locally travel with the policy.
	if got := creates[0].Policy.User; got != policies.DefaultUser {
		t.Errorf("user = %q, want %q", got, policies.DefaultUser)
	}
}

func TestRunManifestErrors(t *testing.T) {
	bad := writeFile(t, "bad.hcl", `session "bad" {
  image   = "airlock/agent:bookworm"
  timeout = "soon"
}
`)
	tests := []struct {
		name       string
		args       []string
		wantStderr []string // substrings
	}{
		{"diagnostics with snippet", []string{"run", "-f", bad}, []string{"Error: ", "bad.hcl line 3", `timeout = "soon"`}},
		{"missing file", []string{"run", "-f", filepath.Join(t.TempDir(), "none.hcl")}, []string{"airlock: reading manifest: open ", "no such file or directory"}},
		{"no -f", []string{"run", "--", "true"}, []string{"airlock: a manifest is required: -f FILE\n"}},
		{"bad var", []string{"run", "-f", bad, "--var", "novalue"}, []string{`airlock: invalid --var "novalue": want NAME=VALUE` + "\n"}},
		{"undeclared var", []string{"run", "-f", writeFile(t, "ok.hcl", helloHCL), "--var", "x=1"}, []string{"Error: "}},
		{"rm and detach", []string{"run", "--rm", "-d", "-f", bad}, []string{"airlock: --rm and --detach cannot be used together\n"}},
		{"override fails validation", []string{"run", "-f", writeFile(t, "ok.hcl", helloHCL), "--", "a\x00b"}, []string{"airlock: ", "ok.hcl: invalid policy: command[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			r := h.run("", tt.args...)
			if r.code != exitUsage || r.stdout != "" {
				t.Errorf("exit %d stdout %q, want exit 2 and no output", r.code, r.stdout)
			}
			for _, s := range tt.wantStderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not contain %q", r.stderr, s)
				}
			}
			if n := h.d.requestCount(); n != 0 {
				t.Errorf("%d requests reached the daemon, want 0", n)
			}
		})
	}
}

func TestRunDaemonErrors(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	t.Run("unreachable", func(t *testing.T) {
		h := newHarness(t)
		h.socket = filepath.Join(t.TempDir(), "nope.sock")
		h.run("", "run", "-f", manifest).check(t, exitDaemon, "",
			"airlock: cannot reach airlockd at "+h.socket+": connect: no such file or directory (is airlockd running? set --socket or AIRLOCK_SOCKET)\n")
	})
	t.Run("socket flag wins", func(t *testing.T) {
		h := newHarness(t)
		good := h.socket
		h.socket = "/nonexistent/airlock.sock"
		h.run("", "--socket", good, "run", "-f", manifest).check(t, 0, "hello from airlock\n", "")
	})
	t.Run("unknown image", func(t *testing.T) {
		h := newHarness(t)
		m := writeFile(t, "other.hcl", strings.Replace(helloHCL, "airlock/agent:bookworm", "other:1", 1))
		h.run("", "run", "-f", m).check(t, exitDaemon, "", "airlock: image \"other:1\" not found\n")
	})
	t.Run("start fails", func(t *testing.T) {
		h := newHarness(t)
		h.run("", "run", "--rm", "-f", manifest, "--", "missing").check(t, exitDaemon, "",
			"airlock: exec: \"missing\": executable file not found in $PATH\n")
	})
}

func TestRunDetach(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	h.run("", "run", "-d", "-f", manifest, "--", "emit", "block").check(t, 0, "s1\n", "")
	s, ok := h.d.session("s1")
	if !ok || s.State != api.StateRunning {
		t.Errorf("session after run -d: %+v (exists %v), want running", s, ok)
	}
}

// startRun runs the CLI in the background and waits until it follows the
// session's logs.
func startRun(t *testing.T, h *harness, args ...string) <-chan result {
	t.Helper()
	done := make(chan result, 1)
	go func() { done <- h.run("", args...) }()
	select {
	case <-h.d.following:
	case r := <-done:
		t.Fatalf("run ended early: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("run never followed the logs")
	}
	return done
}

func TestRunSignals(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	t.Run("SIGINT stops, --rm removes", func(t *testing.T) {
		h := newHarness(t)
		done := startRun(t, h, "run", "--rm", "-f", manifest, "--", "emit", "out=started", "block")
		h.signal(os.Interrupt)
		r := <-done
		r.check(t, 143, "started\n", "terminated\n")
		if _, stops, _ := h.d.recorded(); len(stops) != 1 || stops[0].Grace != policies.Duration(10*time.Second) {
			t.Errorf("stop requests = %+v, want one with the default grace", stops)
		}
		if _, ok := h.d.session("s1"); ok {
			t.Error("session not removed")
		}
	})
	t.Run("second signal kills", func(t *testing.T) {
		h := newHarness(t)
		done := startRun(t, h, "run", "-f", manifest, "--", "emit", "ignoreterm", "block")
		h.signal(syscall.SIGTERM)
		// The daemon has the first stop request before the second signal.
		if req := <-h.d.stopped; req.Grace != policies.Duration(10*time.Second) {
			t.Errorf("first stop grace = %v, want the default", req.Grace)
		}
		h.signal(os.Interrupt)
		if req := <-h.d.stopped; req.Grace != killNow {
			t.Errorf("second stop grace = %v, want %v", req.Grace, killNow)
		}
		r := <-done
		r.check(t, 137, "", "")
		if s, ok := h.d.session("s1"); !ok || s.State != api.StateStopped {
			t.Errorf("session = %+v, want kept and stopped", s)
		}
	})
}

func TestRunSignalDuringCreate(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	gated := func(t *testing.T) (*harness, <-chan result) {
		h := newHarness(t)
		h.d.gate, h.d.creating = make(chan struct{}), make(chan struct{}, 1)
		done := make(chan result, 1)
		go func() { done <- h.run("", "run", "--rm", "-f", manifest, "--", "emit", "out=started", "block") }()
		<-h.d.creating
		return h, done
	}
	t.Run("one signal is forwarded once the session exists", func(t *testing.T) {
		h, done := gated(t)
		h.signal(os.Interrupt)
		close(h.d.gate)
		r := <-done
		r.check(t, 143, "started\n", "terminated\n")
		if _, stops, _ := h.d.recorded(); len(stops) != 1 {
			t.Errorf("stop requests = %+v, want one", stops)
		}
		if _, ok := h.d.session("s1"); ok {
			t.Error("session not removed")
		}
	})
	t.Run("two signals abandon the request", func(t *testing.T) {
		h, done := gated(t)
		h.signal(os.Interrupt)
		h.signal(os.Interrupt)
		r := <-done
		r.check(t, exitInterrupted, "", "airlock: interrupted while creating the session\n")
	})
}

func TestCreateStartWaitLogs(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	h.run("", "create", "-f", manifest, "--", "emit", "out=o1", "err=e1", "exit=7").check(t, 0, "s1\n", "")
	if s, _ := h.d.session("s1"); s.State != api.StateCreated {
		t.Errorf("state after create = %q", s.State)
	}
	h.run("", "start", "s1").check(t, 0, "s1\n", "")
	h.run("", "start", "s1").check(t, exitFailure, "", "airlock: session s1 is stopped\n")
	h.run("", "wait", "s1").check(t, 0, "7\n", "")
	h.run("", "wait", "--json", "s1").check(t, 0, "{\n  \"exit_code\": 7,\n  \"reason\": \"exited\"\n}\n", "")
	h.run("", "logs", "s1").check(t, 0, "o1\n", "e1\n")
	h.run("", "logs", "--stdout-only", "s1").check(t, 0, "o1\n", "")
	h.run("", "logs", "-f", "--stderr-only", "s1").check(t, 0, "", "e1\n")
	h.run("", "logs", "--stdout-only", "--stderr-only", "s1").check(t, exitUsage, "",
		"airlock: --stdout-only and --stderr-only cannot be used together\n")
	h.run("", "logs", "nope").check(t, exitFailure, "", "airlock: session \"nope\" not found\n")
}

func TestExec(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	h.run("", "run", "-d", "-f", manifest, "--", "emit", "block").check(t, 0, "s1\n", "")

	h.run("", "exec", "s1", "--", "emit", "out=x", "err=y", "exit=4").check(t, 4, "x\n", "y\n")
	h.run("piped input\n", "exec", "-i", "s1", "--", "cat").check(t, 0, "piped input\n", "")
	h.run("ignored", "exec", "s1", "-e", "A=1", "-w", "/work", "--", "cat").check(t, 0, "", "")
	_, _, execs := h.d.recorded()
	last := execs[len(execs)-1]
	want := api.ExecRequest{Command: []string{"cat"}, Env: map[string]string{"A": "1"}, Workdir: "/work"}
	if !reflect.DeepEqual(last, want) {
		t.Errorf("exec request = %+v, want %+v", last, want)
	}
	h.run("", "exec", "s1", "-e", "A", "--", "cat").check(t, exitUsage, "", "airlock: invalid --env \"A\": want NAME=VALUE\n")
	h.run("", "exec", "s1").check(t, exitUsage, "", "airlock: airlock exec takes a session ID and a COMMAND (see 'airlock exec --help')\n")

	h.run("", "stop", "s1").check(t, 0, "s1\n", "")
	h.run("", "exec", "s1", "--", "true").check(t, exitDaemon, "", "airlock: session s1 is not running\n")
}

func TestStopRm(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	for range 3 {
		h.run("", "run", "-d", "-f", manifest, "--", "emit", "block")
	}
	h.run("", "stop", "--time", "3s", "s1").check(t, 0, "s1\n", "")
	h.run("", "stop", "-t", "0", "s2").check(t, 0, "s2\n", "")
	_, stops, _ := h.d.recorded()
	if got := []policies.Duration{stops[0].Grace, stops[1].Grace}; got[0] != policies.Duration(3*time.Second) || got[1] != killNow {
		t.Errorf("graces = %v, want [3s, %v]", got, killNow)
	}
	h.run("", "rm", "s3").check(t, exitFailure, "", "airlock: session s3 is running; stop it first or remove it with force\n")
	h.run("", "rm", "s1", "nope", "s2").check(t, exitFailure, "s1\ns2\n", "airlock: removing nope: session \"nope\" not found\n")
	h.run("", "rm", "-f", "s3").check(t, 0, "s3\n", "")
	h.run("", "ps", "-aq").check(t, 0, "", "")
}

func TestPsInspect(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	h.run("", "run", "-f", manifest)
	h.run("", "run", "-d", "-f", manifest, "--name", "agent", "--", "emit", "out=a long argument that will be cut", "block")
	h.run("", "create", "-f", manifest)

	h.run("", "ps").check(t, 0, ""+
		"ID   LABEL   STATE     IMAGE                    CREATED         COMMAND\n"+
		"s2   agent   running   airlock/agent:bookworm   2 minutes ago   emit \"out=a long argument that will be …\n", "")
	h.run("", "ps", "-a").check(t, 0, ""+
		"ID   LABEL   STATE         IMAGE                    CREATED         COMMAND\n"+
		"s1   hello   stopped (0)   airlock/agent:bookworm   1 minute ago    echo \"hello from airlock\"\n"+
		"s2   agent   running       airlock/agent:bookworm   2 minutes ago   emit \"out=a long argument that will be …\n"+
		"s3   hello   created       airlock/agent:bookworm   3 minutes ago   echo \"hello from airlock\"\n", "")
	h.run("", "ps", "-a", "-q").check(t, 0, "s1\ns2\ns3\n", "")

	r := h.run("", "ps", "--json")
	var list []api.Session
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].ID != "s2" {
		t.Errorf("ps --json = %q (%v), want one running session", r.stdout, err)
	}

	r = h.run("", "inspect", "s2")
	var s api.Session
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
		t.Fatalf("inspect output %q: %v", r.stdout, err)
	}
	if s.ID != "s2" || s.Label != "agent" || s.Policy.Image != "airlock/agent:bookworm" {
		t.Errorf("inspect = %+v", s)
	}
	h.run("", "inspect").check(t, exitUsage, "", "airlock: airlock inspect takes one session ID (see 'airlock inspect --help')\n")
	h.run("", "inspect", "nope").check(t, exitFailure, "", "airlock: session \"nope\" not found\n")
}

func TestImages(t *testing.T) {
	h := newHarness(t)
	archive := writeFile(t, "img.tar", "not really a tar")
	h.run("", "image", "import", archive, "--name", "mine:1").
		check(t, 0, "Imported mine:1 (sha256:"+sha256hex("not really a tar")+")\n", "")
	h.run("from stdin", "image", "import", "-").
		check(t, 0, "Imported imported:latest (sha256:"+sha256hex("from stdin")+")\n", "")
	h.run("", "image", "ls").check(t, 0, ""+
		"NAME                     AGENT           DIGEST                SIZE      CREATED\n"+
		"airlock/agent:bookworm   -               sha256:abababababab   123.4MB   3 days ago\n"+
		"airlock/codex:bookworm   codex 0.169.0   sha256:cdcdcdcdcdcd   500MB     3 days ago\n"+
		"imported:latest          -               sha256:"+sha256hex("from stdin")[:12]+"   10B       Less than a second ago\n"+
		"mine:1                   -               sha256:"+sha256hex("not really a tar")[:12]+"   16B       Less than a second ago\n", "")
	h.run("", "image", "ls", "-q").check(t, 0, "airlock/agent:bookworm\nairlock/codex:bookworm\nimported:latest\nmine:1\n", "")
	r := h.run("", "image", "ls", "--json")
	var imgs []api.Image
	if err := json.Unmarshal([]byte(r.stdout), &imgs); err != nil || len(imgs) != 4 {
		t.Errorf("image ls --json = %q (%v)", r.stdout, err)
	} else if got := imgs[1].Labels[api.LabelAgentVersion]; got != "0.169.0" {
		t.Errorf("image ls --json: codex image's version label = %q, want 0.169.0 (%q)", got, r.stdout)
	}
	missing := filepath.Join(t.TempDir(), "none.tar")
	h.run("", "image", "import", missing).check(t, exitFailure, "", "airlock: open "+missing+": no such file or directory\n")
	h.run("", "image", "import", archive, "extra").check(t, exitUsage, "",
		"airlock: airlock image import takes one archive FILE, or - for standard input (see 'airlock image import --help')\n")
}

func sha256hex(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }

func TestVersion(t *testing.T) {
	h := newHarness(t)
	h.run("", "version").check(t, 0, "Client: dev\nServer: 0.0.0-test (containerd v2.4.2, root /var/lib/airlock)\n", "")
	r := h.run("", "version", "--json")
	var v struct {
		Client struct{ Version string }
		Server api.Version
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Client.Version != "dev" || v.Server.Version != "0.0.0-test" {
		t.Errorf("version --json = %q (%v)", r.stdout, err)
	}
	h.socket = filepath.Join(t.TempDir(), "nope.sock")
	r = h.run("", "version")
	if r.code != exitFailure || r.stdout != "Client: dev\n" || !strings.HasPrefix(r.stderr, "airlock: cannot reach airlockd at ") {
		t.Errorf("version without daemon = %+v", r)
	}
}

func TestUsageErrors(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		args   []string
		stderr string
	}{
		{[]string{"xyzzy"}, "airlock: unknown command \"xyzzy\" for \"airlock\" (see 'airlock --help')\n"},
		{[]string{"stpo"}, "airlock: unknown command \"stpo\" for \"airlock\"; did you mean \"stop\"? (see 'airlock --help')\n"},
		{[]string{"ps", "--bogus"}, "airlock: unknown flag: --bogus (see 'airlock ps --help')\n"},
		{[]string{"ps", "extra"}, "airlock: airlock ps takes no arguments (see 'airlock ps --help')\n"},
		{[]string{"stop", "--time", "soon", "s1"}, "airlock: invalid argument \"soon\" for \"-t, --time\" flag: time: invalid duration \"soon\" (see 'airlock stop --help')\n"},
		{[]string{"stop", "--time", "-1s", "s1"}, "airlock: --time must not be negative\n"},
		{[]string{"image", "bogus"}, "airlock: unknown command \"bogus\" for \"airlock image\" (see 'airlock image --help')\n"},
		{[]string{"rm"}, "airlock: airlock rm takes at least one session ID (see 'airlock rm --help')\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			h.run("", tt.args...).check(t, exitUsage, "", tt.stderr)
		})
	}
	if n := h.d.requestCount(); n != 0 {
		t.Errorf("%d requests reached the daemon, want 0", n)
	}
}

// TestHelp checks that every command documents itself with a description
// and an example, and that commands that do not work yet are absent.
func TestHelp(t *testing.T) {
	c := &cli{getenv: func(string) string { return "" }}
	root := c.newRootCommand()
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if sub.Short == "" || sub.Example == "" {
				t.Errorf("%s: missing Short or Example", sub.CommandPath())
			}
			walk(sub)
		}
	}
	walk(root)
	for _, name := range []string{"audit", "diff", "commit", "discard"} {
		if cmd, _, err := root.Find([]string{name}); err != nil || cmd == root {
			t.Errorf("command %q is missing", name)
		}
	}

	h := newHarness(t)
	for _, args := range [][]string{{"--help"}, {"run", "--help"}, {"image", "import", "--help"}, {"help", "fmt"}, {"image"}} {
		r := h.run("", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("%q: exit %d stdout %q stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := h.run("", "run", "--help"); !strings.Contains(r.stdout, "airlock run -f examples/hello.hcl") {
		t.Errorf("run --help has no example:\n%s", r.stdout)
	}
}

func TestNormalizeArgs(t *testing.T) {
	got := normalizeArgs([]string{"run", "-var", "a=1", "-var=b=2", "-f", "x", "--", "tool", "-var", "c"})
	want := []string{"run", "--var", "a=1", "--var=b=2", "-f", "x", "--", "tool", "-var", "c"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("normalizeArgs = %q, want %q", got, want)
	}
}

// TestWarningsPrinted checks that the daemon's warnings about a policy
// reach stderr for run, run -d and create, and stay off stdout.
func TestWarningsPrinted(t *testing.T) {
	ws := t.TempDir()
	manifest := writeFile(t, "rw.hcl", `session "rw" {
  image   = "airlock/agent:bookworm"
  command = ["echo", "hi"]
  workspace "`+ws+`" {
    target = "/workspace"
    mode   = "rw"
  }
}
`)
	const warning = `airlock: warning: workspaces[0].mode: with mode "rw" the session's writes reach the host directory directly, and deny_read masks only what exists when the session starts: a file the host creates during the session is readable` + "\n"
	for _, tt := range []struct {
		args   []string
		stdout string
	}{
		{[]string{"run", "--rm", "-f", manifest}, "hi\n"},
		{[]string{"run", "-d", "-f", manifest}, "s1\n"},
		{[]string{"create", "-f", manifest}, "s1\n"},
	} {
		t.Run(tt.args[0]+" "+tt.args[1], func(t *testing.T) {
			h := newHarness(t)
			h.run("", tt.args...).check(t, 0, tt.stdout, warning)
		})
	}
}

// TestQueuedNoted: a create that waited a second or more for its turn
// among the sandboxes being prepared says so on stderr; a shorter wait
// is not mentioned.
func TestQueuedNoted(t *testing.T) {
	manifest := writeFile(t, "q.hcl", `session "q" {
  image   = "airlock/agent:bookworm"
  command = ["echo", "hi"]
}
`)
	for _, tt := range []struct {
		queued time.Duration
		stderr string
	}{
		{2460 * time.Millisecond, "airlock: note: the create waited 2.5s for its turn among the sandboxes being prepared (airlockd --max-preparing)\n"},
		{900 * time.Millisecond, ""},
	} {
		h := newHarness(t)
		h.d.queued = policies.Duration(tt.queued)
		h.run("", "run", "--rm", "-f", manifest).check(t, 0, "hi\n", tt.stderr)
	}
}

func TestUpdate(t *testing.T) {
	manifest := writeFile(t, "task.hcl", `session "task" {
  image   = "airlock/agent:bookworm"
  command = ["emit", "block"]
  egress { allow = ["a.test", "b.test"] }
}
`)
	revised := writeFile(t, "revised.hcl", `variable "extra" { default = "c.test" }
session "task" {
  image   = "airlock/agent:bookworm"
  egress { allow = ["b.test", var.extra] }
}
`)
	image := writeFile(t, "image.hcl", `session "task" {
  image   = "airlock/other:1"
  user    = "0:0"
  egress { allow = ["b.test"] }
}
`)
	h := newHarness(t)
	h.run("", "run", "-d", "-f", manifest).check(t, 0, "s1\n", "")

	h.run("", "update", "s1").check(t, exitUsage, "", "airlock: a manifest is required: -f FILE\n")
	h.run("", "update", "-f", revised).check(t, exitUsage, "", "airlock: airlock update takes one session ID (see 'airlock update --help')\n")
	h.run("", "update", "nope", "-f", revised).check(t, exitFailure, "", "airlock: session \"nope\" not found\n")
	h.run("", "update", "s1", "-f", image).check(t, exitFailure, "",
		"airlock: session \"s1\": revision refused, nothing changed: image: cannot change on a running session; user: cannot change on a running session\n")
	if s, _ := h.d.session("s1"); s.PolicyVersion > 1 || len(s.Policy.Egress.Allow) != 2 {
		t.Errorf("a refused revision changed the session: %+v", s)
	}
	h.run("", "update", "--var", "extra=d.test", "s1", "-f", revised).check(t, 0,
		"s1: policy version 2 (was 1)\n  egress allow added: d.test\n  egress allow removed: a.test\n  egress allow kept: b.test\n  connections cut: 0\n", "")
	h.run("", "update", "--var", "extra=d.test", "s1", "-f", revised).check(t, 0, "s1: nothing to revise (policy version 2)\n", "")
	r := h.run("", "update", "s1", "-f", revised, "--json")
	var s api.Session
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || r.code != 0 {
		t.Fatalf("--json: exit %d %q: %v", r.code, r.stdout, err)
	}
	if s.PolicyVersion != 3 || s.Revision == nil || !slices.Equal(s.Revision.Allow.Added, []string{"c.test"}) {
		t.Errorf("--json: version %d, revision %+v", s.PolicyVersion, s.Revision)
	}

	creds := writeFile(t, "creds.hcl", `session "task" {
  image   = "airlock/agent:bookworm"
  egress { allow = ["b.test", "c.test"] }
  credential "jobs" {
    audience = "jobs.test"
    scopes   = ["jobs.cancel owner=alex"]
  }
}
`)
	h.run("", "update", "s1", "-f", creds).check(t, exitFailure, "", "airlock: session \"s1\": revision refused, nothing changed: credential.jobs: "+
		policies.ReasonCredentialDir+"\n")
	gw := writeFile(t, "gateway.hcl", strings.Replace(readFileT(t, creds), `scopes   = ["jobs.cancel owner=alex"]`,
		`scopes   = ["jobs.cancel owner=alex"]
    deliver  = "gateway"`, 1))
	r = h.run("", "update", "s1", "-f", gw)
	if r.code != 0 || r.stdout != "s1: policy version 4 (was 3)\n  egress allow kept: b.test, c.test\n  credentials added: jobs (jti jti-jobs)\n  tokens minted: 1\n" {
		t.Errorf("update adding a credential: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func readFileT(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
