package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// followPoll is how often a follower looks for new output when it
// cannot watch the log directory (see logwatch_linux.go).
var followPoll = 5 * time.Millisecond

// followCheck is how often a follower that watches the log directory
// looks anyway: a safety net, not the way it learns of output.
var followCheck = 250 * time.Millisecond

// FlushGrace bounds how long a reader waits, after the main process has
// exited, for the log writer to flush its last bytes.
const FlushGrace = 3 * time.Second

// LogSource is a session's recorded output: the log writer's files in Dir,
// and what the reader needs to know of the session to follow them.
type LogSource struct {
	Dir string
	// Running reports whether the main process still runs.
	Running func() bool
	// Started reports whether a command ever ran: without one the log
	// writer writes no end-of-file markers.
	Started func() bool
	// Exited, if not nil, is closed once Running reports false, so that
	// a follower learns of the exit without looking.
	Exited <-chan struct{}
}

// CopyLogs copies the session's recorded output to o's writers. With
// o.Follow it returns once the main process has exited and its output has
// been written completely (the log writer's end-of-file markers, or
// FlushGrace after the exit), or when ctx is done.
func CopyLogs(ctx context.Context, src LogSource, o LogsOptions) error {
	type stream struct {
		name string
		w    io.Writer
		f    *os.File
	}
	var streams []*stream
	if o.Stdout != nil {
		streams = append(streams, &stream{name: StdoutLog, w: o.Stdout})
	}
	if o.Stderr != nil {
		streams = append(streams, &stream{name: StderrLog, w: o.Stderr})
	}
	defer func() {
		for _, st := range streams {
			if st.f != nil {
				st.f.Close()
			}
		}
	}()
	drain := func() error {
		for _, st := range streams {
			if st.f == nil {
				f, err := os.Open(filepath.Join(src.Dir, st.name))
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return err
				}
				st.f = f
			}
			if _, err := io.Copy(st.w, st.f); err != nil {
				return err
			}
		}
		return nil
	}
	flushed := func() bool {
		if !src.Started() {
			return true
		}
		for _, st := range streams {
			if _, err := os.Stat(filepath.Join(src.Dir, st.name+EOFSuffix)); err != nil {
				return false
			}
		}
		return true
	}
	var changed <-chan struct{}
	if o.Follow {
		if ch, stop, err := watchLogDir(src.Dir); err == nil {
			defer stop()
			changed = ch
		}
	}
	exited := src.Exited
	var exitedAt time.Time
	for {
		if err := drain(); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
		if !src.Running() {
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			}
			if flushed() || time.Since(exitedAt) > FlushGrace {
				return drain()
			}
		}
		wait := followPoll
		if changed != nil && src.Exited != nil {
			wait = followCheck
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case _, ok := <-changed:
			if !ok {
				changed = nil // the watch ended: poll
			}
		case <-exited:
			exited = nil
		case <-t.C:
		}
		t.Stop()
	}
}

// StreamDropped is what the cap on output kept out of one stream's file.
type StreamDropped struct {
	Stream string // "stdout" or "stderr"
	LogDropped
}

// OutputDropped reads, for each stream of the log directory the cap on
// output cut, how much it dropped. With wait it first gives the log writer
// up to FlushGrace to finish a cut stream, so that the count is final.
func OutputDropped(logDir string, wait bool) []StreamDropped {
	var out []StreamDropped
	for _, name := range []string{StdoutLog, StderrLog} {
		p := filepath.Join(logDir, name+DroppedSuffix)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		for deadline := time.Now().Add(FlushGrace); wait && time.Now().Before(deadline); time.Sleep(10 * followPoll) {
			if _, err := os.Stat(filepath.Join(logDir, name+EOFSuffix)); err == nil {
				break
			}
		}
		var dr LogDropped
		b, err := os.ReadFile(p)
		if err == nil {
			err = json.Unmarshal(b, &dr)
		}
		if err != nil {
			continue
		}
		out = append(out, StreamDropped{Stream: strings.TrimSuffix(name, ".log"), LogDropped: dr})
	}
	return out
}
