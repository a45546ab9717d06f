// Package e2e drives the airlock CLI binary against a real daemon, as an
// operator would.
package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
)

var h *daemontest.Harness

func TestMain(m *testing.M) {
	flag.Parse()
	if !testutil.RequiresRootM() {
		os.Exit(m.Run())
	}
	var err error
	h, err = daemontest.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start daemon:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := h.Close(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "close daemon:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// airlock runs the CLI binary against the harness daemon.
func airlock(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.Env.BinDir, "airlock"), args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_SOCKET="+h.Socket)
	cmd.Dir = "../examples"
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("airlock %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

func TestRunHello(t *testing.T) {
	testutil.RequiresRoot(t)
	r := airlock(t, "", "run", "--rm", "-f", "hello.hcl")
	if r.code != 0 || r.stdout != "hello from airlock\n" || r.stderr != "" {
		t.Errorf("run hello: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = airlock(t, "", "run", "--rm", "-f", "hello.hcl", "--", "sh", "-c", "echo out; echo err >&2; exit 42")
	if r.code != 42 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("run with override: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := airlock(t, "", "ps", "-a", "-q"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("--rm left sessions: %q", r.stdout)
	}
}

func TestSessionCommands(t *testing.T) {
	testutil.RequiresRoot(t)
	r := airlock(t, "", "create", "-f", "hello.hcl", "--", "sh", "-c", "echo started; sleep 300")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("create: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	t.Cleanup(func() { airlock(t, "", "rm", "-f", id) })
	if r := airlock(t, "", "start", id); r.code != 0 {
		t.Fatalf("start: %+v", r)
	}
	if r := airlock(t, "hello\n", "exec", "-i", id, "--", "tr", "a-z", "A-Z"); r.code != 0 || r.stdout != "HELLO\n" {
		t.Errorf("exec -i: %+v", r)
	}
	if r := airlock(t, "", "stop", "--time", "1s", id); r.code != 0 {
		t.Errorf("stop: %+v", r)
	}
	if r := airlock(t, "", "logs", id); r.stdout != "started\n" {
		t.Errorf("logs: %+v", r)
	}
	r = airlock(t, "", "audit", id)
	if r.code != 0 || !strings.Contains(r.stdout, "session  started") || !strings.Contains(r.stdout, "session  ended") {
		t.Errorf("audit: %+v", r)
	}
	if r := airlock(t, "", "rm", id); r.code != 0 {
		t.Errorf("rm: %+v", r)
	}
	if r := airlock(t, "", "inspect", id); r.code == 0 || !strings.Contains(r.stderr, "no session") {
		t.Errorf("inspect after rm: %+v", r)
	}
}

func TestBadManifestCreatesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(bad, []byte("session \"x\" {\n  image = \"airlock/agent:bookworm\"\n  timeout = \"soon\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := airlock(t, "", "run", "--rm", "-f", bad)
	if r.code != 2 || !strings.Contains(r.stderr, "bad.hcl line 3") || !strings.Contains(r.stderr, "Invalid duration") {
		t.Errorf("bad manifest: exit %d stderr %q, want 2 with file:line", r.code, r.stderr)
	}
	if r := airlock(t, "", "ps", "-a", "-q"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("a bad manifest created a session: %q", r.stdout)
	}
}
