package steps

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// TestTimer: steps started by Go run side by side, Wait returns when all
// have ended, and the debug line names every step with its duration.
func TestTimer(t *testing.T) {
	var buf bytes.Buffer
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	steps := New()
	steps.Run("first", func() {})
	var running, peak atomic.Int32
	release := make(chan struct{})
	for _, name := range []string{"a", "b", "c"} {
		steps.Go(name, func() {
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
	steps.Wait()
	if peak.Load() != 3 {
		t.Errorf("%d steps ran at once, want 3", peak.Load())
	}
	if running.Load() != 0 {
		t.Error("wait returned before every step ended")
	}
	steps.Mark("last")
	steps.Log(ctx, "session teardown steps", "phase", "exit")
	line := buf.String()
	for _, want := range []string{`msg="session teardown steps"`, "phase=exit", "total=", "first=", "a=", "b=", "c=", "last="} {
		if !strings.Contains(line, want) {
			t.Errorf("log line lacks %q: %s", want, line)
		}
	}
}
