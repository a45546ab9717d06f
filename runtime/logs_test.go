package runtime

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A follower copies what the log writer appends, and returns once the
// process has exited and both streams' end-of-file markers are there.
func TestCopyLogsFollows(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) { appendFile(t, dir, name, s) }
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

// A follower that watches the log directory learns of output and of the
// end from the directory's events and the exit channel, not by looking:
// with its polls set to an hour it still copies every write as it
// comes and returns at the end-of-file markers.
func TestCopyLogsWakesOnWrite(t *testing.T) {
	defer func(poll, check time.Duration) { followPoll, followCheck = poll, check }(followPoll, followCheck)
	followPoll, followCheck = time.Hour, time.Hour
	dir := t.TempDir()
	write := func(name, s string) { appendFile(t, dir, name, s) }
	var running atomic.Bool
	running.Store(true)
	exited := make(chan struct{})
	out := &notifyBuffer{grew: make(chan struct{}, 16)}
	done := make(chan error, 1)
	go func() {
		done <- CopyLogs(context.Background(), LogSource{Dir: dir, Running: running.Load, Exited: exited, Started: func() bool { return true }},
			LogsOptions{Follow: true, Stdout: out, Stderr: io.Discard})
	}()
	for i, line := range []string{"one\n", "two\n", "three\n"} {
		write(StdoutLog, line)
		select {
		case <-out.grew:
		case <-time.After(10 * time.Second):
			t.Fatalf("write %d not copied: the follower was not woken by it", i+1)
		}
	}
	running.Store(false)
	close(exited)
	write(StdoutLog+EOFSuffix, "")
	write(StderrLog+EOFSuffix, "")
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follower did not return at the exit and the end-of-file markers")
	}
	if got := out.String(); got != "one\ntwo\nthree\n" {
		t.Errorf("copied %q", got)
	}
	if n := watchCount(t); n != 0 {
		t.Errorf("%d inotify watches left after the follower returned", n)
	}
}

// Followers of one directory share its watch; the last to leave removes
// it, and a directory removed under its followers ends their watch (they
// go back to polling and still return at the end).
func TestLogWatchShared(t *testing.T) {
	dir := t.TempDir()
	var stops []func()
	var chans []<-chan struct{}
	for range 3 {
		ch, stop, err := watchLogDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		chans, stops = append(chans, ch), append(stops, stop)
	}
	if n := watchCount(t); n != 1 {
		t.Fatalf("3 followers of one directory hold %d watches, want 1", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("follower %d not told of the write", i)
		}
	}
	for _, stop := range stops {
		stop()
		stop() // twice is harmless
	}
	if n := watchCount(t); n != 0 {
		t.Fatalf("%d watches left after every follower left", n)
	}

	gone := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(gone, 0o755); err != nil {
		t.Fatal(err)
	}
	ch, stop, err := watchLogDir(gone)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("the watch of a removed directory did not end")
		}
	}
	if n := watchCount(t); n != 0 {
		t.Fatalf("%d watches left after the directory was removed", n)
	}
}

// watchCount counts the watches of the process's shared inotify
// instance, as the kernel lists them in its fdinfo.
func watchCount(t *testing.T) int {
	t.Helper()
	sharedMu.Lock()
	w := sharedWatcher
	sharedMu.Unlock()
	if w == nil {
		return 0
	}
	var n int
	err := w.rawFD(func(fd int) error {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
		n = strings.Count(string(b), "inotify wd:")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// notifyBuffer is a buffer that says when it grew.
type notifyBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	grew chan struct{}
}

func (n *notifyBuffer) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer func() { n.grew <- struct{}{} }()
	return n.b.Write(p)
}

func (n *notifyBuffer) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()
}

// appendFile appends s to dir/name, as the log writer does.
func appendFile(t *testing.T, dir, name, s string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// A watcher that fails (its descriptor gone) ends its followers' watches,
// which go back to polling; a new one is made a while later, not for
// every follower meanwhile.
func TestLogWatcherRemadeAfterFailure(t *testing.T) {
	defer func(d time.Duration) { watcherRetry = d }(watcherRetry)
	watcherRetry = 200 * time.Millisecond
	dir := t.TempDir()
	ch, stop, err := watchLogDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	sharedMu.Lock()
	failing := sharedWatcher
	sharedMu.Unlock()
	failing.f.Close() // its reader fails
	deadline := time.After(10 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-ch:
		case <-deadline:
			t.Fatal("a follower's watch did not end with its watcher")
		}
	}
	if _, _, err := watchLogDir(dir); err == nil {
		t.Fatal("a watcher was made again at once after a failure")
	}
	time.Sleep(watcherRetry)
	ch2, stop2, err := watchLogDir(dir)
	if err != nil {
		t.Fatalf("no watcher %v after a failure: %v", watcherRetry, err)
	}
	defer stop2()
	appendFile(t, dir, "x", "x")
	select {
	case <-ch2:
	case <-time.After(10 * time.Second):
		t.Fatal("the new watcher did not tell of a write")
	}
}
