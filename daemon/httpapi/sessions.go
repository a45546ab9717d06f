package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

func (h *server) handleVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.d.Version(r.Context()))
}

func (h *server) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	if err := checkReservedLabels(r.Context(), req.Labels); err != nil {
		writeError(w, r, err)
		return
	}
	s, err := h.d.Create(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s)
}

func (h *server) handleList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, h.d.List(r.Context()))
}

func (h *server) handleInspect(w http.ResponseWriter, r *http.Request) {
	s, err := h.d.Inspect(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *server) handleUpdate(w http.ResponseWriter, r *http.Request) {
	var req api.UpdateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	s, err := h.d.Update(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *server) handleStart(w http.ResponseWriter, r *http.Request) {
	s, err := h.d.Start(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *server) handleStop(w http.ResponseWriter, r *http.Request) {
	req := api.StopRequest{Grace: policies.Duration(10 * time.Second)}
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, r, err)
			return
		}
	}
	if req.Grace < 0 {
		writeError(w, r, fmt.Errorf("grace must not be negative: %w", errdefs.ErrInvalidArgument))
		return
	}
	s, err := h.d.Stop(r.Context(), r.PathValue("id"), req.Grace.Std())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *server) handleWait(w http.ResponseWriter, r *http.Request) {
	resp, err := h.d.Wait(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *server) handleRemove(w http.ResponseWriter, r *http.Request) {
	force, err := boolQuery(r, "force", false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := h.d.Remove(r.Context(), r.PathValue("id"), force); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *server) handleLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	follow, err1 := boolQuery(r, "follow", false)
	wantOut, err2 := boolQuery(r, "stdout", true)
	wantErr, err3 := boolQuery(r, "stderr", true)
	if err := errors.Join(err1, err2, err3); err != nil {
		writeError(w, r, err)
		return
	}
	if err := h.d.CheckSession(id); err != nil {
		writeError(w, r, err)
		return
	}
	flush := flusher(w)
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush()
	stdout, stderr := api.NewFrameWriters(w, flush)
	o := runtime.LogsOptions{Follow: follow}
	if wantOut {
		o.Stdout = stdout
	}
	if wantErr {
		o.Stderr = stderr
	}
	if err := h.d.Logs(r.Context(), id, o); err != nil && r.Context().Err() == nil {
		writeErrorFrame(stdout, err)
	}
}

func (h *server) handleExec(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// At once: a client streaming stdin (a terminal) keeps its body
	// open, so the server must not wait for its end to answer an error.
	_ = http.NewResponseController(w).EnableFullDuplex()
	br := bufio.NewReader(io.LimitReader(r.Body, 1<<62))
	line, err := br.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		writeError(w, r, fmt.Errorf("exec request: first line must be the JSON request: %w", errdefs.ErrInvalidArgument))
		return
	}
	var req api.ExecRequest
	if err := json.Unmarshal(line, &req); err != nil {
		writeError(w, r, fmt.Errorf("exec request: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	if len(req.Command) == 0 {
		writeError(w, r, fmt.Errorf("exec request: command is empty: %w", errdefs.ErrInvalidArgument))
		return
	}
	if err := h.d.CheckSession(id); err != nil {
		writeError(w, r, err)
		return
	}
	flush := flusher(w)
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush()
	stdout, stderr := api.NewFrameWriters(w, flush)
	o := runtime.ExecOptions{Args: req.Command, Cwd: req.Workdir, Stdout: stdout, Stderr: stderr, TTY: req.TTY}
	var resize chan runtime.WinSize
	if req.TTY {
		if req.Size != nil {
			o.Size = runtime.WinSize{Cols: req.Size.Cols, Rows: req.Size.Rows}
		}
		resize = make(chan runtime.WinSize, 1)
		o.Resize = resize
	}
	for k, v := range req.Env {
		o.Env = append(o.Env, k+"="+v)
	}
	// Stdin is pumped from the request body by a goroutine this handler
	// owns, so that nothing reads the body once the handler has returned.
	var pumped chan struct{}
	if req.Stdin {
		pr, pw := io.Pipe()
		pumped = make(chan struct{})
		go func() {
			defer close(pumped)
			_, err := io.Copy(pw, &frameStdin{r: br, resize: resize})
			pw.CloseWithError(err)
		}()
		defer pr.Close()
		o.Stdin = pr
	}
	code, err := h.d.Exec(r.Context(), id, o)
	if err != nil {
		writeErrorFrame(stdout, err)
	} else {
		b, _ := json.Marshal(api.WaitResponse{ExitCode: code, Reason: "exited"})
		_, _ = stdout.Kind(api.FrameExit).Write(b)
	}
	if pumped != nil {
		select {
		case <-pumped:
		case <-time.After(200 * time.Millisecond):
			// The process is done but the client still holds its stdin
			// open: drop the connection (the last frame is already flushed)
			// instead of letting the server reuse it under a live reader.
			panic(http.ErrAbortHandler)
		}
	}
}

// frameStdin reads FrameStdin frames; an empty frame or the end of the body
// is EOF. Resize frames go to resize, the latest replacing one not yet
// taken (nil: they are skipped, as are frames of other kinds).
type frameStdin struct {
	r      io.Reader
	buf    []byte
	eof    bool
	resize chan runtime.WinSize
	// hungUp is set when the body ended without an empty stdin frame:
	// the client went away.
	hungUp bool
}

func (f *frameStdin) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if f.eof {
			return 0, io.EOF
		}
		kind, payload, err := api.ReadFrame(f.r)
		if err != nil || kind == api.FrameStdin && len(payload) == 0 {
			f.eof, f.hungUp = true, err != nil
			return 0, io.EOF
		}
		if kind == api.FrameResize && f.resize != nil {
			var ws api.WinSize
			if json.Unmarshal(payload, &ws) == nil && ws.Cols > 0 && ws.Rows > 0 {
				sendLatest(f.resize, runtime.WinSize{Cols: ws.Cols, Rows: ws.Rows})
			}
			continue
		}
		if kind != api.FrameStdin {
			continue
		}
		f.buf = payload
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

// sendLatest puts v on c (of capacity 1), replacing a value not yet taken.
func sendLatest[T any](c chan T, v T) {
	for {
		select {
		case c <- v:
			return
		default:
		}
		select {
		case <-c:
		default:
		}
	}
}

// handleAttach connects the client to the terminal of the session's main
// process: the request body is a JSON AttachRequest line, then stdin and
// resize frames; the response is the terminal's output as stdout frames,
// ending with an exit frame when the main process ends. The client
// detaches by hanging up.
// attach counts a client attaching to session id, refusing it past
// maxAttached; release uncounts it.
func (h *server) attach(id string) (release func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.attached[id] >= maxAttached {
		return nil, fmt.Errorf("session %q has %d clients attached, the most it takes; detach one first: %w", id, maxAttached, errdefs.ErrFailedPrecondition)
	}
	h.attached[id]++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.attached[id]--; h.attached[id] <= 0 {
			delete(h.attached, id)
		}
	}, nil
}

func (h *server) handleAttach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	// At once: the client keeps its body open for keystrokes, so the
	// server must not wait for its end to answer, even with an error.
	_ = http.NewResponseController(w).EnableFullDuplex()
	br := bufio.NewReader(r.Body)
	line, err := br.ReadBytes('\n')
	if err != nil && !(errors.Is(err, io.EOF) && len(line) > 0) {
		writeError(w, r, fmt.Errorf("attach request: first line must be the JSON request: %w", errdefs.ErrInvalidArgument))
		return
	}
	var req api.AttachRequest
	if err := json.Unmarshal(line, &req); err != nil {
		writeError(w, r, fmt.Errorf("attach request: %v: %w", err, errdefs.ErrInvalidArgument))
		return
	}
	if req.Size != nil && (req.Size.Cols == 0 || req.Size.Rows == 0) {
		writeError(w, r, fmt.Errorf("attach request: size %dx%d: columns and rows must be positive: %w", req.Size.Cols, req.Size.Rows, errdefs.ErrInvalidArgument))
		return
	}
	release, err := h.attach(id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	conn, err := h.d.Attach(ctx, id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	defer conn.Close()
	if req.Size != nil {
		// The size goes one row off and back: the program gets SIGWINCH
		// even when the size is the one it had, and redraws its screen
		// for the newcomer (as docker attach does).
		size := runtime.WinSize{Cols: req.Size.Cols, Rows: req.Size.Rows}
		nudge := size
		if nudge.Rows < 0xffff {
			nudge.Rows++
		} else {
			nudge.Rows--
		}
		for _, ws := range []runtime.WinSize{nudge, size} {
			if err := h.d.Resize(ctx, id, ws); err != nil {
				writeError(w, r, err)
				return
			}
		}
	}
	flush := flusher(w)
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush()
	stdout, _ := api.NewFrameWriters(w, flush)

	// Input and resizes, until the client hangs up or ends its stdin.
	resize := make(chan runtime.WinSize, 1)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		in := &frameStdin{r: br, resize: resize}
		_, _ = io.Copy(conn, in)
		if in.hungUp {
			// The client went away (or detached): the server notices
			// a closed connection late while the handler reads the body.
			cancel()
		}
	}()
	resized := make(chan struct{})
	go func() {
		defer close(resized)
		for {
			select {
			case ws := <-resize:
				_ = h.d.Resize(ctx, id, ws)
			case <-ctx.Done():
				return
			}
		}
	}()
	// Output, until the terminal ends (the main process has exited) or
	// the client hangs up.
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(stdout, conn)
		copied <- err
	}()
	select {
	case <-ctx.Done():
		conn.Close()
		<-copied
		<-resized
		return
	case <-copied:
	}
	if h.stillRunning(ctx, id) {
		// The terminal's output ended while the session runs on: the
		// logger let this client go for falling too far behind (a
		// sandbox flooding its terminal). Say so now, rather than wait
		// for an exit that may be hours away while the client's keys
		// go nowhere.
		writeErrorFrame(stdout, fmt.Errorf("session %s: its output outran this client, which was let go; attach again: %w", id, errdefs.ErrUnavailable))
	} else if wr, err := h.d.Wait(ctx, id); err != nil {
		writeErrorFrame(stdout, err)
	} else {
		b, _ := json.Marshal(wr)
		_, _ = stdout.Kind(api.FrameExit).Write(b)
	}
	conn.Close()
	select {
	case <-pumped:
	case <-time.After(200 * time.Millisecond):
		// As in exec: the client still holds its stdin open; drop the
		// connection rather than reuse it under a live reader.
		panic(http.ErrAbortHandler)
	}
}

// stillRunning reports whether session id is still running a second after
// its terminal's output ended: a main process that has exited is recorded
// so well within that.
func (h *server) stillRunning(ctx context.Context, id string) bool {
	deadline := time.Now().Add(time.Second)
	for {
		s, err := h.d.Inspect(ctx, id)
		if err != nil || s.State != api.StateRunning {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReservedLabelPrefix begins the labels the Kubernetes node agent puts on
// the local sessions it runs for Sessions (the Session's uid and name):
// it adopts a local session by them.
const ReservedLabelPrefix = "airlock.dev/"

// checkReservedLabels refuses labels under ReservedLabelPrefix unless the
// caller is root on the socket: a member of the socket's group could
// otherwise make a local session that the node agent adopts for a
// pending Session, whose status, logs and changes it would then forge.
// Root (the node's operator, as when handing a session to an agent) may.
func checkReservedLabels(ctx context.Context, labels map[string]string) error {
	if caller.IsRoot(ctx) {
		return nil
	}
	for k := range labels {
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			return fmt.Errorf("label %q: labels under %s are the Kubernetes node agent's, which adopts a local session by them; only root may set them through the socket (%s may not): %w",
				k, ReservedLabelPrefix, caller.Name(ctx), errdefs.ErrPermissionDenied)
		}
	}
	return nil
}
