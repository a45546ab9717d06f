package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/clients"
	benchimage "github.com/airlock-sandbox/airlock/images/bench"
)

// maxOutput bounds what a run keeps of each output stream.
const maxOutput = 4 << 10

// Output is what a command printed and how it ended.
type Output struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Fingerprint identifies the workspace tree after the command ("" for
	// a shell without a workspace).
	Fingerprint string
}

// shell is one exec in a session that runs the runner's commands one after
// another: running a command costs a fork in the sandbox, not a container
// exec. Each command gets the session's environment, working directory and
// user, exactly as an exec of `bash -c CMD` would.
type shell struct {
	// Fingerprint is the workspace tree's when the shell started.
	Fingerprint string

	client   *api.Client
	marker   []byte
	stdin    *io.PipeWriter
	out      *markerStream
	stderrMu sync.Mutex
	stderr   bytes.Buffer // the shell's own complaints
	cancel   context.CancelFunc
	done     chan struct{} // closed when the exec has returned
	exitErr  error         // set before done is closed
}

// startShell starts the shell in session id. workspace, if set, is the
// sandbox path of the workspace to fingerprint.
//
// The shell has a client of its own: its exec connection is never handed
// to another request.
func startShell(ctx context.Context, socket, id, workdir, workspace string, timeout time.Duration) (*shell, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	marker := "airlock-bench-" + hex.EncodeToString(b)
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	c := api.NewClient(socket)
	sh := &shell{
		client: c,
		marker: []byte("\n" + marker + " "),
		stdin:  pw,
		cancel: cancel,
		done:   make(chan struct{}),
	}
	sh.out = newMarkerStream(sh.marker)
	go func() {
		code, err := c.Exec(ctx, id, api.ExecRequest{Command: shellCommand(marker, workspace), Workdir: workdir}, pr, sh.out, &lockedWriter{mu: &sh.stderrMu, w: &sh.stderr})
		if err == nil && code != 0 {
			err = fmt.Errorf("bench shell exited with status %d", code)
		}
		if err == nil {
			err = io.EOF
		}
		pr.CloseWithError(err)
		sh.out.fail(err)
		c.Close()
		sh.exitErr = err
		close(sh.done)
	}()
	first, err := sh.wait(timeout)
	if err != nil {
		sh.kill()
		return nil, err
	}
	sh.Fingerprint = first.Fingerprint
	return sh, nil
}

// shellCommand is the exec that runs the shell in a session of the bench
// image: clients.Shell, whose status lines markerStream parses.
func shellCommand(marker, workspace string) []string {
	cmd := []string{benchimage.CLIPath, clients.ShellCommand, marker}
	if workspace != "" {
		cmd = append(cmd, workspace)
	}
	return cmd
}

// errTimeout is returned by run when the command did not finish in time.
var errTimeout = errors.New("command timed out")

// run runs cmd and returns its output.
func (sh *shell) run(cmd string, timeout time.Duration) (Output, error) {
	line := base64.StdEncoding.EncodeToString([]byte(cmd)) + "\n"
	if _, err := io.WriteString(sh.stdin, line); err != nil {
		return Output{}, fmt.Errorf("bench shell: %w", err)
	}
	return sh.wait(timeout)
}

// wait returns the next status line's result.
func (sh *shell) wait(timeout time.Duration) (Output, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-sh.out.results:
		if r.err != nil {
			return Output{}, fmt.Errorf("bench shell: %w (%s)", r.err, strings.TrimSpace(sh.stderrText()))
		}
		return Output{ExitCode: r.code, Stdout: r.text, Stderr: r.stderr, Fingerprint: r.fingerprint}, nil
	case <-t.C:
		return Output{}, errTimeout
	}
}

func (sh *shell) stderrText() string {
	sh.stderrMu.Lock()
	defer sh.stderrMu.Unlock()
	return truncate(sh.stderr.String())
}

// close ends the shell: with its input closed it exits.
func (sh *shell) close() error {
	sh.stdin.Close()
	select {
	case <-sh.done:
		if errors.Is(sh.exitErr, io.EOF) {
			return nil
		}
		return sh.exitErr
	case <-time.After(10 * time.Second):
		sh.cancel()
		<-sh.done
		return errors.New("bench shell did not exit")
	}
}

// kill abandons the shell (the daemon kills its process).
func (sh *shell) kill() {
	sh.cancel()
	sh.stdin.CloseWithError(errTimeout)
	<-sh.done
}

type markerResult struct {
	text        string
	stderr      string
	fingerprint string
	code        int
	err         error
}

// markerStream splits an output stream at marker lines ("\nMARKER CODE\n"),
// delivering what came before each, truncated to maxOutput.
type markerStream struct {
	marker  []byte
	mu      sync.Mutex
	buf     []byte
	kept    bytes.Buffer
	results chan markerResult
	failed  bool
}

func newMarkerStream(marker []byte) *markerStream {
	return &markerStream{marker: marker, results: make(chan markerResult, 64)}
}

func (m *markerStream) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf = append(m.buf, p...)
	for {
		i := bytes.Index(m.buf, m.marker)
		if i < 0 {
			// Keep enough to find a marker split across writes.
			if keep := len(m.marker) + 16; len(m.buf) > keep {
				m.keep(m.buf[:len(m.buf)-keep])
				m.buf = append(m.buf[:0], m.buf[len(m.buf)-keep:]...)
			}
			return len(p), nil
		}
		rest := m.buf[i+len(m.marker):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return len(p), nil
		}
		m.keep(m.buf[:i])
		r := markerResult{text: m.kept.String()}
		fields := strings.Split(string(rest[:nl]), " ")
		for len(fields) < 3 {
			fields = append(fields, "")
		}
		code, err := strconv.Atoi(fields[0])
		stderr, derr := base64.StdEncoding.DecodeString(fields[1])
		if err != nil || derr != nil {
			r.err = fmt.Errorf("bad status line %q", rest[:nl])
		}
		r.code, r.stderr, r.fingerprint = code, truncate(string(stderr)), fields[2]
		m.results <- r
		m.kept.Reset()
		m.buf = append(m.buf[:0], rest[nl+1:]...)
	}
}

func (m *markerStream) keep(b []byte) {
	if room := maxOutput - m.kept.Len(); room > 0 {
		m.kept.Write(b[:min(len(b), room)])
	}
}

// fail delivers err to a reader waiting for a result that will not come.
func (m *markerStream) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.failed {
		m.failed = true
		m.results <- markerResult{err: err}
	}
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
