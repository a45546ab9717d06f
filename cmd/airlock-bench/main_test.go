package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// result is one invocation's outcome.
type result struct {
	stdout, stderr string
	code           int
}

// harness runs the command against a daemon that only answers version
// requests, and delivers fake signals.
type harness struct {
	t      *testing.T
	socket string
	env    map[string]string

	mu   sync.Mutex
	sigs chan<- os.Signal
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	// Not t.TempDir: a unix socket's path must stay short.
	dir, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	h := &harness{t: t, socket: filepath.Join(dir, "airlockd.sock")}
	h.env = map[string]string{"AIRLOCK_SOCKET": h.socket}
	l, err := net.Listen("unix", h.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.Version{Version: "0.0.0-test", Containerd: "v2.4.2", Root: "/var/lib/airlock"})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return h
}

// run executes the command with args.
func (h *harness) run(args ...string) result {
	h.t.Helper()
	var out, errb bytes.Buffer
	c := &cli{
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string { return h.env[k] },
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
	}
	ctx, cancel := context.WithTimeout(h.t.Context(), 30*time.Second)
	defer cancel()
	code := c.execute(ctx, args)
	return result{out.String(), errb.String(), code}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	h := newHarness(t)
	for _, args := range [][]string{{"--help"}, {"-h"}} {
		r := h.run(args...)
		if r.code != exitOK || r.stderr != "" {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, want := range []string{
			"Bench runs AmPermBench's task families",
			"Usage:\n  airlock-bench [flags]\n",
			"  airlock bench --family cancel-jobs --mode gate-only --mode perimeter\n",
			"--socket string ", "(default \"" + h.socket + "\")",
			"--world-netns string", "--gate stringArray", "--timeout duration",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%q: help lacks %q:\n%s", args, want, r.stdout)
			}
		}
	}
}

// TestCobraErrors: flag errors are usage errors, printed on one line
// with the program's name.
func TestCobraErrors(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nope"}, "airlock-bench: unknown flag: --nope (see 'airlock-bench --help')\n"},
		{[]string{"--workers", "two"}, `airlock-bench: invalid argument "two" for "--workers" flag: strconv.ParseInt: parsing "two": invalid syntax (see 'airlock-bench --help')` + "\n"},
		{[]string{"--timeout"}, "airlock-bench: flag needs an argument: --timeout (see 'airlock-bench --help')\n"},
		{[]string{"extra"}, "airlock-bench: airlock-bench takes no arguments (see 'airlock-bench --help')\n"},
	} {
		r := h.run(tc.args...)
		if r.code != exitUsage || r.stdout != "" || r.stderr != tc.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and stderr %q", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
}
