package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
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
	_ = http.NewResponseController(w).EnableFullDuplex()
	flush := flusher(w)
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush()
	stdout, stderr := api.NewFrameWriters(w, flush)
	o := runtime.ExecOptions{Args: req.Command, Cwd: req.Workdir, Stdout: stdout, Stderr: stderr}
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
			_, err := io.Copy(pw, &frameStdin{r: br})
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
// is EOF.
type frameStdin struct {
	r   io.Reader
	buf []byte
	eof bool
}

func (f *frameStdin) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if f.eof {
			return 0, io.EOF
		}
		kind, payload, err := api.ReadFrame(f.r)
		if err != nil || len(payload) == 0 {
			f.eof = true
			return 0, io.EOF
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
