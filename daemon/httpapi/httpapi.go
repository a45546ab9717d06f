// Package httpapi serves airlockd's HTTP+JSON API (the routes of package
// api) on a unix socket. It owns the HTTP side of the API: the socket,
// created with private permissions (Listen); the routes and their
// handlers, which decode requests, check their arguments, and stream logs,
// exec, audit events and approvals (New); who calls, as the socket's peer
// credentials show (approvals are decided in their name); the mapping of
// errdefs classes to statuses and the error envelope (ErrorDetail);
// request logging; and the TCP listener of the credential verification
// endpoints (ServeCredentials). It
// holds no session state: every request becomes a call of a Daemon method,
// which *daemon.Daemon implements.
package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Daemon is what the API serves. Errors carry errdefs classes, which
// ErrorDetail maps to statuses.
type Daemon interface {
	Version(ctx context.Context) api.Version

	Create(ctx context.Context, req api.CreateRequest) (*api.Session, error)
	List(ctx context.Context) []api.Session
	Inspect(ctx context.Context, id string) (*api.Session, error)
	// Update revises a session's policy, live, or refuses the revision
	// as a whole.
	Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Session, error)
	// CheckSession returns the error the other session methods return
	// for an unknown id, and nil for a known one.
	CheckSession(id string) error
	Start(ctx context.Context, id string) (*api.Session, error)
	Stop(ctx context.Context, id string, grace time.Duration) (*api.Session, error)
	Wait(ctx context.Context, id string) (*api.WaitResponse, error)
	Remove(ctx context.Context, id string, force bool) error
	Logs(ctx context.Context, id string, o runtime.LogsOptions) error
	Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error)
	// Attach connects to the terminal of the session's main process:
	// reads are its output, writes its input; closing detaches.
	Attach(ctx context.Context, id string) (*net.UnixConn, error)
	// Resize sets the size of the main process's terminal.
	Resize(ctx context.Context, id string, size runtime.WinSize) error
	// AuditEach calls fn with each event as JSON, raw valid only during
	// the call; errors before the first call come before any call.
	AuditEach(ctx context.Context, id string, fn func(raw json.RawMessage) error) error

	Diff(ctx context.Context, id string) (*api.ChangeSet, error)
	// UnifiedDiff checks that the changes can be reviewed and returns
	// the function writing them as a unified diff.
	UnifiedDiff(id string) (func(ctx context.Context, w io.Writer) error, error)
	Commit(ctx context.Context, id string, req api.CommitRequest) (*api.CommitResult, error)
	Discard(ctx context.Context, id string) error

	Pools() []api.Pool
	RemovePool(ctx context.Context, key string) error

	// Approvals is the store of requests held for a decision.
	Approvals() *approvals.Store
	// ApproveRevise approves a held request by a revision of its
	// session's policy: the request's repair.
	ApproveRevise(ctx context.Context, id, reason, by string) (api.Approval, error)

	Images(ctx context.Context) ([]api.Image, error)
	ImportImage(ctx context.Context, r io.Reader, name string) ([]api.Image, error)

	// CredentialsHandler serves /v1/credentials/ with the prefix
	// stripped.
	CredentialsHandler() http.Handler
	// ExposeAPI readies the daemon for its API being served on socket to
	// group, or refuses.
	ExposeAPI(socket, group string) error
}

// maxJSONBody bounds request bodies that carry JSON.
const maxJSONBody = 4 << 20

// maxAttached is how many clients may be attached to one session's
// terminal at once. Each costs the session's logger a queue of output;
// the cap keeps a caller from making that unbounded.
const maxAttached = 8

// server holds the handlers of the routes.
type server struct {
	d Daemon

	mu       sync.Mutex
	attached map[string]int // clients attached, by session
}

// New returns the API's HTTP handler serving d.
func New(d Daemon) http.Handler {
	s := &server{d: d, attached: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", s.handleVersion)
	mux.HandleFunc("POST /v1/sessions", s.handleCreate)
	mux.HandleFunc("GET /v1/sessions", s.handleList)
	mux.HandleFunc("GET /v1/sessions/{id}", s.handleInspect)
	mux.HandleFunc("PATCH /v1/sessions/{id}", s.handleUpdate)
	mux.HandleFunc("POST /v1/sessions/{id}/start", s.handleStart)
	mux.HandleFunc("POST /v1/sessions/{id}/stop", s.handleStop)
	mux.HandleFunc("GET /v1/sessions/{id}/wait", s.handleWait)
	mux.HandleFunc("DELETE /v1/sessions/{id}", s.handleRemove)
	mux.HandleFunc("GET /v1/sessions/{id}/logs", s.handleLogs)
	mux.HandleFunc("POST /v1/sessions/{id}/exec", s.handleExec)
	mux.HandleFunc("POST /v1/sessions/{id}/attach", s.handleAttach)
	mux.HandleFunc("GET /v1/sessions/{id}/audit", s.handleAudit)
	mux.HandleFunc("GET /v1/sessions/{id}/diff", s.handleDiff)
	mux.HandleFunc("POST /v1/sessions/{id}/commit", s.handleCommit)
	mux.HandleFunc("POST /v1/sessions/{id}/discard", s.handleDiscard)
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, d.Pools()) })
	mux.HandleFunc("DELETE /v1/pools/{key}", func(w http.ResponseWriter, r *http.Request) {
		if err := d.RemovePool(r.Context(), r.PathValue("key")); err != nil {
			writeError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/approvals", s.handleApprovals)
	mux.HandleFunc("POST /v1/approvals/{id}", s.handleDecide)
	mux.HandleFunc("GET /v1/images", s.handleImages)
	mux.HandleFunc("POST /v1/images/import", s.handleImageImport)
	mux.Handle("/v1/credentials/", http.StripPrefix("/v1/credentials", d.CredentialsHandler()))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, fmt.Errorf("no route for %s %s: %w", r.Method, r.URL.Path, errdefs.ErrNotFound))
	})
	return logRequests(mux)
}

func logRequests(h http.Handler) http.Handler {
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
