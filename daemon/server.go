package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// maxJSONBody bounds request bodies that carry JSON.
const maxJSONBody = 4 << 20

// Handler returns the API's HTTP handler.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", d.handleVersion)
	mux.HandleFunc("POST /v1/sessions", d.handleCreate)
	mux.HandleFunc("GET /v1/sessions", d.handleList)
	mux.HandleFunc("GET /v1/sessions/{id}", d.handleInspect)
	mux.HandleFunc("POST /v1/sessions/{id}/start", d.handleStart)
	mux.HandleFunc("POST /v1/sessions/{id}/stop", d.handleStop)
	mux.HandleFunc("GET /v1/sessions/{id}/wait", d.handleWait)
	mux.HandleFunc("DELETE /v1/sessions/{id}", d.handleRemove)
	mux.HandleFunc("GET /v1/sessions/{id}/logs", d.handleLogs)
	mux.HandleFunc("POST /v1/sessions/{id}/exec", d.handleExec)
	mux.HandleFunc("GET /v1/sessions/{id}/audit", d.handleAudit)
	mux.HandleFunc("GET /v1/sessions/{id}/diff", d.handleDiff)
	mux.HandleFunc("POST /v1/sessions/{id}/commit", d.handleCommit)
	mux.HandleFunc("POST /v1/sessions/{id}/discard", d.handleDiscard)
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.Pools()) })
	mux.HandleFunc("DELETE /v1/pools/{key}", func(w http.ResponseWriter, r *http.Request) {
		if err := d.RemovePool(r.Context(), r.PathValue("key")); err != nil {
			writeError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/images", d.handleImages)
	mux.HandleFunc("POST /v1/images/import", d.handleImageImport)
	mux.Handle("/v1/credentials/", http.StripPrefix("/v1/credentials", d.CredentialsHandler()))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, fmt.Errorf("no route for %s %s: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return d.logRequests(mux)
}

// Serve listens on the unix socket path (mode 0600, or 0660 with group
// ownership when group is set) and serves the API until ctx is done.
// Every member of group can create sessions, so serving a group needs an
// explicit admission policy (Config.Admission).
func (d *Daemon) Serve(ctx context.Context, socket, group string) error {
	if group != "" && d.cfg.Admission == nil {
		return fmt.Errorf("socket group %q: every member of the group could ask for what the built-in admission policy admits, "+
			"which can be root-equivalent on this host; give an explicit admission policy (airlockd --admission FILE, see examples/airlockd/admission.hcl): %w",
			group, errdefs.ErrFailedPrecondition)
	}
	d.ProtectSocket(socket)
	l, err := Listen(socket, group)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           d.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.G(ctx).Info("serving API", "socket", socket)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Closing the listener removes the socket file.
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	return err
}

// afterBind, when set (by tests), is called with the path a socket was
// just bound at, before its mode and owner are set.
var afterBind func(path string)

// Listen opens the API socket with restrictive permissions: mode 0600, or
// 0660 and owned by group when one is given. The socket is bound in a
// private directory (mode 0700) beside its final path, given its owner
// and mode there and then renamed into place, so it is never reachable
// with a mode that depends on the umask. The directory holding the socket
// must belong to airlockd's user and be writable by nobody else: whoever
// can write there can replace the socket.
func Listen(socket, group string) (_ net.Listener, retErr error) {
	gid := -1
	if group != "" {
		var err error
		if gid, err = lookupGroup(group); err != nil {
			return nil, err
		}
	}
	dir := dirOf(socket)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		return nil, fmt.Errorf("another daemon is serving on %s: %w", socket, errdefs.ErrAlreadyExists)
	}
	tmp, err := os.MkdirTemp(dir, ".s")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bound := tmp + "/s"
	l, err := net.Listen("unix", bound)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", socket, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	defer func() {
		if retErr != nil {
			ul.Close()
		}
	}()
	if afterBind != nil {
		afterBind(bound)
	}
	mode := os.FileMode(0o600)
	if gid >= 0 {
		if err := os.Chown(bound, os.Geteuid(), gid); err != nil {
			return nil, err
		}
		mode = 0o660
	}
	if err := os.Chmod(bound, mode); err != nil {
		return nil, err
	}
	if err := os.Rename(bound, socket); err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(socket, &st); err != nil {
		return nil, err
	}
	return &socketListener{UnixListener: ul, path: socket, ino: st.Ino}, nil
}

// socketListener removes its socket file on Close, unless another
// listener has replaced it.
type socketListener struct {
	*net.UnixListener
	path string
	ino  uint64
}

func (l *socketListener) Close() error {
	var st syscall.Stat_t
	if err := syscall.Stat(l.path, &st); err == nil && st.Ino == l.ino {
		_ = os.Remove(l.path)
	}
	return l.UnixListener.Close()
}

// checkSocketDir refuses a socket directory that another user owns or
// that group or others may write to.
func checkSocketDir(dir string) error {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("socket directory %s belongs to uid %d, not to airlockd's uid %d: whoever owns it can replace the socket; use a directory airlockd's user owns, such as /run/airlock: %w",
			dir, st.Uid, euid, errdefs.ErrPermissionDenied)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("socket directory %s has mode %04o: group or others can write to it and replace the socket; use a directory only airlockd's user can write to (mode 0755 or stricter): %w",
			dir, st.Mode&0o7777, errdefs.ErrPermissionDenied)
	}
	return nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("socket group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

func dirOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			if i == 0 {
				return "/"
			}
			return p[:i]
		}
	}
	return "."
}

func (d *Daemon) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		level := slog.LevelDebug
		if sw.status >= 500 {
			level = slog.LevelWarn
		}
		log.G(r.Context()).Log(r.Context(), level, "api", "method", r.Method, "path", r.URL.Path,
			"status", sw.status, "duration", time.Since(start))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (d *Daemon) handleVersion(w http.ResponseWriter, r *http.Request) {
	v := api.Version{Version: Version, Root: d.cfg.Root}
	if cv, err := d.runtime.Client().Version(r.Context()); err == nil {
		v.Containerd = cv.Version
	}
	writeJSON(w, http.StatusOK, v)
}

func (d *Daemon) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req api.CreateRequest
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	s, err := d.Create(r.Context(), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s)
}

func (d *Daemon) handleList(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, d.List(r.Context()))
}

func (d *Daemon) handleInspect(w http.ResponseWriter, r *http.Request) {
	s, err := d.Inspect(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleStart(w http.ResponseWriter, r *http.Request) {
	s, err := d.Start(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleStop(w http.ResponseWriter, r *http.Request) {
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
	s, err := d.Stop(r.Context(), r.PathValue("id"), req.Grace.Std())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (d *Daemon) handleWait(w http.ResponseWriter, r *http.Request) {
	resp, err := d.Wait(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (d *Daemon) handleRemove(w http.ResponseWriter, r *http.Request) {
	force, err := boolQuery(r, "force", false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if err := d.Remove(r.Context(), r.PathValue("id"), force); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) handleLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	follow, err1 := boolQuery(r, "follow", false)
	wantOut, err2 := boolQuery(r, "stdout", true)
	wantErr, err3 := boolQuery(r, "stderr", true)
	if err := errors.Join(err1, err2, err3); err != nil {
		writeError(w, r, err)
		return
	}
	if _, err := d.get(id); err != nil {
		writeError(w, r, err)
		return
	}
	flush := flusher(w)
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush()
	stdout, stderr := api.NewFrameWriters(w, flush)
	o := LogsOptions{Follow: follow}
	if wantOut {
		o.Stdout = stdout
	}
	if wantErr {
		o.Stderr = stderr
	}
	if err := d.Logs(r.Context(), id, o); err != nil && r.Context().Err() == nil {
		writeErrorFrame(stdout, err)
	}
}

func (d *Daemon) handleExec(w http.ResponseWriter, r *http.Request) {
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
	if _, err := d.get(id); err != nil {
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
	code, err := d.Exec(r.Context(), id, o)
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

func flusher(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	return func() { _ = rc.Flush() }
}

func boolQuery(r *http.Request, key string, def bool) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q is not a boolean: %w", key, v, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ErrorDetail converts an error into the API's error envelope.
func ErrorDetail(err error) (int, api.ErrorDetail) {
	status, class := http.StatusInternalServerError, api.ClassInternal
	switch {
	case errdefs.IsInvalidArgument(err):
		status, class = http.StatusBadRequest, api.ClassInvalidArgument
	case errdefs.IsNotFound(err):
		status, class = http.StatusNotFound, api.ClassNotFound
	case errdefs.IsAlreadyExists(err):
		status, class = http.StatusConflict, api.ClassAlreadyExists
	case errdefs.IsFailedPrecondition(err), errdefs.IsConflict(err):
		status, class = http.StatusConflict, api.ClassFailedPrecondition
	case errdefs.IsPermissionDenied(err):
		status, class = http.StatusForbidden, api.ClassPermissionDenied
	case errdefs.IsUnavailable(err):
		status, class = http.StatusServiceUnavailable, api.ClassUnavailable
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, class = http.StatusServiceUnavailable, api.ClassUnavailable
	}
	detail := api.ErrorDetail{Class: class, Message: cleanMessage(err.Error())}
	var ve *policies.ValidationError
	var ae *policies.AdmissionError
	switch {
	case errors.As(err, &ve):
		detail.Message = "invalid policy"
		detail.Details = ve.Problems
	case errors.As(err, &ae):
		detail.Message = "admission"
		detail.Details = ae.Problems
	}
	return status, detail
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := ErrorDetail(err)
	if status >= 500 {
		log.G(r.Context()).Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, status, api.ErrorBody{Error: detail})
}

func writeErrorFrame(fw *api.FrameWriter, err error) {
	_, detail := ErrorDetail(err)
	b, _ := json.Marshal(detail)
	_, _ = fw.Kind(api.FrameError).Write(b)
}

// classTexts are the messages of errdefs' class errors, which wrapping
// leaves at the start or end of a message; the class already says them.
var classTexts = []string{
	errdefs.ErrInvalidArgument.Error(), errdefs.ErrNotFound.Error(), errdefs.ErrAlreadyExists.Error(),
	errdefs.ErrFailedPrecondition.Error(), errdefs.ErrPermissionDenied.Error(), errdefs.ErrUnavailable.Error(),
	errdefs.ErrConflict.Error(),
}

func cleanMessage(m string) string {
	for _, c := range classTexts {
		m = strings.TrimSuffix(m, ": "+c)
		m = strings.TrimPrefix(m, c+": ")
	}
	return m
}
