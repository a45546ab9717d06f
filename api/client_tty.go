package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
)

// AttachContentType is the media type of an attach request body: one line
// of JSON AttachRequest, then stdin and resize frames.
const AttachContentType = "application/vnd.airlock.attach"

// ErrDetached is what a Terminal's In returns to detach: the client hangs
// up and Attach returns ErrDetached; the session runs on.
var ErrDetached = errors.New("detached")

// Terminal is the client's side of a pseudo-terminal in a session.
type Terminal struct {
	// In is the keystrokes; nil sends none. A Read that returns
	// ErrDetached ends the exchange (see ErrDetached).
	In io.Reader
	// Out receives the terminal's output.
	Out io.Writer
	// Size is the terminal's size to begin with; zero keeps it.
	Size WinSize
	// Resize delivers later sizes (SIGWINCH); nil: none.
	Resize <-chan WinSize
}

// ExecTerminal runs req.Command in a running session with a
// pseudo-terminal, copies its output to t.Out and returns its exit code.
// The process gets SIGHUP from its terminal when ctx is cancelled or the
// connection drops, and is killed.
func (c *Client) ExecTerminal(ctx context.Context, id string, req ExecRequest, t Terminal) (int, error) {
	p, err := sessionPath(id, "exec")
	if err != nil {
		return -1, err
	}
	req.TTY, req.Stdin = true, true
	if t.Size.Cols > 0 && t.Size.Rows > 0 {
		size := t.Size
		req.Size = &size
	}
	exit, err := c.terminal(ctx, p, ExecContentType, req, t, nil)
	if err != nil {
		return -1, err
	}
	if exit == nil {
		return -1, fmt.Errorf("exec stream ended without an exit status: %w", io.ErrUnexpectedEOF)
	}
	return exit.ExitCode, nil
}

// Attach connects to the terminal of a session's main process (a session
// created with policies.Policy.Terminal) and copies its output, from now
// on, to t.Out. attached, if set, is called once the daemon has connected
// the terminal (output from then on reaches t.Out): a caller that wants a
// session's output from its first byte creates it unstarted, and starts it
// there.
//
// It returns how the main process ended; ErrDetached when t.In asked to
// detach; and an error when the daemon went away (the session runs on:
// attach again).
func (c *Client) Attach(ctx context.Context, id string, t Terminal, attached func()) (*WaitResponse, error) {
	p, err := sessionPath(id, "attach")
	if err != nil {
		return nil, err
	}
	var req AttachRequest
	if t.Size.Cols > 0 && t.Size.Rows > 0 {
		size := t.Size
		req.Size = &size
	}
	exit, err := c.terminal(ctx, p, AttachContentType, req, t, attached)
	if err != nil {
		return nil, err
	}
	if exit == nil {
		return nil, fmt.Errorf("attach stream of session %s ended without an exit status: %w", id, io.ErrUnexpectedEOF)
	}
	return exit, nil
}

// terminal runs a full-duplex framed exchange: the header, then stdin and
// resize frames up; output frames down, to the exit frame.
func (c *Client) terminal(ctx context.Context, path, ctype string, header any, t Terminal, attached func()) (*WaitResponse, error) {
	line, err := json.Marshal(header)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	line = append(line, '\n')
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var detached atomic.Bool
	pr, pw := io.Pipe()
	defer pr.Close()
	var mu sync.Mutex
	go func() {
		mu.Lock()
		_, err := pw.Write(line)
		mu.Unlock()
		if err != nil {
			return
		}
		if t.Resize != nil {
			go func() {
				for {
					select {
					case sz := <-t.Resize:
						b, _ := json.Marshal(sz)
						if WriteFrame(pw, &mu, FrameResize, b) != nil {
							return
						}
					case <-ctx.Done():
						return
					}
				}
			}()
		}
		if t.In == nil {
			return
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := t.In.Read(buf)
			if n > 0 {
				if WriteFrame(pw, &mu, FrameStdin, buf[:n]) != nil {
					return
				}
			}
			if errors.Is(err, ErrDetached) {
				detached.Store(true)
				cancel()
				return
			}
			if errors.Is(err, io.EOF) {
				_ = WriteFrame(pw, &mu, FrameStdin, nil)
				return
			}
			if err != nil {
				pw.CloseWithError(fmt.Errorf("reading stdin: %w", err))
				return
			}
		}
	}()
	resp, err := c.do(ctx, http.MethodPost, path, nil, pr, ctype)
	if err != nil {
		if detached.Load() {
			return nil, ErrDetached
		}
		return nil, err
	}
	defer resp.Body.Close()
	if attached != nil {
		attached()
	}
	out := t.Out
	if out == nil {
		out = io.Discard
	}
	exit, err := copyFrames(resp.Body, out, out)
	if detached.Load() {
		return nil, ErrDetached
	}
	if err != nil {
		return nil, c.streamError(ctx, err)
	}
	return exit, nil
}
