package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// DefaultSocket is where airlockd listens unless configured otherwise.
const DefaultSocket = "/run/airlock/airlock.sock"

// ExecContentType is the media type of an exec request body: one line of
// JSON ExecRequest, then stdin frames.
const ExecContentType = "application/vnd.airlock.exec"

// maxErrorBody bounds how much of an error response the client reads.
const maxErrorBody = 1 << 20

// Client talks to airlockd over its unix socket. It is safe for concurrent
// use; requests share a small pool of connections.
type Client struct {
	socket string
	hc     *http.Client
}

// NewClient returns a client for the daemon listening on socketPath. It does
// not connect until the first request.
func NewClient(socketPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, &UnreachableError{Socket: socketPath, Err: err}
			}
			return conn, nil
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{socket: socketPath, hc: &http.Client{Transport: tr}}
}

// NewClientTransport returns a client whose requests, to
// http://airlockd/v1/..., rt carries: rt routes them (to a node agent's
// endpoint, for airlock --context). name stands for the daemon in error
// messages.
func NewClientTransport(name string, rt http.RoundTripper) *Client {
	return &Client{socket: name, hc: &http.Client{Transport: rt}}
}

// Socket returns the socket path the client dials.
func (c *Client) Socket() string { return c.socket }

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Version returns the daemon's identity.
func (c *Client) Version(ctx context.Context) (*Version, error) {
	var v Version
	if err := c.doJSON(ctx, http.MethodGet, "/v1/version", nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// CreateSession creates a session from req.Policy, and starts it when
// req.Start is set.
func (c *Client) CreateSession(ctx context.Context, req CreateRequest) (*Session, error) {
	var s Session
	if err := c.doJSON(ctx, http.MethodPost, "/v1/sessions", nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions returns every session the daemon knows, in any state.
func (c *Client) ListSessions(ctx context.Context) ([]Session, error) {
	var s []Session
	if err := c.doJSON(ctx, http.MethodGet, "/v1/sessions", nil, nil, &s); err != nil {
		return nil, err
	}
	return s, nil
}

// ListPools returns the daemon's warm pools.
func (c *Client) ListPools(ctx context.Context) ([]Pool, error) {
	var p []Pool
	if err := c.doJSON(ctx, http.MethodGet, "/v1/pools", nil, nil, &p); err != nil {
		return nil, err
	}
	return p, nil
}

// RemovePool stops a warm pool and removes its prepared sandboxes.
func (c *Client) RemovePool(ctx context.Context, key string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/pools/"+url.PathEscape(key), nil, nil, nil)
}

// InspectSession returns one session.
func (c *Client) InspectSession(ctx context.Context, id string) (*Session, error) {
	p, err := sessionPath(id, "")
	if err != nil {
		return nil, err
	}
	var s Session
	if err := c.doJSON(ctx, http.MethodGet, p, nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// UpdateSession revises a created or running session's policy, live
// (PATCH /v1/sessions/{id}); the answer's Revision says what changed. A
// refused revision changes nothing.
func (c *Client) UpdateSession(ctx context.Context, id string, req UpdateRequest) (*Session, error) {
	p, err := sessionPath(id, "")
	if err != nil {
		return nil, err
	}
	var s Session
	if err := c.doJSON(ctx, http.MethodPatch, p, nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// StartSession starts a created session's main process.
func (c *Client) StartSession(ctx context.Context, id string) (*Session, error) {
	p, err := sessionPath(id, "start")
	if err != nil {
		return nil, err
	}
	var s Session
	if err := c.doJSON(ctx, http.MethodPost, p, nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// StopSession stops a session's main process (SIGTERM, then SIGKILL after
// req.Grace) and returns once it has exited.
func (c *Client) StopSession(ctx context.Context, id string, req StopRequest) (*Session, error) {
	p, err := sessionPath(id, "stop")
	if err != nil {
		return nil, err
	}
	var s Session
	if err := c.doJSON(ctx, http.MethodPost, p, nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// WaitSession blocks until the session's main process has exited and reports
// how it ended. It returns at once for a session that already ended.
func (c *Client) WaitSession(ctx context.Context, id string) (*WaitResponse, error) {
	p, err := sessionPath(id, "wait")
	if err != nil {
		return nil, err
	}
	var w WaitResponse
	if err := c.doJSON(ctx, http.MethodGet, p, nil, nil, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// RemoveSession removes a stopped session and everything it owns. With
// force, a running session is killed first.
func (c *Client) RemoveSession(ctx context.Context, id string, force bool) error {
	p, err := sessionPath(id, "")
	if err != nil {
		return err
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"1"}}
	}
	return c.doJSON(ctx, http.MethodDelete, p, q, nil, nil)
}

// LogsOptions selects what Logs returns. When neither Stdout nor Stderr is
// set, both streams are returned.
type LogsOptions struct {
	// Follow keeps the stream open until the main process has exited and
	// all of its output has been delivered.
	Follow bool
	Stdout bool
	Stderr bool
}

// Logs copies the session's main-process output to stdout and stderr (a nil
// writer discards that stream). Without Follow it returns after the output
// written so far; with Follow it returns once the process has exited and
// all of its output has been copied.
func (c *Client) Logs(ctx context.Context, id string, opts LogsOptions, stdout, stderr io.Writer) error {
	p, err := sessionPath(id, "logs")
	if err != nil {
		return err
	}
	if !opts.Stdout && !opts.Stderr {
		opts.Stdout, opts.Stderr = true, true
	}
	q := url.Values{
		"follow": {boolParam(opts.Follow)},
		"stdout": {boolParam(opts.Stdout)},
		"stderr": {boolParam(opts.Stderr)},
	}
	resp, err := c.do(ctx, http.MethodGet, p, q, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	exit, err := copyFrames(resp.Body, stdout, stderr)
	if err != nil {
		return c.streamError(ctx, err)
	}
	if exit != nil {
		return fmt.Errorf("logs stream: unexpected exit frame")
	}
	return nil
}

// Exec runs req.Command in a running session, copies its output to stdout
// and stderr (nil discards), and returns its exit code.
//
// When stdin is non-nil it is streamed to the process until it returns
// io.EOF, and req.Stdin is set accordingly. A Read on stdin that blocks
// keeps a goroutine alive until it returns, even after Exec has returned.
// Cancelling ctx closes the connection; the daemon then kills the process.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (exitCode int, err error) {
	p, err := sessionPath(id, "exec")
	if err != nil {
		return -1, err
	}
	req.Stdin = stdin != nil
	header, err := json.Marshal(req)
	if err != nil {
		return -1, fmt.Errorf("encoding exec request: %w", err)
	}
	header = append(header, '\n')

	var body io.Reader = bytes.NewReader(header)
	if stdin != nil {
		pr, pw := io.Pipe()
		go pumpStdin(pw, header, stdin)
		// Closing the read side ends the pump when the exchange is over
		// before stdin reached EOF.
		defer pr.Close()
		body = pr
	}
	resp, err := c.do(ctx, http.MethodPost, p, nil, body, ExecContentType)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	exit, err := copyFrames(resp.Body, stdout, stderr)
	if err != nil {
		return -1, c.streamError(ctx, err)
	}
	if exit == nil {
		return -1, fmt.Errorf("exec stream ended without an exit status: %w", io.ErrUnexpectedEOF)
	}
	return exit.ExitCode, nil
}

// pumpStdin writes the exec header, then stdin as frames, then an empty
// frame for EOF.
func pumpStdin(pw *io.PipeWriter, header []byte, stdin io.Reader) {
	if _, err := pw.Write(header); err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if werr := WriteFrame(pw, nil, FrameStdin, buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if werr := WriteFrame(pw, nil, FrameStdin, nil); werr != nil {
				return
			}
			pw.Close()
			return
		}
		if err != nil {
			pw.CloseWithError(fmt.Errorf("reading stdin: %w", err))
			return
		}
	}
}

// ListImages returns the images in the daemon's store.
func (c *Client) ListImages(ctx context.Context) ([]Image, error) {
	var imgs []Image
	if err := c.doJSON(ctx, http.MethodGet, "/v1/images", nil, nil, &imgs); err != nil {
		return nil, err
	}
	return imgs, nil
}

// ImportImage streams an OCI or Docker image archive to the daemon and
// returns the images it contained. A non-empty name tags the imported image
// (the archive must then hold exactly one).
func (c *Client) ImportImage(ctx context.Context, name string, r io.Reader) ([]Image, error) {
	var q url.Values
	if name != "" {
		q = url.Values{"name": {name}}
	}
	resp, err := c.do(ctx, http.MethodPost, "/v1/images/import", q, r, "application/x-tar")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var imgs []Image
	if err := json.NewDecoder(resp.Body).Decode(&imgs); err != nil {
		return nil, fmt.Errorf("decoding import response: %w", err)
	}
	return imgs, nil
}

// doJSON sends in (if non-nil) as JSON and decodes the response into out
// (if non-nil).
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, q, body, ctype)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding response: %w", method, path, err)
	}
	return nil
}

// do sends a request and returns the response if its status is 2xx; any
// other status is returned as an *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, ctype string) (*http.Response, error) {
	u := "http://airlockd" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func (c *Client) transportError(ctx context.Context, method, path string, err error) error {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return ue
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("airlockd at %s: %s %s: %w", c.socket, method, path, err)
}

// streamError prefers the context's error over the I/O error it caused.
func (c *Client) streamError(ctx context.Context, err error) error {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// copyFrames demultiplexes a framed stream. It returns the exit status if
// the stream ended with an exit frame, nil at a clean end of stream, and
// an *Error for an error frame.
func copyFrames(r io.Reader, stdout, stderr io.Writer) (*WaitResponse, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		kind, payload, err := ReadFrame(br)
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading stream: %w", err)
		}
		switch kind {
		case FrameStdout:
			if _, err := stdout.Write(payload); err != nil {
				return nil, fmt.Errorf("writing stdout: %w", err)
			}
		case FrameStderr:
			if _, err := stderr.Write(payload); err != nil {
				return nil, fmt.Errorf("writing stderr: %w", err)
			}
		case FrameExit:
			var w WaitResponse
			if err := json.Unmarshal(payload, &w); err != nil {
				return nil, fmt.Errorf("decoding exit frame: %w", err)
			}
			return &w, nil
		case FrameError:
			var d ErrorDetail
			if err := json.Unmarshal(payload, &d); err != nil {
				return nil, fmt.Errorf("decoding error frame: %w", err)
			}
			return nil, &Error{Status: StatusForClass(d.Class), Class: d.Class, Message: d.Message, Details: d.Details}
		default:
			return nil, fmt.Errorf("unexpected frame kind %d", kind)
		}
	}
}

func sessionPath(id, action string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("session id must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	p := "/v1/sessions/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p, nil
}

func boolParam(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Error is a non-2xx response from the daemon, or an error frame in a
// stream. It unwraps to the matching containerd errdefs class, so both
// errdefs.IsNotFound(err) and api.IsNotFound(err) work.
type Error struct {
	// Status is the HTTP status; for an error frame, the status its class
	// maps to.
	Status  int
	Class   string
	Message string
	Details []string
}

func (e *Error) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if msg == "" {
		msg = e.Class
	}
	if len(e.Details) > 0 {
		msg += ": " + strings.Join(e.Details, "; ")
	}
	return msg
}

// Unwrap returns the errdefs class error.
func (e *Error) Unwrap() error { return classError(e.Class) }

func classError(class string) error {
	switch class {
	case ClassInvalidArgument:
		return errdefs.ErrInvalidArgument
	case ClassNotFound:
		return errdefs.ErrNotFound
	case ClassAlreadyExists:
		return errdefs.ErrAlreadyExists
	case ClassFailedPrecondition:
		return errdefs.ErrFailedPrecondition
	case ClassPermissionDenied:
		return errdefs.ErrPermissionDenied
	case ClassUnavailable:
		return errdefs.ErrUnavailable
	case ClassResourceExhausted:
		return errdefs.ErrResourceExhausted
	case ClassInternal:
		return errdefs.ErrInternal
	}
	return errdefs.ErrUnknown
}

// StatusForClass returns the HTTP status the daemon answers with for an
// error class; unknown classes map to 500.
func StatusForClass(class string) int {
	switch class {
	case ClassInvalidArgument:
		return http.StatusBadRequest
	case ClassNotFound:
		return http.StatusNotFound
	case ClassAlreadyExists, ClassFailedPrecondition:
		return http.StatusConflict
	case ClassPermissionDenied:
		return http.StatusForbidden
	case ClassUnavailable:
		return http.StatusServiceUnavailable
	case ClassResourceExhausted:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// ClassForStatus guesses the class of an error response whose body is not
// an ErrorBody (a proxy or a panic handler answered).
func ClassForStatus(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return ClassInvalidArgument
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return ClassNotFound
	case http.StatusConflict:
		return ClassFailedPrecondition
	case http.StatusForbidden, http.StatusUnauthorized:
		return ClassPermissionDenied
	case http.StatusServiceUnavailable:
		return ClassUnavailable
	case http.StatusInsufficientStorage, http.StatusTooManyRequests:
		return ClassResourceExhausted
	}
	return ClassInternal
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body ErrorBody
	if err := json.Unmarshal(b, &body); err == nil && body.Error.Class != "" {
		return &Error{
			Status:  resp.StatusCode,
			Class:   body.Error.Class,
			Message: body.Error.Message,
			Details: body.Error.Details,
		}
	}
	msg := strings.TrimSpace(string(b))
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &Error{Status: resp.StatusCode, Class: ClassForStatus(resp.StatusCode), Message: msg}
}

// IsInvalidArgument reports whether err is of class invalid_argument.
func IsInvalidArgument(err error) bool { return errdefs.IsInvalidArgument(err) }

// IsNotFound reports whether err is of class not_found.
func IsNotFound(err error) bool { return errdefs.IsNotFound(err) }

// IsAlreadyExists reports whether err is of class already_exists.
func IsAlreadyExists(err error) bool { return errdefs.IsAlreadyExists(err) }

// IsFailedPrecondition reports whether err is of class failed_precondition.
func IsFailedPrecondition(err error) bool { return errdefs.IsFailedPrecondition(err) }

// IsPermissionDenied reports whether err is of class permission_denied.
func IsPermissionDenied(err error) bool { return errdefs.IsPermissionDenied(err) }

// IsUnavailable reports whether err is of class unavailable, or the daemon
// could not be reached at all.
func IsUnavailable(err error) bool { return errdefs.IsUnavailable(err) }

// IsInternal reports whether err is of class internal.
func IsInternal(err error) bool { return errdefs.IsInternal(err) }

// UnreachableError is returned when the daemon's socket cannot be dialed.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	cause := e.Err
	var sc *os.SyscallError
	if errors.As(cause, &sc) {
		cause = sc
	}
	return fmt.Sprintf("cannot reach airlockd at %s: %v", e.Socket, cause)
}

// Unwrap returns the dial error and errdefs.ErrUnavailable.
func (e *UnreachableError) Unwrap() []error { return []error{e.Err, errdefs.ErrUnavailable} }
