package main

import (
	"bufio"
	"context"
	"crypto/sha256"
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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/policies"
)

// fakeDaemon is an in-memory airlockd for CLI tests. A session's command
// is a small script when its first word is "emit":
//
//	out=TEXT   write TEXT and a newline to stdout
//	err=TEXT   write TEXT and a newline to stderr
//	exit=N     exit with N (default 0)
//	block      keep running until stopped (SIGTERM: 143, SIGKILL: 137)
//	ignoreterm a stop with a grace period only ends it by SIGKILL
//
// "echo ARGS" prints ARGS; "missing" cannot be started; anything else
// exits 0 without output.
type fakeDaemon struct {
	t    *testing.T
	sock string
	// following receives a session id each time a follow-logs request
	// has sent everything so far and is waiting for more.
	following chan string
	// stopped receives every stop request as it arrives.
	stopped chan api.StopRequest
	// gate, if set, holds create requests: each sends on creating, then
	// waits for gate to be closed or for the client to go away.
	gate, creating chan struct{}
	// approvals serves /v1/approvals; followingApprovals receives a token
	// when a follower has had what is held and waits for more.
	approvals          *approvals.Store
	followingApprovals chan struct{}
	// queued is what create responses say the create waited for a
	// place among the sandboxes being prepared.
	queued policies.Duration

	mu       sync.Mutex
	requests int
	nextID   int
	sessions map[string]*fakeSession
	images   []api.Image
	creates  []api.CreateRequest
	stops    []api.StopRequest
	execs    []api.ExecRequest
}

type fakeFrame struct {
	kind byte
	data string
}

type fakeSession struct {
	api.Session
	script     []string
	ignoreTerm bool
	out        []fakeFrame
	changed    chan struct{} // closed and replaced on every change
	done       chan struct{} // closed when the process has ended
	result     api.WaitResponse
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeDaemon{
		t:                  t,
		sock:               filepath.Join(dir, "airlockd.sock"),
		following:          make(chan string, 16),
		approvals:          approvals.New(),
		followingApprovals: make(chan struct{}, 16),
		stopped:            make(chan api.StopRequest, 16),
		sessions:           map[string]*fakeSession{},
		images: []api.Image{{
			Name: "airlock/agent:bookworm", Digest: "sha256:" + strings.Repeat("ab", 32),
			Size: 123_400_000, Created: testNow.Add(-72 * time.Hour),
		}, {
			Name: "airlock/codex:bookworm", Digest: "sha256:" + strings.Repeat("cd", 32),
			Size: 500_000_000, Created: testNow.Add(-72 * time.Hour),
			Labels: map[string]string{api.LabelAgentName: "codex", api.LabelAgentPackage: "@openai/codex", api.LabelAgentVersion: "0.169.0"},
		}},
	}
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.routes())
	srv.Listener = l
	srv.Start()
	t.Cleanup(func() {
		f.approvals.Close(context.Background())
		srv.CloseClientConnections()
		srv.Close()
	})
	return f
}

func (f *fakeDaemon) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.Version{Version: "0.0.0-test", Containerd: "v2.4.2", Root: "/var/lib/airlock"})
	})
	mux.HandleFunc("POST /v1/sessions", f.create)
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		list := []api.Session{}
		for _, s := range f.sessions {
			list = append(list, s.Session)
		}
		f.mu.Unlock()
		writeJSON(w, 200, list)
	})
	mux.HandleFunc("GET /v1/sessions/{id}", f.withSession(func(w http.ResponseWriter, r *http.Request, s *fakeSession) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, s.Session)
	}))
	mux.HandleFunc("PATCH /v1/sessions/{id}", f.withSession(f.update))
	mux.HandleFunc("POST /v1/sessions/{id}/start", f.withSession(func(w http.ResponseWriter, r *http.Request, s *fakeSession) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if s.State != api.StateCreated {
			writeError(w, api.ClassFailedPrecondition, fmt.Sprintf("session %s is %s", s.ID, s.State))
			return
		}
		if err := f.startLocked(s); err != nil {
			writeError(w, api.ClassInvalidArgument, err.Error())
			return
		}
		writeJSON(w, 200, s.Session)
	}))
	mux.HandleFunc("POST /v1/sessions/{id}/stop", f.withSession(f.stop))
	mux.HandleFunc("GET /v1/sessions/{id}/wait", f.withSession(func(w http.ResponseWriter, r *http.Request, s *fakeSession) {
		f.mu.Lock()
		state := s.State
		f.mu.Unlock()
		if state == api.StateCreated {
			writeError(w, api.ClassFailedPrecondition, fmt.Sprintf("session %q has not been started", s.ID))
			return
		}
		select {
		case <-s.done:
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, s.result)
	}))
	mux.HandleFunc("DELETE /v1/sessions/{id}", f.withSession(func(w http.ResponseWriter, r *http.Request, s *fakeSession) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if s.State == api.StateRunning {
			if r.URL.Query().Get("force") != "1" {
				writeError(w, api.ClassFailedPrecondition, fmt.Sprintf("session %s is running; stop it first or remove it with force", s.ID))
				return
			}
			f.finishLocked(s, 137, "killed")
		}
		delete(f.sessions, s.ID)
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("GET /v1/sessions/{id}/logs", f.withSession(f.logs))
	mux.HandleFunc("POST /v1/sessions/{id}/exec", f.withSession(f.exec))
	mux.HandleFunc("GET /v1/approvals", f.listApprovals)
	mux.HandleFunc("POST /v1/approvals/{id}", f.decideApproval)
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		writeJSON(w, 200, f.images)
	})
	mux.HandleFunc("POST /v1/images/import", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) == 0 {
			writeError(w, api.ClassInvalidArgument, "archive is empty")
			return
		}
		name := r.URL.Query().Get("name")
		if name == "" {
			name = "imported:latest"
		}
		img := api.Image{Name: name, Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(b)), Size: int64(len(b)), Created: testNow}
		f.mu.Lock()
		f.images = append(f.images, img)
		f.mu.Unlock()
		writeJSON(w, 200, []api.Image{img})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests++
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

func (f *fakeDaemon) withSession(h func(http.ResponseWriter, *http.Request, *fakeSession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		f.mu.Lock()
		s := f.sessions[id]
		f.mu.Unlock()
		if s == nil {
			writeError(w, api.ClassNotFound, fmt.Sprintf("session %q not found", id))
			return
		}
		h(w, r, s)
	}
}

func (f *fakeDaemon) create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, api.ClassInvalidArgument, "decoding request: "+err.Error())
		return
	}
	if f.gate != nil {
		f.creating <- struct{}{}
		select {
		case <-f.gate:
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	if err := req.Policy.Validate(); err != nil {
		var verr *policies.ValidationError
		errors.As(err, &verr)
		writeError(w, api.ClassInvalidArgument, "invalid policy", verr.Problems...)
		return
	}
	known := false
	for _, img := range f.images {
		known = known || img.Name == req.Policy.Image
	}
	if !known {
		writeError(w, api.ClassNotFound, fmt.Sprintf("image %q not found", req.Policy.Image))
		return
	}
	f.nextID++
	s := &fakeSession{
		Session: api.Session{
			ID: fmt.Sprintf("s%d", f.nextID), Label: req.Policy.Label, State: api.StateCreated,
			Image: req.Policy.Image, Command: req.Policy.Command, Created: testNow.Add(-time.Duration(f.nextID) * time.Minute),
			Policy: req.Policy,
		},
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if req.Start {
		if err := f.startLocked(s); err != nil {
			writeError(w, api.ClassInvalidArgument, err.Error())
			return
		}
	}
	f.sessions[s.ID] = s
	// As the daemon does, the create response carries the policy's
	// warnings.
	v := s.Session
	v.Warnings = req.Policy.Warnings()
	v.Queued = f.queued
	writeJSON(w, http.StatusCreated, v)
}

// update revises a session's policy as the daemon does, without a
// network: policies.Diff decides, and the revision is answered.
func (f *fakeDaemon) update(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	var req api.UpdateRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, api.ClassInvalidArgument, "decoding request: "+err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	version := max(s.PolicyVersion, 1)
	d := policies.Diff(&s.Policy, &req.Policy)
	if len(d.Refused) > 0 {
		var parts []string
		for _, x := range d.Refused {
			parts = append(parts, x.Field+": "+x.Reason)
		}
		writeError(w, api.ClassFailedPrecondition, fmt.Sprintf("session %q: revision refused, nothing changed: %s", s.ID, strings.Join(parts, "; ")))
		return
	}
	v := s.Session
	v.PolicyVersion = version
	if d.Changed() {
		s.Policy = *policies.Revised(&s.Policy, &req.Policy)
		s.PolicyVersion = version + 1
		v = s.Session
		v.Revision = &api.Revision{Version: version + 1, Previous: version, Allow: d.Allow, Deny: d.Deny}
		if ch := d.Credentials; ch.Revises() {
			tok := func(names ...string) []api.CredentialToken {
				var out []api.CredentialToken
				for _, n := range names {
					out = append(out, api.CredentialToken{Name: n, ID: "jti-" + n})
				}
				return out
			}
			v.Revision.Credentials = &api.CredentialRevision{Reminted: tok(ch.Changed...), Added: tok(ch.Added...),
				Removed: ch.Removed, Revoked: tok(append(slices.Clone(ch.Changed), ch.Removed...)...), Kept: tok(ch.Kept...)}
			v.Revision.CredentialsReminted = len(ch.Changed) + len(ch.Added)
		}
	}
	writeJSON(w, 200, v)
}

// startLocked runs the session's script up to its end or to "block".
func (f *fakeDaemon) startLocked(s *fakeSession) error {
	cmd := s.Command
	if len(cmd) > 0 && cmd[0] == "missing" {
		return errors.New(`exec: "missing": executable file not found in $PATH`)
	}
	started := testNow
	s.Started, s.State, s.Pid = &started, api.StateRunning, 4242
	out, code, block := runScript(cmd)
	s.out = append(s.out, out...)
	for _, w := range cmd {
		s.ignoreTerm = s.ignoreTerm || w == "ignoreterm"
	}
	if !block {
		f.finishLocked(s, code, "exited")
	}
	f.notifyLocked(s)
	return nil
}

func runScript(cmd []string) (out []fakeFrame, code int, block bool) {
	if len(cmd) == 0 {
		return nil, 0, false
	}
	switch cmd[0] {
	case "echo":
		return []fakeFrame{{api.FrameStdout, strings.Join(cmd[1:], " ") + "\n"}}, 0, false
	case "emit":
	default:
		return nil, 0, false
	}
	for _, w := range cmd[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "out":
			out = append(out, fakeFrame{api.FrameStdout, v + "\n"})
		case "err":
			out = append(out, fakeFrame{api.FrameStderr, v + "\n"})
		case "exit":
			code, _ = strconv.Atoi(v)
		case "block":
			block = true
		}
	}
	return out, code, block
}

func (f *fakeDaemon) finishLocked(s *fakeSession, code int, reason string) {
	if s.State == api.StateStopped {
		return
	}
	finished := testNow
	s.State, s.Finished, s.ExitCode = api.StateStopped, &finished, &code
	s.Reason, s.result = reason, api.WaitResponse{ExitCode: code, Reason: reason}
	close(s.done)
	f.notifyLocked(s)
}

func (f *fakeDaemon) notifyLocked(s *fakeSession) {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (f *fakeDaemon) stop(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	req := api.StopRequest{Grace: policies.Duration(10 * time.Second)} // omitted: the default
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, api.ClassInvalidArgument, err.Error())
		return
	}
	f.stopped <- req
	f.mu.Lock()
	f.stops = append(f.stops, req)
	switch {
	case s.State != api.StateRunning:
	case req.Grace < 0:
		writeError(w, api.ClassInvalidArgument, "grace must not be negative")
		f.mu.Unlock()
		return
	case req.Grace < policies.Duration(time.Millisecond):
		f.finishLocked(s, 137, "killed")
	case !s.ignoreTerm:
		s.out = append(s.out, fakeFrame{api.FrameStderr, "terminated\n"})
		f.finishLocked(s, 143, "stopped")
	}
	f.mu.Unlock()
	select {
	case <-s.done:
	case <-r.Context().Done():
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	writeJSON(w, 200, s.Session)
}

func (f *fakeDaemon) logs(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	q := r.URL.Query()
	follow, want := q.Get("follow") == "1", map[byte]bool{
		api.FrameStdout: q.Get("stdout") == "1",
		api.FrameStderr: q.Get("stderr") == "1",
	}
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(200)
	rc := http.NewResponseController(w)
	sent := 0
	for {
		f.mu.Lock()
		frames := s.out[sent:]
		sent = len(s.out)
		changed := s.changed
		ended := s.State == api.StateStopped
		f.mu.Unlock()
		for _, fr := range frames {
			if want[fr.kind] {
				_ = api.WriteFrame(w, nil, fr.kind, []byte(fr.data))
			}
		}
		_ = rc.Flush()
		if !follow || ended {
			return
		}
		select {
		case f.following <- s.ID:
		default:
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

func (f *fakeDaemon) exec(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	br := bufio.NewReader(r.Body)
	line, err := br.ReadBytes('\n')
	var req api.ExecRequest
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	if err != nil || len(req.Command) == 0 {
		writeError(w, api.ClassInvalidArgument, fmt.Sprintf("bad exec request: %v", err))
		return
	}
	f.mu.Lock()
	f.execs = append(f.execs, req)
	running := s.State == api.StateRunning
	f.mu.Unlock()
	if !running {
		writeError(w, api.ClassFailedPrecondition, fmt.Sprintf("session %s is not running", s.ID))
		return
	}
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		f.t.Errorf("EnableFullDuplex: %v", err)
	}
	w.Header().Set("Content-Type", api.StreamContentType)
	w.WriteHeader(200)
	stdout, _ := api.NewFrameWriters(w, func() { _ = rc.Flush() })
	code := 0
	if req.Command[0] == "cat" {
		for req.Stdin {
			kind, p, err := api.ReadFrame(br)
			if err != nil || kind != api.FrameStdin {
				f.t.Errorf("stdin frame: kind %d, %v", kind, err)
				return
			}
			if len(p) == 0 {
				break
			}
			stdout.Write(p)
		}
	} else {
		var out []fakeFrame
		out, code, _ = runScript(req.Command)
		for _, fr := range out {
			_ = api.WriteFrame(w, nil, fr.kind, []byte(fr.data))
		}
	}
	b, _ := json.Marshal(api.WaitResponse{ExitCode: code, Reason: "exited"})
	_ = api.WriteFrame(w, nil, api.FrameExit, b)
}

func (f *fakeDaemon) session(id string) (api.Session, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return api.Session{}, false
	}
	return s.Session, true
}

// recorded returns copies of the requests the daemon has recorded.
func (f *fakeDaemon) recorded() (creates []api.CreateRequest, stops []api.StopRequest, execs []api.ExecRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates), slices.Clone(f.stops), slices.Clone(f.execs)
}

func (f *fakeDaemon) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, class, msg string, details ...string) {
	writeJSON(w, api.StatusForClass(class), api.ErrorBody{Error: api.ErrorDetail{Class: class, Message: msg, Details: details}})
}
