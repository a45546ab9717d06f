package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/runtime"
)

// fakeDaemon is a Daemon whose methods run the test's functions; a method
// without one answers as for an unknown session. It records each call.
type fakeDaemon struct {
	known map[string]bool // ids CheckSession accepts

	create      func(api.CreateRequest) (*api.Session, error)
	inspect     func(id string) (*api.Session, error)
	stop        func(id string, grace time.Duration) (*api.Session, error)
	remove      func(id string, force bool) error
	logs        func(ctx context.Context, id string, o runtime.LogsOptions) error
	exec        func(ctx context.Context, id string, o runtime.ExecOptions) (int, error)
	attach      func(ctx context.Context, id string) (*net.UnixConn, error)
	resize      func(id string, size runtime.WinSize) error
	wait        func(id string) (*api.WaitResponse, error)
	auditEach   func(ctx context.Context, id string, fn func(json.RawMessage) error) error
	unifiedDiff func(id string) (func(context.Context, io.Writer) error, error)
	importImage func(ctx context.Context, r io.Reader, name string) ([]api.Image, error)
	exposeAPI   func(socket, group string) error
	credentials http.Handler
	approvals   *approvals.Store

	mu    sync.Mutex
	calls []string
}

var _ Daemon = (*fakeDaemon)(nil)

func (f *fakeDaemon) called(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

// Calls returns the calls so far.
func (f *fakeDaemon) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func noSession(id string) error { return fmt.Errorf("no session %q: %w", id, errdefs.ErrNotFound) }

func (f *fakeDaemon) Version(ctx context.Context) api.Version {
	f.called("Version")
	return api.Version{Version: "test", Root: "/var/lib/airlock", Containerd: "v2"}
}

func (f *fakeDaemon) Create(ctx context.Context, req api.CreateRequest) (*api.Session, error) {
	f.called("Create start=%v", req.Start)
	if f.create == nil {
		return nil, fmt.Errorf("create: %w", errdefs.ErrUnavailable)
	}
	return f.create(req)
}

func (f *fakeDaemon) List(ctx context.Context) []api.Session {
	f.called("List")
	return []api.Session{}
}

func (f *fakeDaemon) Inspect(ctx context.Context, id string) (*api.Session, error) {
	f.called("Inspect %s", id)
	if f.inspect == nil {
		return nil, noSession(id)
	}
	return f.inspect(id)
}

func (f *fakeDaemon) Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Session, error) {
	f.called("Update %s", id)
	return nil, noSession(id)
}

func (f *fakeDaemon) CheckSession(id string) error {
	f.called("CheckSession %s", id)
	if !f.known[id] {
		return noSession(id)
	}
	return nil
}

func (f *fakeDaemon) Start(ctx context.Context, id string) (*api.Session, error) {
	f.called("Start %s", id)
	return nil, noSession(id)
}

func (f *fakeDaemon) Stop(ctx context.Context, id string, grace time.Duration) (*api.Session, error) {
	f.called("Stop %s %v", id, grace)
	if f.stop == nil {
		return nil, noSession(id)
	}
	return f.stop(id, grace)
}

func (f *fakeDaemon) Wait(ctx context.Context, id string) (*api.WaitResponse, error) {
	f.called("Wait %s", id)
	if f.wait != nil {
		return f.wait(id)
	}
	return nil, noSession(id)
}

func (f *fakeDaemon) Attach(ctx context.Context, id string) (*net.UnixConn, error) {
	f.called("Attach %s", id)
	if f.attach == nil {
		return nil, noSession(id)
	}
	return f.attach(ctx, id)
}

func (f *fakeDaemon) Resize(ctx context.Context, id string, size runtime.WinSize) error {
	f.called("Resize %s %dx%d", id, size.Cols, size.Rows)
	if f.resize == nil {
		return noSession(id)
	}
	return f.resize(id, size)
}

func (f *fakeDaemon) Remove(ctx context.Context, id string, force bool) error {
	f.called("Remove %s force=%v", id, force)
	if f.remove == nil {
		return noSession(id)
	}
	return f.remove(id, force)
}

func (f *fakeDaemon) Logs(ctx context.Context, id string, o runtime.LogsOptions) error {
	f.called("Logs %s follow=%v stdout=%v stderr=%v", id, o.Follow, o.Stdout != nil, o.Stderr != nil)
	if f.logs == nil {
		return noSession(id)
	}
	return f.logs(ctx, id, o)
}

func (f *fakeDaemon) Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error) {
	f.called("Exec %s %q", id, o.Args)
	if f.exec == nil {
		return -1, noSession(id)
	}
	return f.exec(ctx, id, o)
}

func (f *fakeDaemon) AuditEach(ctx context.Context, id string, fn func(raw json.RawMessage) error) error {
	f.called("AuditEach %s", id)
	if f.auditEach == nil {
		return noSession(id)
	}
	return f.auditEach(ctx, id, fn)
}

func (f *fakeDaemon) Diff(ctx context.Context, id string) (*api.ChangeSet, error) {
	f.called("Diff %s", id)
	return nil, noSession(id)
}

func (f *fakeDaemon) UnifiedDiff(id string) (func(ctx context.Context, w io.Writer) error, error) {
	f.called("UnifiedDiff %s", id)
	if f.unifiedDiff == nil {
		return nil, noSession(id)
	}
	return f.unifiedDiff(id)
}

func (f *fakeDaemon) Commit(ctx context.Context, id string, req api.CommitRequest) (*api.CommitResult, error) {
	f.called("Commit %s partial=%v", id, req.Partial)
	return nil, noSession(id)
}

func (f *fakeDaemon) Discard(ctx context.Context, id string) error {
	f.called("Discard %s", id)
	return noSession(id)
}

func (f *fakeDaemon) Pools() []api.Pool {
	f.called("Pools")
	return []api.Pool{}
}

func (f *fakeDaemon) RemovePool(ctx context.Context, key string) error {
	f.called("RemovePool %s", key)
	return nil
}

func (f *fakeDaemon) Images(ctx context.Context) ([]api.Image, error) {
	f.called("Images")
	return []api.Image{}, nil
}

func (f *fakeDaemon) ImportImage(ctx context.Context, r io.Reader, name string) ([]api.Image, error) {
	f.called("ImportImage %s", name)
	if f.importImage == nil {
		return nil, fmt.Errorf("import: %w", errdefs.ErrUnavailable)
	}
	return f.importImage(ctx, r, name)
}

func (f *fakeDaemon) Approvals() *approvals.Store {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.approvals == nil {
		f.approvals = approvals.New()
	}
	return f.approvals
}

func (f *fakeDaemon) ApproveRevise(ctx context.Context, id, reason, by string) (api.Approval, error) {
	f.called("approve-revise %s %s", id, reason)
	return api.Approval{}, fmt.Errorf("approval %s cannot be made a revision: %w", id, errdefs.ErrFailedPrecondition)
}

func (f *fakeDaemon) CredentialsHandler() http.Handler {
	if f.credentials == nil {
		return http.NotFoundHandler()
	}
	return f.credentials
}

func (f *fakeDaemon) ExposeAPI(socket, group string) error {
	f.called("ExposeAPI %s", group)
	if f.exposeAPI == nil {
		return nil
	}
	return f.exposeAPI(socket, group)
}

// quietCtx carries a logger that drops everything.
func quietCtx() context.Context {
	return log.WithLogger(context.Background(), slog.New(slog.DiscardHandler))
}

// testServer serves New(f) on a unix socket.
type testServer struct {
	t      *testing.T
	socket string
	http   *http.Client
	client *api.Client
}

func serve(t *testing.T, f *fakeDaemon) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "httpapi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(New(f))
	srv.Listener = l
	srv.Config.BaseContext = func(net.Listener) context.Context { return quietCtx() }
	srv.Config.ConnContext = connContext
	srv.Start()
	t.Cleanup(srv.Close)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &testServer{t: t, socket: sock, http: &http.Client{Transport: tr}, client: api.NewClient(sock)}
}

// do sends a request and returns the response with its body read.
func (s *testServer) do(method, path, body string) (*http.Response, string) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(s.t.Context(), method, "http://airlock"+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, string(b)
}

// errorBody decodes an error envelope, failing the test if body is not one.
func errorBody(t *testing.T, body string) api.ErrorDetail {
	t.Helper()
	var eb api.ErrorBody
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Error.Class == "" {
		t.Fatalf("body %q is not an error envelope: %v", body, err)
	}
	return eb.Error
}
