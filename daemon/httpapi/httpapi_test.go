package httpapi

import (
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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestErrorMapping checks the status, class and message each errdefs class
// of a daemon error becomes, through a real route.
func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		status      int
		class       string
		message     string
		details     []string
		wantDetails bool
	}{
		{"not found", fmt.Errorf("no session %q: %w", "x", errdefs.ErrNotFound), 404, api.ClassNotFound, `no session "x"`, nil, false},
		{"invalid", fmt.Errorf("%w: bad id", errdefs.ErrInvalidArgument), 400, api.ClassInvalidArgument, "bad id", nil, false},
		{"exists", fmt.Errorf("session x: %w", errdefs.ErrAlreadyExists), 409, api.ClassAlreadyExists, "session x", nil, false},
		{"precondition", fmt.Errorf("session x is running: %w", errdefs.ErrFailedPrecondition), 409, api.ClassFailedPrecondition, "session x is running", nil, false},
		{"conflict", fmt.Errorf("busy: %w", errdefs.ErrConflict), 409, api.ClassFailedPrecondition, "busy", nil, false},
		{"denied", fmt.Errorf("mount /etc: %w", errdefs.ErrPermissionDenied), 403, api.ClassPermissionDenied, "mount /etc", nil, false},
		{"unavailable", fmt.Errorf("containerd: %w", errdefs.ErrUnavailable), 503, api.ClassUnavailable, "containerd", nil, false},
		{"disk full", fmt.Errorf("write session.json: %w", syscall.ENOSPC), 507, api.ClassResourceExhausted, "write session.json: no space left on device", nil, false},
		{"canceled", fmt.Errorf("stop: %w", context.Canceled), 503, api.ClassUnavailable, "stop: context canceled", nil, false},
		{"deadline", fmt.Errorf("stop: %w", context.DeadlineExceeded), 503, api.ClassUnavailable, "stop: context deadline exceeded", nil, false},
		{"unclassed", errors.New("disk on fire"), 500, api.ClassInternal, "disk on fire", nil, false},
		{"validation", fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, &policies.ValidationError{Problems: []string{"a: bad", "b: worse"}}),
			400, api.ClassInvalidArgument, "invalid policy", []string{"a: bad", "b: worse"}, true},
		{"admission", fmt.Errorf("%w: %w", errdefs.ErrPermissionDenied, &policies.AdmissionError{Problems: []string{"mount /: protected"}}),
			403, api.ClassPermissionDenied, "admission", []string{"mount /: protected"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, d := ErrorDetail(tc.err)
			if status != tc.status || d.Class != tc.class || d.Message != tc.message || (tc.wantDetails && !slices.Equal(d.Details, tc.details)) {
				t.Errorf("ErrorDetail(%v) = %d %+v, want %d %s %q %q", tc.err, status, d, tc.status, tc.class, tc.message, tc.details)
			}
			s := serve(t, &fakeDaemon{inspect: func(string) (*api.Session, error) { return nil, tc.err }})
			resp, body := s.do(http.MethodGet, "/v1/sessions/x", "")
			got := errorBody(t, body)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/json" || got.Class != d.Class || got.Message != d.Message {
				t.Errorf("GET: %d %q %+v, want %d %+v", resp.StatusCode, resp.Header.Get("Content-Type"), got, tc.status, d)
			}
			// The client sees the same class.
			_, err := s.client.InspectSession(t.Context(), "x")
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Class != tc.class {
				t.Errorf("client error %v, want status %d class %s", err, tc.status, tc.class)
			}
		})
	}
}

func TestUnknownRoute(t *testing.T) {
	f := &fakeDaemon{}
	s := serve(t, f)
	for _, path := range []string{"/v2/sessions", "/v1/nothing", "/"} {
		resp, body := s.do(http.MethodGet, path, "")
		d := errorBody(t, body)
		if resp.StatusCode != http.StatusNotFound || d.Class != api.ClassNotFound || d.Message != "no route for GET "+path {
			t.Errorf("GET %s: %d %+v, want 404 naming the route", path, resp.StatusCode, d)
		}
	}
	if c := f.Calls(); len(c) != 0 {
		t.Errorf("unknown routes called the daemon: %q", c)
	}
}

func TestCreateBody(t *testing.T) {
	var got api.CreateRequest
	f := &fakeDaemon{create: func(req api.CreateRequest) (*api.Session, error) {
		got = req
		return &api.Session{ID: "abc", State: api.StateCreated}, nil
	}}
	s := serve(t, f)

	resp, body := s.do(http.MethodPost, "/v1/sessions", `{"start": true}`)
	var sess api.Session
	if err := json.Unmarshal([]byte(body), &sess); resp.StatusCode != http.StatusCreated || err != nil || sess.ID != "abc" || !got.Start {
		t.Fatalf("create: %d %q (%v), request %+v; want 201 and the session", resp.StatusCode, body, err, got)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"unknown field", `{"start": true, "bogus": 1}`, `unknown field "bogus"`},
		{"not JSON", `start`, "invalid character"},
		{"empty", ``, "EOF"},
		{"wrong type", `{"start": "yes"}`, "cannot unmarshal string"},
		// Cut at maxJSONBody: the decoder sees a truncated document.
		{"too large", `{"start": true` + strings.Repeat(" ", maxJSONBody) + `}`, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.Calls())
			resp, body := s.do(http.MethodPost, "/v1/sessions", tc.body)
			d := errorBody(t, body)
			if resp.StatusCode != http.StatusBadRequest || d.Class != api.ClassInvalidArgument ||
				!strings.HasPrefix(d.Message, "request body: ") || !strings.Contains(d.Message, tc.want) {
				t.Errorf("%d %+v, want 400 with a reason containing %q", resp.StatusCode, d, tc.want)
			}
			if c := f.Calls(); len(c) != before {
				t.Errorf("a bad body reached the daemon: %q", c[before:])
			}
		})
	}
}

func TestStopGrace(t *testing.T) {
	var grace time.Duration
	f := &fakeDaemon{stop: func(id string, g time.Duration) (*api.Session, error) {
		grace = g
		return &api.Session{ID: id, State: api.StateStopped}, nil
	}}
	s := serve(t, f)
	for _, tc := range []struct {
		body   string
		status int
		grace  time.Duration
	}{
		{"", 200, 10 * time.Second},
		{`{}`, 200, 10 * time.Second},
		{`{"grace": "2s"}`, 200, 2 * time.Second},
		{`{"grace": 5}`, 200, 5},
		{`{"grace": "0s"}`, 200, 0},
		{`{"grace": "-1s"}`, 400, -1},
		{`{"grace": "soon"}`, 400, -1},
		{`{"grace": true}`, 400, -1},
	} {
		grace = -1
		resp, body := s.do(http.MethodPost, "/v1/sessions/x/stop", tc.body)
		if resp.StatusCode != tc.status || grace != tc.grace {
			t.Errorf("stop with %q: %d %s, grace %v; want %d, grace %v", tc.body, resp.StatusCode, body, grace, tc.status, tc.grace)
		}
		if tc.status == 400 {
			if d := errorBody(t, body); d.Class != api.ClassInvalidArgument {
				t.Errorf("stop with %q: %+v", tc.body, d)
			}
		}
	}
}

func TestBoolQuery(t *testing.T) {
	for _, tc := range []struct {
		query   string
		def     bool
		want    bool
		wantErr bool
	}{
		{"", false, false, false},
		{"", true, true, false},
		{"force=true", false, true, false},
		{"force=1", false, true, false},
		{"force=false", true, false, false},
		{"force=0", true, false, false},
		{"force=T", false, true, false},
		{"force=yes", false, false, true},
		{"force=", true, true, false},
		{"other=true", false, false, false},
	} {
		r := httptest.NewRequest(http.MethodGet, "/x?"+tc.query, nil)
		got, err := boolQuery(r, "force", tc.def)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("boolQuery(%q, def %v) = %v, %v; want %v, error %v", tc.query, tc.def, got, err, tc.want, tc.wantErr)
		}
		if err != nil && (!errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "force=")) {
			t.Errorf("boolQuery(%q): error %v, want an invalid argument naming the parameter", tc.query, err)
		}
	}
}

func TestRemoveForce(t *testing.T) {
	f := &fakeDaemon{remove: func(id string, force bool) error {
		if !force {
			return fmt.Errorf("session %q has changes waiting for review: %w", id, errdefs.ErrFailedPrecondition)
		}
		return nil
	}}
	s := serve(t, f)
	if resp, body := s.do(http.MethodDelete, "/v1/sessions/x?force=true", ""); resp.StatusCode != http.StatusNoContent || body != "" {
		t.Errorf("remove with force: %d %q, want 204 and no body", resp.StatusCode, body)
	}
	resp, body := s.do(http.MethodDelete, "/v1/sessions/x", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusConflict || d.Class != api.ClassFailedPrecondition {
		t.Errorf("remove without force: %d %+v, want 409", resp.StatusCode, d)
	}
	resp, body = s.do(http.MethodDelete, "/v1/sessions/x?force=maybe", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusBadRequest || d.Message != `query parameter force="maybe" is not a boolean` {
		t.Errorf("remove with force=maybe: %d %+v, want 400 naming the parameter", resp.StatusCode, d)
	}
	want := []string{"Remove x force=true", "Remove x force=false"}
	if c := f.Calls(); !slices.Equal(c, want) {
		t.Errorf("calls %q, want %q (a bad query reaches no method)", c, want)
	}
}

// TestLogsStream checks the logs route: its checks come before the
// stream, the streams asked for are the ones passed, and each write reaches
// the client while the daemon is still writing.
func TestLogsStream(t *testing.T) {
	step := make(chan struct{})
	f := &fakeDaemon{known: map[string]bool{"s1": true}, logs: func(ctx context.Context, id string, o runtime.LogsOptions) error {
		if o.Stdout != nil {
			if _, err := o.Stdout.Write([]byte("out 1\n")); err != nil {
				return err
			}
		}
		select {
		case <-step: // the client has seen the first write
		case <-time.After(10 * time.Second):
			return errors.New("the first write never reached the client")
		}
		if o.Stderr != nil {
			_, _ = o.Stderr.Write([]byte("err 1\n"))
		}
		return fmt.Errorf("log file vanished: %w", errdefs.ErrNotFound)
	}}
	s := serve(t, f)

	// Unknown session, bad query: a JSON error, no stream.
	resp, body := s.do(http.MethodGet, "/v1/sessions/nope/logs", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusNotFound || d.Class != api.ClassNotFound {
		t.Errorf("logs of an unknown session: %d %+v", resp.StatusCode, d)
	}
	resp, body = s.do(http.MethodGet, "/v1/sessions/s1/logs?follow=sometimes&stdout=x", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(d.Message, "follow=") || !strings.Contains(d.Message, "stdout=") {
		t.Errorf("logs with bad query: %d %+v, want 400 naming both parameters", resp.StatusCode, d)
	}

	// A stream: the first frame arrives before the daemon writes the next.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://airlock/v1/sessions/s1/logs?follow=1", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.StreamContentType {
		t.Fatalf("logs: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	kind, payload, err := api.ReadFrame(resp.Body)
	if err != nil || kind != api.FrameStdout || string(payload) != "out 1\n" {
		t.Fatalf("first frame %d %q %v, want stdout", kind, payload, err)
	}
	close(step)
	var frames []string
	for {
		kind, payload, err := api.ReadFrame(resp.Body)
		if err != nil {
			break
		}
		frames = append(frames, fmt.Sprintf("%d %s", kind, payload))
	}
	want := []string{fmt.Sprintf("%d err 1\n", api.FrameStderr), fmt.Sprintf(`%d {"class":"not_found","message":"log file vanished"}`, api.FrameError)}
	if !slices.Equal(frames, want) {
		t.Errorf("frames %q, want %q", frames, want)
	}

	// Only the streams asked for are passed.
	f.logs = func(ctx context.Context, id string, o runtime.LogsOptions) error { return nil }
	if resp, _ := s.do(http.MethodGet, "/v1/sessions/s1/logs?stdout=false", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("logs without stdout: %d", resp.StatusCode)
	}
	calls := f.Calls()
	wantCalls := []string{"CheckSession nope", "CheckSession s1", "Logs s1 follow=true stdout=true stderr=true", "CheckSession s1", "Logs s1 follow=false stdout=false stderr=true"}
	if !slices.Equal(calls, wantCalls) {
		t.Errorf("calls %q, want %q", calls, wantCalls)
	}
}

func TestExec(t *testing.T) {
	var got runtime.ExecOptions
	f := &fakeDaemon{known: map[string]bool{"s1": true}, exec: func(ctx context.Context, id string, o runtime.ExecOptions) (int, error) {
		got = o
		if o.Stdin != nil {
			in, err := io.ReadAll(o.Stdin)
			if err != nil {
				return -1, err
			}
			_, _ = o.Stdout.Write(bytes.ToUpper(in))
		}
		_, _ = o.Stderr.Write([]byte("done"))
		return 7, nil
	}}
	s := serve(t, f)

	// stdin frames reach the process, output frames and the exit code
	// reach the client.
	// The exec with stdin has a connection of its own: with full duplex,
	// net/http can start reading the next request on it while it still
	// reads the body's end (golang/go#68560), and then drops it.
	stdinClient := api.NewClient(s.socket)
	defer stdinClient.Close()
	var stdout, stderr bytes.Buffer
	code, err := stdinClient.Exec(t.Context(), "s1", api.ExecRequest{Command: []string{"tr", "a-z", "A-Z"}, Env: map[string]string{"K": "v"}, Workdir: "/w"},
		strings.NewReader("hello\nworld\n"), &stdout, &stderr)
	if err != nil || code != 7 || stdout.String() != "HELLO\nWORLD\n" || stderr.String() != "done" {
		t.Fatalf("exec: code %d, %v, stdout %q, stderr %q", code, err, stdout.String(), stderr.String())
	}
	if !slices.Equal(got.Args, []string{"tr", "a-z", "A-Z"}) || got.Cwd != "/w" || !slices.Equal(got.Env, []string{"K=v"}) {
		t.Errorf("exec options %+v", got)
	}
	// Without stdin the process gets none.
	if code, err := s.client.Exec(t.Context(), "s1", api.ExecRequest{Command: []string{"true"}}, nil, nil, nil); err != nil || code != 7 || got.Stdin != nil {
		t.Errorf("exec without stdin: %d %v, stdin %v", code, err, got.Stdin)
	}

	// A daemon error after the stream began is an error frame.
	f.exec = func(context.Context, string, runtime.ExecOptions) (int, error) {
		return -1, fmt.Errorf("session %q is exited, not running: %w", "s1", errdefs.ErrFailedPrecondition)
	}
	_, err = s.client.Exec(t.Context(), "s1", api.ExecRequest{Command: []string{"true"}}, nil, nil, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Class != api.ClassFailedPrecondition || ae.Message != `session "s1" is exited, not running` {
		t.Errorf("exec in a stopped session: %v", err)
	}

	// Header errors come before the stream.
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"no header line", "/v1/sessions/s1/exec", ``, 400, "exec request: first line must be the JSON request"},
		{"bad JSON", "/v1/sessions/s1/exec", "{command\n", 400, "exec request: invalid character"},
		{"empty command", "/v1/sessions/s1/exec", `{"command": []}` + "\n", 400, "exec request: command is empty"},
		{"unknown session", "/v1/sessions/nope/exec", `{"command": ["true"]}` + "\n", 404, `no session "nope"`},
	} {
		before := len(f.Calls())
		resp, body := s.do(http.MethodPost, tc.path, tc.body)
		if d := errorBody(t, body); resp.StatusCode != tc.status || !strings.HasPrefix(d.Message, tc.want) {
			t.Errorf("%s: %d %+v, want %d %q", tc.name, resp.StatusCode, d, tc.status, tc.want)
		}
		for _, c := range f.Calls()[before:] {
			if strings.HasPrefix(c, "Exec") {
				t.Errorf("%s: reached the daemon's Exec", tc.name)
			}
		}
	}
}

func TestFrameStdin(t *testing.T) {
	var in bytes.Buffer
	_ = api.WriteFrame(&in, nil, api.FrameStdin, []byte("ab"))
	_ = api.WriteFrame(&in, nil, api.FrameStdout, []byte("ignored"))
	_ = api.WriteFrame(&in, nil, api.FrameStdin, []byte("cd"))
	_ = api.WriteFrame(&in, nil, api.FrameStdin, nil) // EOF
	_ = api.WriteFrame(&in, nil, api.FrameStdin, []byte("after EOF"))
	b, err := io.ReadAll(&frameStdin{r: &in})
	if err != nil || string(b) != "abcd" {
		t.Errorf("frameStdin read %q, %v; want abcd", b, err)
	}
	// A body cut short ends stdin too.
	b, err = io.ReadAll(&frameStdin{r: strings.NewReader("\x03\x00\x00")})
	if err != nil || len(b) != 0 {
		t.Errorf("cut frame: %q, %v", b, err)
	}
}

func TestAuditStream(t *testing.T) {
	events := []string{
		`{"time":"2026-03-01T12:00:00Z","session":"s1","layer":"session","action":"started"}`,
		`{"time":"2026-03-01T12:00:01Z","session":"s1","layer":"dns","action":"refused","subject":"evil.test"}`,
	}
	var failAfter int // the event before which AuditEach fails; -1: never
	f := &fakeDaemon{auditEach: func(ctx context.Context, id string, fn func(json.RawMessage) error) error {
		if id != "s1" {
			return noSession(id)
		}
		for i, ev := range events {
			if i == failAfter {
				return errors.New("audit log line 2: not a JSON event")
			}
			if err := fn(json.RawMessage(ev)); err != nil {
				return err
			}
		}
		return nil
	}}
	s := serve(t, f)

	failAfter = -1
	resp, body := s.do(http.MethodGet, "/v1/sessions/s1/audit", "")
	if want := "[\n" + events[0] + ",\n" + events[1] + "\n]\n"; resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || body != want {
		t.Errorf("audit: %d %q\n%s\nwant\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body, want)
	}
	evs, err := s.client.Audit(t.Context(), "s1")
	if err != nil || len(evs) != 2 || evs[1].Subject != "evil.test" {
		t.Errorf("client: %+v, %v", evs, err)
	}

	// No events: an empty array.
	failAfter = -1
	saved := events
	events = nil
	if resp, body := s.do(http.MethodGet, "/v1/sessions/s1/audit", ""); resp.StatusCode != http.StatusOK || body != "[]\n" {
		t.Errorf("empty audit: %d %q", resp.StatusCode, body)
	}
	events = saved

	// An error before the first event: a JSON error.
	failAfter = 0
	resp, body = s.do(http.MethodGet, "/v1/sessions/s1/audit", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusInternalServerError || d.Message != "audit log line 2: not a JSON event" {
		t.Errorf("failing audit: %d %+v", resp.StatusCode, d)
	}
	if _, err := s.client.Audit(t.Context(), "nope"); !api.IsNotFound(err) {
		t.Errorf("unknown session: %v", err)
	}

	// An error after the array began: the response is cut off, never a
	// shorter array.
	failAfter = 1
	if evs, err := s.client.Audit(t.Context(), "s1"); err == nil {
		t.Errorf("audit failing midway: %d events and no error", len(evs))
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://airlock/v1/sessions/s1/audit", nil)
	if resp, err := s.http.Do(req); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Error("audit failing midway: the body ended cleanly")
		}
	}
}

func TestUnifiedDiff(t *testing.T) {
	var fail error
	f := &fakeDaemon{unifiedDiff: func(id string) (func(context.Context, io.Writer) error, error) {
		if id != "s1" {
			return nil, fmt.Errorf("session %q is running; stop it before reviewing its changes: %w", id, errdefs.ErrFailedPrecondition)
		}
		return func(_ context.Context, w io.Writer) error {
			_, _ = io.WriteString(w, "--- a/x\n+++ b/x\n")
			return fail
		}, nil
	}}
	s := serve(t, f)
	resp, body := s.do(http.MethodGet, "/v1/sessions/s1/diff?format=unified", "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/x-diff; charset=utf-8" || body != "--- a/x\n+++ b/x\n" {
		t.Errorf("unified diff: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	// Once written, a failure is only logged.
	fail = errors.New("read error")
	if resp, body := s.do(http.MethodGet, "/v1/sessions/s1/diff?format=unified", ""); resp.StatusCode != http.StatusOK || body != "--- a/x\n+++ b/x\n" {
		t.Errorf("unified diff failing late: %d %q", resp.StatusCode, body)
	}
	resp, body = s.do(http.MethodGet, "/v1/sessions/s2/diff?format=unified", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusConflict || d.Class != api.ClassFailedPrecondition {
		t.Errorf("unified diff of a running session: %d %+v", resp.StatusCode, d)
	}
	resp, body = s.do(http.MethodGet, "/v1/sessions/s1/diff?format=html", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusBadRequest || d.Message != "format must be json or unified" {
		t.Errorf("diff format html: %d %+v", resp.StatusCode, d)
	}
	resp, _ = s.do(http.MethodGet, "/v1/sessions/s1/diff", "")
	if resp.StatusCode != http.StatusNotFound || !slices.Contains(f.Calls(), "Diff s1") {
		t.Errorf("json diff: %d, calls %q", resp.StatusCode, f.Calls())
	}
}

func TestImageImport(t *testing.T) {
	var got []byte
	f := &fakeDaemon{importImage: func(_ context.Context, r io.Reader, name string) ([]api.Image, error) {
		got, _ = io.ReadAll(r)
		return []api.Image{{Name: name, Digest: "sha256:00"}}, nil
	}}
	s := serve(t, f)
	resp, body := s.do(http.MethodPost, "/v1/images/import?name=agent:1", "")
	if d := errorBody(t, body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(d.Message, "archive as the request body") {
		t.Errorf("import without a body: %d %+v", resp.StatusCode, d)
	}
	if slices.Contains(f.Calls(), "ImportImage agent:1") {
		t.Error("an empty import reached the daemon")
	}
	imgs, err := s.client.ImportImage(t.Context(), "agent:1", strings.NewReader("tar bytes"))
	if err != nil || len(imgs) != 1 || imgs[0].Name != "agent:1" || string(got) != "tar bytes" {
		t.Errorf("import: %+v, %v; archive %q", imgs, err, got)
	}
}

func TestPoolsVersionCredentials(t *testing.T) {
	var credPath string
	f := &fakeDaemon{credentials: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		credPath = r.URL.Path
		w.WriteHeader(http.StatusTeapot)
	})}
	s := serve(t, f)
	if v, err := s.client.Version(t.Context()); err != nil || v.Version != "test" || v.Containerd != "v2" {
		t.Errorf("version: %+v, %v", v, err)
	}
	if resp, _ := s.do(http.MethodDelete, "/v1/pools/k1", ""); resp.StatusCode != http.StatusNoContent || !slices.Contains(f.Calls(), "RemovePool k1") {
		t.Errorf("remove pool: %d, calls %q", resp.StatusCode, f.Calls())
	}
	if resp, body := s.do(http.MethodGet, "/v1/pools", ""); resp.StatusCode != http.StatusOK || body != "[]\n" {
		t.Errorf("pools: %d %q", resp.StatusCode, body)
	}
	if resp, _ := s.do(http.MethodPost, "/v1/credentials/v1/introspect", "{}"); resp.StatusCode != http.StatusTeapot || credPath != "/v1/introspect" {
		t.Errorf("credentials: %d at %q, want the broker's answer at /v1/introspect", resp.StatusCode, credPath)
	}
}

// TestServeRefusedByDaemon checks that Serve asks the daemon first and
// creates no socket when it refuses.
func TestServeRefusedByDaemon(t *testing.T) {
	refusal := fmt.Errorf("socket group %q needs an admission policy: %w", "staff", errdefs.ErrFailedPrecondition)
	f := &fakeDaemon{exposeAPI: func(socket, group string) error {
		if group != "" {
			return refusal
		}
		return nil
	}}
	sock := filepath.Join(t.TempDir(), "api.sock")
	if err := Serve(quietCtx(), f, sock, "staff"); !errors.Is(err, refusal) {
		t.Fatalf("Serve: %v, want the daemon's refusal", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Serve left %s", sock)
	}
}

func TestCleanMessage(t *testing.T) {
	for in, want := range map[string]string{
		"no session \"x\": not found":          `no session "x"`,
		"invalid argument: bad policy":         "bad policy",
		"failed precondition":                  "failed precondition",
		"a: not found: b":                      "a: not found: b",
		"permission denied: x: already exists": "x",
	} {
		if got := cleanMessage(in); got != want {
			t.Errorf("cleanMessage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestServeCredentials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv, err := ServeCredentials(quietCtx(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "jwks at "+r.URL.Path)
	}), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr + "/.well-known/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "jwks at /.well-known/jwks.json" {
		t.Errorf("credentials endpoint answered %q", b)
	}
	if _, err := ServeCredentials(quietCtx(), http.NotFoundHandler(), addr); err == nil {
		t.Error("ServeCredentials on an address in use succeeded")
	}
}
