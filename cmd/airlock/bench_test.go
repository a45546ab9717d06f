package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestBenchUsageErrors(t *testing.T) {
	h := newHarness(t)
	image := writeFile(t, "bench.tar", "not really an image")
	actions := writeFile(t, "actions.jsonl", "{not json\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"argument", []string{"bench", "extra"}, "takes no arguments"},
		{"gate", []string{"bench", "--gate", "llm:gpt"}, `--gate: unknown gate "llm:gpt"`},
		{"actions", []string{"bench", "--actions", actions}, "--actions:"},
		{"world without socket", []string{"bench", "--world-netns", "w"}, "--world-netns and --world-dns go with --socket"},
		{"bad world dns", []string{"bench", "--socket", h.socket, "--world-netns", "w", "--world-dns", "ten", "--image", image}, "--world-dns:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.run("", tc.args...)
			if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
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
	r := h.run("", "bench", "--socket", h.socket, "--image", image, "--out", t.TempDir())
	if r.code != exitFailure || !strings.Contains(r.stderr, "needs the world namespace") {
		t.Errorf("without --world-netns: exit %d, stderr %q", r.code, r.stderr)
	}
	r = h.run("", "bench", "--socket", h.socket, "--world-netns", t.TempDir(), "--image", image, "--out", t.TempDir())
	if r.code != exitFailure || !strings.Contains(r.stderr, "only to a daemon whose uplink is a network namespace") {
		t.Errorf("with a directory for a namespace: exit %d, stderr %q", r.code, r.stderr)
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
