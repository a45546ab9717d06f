package daemon

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/runtime"
)

// LogsOptions select what Logs returns.
type LogsOptions struct {
	Follow bool
	Stdout io.Writer // nil: stdout not wanted
	Stderr io.Writer // nil: stderr not wanted
}

// followPoll is how often a follower looks for new output.
const followPoll = 5 * time.Millisecond

// flushGrace bounds how long a follower waits, after the main process has
// exited, for the log writer to flush its last bytes.
const flushGrace = 3 * time.Second

// Logs copies the session's recorded output. With Follow it returns once the
// main process has exited and its output has been written completely.
func (d *Daemon) Logs(ctx context.Context, id string, o LogsOptions) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	type stream struct {
		name string
		w    io.Writer
		f    *os.File
	}
	var streams []*stream
	if o.Stdout != nil {
		streams = append(streams, &stream{name: runtime.StdoutLog, w: o.Stdout})
	}
	if o.Stderr != nil {
		streams = append(streams, &stream{name: runtime.StderrLog, w: o.Stderr})
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
				f, err := os.Open(filepath.Join(s.logDir(), st.name))
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
		s.mu.Lock()
		started := s.rec.Started != nil
		s.mu.Unlock()
		if !started {
			return true
		}
		for _, st := range streams {
			if _, err := os.Stat(filepath.Join(s.logDir(), st.name+runtime.EOFSuffix)); err != nil {
				return false
			}
		}
		return true
	}
	var exitedAt time.Time
	for {
		if err := drain(); err != nil {
			return err
		}
		if !o.Follow {
			return nil
		}
		if !s.running() {
			if exitedAt.IsZero() {
				exitedAt = time.Now()
			}
			if flushed() || time.Since(exitedAt) > flushGrace {
				return drain()
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPoll):
		}
	}
}
