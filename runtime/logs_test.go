package runtime

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// A follower copies what the log writer appends, and returns once the
// process has exited and both streams' end-of-file markers are there.
func TestCopyLogsFollows(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(StdoutLog, "one\n")
	var running atomic.Bool
	running.Store(true)
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- CopyLogs(context.Background(), LogSource{Dir: dir, Running: running.Load, Started: func() bool { return true }},
			LogsOptions{Follow: true, Stdout: &stdout, Stderr: &stderr})
	}()
	time.Sleep(50 * time.Millisecond)
	write(StdoutLog, "two\n")
	write(StderrLog, "err\n")
	running.Store(false)
	select {
	case err := <-done:
		t.Fatalf("follower returned before the end-of-file markers: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	write(StdoutLog, "three\n")
	write(StdoutLog+EOFSuffix, "")
	write(StderrLog+EOFSuffix, "")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(FlushGrace):
		t.Fatal("follower did not return after the end-of-file markers")
	}
	if stdout.String() != "one\ntwo\nthree\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestOutputDropped(t *testing.T) {
	dir := t.TempDir()
	if got := OutputDropped(dir, false); len(got) != 0 {
		t.Fatalf("nothing cut, got %+v", got)
	}
	if err := os.WriteFile(filepath.Join(dir, StderrLog+DroppedSuffix), []byte(`{"limit":1024,"written":1024,"dropped":77,"final":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	got := OutputDropped(dir, false)
	if len(got) != 1 || got[0].Stream != "stderr" || got[0].Dropped != 77 || got[0].Limit != 1024 || !got[0].Final {
		t.Errorf("OutputDropped = %+v, want stderr with 77 of its bytes dropped under 1024", got)
	}
}
