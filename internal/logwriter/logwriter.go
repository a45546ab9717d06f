// Package logwriter is the log writer of session output: containerd's
// shim runs it (as airlock-logger, a small static binary) with the
// session's stdout and stderr, and it appends each to its file, up to the
// session's cap on output.
package logwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/containerd/containerd/v2/core/runtime/v2/logging"
)

// Log file names inside a session's log directory. The logger creates the
// ".eof" marker of a stream once that stream is closed and fully written, so
// a follower knows it has seen everything. A stream cut by the cap also
// gets a ".dropped" file (a Dropped, as JSON): written when the cap is
// reached, and again, final, before the ".eof" marker.
const (
	StdoutLog     = "stdout.log"
	StderrLog     = "stderr.log"
	EOFSuffix     = ".eof"
	DroppedSuffix = ".dropped"
)

// The logger's arguments come in pairs, in any order (containerd's shim
// passes the binary URI's query in map order): Arg DIR, the session's log
// directory, and SizeArg BYTES, the cap on the session's output, stdout and
// stderr together.
//
// TTYArg 1 says the session's main process has a terminal: the logger
// then also relays it (see RunTTY).
const (
	Arg     = "_airlock_logger"
	SizeArg = "_airlock_log_size"
	TTYArg  = "_airlock_tty"
)

// DefaultLimit is the cap when SizeArg is absent; it equals
// policies.DefaultLogSize.
const DefaultLimit = 64 << 20

// Dropped says how much of a stream the cap kept out of its file.
type Dropped struct {
	Limit   int64 `json:"limit"`   // the session's cap, both streams together
	Written int64 `json:"written"` // bytes of this stream in the file, markers aside
	Dropped int64 `json:"dropped"` // bytes read and discarded
	Final   bool  `json:"final"`   // the stream has ended
}

// ParseArgs reads the logger's arguments (os.Args[1:]).
func ParseArgs(args []string) (dir string, limit int64, err error) {
	if len(args)%2 != 0 {
		return "", 0, errors.New("arguments come in pairs")
	}
	limit = DefaultLimit
	for i := 0; i < len(args); i += 2 {
		switch args[i] {
		case Arg:
			dir = args[i+1]
		case SizeArg:
			if limit, err = strconv.ParseInt(args[i+1], 10, 64); err != nil || limit <= 0 {
				return "", 0, fmt.Errorf("%s %q: want a positive number of bytes", SizeArg, args[i+1])
			}
		case TTYArg:
			if args[i+1] != "1" {
				return "", 0, fmt.Errorf("%s %q: want 1", TTYArg, args[i+1])
			}
		default:
			return "", 0, fmt.Errorf("unknown argument %q", args[i])
		}
	}
	if dir == "" {
		return "", 0, errors.New("no " + Arg + " DIR")
	}
	return dir, limit, nil
}

// WantsTTY reports whether args (valid for ParseArgs) ask for RunTTY.
func WantsTTY(args []string) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == TTYArg {
			return true
		}
	}
	return false
}

// Run implements containerd's binary logging protocol: the shim
// starts the logger with the task's stdout and stderr as fds 3 and 4; it
// copies each into its file in dir, the two together up to limit bytes.
// It never returns.
func Run(dir string, limit int64) {
	logging.Run(func(_ context.Context, cfg *logging.Config, ready func() error) error {
		return copyLogs(dir, limit, cfg.Stdout, cfg.Stderr, ready)
	})
}

// budget is what is left of the cap, shared by both streams.
type budget struct{ left atomic.Int64 }

// take takes n bytes from the budget and returns how many of them fit.
func (b *budget) take(n int) int {
	before := b.left.Add(-int64(n)) + int64(n)
	return int(min(max(before, 0), int64(n)))
}

// copyBuf is the size of a stream's copy buffer (io.Copy's). The log files
// are opened O_APPEND, which rules out splice(2) into them anyway.
const copyBuf = 32 << 10

func copyLogs(dir string, limit int64, stdout, stderr io.Reader, ready func() error) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("log dir %q is not absolute", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	names := []string{StdoutLog, StderrLog}
	var b budget
	b.left.Store(limit)
	var files []*os.File
	for _, name := range names {
		_ = os.Remove(filepath.Join(dir, name+EOFSuffix))
		// Read access too: the truncation marker looks at the last byte.
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			b.left.Add(-st.Size()) // a restarted logger appends
		}
		files = append(files, f)
	}
	if err := ready(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, src := range []io.Reader{stdout, stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = copyStream(dir, names[i], files[i], src, &b, limit)
			_ = os.WriteFile(filepath.Join(dir, names[i]+EOFSuffix), nil, 0o600)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// copyStream copies src into f while the budget lasts, then writes a
// marker line, discards the rest, and ends the file with a line saying how
// much was dropped.
//
// A write that fails (the daemon's disk is full) never stops the reading:
// a logger that stopped reading would fill the pipe and hold the session's
// command up at its next write. What cannot be written is lost, counted,
// and said in a marker line once a write succeeds again (or at the end).
func copyStream(dir, name string, f *os.File, src io.Reader, b *budget, limit int64) error {
	stream := name[:len(name)-len(".log")]
	var written, lost int64
	var lostErr error
	sayLost := func() bool {
		msg := lineStart(f) + fmt.Sprintf("[airlock: %d bytes of %s lost: %v]\n", lost, stream, lostErr)
		if _, err := f.WriteString(msg); err != nil {
			return false
		}
		lost, lostErr = 0, nil
		return true
	}
	buf := make([]byte, copyBuf)
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			keep := b.take(n)
			if lost > 0 && !sayLost() {
				lost += int64(keep)
			} else {
				wn, err := f.Write(buf[:keep])
				written += int64(wn)
				if err != nil {
					lost, lostErr = lost+int64(keep-wn), unwrapPath(err)
				}
			}
			if keep < n {
				if lost > 0 {
					sayLost()
				}
				return truncate(dir, name, f, src, limit, written, int64(n-keep))
			}
		}
		if rerr == io.EOF {
			if lost > 0 {
				sayLost()
			}
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// unwrapPath drops an *os.PathError's path: the marker names the stream.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// truncate ends a stream that reached the cap: the marker line, the rest
// of src discarded, the count of what was dropped.
func truncate(dir, name string, f *os.File, src io.Reader, limit, written, dropped int64) error {
	stream := name[:len(name)-len(".log")]
	info := Dropped{Limit: limit, Written: written}
	report := func() {
		// By hand, not encoding/json: it would grow the binary run once
		// per session by a sixth.
		j := fmt.Sprintf(`{"limit":%d,"written":%d,"dropped":%d,"final":%t}`, info.Limit, info.Written, info.Dropped, info.Final)
		_ = os.WriteFile(filepath.Join(dir, name+DroppedSuffix), []byte(j), 0o600)
	}
	report()
	_, _ = f.WriteString(lineStart(f) + fmt.Sprintf("[airlock: output truncated: the session's output reached its cap (log_size, %d bytes); the rest of %s is dropped]\n", limit, stream))
	rest, err := discard(src)
	info.Dropped, info.Final = dropped+rest, true
	_, _ = f.WriteString(fmt.Sprintf("[airlock: %d bytes of %s dropped]\n", info.Dropped, stream))
	report()
	return err
}

// discard reads src to its end. Into /dev/null, a pipe is spliced: the
// bytes never reach this process.
func discard(src io.Reader) (int64, error) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return io.Copy(io.Discard, src)
	}
	defer null.Close()
	return io.Copy(null, src)
}

// lineStart returns "\n" if f does not end with one, so that a marker
// starts a line of its own.
func lineStart(f *os.File) string {
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return ""
	}
	var last [1]byte
	if _, err := f.ReadAt(last[:], st.Size()-1); err == nil && last[0] == '\n' {
		return ""
	}
	return "\n"
}
