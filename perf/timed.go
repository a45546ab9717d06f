package perf

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// TimedRun is one timed command.
type TimedRun struct {
	// FirstByte is the time from just before the process was started to
	// the first byte on its stdout (0 if it wrote none).
	FirstByte time.Duration
	// Exit is the time from just before the start to the end of Wait.
	Exit   time.Duration
	Code   int
	Stdout string
	Stderr string
	Err    error
}

// runTimed starts argv, reads its stdout and waits for it, timing the first
// output byte and the exit. Output beyond 1 MiB is discarded.
func runTimed(ctx context.Context, dir string, argv []string) TimedRun {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	pr, err := cmd.StdoutPipe()
	if err != nil {
		return TimedRun{Err: err}
	}
	var (
		first  time.Time
		stdout limitedBuffer
		wg     sync.WaitGroup
	)
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return TimedRun{Err: err}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				if first.IsZero() {
					first = time.Now()
				}
				stdout.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	wg.Wait()
	werr := cmd.Wait()
	r := TimedRun{Exit: time.Since(t0), Stdout: stdout.String(), Stderr: stderr.String()}
	if !first.IsZero() {
		r.FirstByte = first.Sub(t0)
	}
	if werr != nil {
		if ee, ok := werr.(*exec.ExitError); ok {
			r.Code = ee.ExitCode()
		} else {
			r.Err = werr
		}
	}
	return r
}

// check reports a run that failed or printed something other than want
// (compared after trimming space; want "" accepts any output).
func (r TimedRun) check(want string) error {
	switch {
	case r.Err != nil:
		return r.Err
	case r.Code != 0:
		return fmt.Errorf("exit code %d: %s", r.Code, lastLine(r.Stderr))
	case want != "" && strings.TrimSpace(r.Stdout) != want:
		return fmt.Errorf("stdout %q, want %q", strings.TrimSpace(r.Stdout), want)
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// limitedBuffer keeps the first MiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 1<<20 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*limitedBuffer)(nil)

// shellQuote renders argv as a POSIX shell command line.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@+%$") == "" {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
