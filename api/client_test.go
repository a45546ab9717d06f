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
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
)

// serve runs h on a unix socket and returns a client for it.
func serve(t *testing.T, h http.Handler) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	c := NewClient(sock)
	t.Cleanup(func() {
		c.Close()
		srv.Close()
	})
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, class, msg string, details ...string) {
	writeJSON(w, StatusForClass(class), ErrorBody{Error: ErrorDetail{Class: class, Message: msg, Details: details}})
}

// streamWriter starts a framed response with full duplex enabled, as the
// daemon does for logs and exec.
func streamWriter(t *testing.T, w http.ResponseWriter) (stdout, stderr *FrameWriter) {
	t.Helper()
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		t.Errorf("EnableFullDuplex: %v", err)
	}
	w.Header().Set("Content-Type", StreamContentType)
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = rc.Flush() }
	flush()
	return NewFrameWriters(w, flush)
}

func TestVersion(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, Version{Version: "1.2.3", Containerd: "v2.4.2", Root: "/var/lib/airlock"})
	})
	c := serve(t, mux)
	v, err := c.Version(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := Version{Version: "1.2.3", Containerd: "v2.4.2", Root: "/var/lib/airlock"}
	if *v != want {
		t.Errorf("Version() = %+v, want %+v", *v, want)
	}
}

func TestSessionLifecycleRequests(t *testing.T) {
	type call struct {
		method, path, query, ctype string
		body                       string
	}
	var (
		mu    sync.Mutex
		calls []call
	)
	created := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sess := Session{ID: "s1", Label: "job", State: StateRunning, Image: "img", Command: []string{"true"}, Created: created}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, call{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), string(b)})
		mu.Unlock()
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sessions":
			writeJSON(w, http.StatusCreated, sess)
		case r.Method == "GET" && r.URL.Path == "/v1/sessions":
			writeJSON(w, 200, []Session{sess})
		case r.Method == "DELETE":
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/wait"):
			writeJSON(w, 200, WaitResponse{ExitCode: 143, Reason: "stopped"})
		default:
			writeJSON(w, 200, sess)
		}
	})
	c := serve(t, h)
	ctx := t.Context()

	pol := policies.Policy{Label: "job", Image: "img", Command: []string{"true"}}
	s, err := c.CreateSession(ctx, CreateRequest{Policy: pol, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != "s1" || !s.Created.Equal(created) {
		t.Errorf("CreateSession() = %+v", s)
	}
	list, err := c.ListSessions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "s1" {
		t.Errorf("ListSessions() = %+v, %v", list, err)
	}
	if _, err := c.InspectSession(ctx, "a/b"); err != nil {
		t.Error(err)
	}
	if _, err := c.StartSession(ctx, "s1"); err != nil {
		t.Error(err)
	}
	if _, err := c.StopSession(ctx, "s1", StopRequest{Grace: policies.Duration(3 * time.Second)}); err != nil {
		t.Error(err)
	}
	wr, err := c.WaitSession(ctx, "s1")
	if err != nil || *wr != (WaitResponse{ExitCode: 143, Reason: "stopped"}) {
		t.Errorf("WaitSession() = %+v, %v", wr, err)
	}
	if err := c.RemoveSession(ctx, "s1", false); err != nil {
		t.Error(err)
	}
	if err := c.RemoveSession(ctx, "s1", true); err != nil {
		t.Error(err)
	}

	want := []call{
		{"POST", "/v1/sessions", "", "application/json", `{"policy":{"label":"job","image":"img","command":["true"],"resources":{}},"start":true}`},
		{"GET", "/v1/sessions", "", "", ""},
		{"GET", "/v1/sessions/a%2Fb", "", "", ""},
		{"POST", "/v1/sessions/s1/start", "", "", ""},
		{"POST", "/v1/sessions/s1/stop", "", "application/json", `{"grace":"3s"}`},
		{"GET", "/v1/sessions/s1/wait", "", "", ""},
		{"DELETE", "/v1/sessions/s1", "", "", ""},
		{"DELETE", "/v1/sessions/s1", "force=1", "", ""},
	}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls:\n got %q\nwant %q", calls, want)
	}
}

func TestEmptySessionID(t *testing.T) {
	c := NewClient("/nonexistent/airlock.sock")
	if _, err := c.InspectSession(t.Context(), ""); !IsInvalidArgument(err) {
		t.Errorf("InspectSession(\"\") error = %v, want invalid argument", err)
	}
}

func TestErrorResponses(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		want    Error
		wantStr string
		is      func(error) bool
	}{
		{
			name:    "not found",
			status:  404,
			body:    `{"error":{"class":"not_found","message":"session \"x\" not found"}}`,
			want:    Error{Status: 404, Class: ClassNotFound, Message: `session "x" not found`},
			wantStr: `session "x" not found`,
			is:      IsNotFound,
		},
		{
			name:    "invalid with details",
			status:  400,
			body:    `{"error":{"class":"invalid_argument","message":"invalid policy","details":["image is required","timeout must be positive"]}}`,
			want:    Error{Status: 400, Class: ClassInvalidArgument, Message: "invalid policy", Details: []string{"image is required", "timeout must be positive"}},
			wantStr: "invalid policy: image is required; timeout must be positive",
			is:      IsInvalidArgument,
		},
		{
			name:    "conflict",
			status:  409,
			body:    `{"error":{"class":"failed_precondition","message":"session is running"}}`,
			want:    Error{Status: 409, Class: ClassFailedPrecondition, Message: "session is running"},
			wantStr: "session is running",
			is:      IsFailedPrecondition,
		},
		{
			name:    "already exists",
			status:  409,
			body:    `{"error":{"class":"already_exists","message":"image exists"}}`,
			want:    Error{Status: 409, Class: ClassAlreadyExists, Message: "image exists"},
			wantStr: "image exists",
			is:      IsAlreadyExists,
		},
		{
			name:    "permission denied",
			status:  403,
			body:    `{"error":{"class":"permission_denied","message":"nope"}}`,
			want:    Error{Status: 403, Class: ClassPermissionDenied, Message: "nope"},
			wantStr: "nope",
			is:      IsPermissionDenied,
		},
		{
			name:    "plain text body",
			status:  502,
			body:    "bad gateway\nmore\n",
			want:    Error{Status: 502, Class: ClassInternal, Message: "bad gateway"},
			wantStr: "bad gateway",
			is:      IsInternal,
		},
		{
			name:    "empty body",
			status:  503,
			want:    Error{Status: 503, Class: ClassUnavailable, Message: "Service Unavailable"},
			wantStr: "Service Unavailable",
			is:      IsUnavailable,
		},
		{
			name:    "json without class",
			status:  404,
			body:    `{"message":"x"}`,
			want:    Error{Status: 404, Class: ClassNotFound, Message: `{"message":"x"}`},
			wantStr: `{"message":"x"}`,
			is:      IsNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			_, err := c.InspectSession(t.Context(), "x")
			var apiErr *Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %T %v is not an *Error", err, err)
			}
			if !reflect.DeepEqual(*apiErr, tt.want) {
				t.Errorf("error = %+v, want %+v", *apiErr, tt.want)
			}
			if err.Error() != tt.wantStr {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.wantStr)
			}
			if !tt.is(err) {
				t.Errorf("class helper false for %v", err)
			}
			if IsNotFound(err) != errdefs.IsNotFound(err) {
				t.Error("IsNotFound and errdefs.IsNotFound disagree")
			}
		})
	}
}

func TestStatusForClassRoundTrip(t *testing.T) {
	for _, class := range []string{ClassInvalidArgument, ClassNotFound, ClassPermissionDenied, ClassUnavailable, ClassResourceExhausted, ClassInternal, ClassFailedPrecondition} {
		if got := ClassForStatus(StatusForClass(class)); got != class {
			t.Errorf("ClassForStatus(StatusForClass(%q)) = %q", class, got)
		}
	}
	if got := StatusForClass(ClassAlreadyExists); got != 409 {
		t.Errorf("StatusForClass(already_exists) = %d, want 409", got)
	}
	if got := StatusForClass("bogus"); got != 500 {
		t.Errorf("StatusForClass(bogus) = %d, want 500", got)
	}
}

func TestUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	c := NewClient(sock)
	_, err := c.Version(t.Context())
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("error %T %v is not an *UnreachableError", err, err)
	}
	want := "cannot reach airlockd at " + sock + ": connect: no such file or directory"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
	if !IsUnavailable(err) {
		t.Error("IsUnavailable(unreachable) = false")
	}
}

func TestCancelledBeforeDial(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "missing.sock"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Version(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
}

// frames writes each (kind, payload) pair as a frame.
func frames(w io.Writer, fs ...any) {
	for i := 0; i < len(fs); i += 2 {
		var p []byte
		switch v := fs[i+1].(type) {
		case string:
			p = []byte(v)
		default:
			p, _ = json.Marshal(v)
		}
		_ = WriteFrame(w, nil, fs[i].(byte), p)
	}
}

func TestLogs(t *testing.T) {
	tests := []struct {
		name               string
		opts               LogsOptions
		stream             func(w io.Writer)
		wantQuery          string
		wantOut, wantErrSt string
		wantErr            string
		wantClass          string
	}{
		{
			name:      "both streams by default",
			opts:      LogsOptions{},
			stream:    func(w io.Writer) { frames(w, FrameStdout, "out1\n", FrameStderr, "err1\n", FrameStdout, "out2\n") },
			wantQuery: "follow=0&stderr=1&stdout=1",
			wantOut:   "out1\nout2\n",
			wantErrSt: "err1\n",
		},
		{
			name:      "follow stdout only",
			opts:      LogsOptions{Follow: true, Stdout: true},
			stream:    func(w io.Writer) { frames(w, FrameStdout, "x") },
			wantQuery: "follow=1&stderr=0&stdout=1",
			wantOut:   "x",
		},
		{
			name: "error frame",
			opts: LogsOptions{Stderr: true},
			stream: func(w io.Writer) {
				frames(w, FrameStderr, "e", FrameError, ErrorDetail{Class: ClassInternal, Message: "log file vanished"})
			},
			wantQuery: "follow=0&stderr=1&stdout=0",
			wantErrSt: "e",
			wantErr:   "log file vanished",
			wantClass: ClassInternal,
		},
		{
			name:      "truncated frame",
			stream:    func(w io.Writer) { w.Write([]byte{FrameStdout, 0, 0, 0, 0, 0, 0, 9, 'a', 'b'}) },
			wantQuery: "follow=0&stderr=1&stdout=1",
			wantErr:   "reading stream: truncated frame: unexpected EOF",
		},
		{
			name:      "unexpected kind",
			stream:    func(w io.Writer) { frames(w, byte(9), "?") },
			wantQuery: "follow=0&stderr=1&stdout=1",
			wantErr:   "unexpected frame kind 9",
		},
		{
			name:      "exit frame in logs",
			stream:    func(w io.Writer) { frames(w, FrameExit, WaitResponse{}) },
			wantQuery: "follow=0&stderr=1&stdout=1",
			wantErr:   "logs stream: unexpected exit frame",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var gotQuery string
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/sessions/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
				gotQuery = r.URL.Query().Encode()
				w.WriteHeader(200)
				tt.stream(w)
			})
			c := serve(t, mux)
			var out, errOut bytes.Buffer
			err := c.Logs(t.Context(), "s1", tt.opts, &out, &errOut)
			if gotQuery != tt.wantQuery {
				t.Errorf("query = %q, want %q", gotQuery, tt.wantQuery)
			}
			if out.String() != tt.wantOut || errOut.String() != tt.wantErrSt {
				t.Errorf("stdout %q stderr %q, want %q %q", out.String(), errOut.String(), tt.wantOut, tt.wantErrSt)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Logs() error = %v", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Errorf("Logs() error = %v, want %q", err, tt.wantErr)
			}
			if tt.wantClass != "" {
				var apiErr *Error
				if !errors.As(err, &apiErr) || apiErr.Class != tt.wantClass || apiErr.Status != 500 {
					t.Errorf("error = %#v, want class %q status 500", err, tt.wantClass)
				}
			}
		})
	}
}

func TestLogsNotFound(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, ClassNotFound, "session "+r.PathValue("id")+" not found")
	})
	c := serve(t, mux)
	err := c.Logs(t.Context(), "nope", LogsOptions{}, nil, nil)
	if !IsNotFound(err) || err.Error() != "session nope not found" {
		t.Errorf("Logs() error = %v, want not found", err)
	}
}

// execServer implements POST /v1/sessions/{id}/exec: it echoes every stdin
// frame as an stdout frame as soon as it arrives, and exits with the number
// of stdin bytes it received.
func execServer(t *testing.T, gotReq chan<- ExecRequest) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions/{id}/exec", func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != ExecContentType {
			t.Errorf("Content-Type = %q", ct)
		}
		br := bufio.NewReader(r.Body)
		line, err := br.ReadBytes('\n')
		if err != nil {
			writeError(w, ClassInvalidArgument, "reading exec header: "+err.Error())
			return
		}
		var req ExecRequest
		if err := json.Unmarshal(line, &req); err != nil {
			writeError(w, ClassInvalidArgument, err.Error())
			return
		}
		gotReq <- req
		if req.Command[0] == "missing" {
			writeError(w, ClassInvalidArgument, "executable file not found")
			return
		}
		stdout, stderr := streamWriter(t, w)
		fmt.Fprintf(stderr, "running %s\n", strings.Join(req.Command, " "))
		if req.Command[0] == "hang" {
			// Reading stdin is how a full-duplex handler notices that the
			// client went away while it still holds the body open.
			_, _ = io.Copy(io.Discard, br)
			<-r.Context().Done()
			return
		}
		if req.Command[0] == "noexit" {
			return
		}
		if req.Command[0] == "fail" {
			frames(w, FrameError, ErrorDetail{Class: ClassUnavailable, Message: "task died"})
			return
		}
		n := 0
		if req.Stdin {
			for {
				kind, p, err := ReadFrame(br)
				if err != nil {
					t.Errorf("reading stdin frame: %v", err)
					return
				}
				if kind != FrameStdin {
					t.Errorf("stdin frame kind %d", kind)
					return
				}
				if len(p) == 0 {
					break
				}
				n += len(p)
				stdout.Write(p)
			}
		} else if rest, _ := io.ReadAll(br); len(rest) > 0 {
			t.Errorf("body after header without stdin: %q", rest)
		}
		b, _ := json.Marshal(WaitResponse{ExitCode: n, Reason: "exited"})
		_ = WriteFrame(w, nil, FrameExit, b)
	})
	return mux
}

func TestExecNoStdin(t *testing.T) {
	reqs := make(chan ExecRequest, 1)
	c := serve(t, execServer(t, reqs))
	var out, errOut bytes.Buffer
	req := ExecRequest{Command: []string{"ls", "-l"}, Env: map[string]string{"A": "1"}, Workdir: "/w", Stdin: true}
	code, err := c.Exec(t.Context(), "s1", req, nil, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Errorf("exit code = %d, want 0", code)
	}
	got := <-reqs
	want := ExecRequest{Command: []string{"ls", "-l"}, Env: map[string]string{"A": "1"}, Workdir: "/w", Stdin: false}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("server got %+v, want %+v", got, want)
	}
	if errOut.String() != "running ls -l\n" || out.Len() != 0 {
		t.Errorf("stdout %q stderr %q", out.String(), errOut.String())
	}
}

// TestExecInteractive checks that stdin is streamed: the server's echo of
// the first line arrives before the client has closed stdin.
func TestExecInteractive(t *testing.T) {
	reqs := make(chan ExecRequest, 1)
	c := serve(t, execServer(t, reqs))
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		code, err := c.Exec(t.Context(), "s1", ExecRequest{Command: []string{"cat"}}, stdinR, outW, io.Discard)
		outW.Close()
		done <- result{code, err}
	}()
	br := bufio.NewReader(outR)
	for _, line := range []string{"hello\n", "world\n"} {
		if _, err := io.WriteString(stdinW, line); err != nil {
			t.Fatal(err)
		}
		got, err := br.ReadString('\n')
		if err != nil || got != line {
			t.Fatalf("echo = %q, %v; want %q", got, err, line)
		}
	}
	stdinW.Close()
	if rest, _ := io.ReadAll(br); len(rest) != 0 {
		t.Errorf("extra output %q", rest)
	}
	r := <-done
	if r.err != nil || r.code != 12 {
		t.Errorf("Exec() = %d, %v; want 12, nil", r.code, r.err)
	}
	if got := <-reqs; !got.Stdin {
		t.Error("ExecRequest.Stdin = false with a stdin reader")
	}
}

func TestExecLargeStdin(t *testing.T) {
	reqs := make(chan ExecRequest, 1)
	c := serve(t, execServer(t, reqs))
	in := bytes.Repeat([]byte("0123456789abcdef"), 20000) // several frames
	var out bytes.Buffer
	code, err := c.Exec(t.Context(), "s1", ExecRequest{Command: []string{"cat"}}, bytes.NewReader(in), &out, nil)
	if err != nil || code != len(in) {
		t.Fatalf("Exec() = %d, %v; want %d", code, err, len(in))
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("echoed %d bytes, want %d identical bytes", out.Len(), len(in))
	}
}

func TestExecErrors(t *testing.T) {
	tests := []struct {
		cmd  string
		want func(error) bool
		msg  string
	}{
		{"missing", IsInvalidArgument, "executable file not found"},
		{"fail", IsUnavailable, "task died"},
		{"noexit", func(err error) bool { return errors.Is(err, io.ErrUnexpectedEOF) }, "exec stream ended without an exit status: unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			reqs := make(chan ExecRequest, 1)
			c := serve(t, execServer(t, reqs))
			code, err := c.Exec(t.Context(), "s1", ExecRequest{Command: []string{tt.cmd}}, strings.NewReader(""), nil, nil)
			if code != -1 || err == nil || !tt.want(err) || err.Error() != tt.msg {
				t.Errorf("Exec() = %d, %v; want -1, %q", code, err, tt.msg)
			}
		})
	}
}

func TestExecCancel(t *testing.T) {
	reqs := make(chan ExecRequest, 1)
	c := serve(t, execServer(t, reqs))
	ctx, cancel := context.WithCancel(t.Context())
	stderr := &notifyWriter{ch: make(chan struct{}, 1)}
	done := make(chan error, 1)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	go func() {
		_, err := c.Exec(ctx, "s1", ExecRequest{Command: []string{"hang"}}, stdinR, nil, stderr)
		done <- err
	}()
	<-stderr.ch // the stream is open
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Exec() error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec did not return after cancel")
	}
}

type notifyWriter struct{ ch chan struct{} }

func (w *notifyWriter) Write(p []byte) (int, error) {
	select {
	case w.ch <- struct{}{}:
	default:
	}
	return len(p), nil
}

func TestImages(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	img := Image{Name: "airlock/codex:bookworm", Digest: "sha256:abc", Size: 1234, Created: created,
		Labels: map[string]string{LabelAgentName: "codex", LabelAgentVersion: "0.169.0"}}
	var gotName, gotType string
	var gotBody []byte
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []Image{img})
	})
	mux.HandleFunc("POST /v1/images/import", func(w http.ResponseWriter, r *http.Request) {
		gotName, gotType = r.URL.Query().Get("name"), r.Header.Get("Content-Type")
		gotBody, _ = io.ReadAll(r.Body)
		if len(gotBody) == 0 {
			writeError(w, ClassInvalidArgument, "empty archive")
			return
		}
		writeJSON(w, 200, []Image{img})
	})
	c := serve(t, mux)
	imgs, err := c.ListImages(t.Context())
	if err != nil || len(imgs) != 1 || !reflect.DeepEqual(imgs[0], img) {
		t.Errorf("ListImages() = %+v, %v", imgs, err)
	}
	imgs, err = c.ImportImage(t.Context(), "airlock/agent:bookworm", strings.NewReader("tar bytes"))
	if err != nil || len(imgs) != 1 || !reflect.DeepEqual(imgs[0], img) {
		t.Errorf("ImportImage() = %+v, %v", imgs, err)
	}
	if gotName != "airlock/agent:bookworm" || gotType != "application/x-tar" || string(gotBody) != "tar bytes" {
		t.Errorf("server got name %q type %q body %q", gotName, gotType, gotBody)
	}
	if _, err := c.ImportImage(t.Context(), "", strings.NewReader("")); !IsInvalidArgument(err) {
		t.Errorf("ImportImage(empty) error = %v, want invalid argument", err)
	}
}

// FuzzCopyFrames feeds arbitrary streams to the demultiplexer: it must
// never panic, never produce more output than it read, and return either
// an exit status or an error, not both.
func FuzzCopyFrames(f *testing.F) {
	seed := func(fs ...any) []byte {
		var b bytes.Buffer
		frames(&b, fs...)
		return b.Bytes()
	}
	f.Add([]byte{})
	f.Add(seed(FrameStdout, "out", FrameStderr, "err"))
	f.Add(seed(FrameStdout, "x", FrameExit, WaitResponse{ExitCode: 3, Reason: "exited"}))
	f.Add(seed(FrameError, ErrorDetail{Class: ClassNotFound, Message: "gone"}))
	f.Add(seed(FrameExit, "not json"))
	f.Add([]byte{FrameStdout, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{9, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var out, errOut bytes.Buffer
		exit, err := copyFrames(bytes.NewReader(data), &out, &errOut)
		if exit != nil && err != nil {
			t.Fatalf("both an exit status %+v and an error %v", exit, err)
		}
		if n := out.Len() + errOut.Len(); n > len(data) {
			t.Fatalf("wrote %d bytes from a %d-byte stream", n, len(data))
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status == 0 {
			t.Fatalf("error frame without a status: %+v", apiErr)
		}
	})
}
