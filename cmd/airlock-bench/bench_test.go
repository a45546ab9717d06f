package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBenchUsageErrors(t *testing.T) {
	h := newHarness(t)
	image := writeFile(t, "bench.tar", "not really an image")
	actions := writeFile(t, "actions.jsonl", "{not json\n")
	goodActions := writeFile(t, "good.jsonl", `{"family": "cancel-jobs", "command": "true"}`+"\n")
	badPairs := t.TempDir()
	if err := os.WriteFile(badPairs+"/x.hcl", []byte("family = \"no-such-family\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"gate", []string{"--gate", "llm:gpt"}, `--gate: unknown gate "llm:gpt"`},
		{"instances missing", []string{"--instances", "/nonexistent/pairs"}, "--instances: "},
		{"instances broken", []string{"--instances", badPairs}, "--instances: " + badPairs + "/x.hcl:1"},
		{"actions", []string{"--actions", actions}, "--actions:"},
		{"world without socket", []string{"--world-netns", "w"}, "--world-netns, --world-dns and --secrets-dir go with --socket"},
		{"secrets dir without socket", []string{"--secrets-dir", "/srv/s"}, "--world-netns, --world-dns and --secrets-dir go with --socket"},
		{"relative secrets dir", []string{"--socket", h.socket, "--world-netns", "w", "--secrets-dir", "s"}, "give an absolute path"},
		{"bad world dns", []string{"--socket", h.socket, "--world-netns", "w", "--world-dns", "ten", "--image", image}, "--world-dns:"},
		{"no agent image", []string{"--out", t.TempDir()}, "no agent image archive: set --agent-image or AIRLOCK_AGENT_IMAGE"},
		{"unknown agent", []string{"--agent", "claude"}, `--agent: agent "claude": want claude-code or codex`},
		{"agent and gate", []string{"--agent", "codex", "--gate", "allow-all"}, "the agent's own permission mode is the gate"},
		{"agent and naive", []string{"--agent", "codex", "--naive"}, "--naive runs the catalog's commands without an agent"},
		{"agent on a running daemon", []string{"--agent", "codex", "--socket", h.socket, "--world-netns", "w"}, "--agent needs a daemon of the bench's own"},
		{"no agent's image", []string{"--agent", "codex", "--out", t.TempDir()}, "no codex image archive: set AIRLOCK_CODEX_IMAGE"},
		{"tasks without agent", []string{"--agent-tasks", actions}, "--agent-tasks, --agent-mode, --agent-model and --model-url go with --agent"},
		{"codex mode", []string{"--agent", "codex", "--agent-mode", "auto"}, "--agent-mode: agent codex runs with approval_policy=never only"},
		{"bad mode", []string{"--agent", "claude-code", "--agent-mode", "plan"}, `--agent-mode: permission mode "plan"`},
		{"auto replay", []string{"--agent", "claude-code", "--agent-mode", "auto"}, "the agent's own gate goes with --agent-tasks or --model-url"},
		{"model url without uplink", []string{"--agent", "codex", "--model-url", "https://api.openai.com"}, "say so with --model-uplink host"},
		{"model url with a path", []string{"--agent", "codex", "--model-url", "https://api.openai.com/v1", "--model-uplink", "host"}, "want https://HOST"},
		{"model url over http", []string{"--agent", "codex", "--model-url", "http://api.openai.com", "--model-uplink", "host"}, "want https://HOST"},
		{"model url in the world", []string{"--agent", "codex", "--model-url", "https://git.bench.test", "--model-uplink", "host", "--model-key-file", goodActions}, "not an address, nor a name of the bench's world"},
		{"model url an address", []string{"--agent", "codex", "--model-url", "https://10.0.0.1", "--model-uplink", "host", "--model-key-file", goodActions}, "not an address, nor a name of the bench's world"},
		{"model url without key", []string{"--agent", "codex", "--model-url", "https://api.openai.com", "--model-uplink", "host"}, "needs --model-key-file"},
		{"model url and scripts", []string{"--agent", "codex", "--model-url", "https://api.openai.com", "--agent-tasks", "../../bench/runner/testdata/agent-tasks.jsonl"}, "the real model answers, not a script"},
		{"key file alone", []string{"--agent", "codex", "--model-key-file", actions}, "go with --model-url"},
		{"empty key", []string{"--agent", "codex", "--model-url", "https://api.openai.com", "--model-uplink", "host", "--model-key-file", writeFile(t, "key", "\n")}, "want one line, the key"},
		{"bad tasks", []string{"--agent", "codex", "--agent-tasks", actions}, "--agent-tasks: " + actions + ":1: "},
		{"tasks and actions", []string{"--agent", "codex", "--agent-tasks", "../../bench/runner/testdata/agent-tasks.jsonl", "--actions", goodActions}, "--actions goes with the replay"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run(tc.args...)
			if r.code != exitUsage || !strings.HasPrefix(r.stderr, "airlock-bench: ") || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, exitUsage, tc.want)
			}
		})
	}
}

// TestBenchAttachRefused: attaching to a daemon needs its uplink namespace,
// and a path that is not a network namespace is refused before anything
// runs.
func TestBenchAttachRefused(t *testing.T) {
	h := newHarness(t)
	image := writeFile(t, "bench.tar", "x")
	r := h.run("--socket", h.socket, "--image", image, "--out", t.TempDir())
	if r.code != exitFailure || !strings.Contains(r.stderr, "needs the world namespace") {
		t.Errorf("without --world-netns: exit %d, stderr %q", r.code, r.stderr)
	}
	r = h.run("--socket", h.socket, "--world-netns", t.TempDir(), "--image", image, "--out", t.TempDir())
	if r.code != exitFailure || !strings.Contains(r.stderr, "only to a daemon whose uplink is a network namespace") {
		t.Errorf("with a directory for a namespace: exit %d, stderr %q", r.code, r.stderr)
	}
	// AIRLOCK_SOCKET only sets the default: attaching takes --socket.
	r = h.run("--world-dns", "10.0.0.1", "--image", image, "--out", t.TempDir())
	if r.code != exitUsage || !strings.Contains(r.stderr, "go with --socket") {
		t.Errorf("socket from the environment: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestInterruptible(t *testing.T) {
	var errb bytes.Buffer
	var subscribed chan<- os.Signal
	stopped := false
	c := &cli{
		stderr:     &errb,
		notify:     func(ch chan<- os.Signal) { subscribed = ch },
		stopNotify: func(ch chan<- os.Signal) { stopped = ch == subscribed },
	}
	ctx, stop := c.interruptible(t.Context())
	if subscribed == nil {
		t.Fatal("interruptible does not listen for signals")
	}
	subscribed <- syscall.SIGTERM
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	stop()
	if !stopped {
		t.Error("stop did not unsubscribe the channel")
	}
	if want := "airlock-bench: interrupted: stopping the benchmark and cleaning up\n"; errb.String() != want {
		t.Errorf("stderr %q, want %q", errb.String(), want)
	}

	// Stopped without a signal: the context ends, nothing is printed.
	errb.Reset()
	ctx, stop = c.interruptible(context.Background())
	stop()
	if ctx.Err() == nil || errb.Len() != 0 {
		t.Errorf("after stop: ctx.Err() = %v, stderr %q", ctx.Err(), errb.String())
	}
}

func TestProgressBar(t *testing.T) {
	now := time.Unix(0, 0)
	var buf bytes.Buffer
	p := &progressBar{w: &buf, start: now, now: func() time.Time { return now }}
	for i := 0; i <= 20; i++ {
		now = now.Add(time.Second)
		p.update(i, 20)
	}
	p.finish()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 10 || lines[0] != "bench: 2/20 runs (10%), 3s" || lines[9] != "bench: 20/20 runs (100%), 21s" {
		t.Errorf("not a terminal: %q", lines)
	}
	// A second phase (the contrast pairs) counts from zero again.
	buf.Reset()
	for i := 0; i <= 4; i++ {
		p.update(i, 4)
	}
	if lines := strings.Split(strings.TrimSpace(buf.String()), "\n"); len(lines) != 4 || lines[3] != "bench: 4/4 runs (100%), 21s" {
		t.Errorf("second phase: %q", lines)
	}

	buf.Reset()
	now = time.Unix(0, 0)
	p = &progressBar{w: &buf, tty: true, start: now, now: func() time.Time { return now }}
	p.update(0, 4)
	now = now.Add(50 * time.Millisecond)
	p.update(1, 4) // too soon: not drawn
	now = now.Add(time.Second)
	p.update(4, 4)
	p.finish()
	want := "\r[                              ] 0/4 runs 0s " +
		"\r[==============================] 4/4 runs 1s \n"
	if buf.String() != want {
		t.Errorf("terminal: %q, want %q", buf.String(), want)
	}
}

// A malformed suite gets every problem with its file:line and nothing runs
// (no stack is started: the test has no daemon, image or world to start);
// --compare checks both manifests against every prompt first.
func TestBenchSuiteRefused(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"suite.hcl": "suite \"desk\" {\n  manifest = \"m.hcl\"\n}\nworld {\n  job \"job-a\" {}\n}\n",
		"prompts.hcl": "prompt \"P-1\" {\n  text       = \"Cancel job-a.\"\n  authorized = [\"cancel-job job-b\"]\n  actions    = [\"scancel job-a\"]\n}\n" +
			"prompt \"P-2\" {\n  text       = \"Cancel job-a.\"\n  authorized = [\"stop-job job-a\"]\n  actions    = [\"scancel job-a\"]\n}\n",
		"m.hcl": "session \"desk\" {\n  image = \"debian\"\n  workspace \".\" {\n    target = \"/workspace\"\n  }\n}\n",
	} {
		if err := os.WriteFile(dir+"/"+name, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	r := h.run("--suite", dir, "--out", out)
	for _, want := range []string{
		"airlock-bench: " + dir + "/prompts.hcl:3: Unknown effect target",
		dir + "/prompts.hcl:8: Unknown effect op",
		"--suite: 2 problem(s); nothing ran",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.code != exitUsage {
		t.Errorf("exit %d, want %d", r.code, exitUsage)
	}
	if entries, _ := os.ReadDir(out); len(entries) > 0 {
		t.Errorf("the refused run wrote %d files into --out", len(entries))
	}

	// A good suite, but a --compare manifest that does not load.
	if err := os.WriteFile(dir+"/prompts.hcl", []byte("prompt \"P-1\" {\n  text       = \"Cancel job-a.\"\n  authorized = [\"cancel-job job-a\"]\n  actions    = [\"scancel job-a\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := writeFile(t, "bad.hcl", "session \"x\" {\n  image = \n}\n")
	r = h.run("--suite", dir, "--compare", dir+"/m.hcl", bad, "--out", out)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--compare: manifest "+bad+" for prompt P-1") {
		t.Errorf("bad --compare manifest: exit %d, stderr %q", r.code, r.stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--suite", dir, "--compare", dir + "/m.hcl"}, "two manifests with --compare"},
		{[]string{"--compare", dir + "/m.hcl", dir + "/m.hcl"}, "go with --suite DIR"},
		{[]string{"--suite", dir, "--family", "cancel-jobs"}, "--suite runs the suite alone"},
	} {
		if r := h.run(tc.args...); r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// --check checks a suite and says what it holds, running nothing: no
// root, daemon or image needed, for a CI job that keeps a suite sound.
func TestBenchSuiteCheck(t *testing.T) {
	h := newHarness(t)
	const dir = "../../examples/suites/release-desk"
	r := h.run("--suite", dir, "--check", "--compare", dir+"/manifests/loose.hcl", dir+"/manifests/tight.hcl")
	if r.code != exitOK || !strings.Contains(r.stdout, "suite release-desk ("+dir+"): ok") ||
		!strings.Contains(r.stdout, "18 prompts (3 traps), 40 actions; world: jobs, services") ||
		!strings.Contains(r.stdout, "against every prompt: ok") {
		t.Errorf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	bad := t.TempDir()
	if err := os.WriteFile(bad+"/suite.hcl", []byte("suite \"x\" {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.run("--suite", bad, "--check"); r.code != exitUsage || !strings.Contains(r.stderr, "No prompts") {
		t.Errorf("a bad suite: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := h.run("--check"); r.code != exitUsage || !strings.Contains(r.stderr, "go with --suite DIR") {
		t.Errorf("--check alone: exit %d, stderr %q", r.code, r.stderr)
	}
}
