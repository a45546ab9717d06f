package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/log"
)

func TestCgroupEmpty(t *testing.T) {
	const path = "/airlock-al0000/abc"
	tests := []struct {
		name  string
		files map[string]string // relative to the cgroup root -> cgroup.procs content
		want  bool
	}{
		{"v2 empty", map[string]string{path: ""}, true},
		{"v2 empty with newline", map[string]string{path: "\n"}, true},
		{"v2 populated", map[string]string{path: "123\n"}, false},
		{"v1 pids empty", map[string]string{"pids" + path: ""}, true},
		{"v1 pids populated", map[string]string{"pids" + path: "1\n2\n"}, false},
		{"v1 memory only, populated", map[string]string{"memory" + path: "7\n"}, false},
		{"v1 memory only, empty", map[string]string{"memory" + path: ""}, true},
		{"v2 wins over v1", map[string]string{path: "9\n", "pids" + path: ""}, false},
		{"no cgroup: not known to be empty", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for dir, procs := range tt.files {
				d := filepath.Join(root, dir)
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			old := cgroupRoot
			cgroupRoot = root
			t.Cleanup(func() { cgroupRoot = old })
			if got := cgroupEmpty(path); got != tt.want {
				t.Errorf("cgroupEmpty = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestTeardownSteps: spawned steps run side by side, wait returns when all
// have ended, and the debug line names every step with its duration.
func TestTeardownSteps(t *testing.T) {
	var buf bytes.Buffer
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	steps := newTeardownSteps()
	steps.run("first", func() {})
	var running, peak atomic.Int32
	release := make(chan struct{})
	for _, name := range []string{"a", "b", "c"} {
		steps.spawn(name, func() {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			<-release
			time.Sleep(time.Millisecond)
			running.Add(-1)
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for peak.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	steps.wait()
	if peak.Load() != 3 {
		t.Errorf("%d steps ran at once, want 3", peak.Load())
	}
	if running.Load() != 0 {
		t.Error("wait returned before every step ended")
	}
	steps.log(ctx, "exit")
	line := buf.String()
	for _, want := range []string{`msg="session teardown steps"`, "phase=exit", "total=", "first=", "a=", "b=", "c="} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %q: %s", want, line)
		}
	}
}
