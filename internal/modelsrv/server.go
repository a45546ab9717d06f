package modelsrv

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Call kinds.
const (
	// KindMain is a call of the agent's main loop: the script answers it.
	KindMain = "main"
	// KindSide is a model call outside the main loop (no shell tool
	// offered): answered with Script.Side.
	KindSide = "side"
	// KindCountTokens is Anthropic's /v1/messages/count_tokens.
	KindCountTokens = "count_tokens"
	// KindModels is a model listing (GET /v1/models...).
	KindModels = "models"
	// KindProbe is a reachability probe: a HEAD of any path, a GET of
	// the root; answered 200 with no body.
	KindProbe = "probe"
	// KindOther is any other path (answered 404), or a request the
	// server cannot read (400, 413); the answer is an error in the API's
	// shape, its text in Call.Err.
	KindOther = "other"
)

// APIs.
const (
	Anthropic = "anthropic"
	OpenAI    = "openai"
)

// Call is one HTTP request the server received.
type Call struct {
	Time   time.Time
	Method string
	// Path is the request's path and query.
	Path string
	// Proto is the HTTP version ("HTTP/1.1", "HTTP/2.0").
	Proto  string
	Header http.Header
	Body   []byte
	// API is Anthropic or OpenAI, from the path or the headers; empty if
	// neither tells.
	API  string
	Kind string
	// Session is the agent's session id, from its headers
	// (X-Claude-Code-Session-Id, Codex's Session-Id); empty if none.
	Session string
	// Model is the model the request names.
	Model  string
	Stream bool
	// Step is, for a main call, the step it was answered with
	// (len(Script.Steps) for the final message); -1 otherwise.
	Step int
	// ToolResults are the results of the script's tool calls that the
	// conversation carries, by call id.
	ToolResults map[string]ToolResult
	// Verdict is, for a classifier call, the verdict answered (Allow or
	// Block).
	Verdict string
	// Status is the HTTP status answered.
	Status int
	// Err says why a call was refused (Status >= 400).
	Err string
}

// ToolResult is the agent's result of one tool call, as it told the model.
type ToolResult struct {
	Step, Index int
	Output      string
	IsError     bool
}

// APIKey is the key the call carried: the x-api-key header, else the
// bearer token of Authorization.
func (c Call) APIKey() string {
	if k := c.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if a := c.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return a[7:]
	}
	return ""
}

// Server plays a Script. It is safe for concurrent use; the script's state
// lives in the conversations the agent sends, so one server can answer any
// number of sessions of the same script.
type Server struct {
	script Script
	pacer  Pacer

	mu sync.Mutex
	// +checklocks:mu
	calls []Call
	// +checklocks:mu
	seq int
}

// Pacer paces a Server's main loop: it is called before a main call is
// answered, with the step the script answers it with (len(Script.Steps)
// for the final message) and the tool results the conversation carries.
// It may block, the agent waiting for its model meanwhile: whoever drives
// the agent measures, between two steps, what the previous one did. It
// returns false to end the conversation there: the call is answered with
// the final message. A main call repeated (an agent's retry) is paced
// again with the same step.
type Pacer func(ctx context.Context, step int, results map[string]ToolResult) bool

// WithPacer returns a server that plays script, each main call paced by p.
func WithPacer(script Script, p Pacer) (*Server, error) {
	s, err := New(script)
	if err != nil {
		return nil, err
	}
	s.pacer = p
	return s, nil
}

// pace returns the step to answer a main call with: step, or the final
// message's when the pacer ends the conversation.
func (s *Server) pace(ctx context.Context, step int, results map[string]ToolResult) int {
	if s.pacer == nil || s.pacer(ctx, step, results) {
		return step
	}
	return len(s.script.Steps)
}

// maxBody bounds a request body.
const maxBody = 64 << 20

// New returns a server that plays script.
func New(script Script) (*Server, error) {
	if err := script.Validate(); err != nil {
		return nil, err
	}
	return &Server{script: script}, nil
}

// Calls returns the calls received so far, oldest first.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// APIKeys returns the distinct API keys the calls carried, in the order
// first seen.
func (s *Server) APIKeys() []string {
	var keys []string
	for _, c := range s.Calls() {
		if k := c.APIKey(); k != "" && !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// MainSteps returns the steps the main calls were answered with, in order.
func (s *Server) MainSteps() []int {
	var steps []int
	for _, c := range s.Calls() {
		if c.Kind == KindMain {
			steps = append(steps, c.Step)
		}
	}
	return steps
}

// ToolResults returns every tool result the agent reported, by call id,
// from the last main call.
func (s *Server) ToolResults() map[string]ToolResult {
	calls := s.Calls()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Kind == KindMain {
			return calls[i].ToolResults
		}
	}
	return nil
}

func (s *Server) nextID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

func (s *Server) record(c Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

// ServeHTTP answers one call and records it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	c := Call{
		Time: time.Now(), Method: r.Method, Path: r.URL.RequestURI(), Proto: r.Proto, Header: r.Header.Clone(),
		Body: body, Step: -1, Kind: KindOther,
		Session: cmp.Or(r.Header.Get("X-Claude-Code-Session-Id"), r.Header.Get("Session-Id")),
	}
	rw := &statusWriter{ResponseWriter: w}
	defer func() {
		c.Status = rw.status
		s.record(c)
	}()
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case strings.HasSuffix(path, "/messages") || strings.HasSuffix(path, "/messages/count_tokens"):
		c.API = Anthropic
	case strings.HasSuffix(path, "/responses") || strings.HasSuffix(path, "/chat/completions"):
		c.API = OpenAI
	case r.Header.Get("Anthropic-Version") != "" || r.Header.Get("X-Api-Key") != "":
		c.API = Anthropic
	}
	if err != nil {
		c.Err = err.Error()
		apiError(rw, c.API, http.StatusBadRequest, c.Err)
		return
	}
	if len(body) > maxBody {
		c.Err = "request body too large"
		apiError(rw, c.API, http.StatusRequestEntityTooLarge, c.Err)
		return
	}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/messages/count_tokens"):
		c.Kind = KindCountTokens
		writeJSON(rw, map[string]any{"input_tokens": approxTokens(body)})
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/messages"):
		s.serveMessages(r.Context(), rw, &c)
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
		s.serveResponses(r.Context(), rw, &c)
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.Contains(path, "/models"):
		c.Kind = KindModels
		serveModels(rw, &c, path)
	case r.Method == http.MethodHead || (r.Method == http.MethodGet && (path == "" || path == "/v1")):
		// A reachability probe (Claude Code: HEAD /api/hello).
		c.Kind = KindProbe
		rw.WriteHeader(http.StatusOK)
	default:
		c.Err = fmt.Sprintf("modelsrv: no such endpoint: %s %s", r.Method, r.URL.Path)
		apiError(rw, c.API, http.StatusNotFound, c.Err)
	}
}

// stepFor is the step to answer a conversation whose tool results are
// results: one past the highest step they answer.
func (s *Server) stepFor(results map[string]ToolResult) int {
	step := 0
	for _, r := range results {
		step = max(step, r.Step+1)
	}
	return min(step, len(s.script.Steps))
}

func (s *Server) sideText() string {
	if s.script.Side != "" {
		return s.script.Side
	}
	return DefaultSide
}

// callID is the id of call i of step st; parseCallID reverses it.
func callID(prefix string, st, i int) string {
	return fmt.Sprintf("%s_airlock_%d_%d", prefix, st, i)
}

func parseCallID(id string) (st, i int, ok bool) {
	_, rest, found := strings.Cut(id, "_airlock_")
	if !found {
		return 0, 0, false
	}
	a, b, found := strings.Cut(rest, "_")
	if !found {
		return 0, 0, false
	}
	st, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	return st, i, err1 == nil && err2 == nil && st >= 0 && i >= 0
}

// approxTokens is a made-up token count: a quarter of the bytes.
func approxTokens(body []byte) int { return len(body)/4 + 1 }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// apiError answers an error in the shape of api's errors.
func apiError(w http.ResponseWriter, api string, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	var v any
	if api == Anthropic {
		v = map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}}
	} else {
		v = map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": msg, "code": nil, "param": nil}}
	}
	b, _ := json.Marshal(v)
	_, _ = w.Write(b)
}

// sse writes server-sent events.
type sse struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w}
}

func (s *sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // the server's own values
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "event: %s\ndata: %s\n\n", name, b)
	_, _ = s.w.Write(buf.Bytes())
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

func serveModels(w http.ResponseWriter, c *Call, path string) {
	models := []string{"claude-sonnet-4-6", "claude-haiku-4-5", "gpt-5.5", "gpt-5.4"}
	if i := strings.LastIndex(path, "/models/"); i >= 0 {
		id := path[i+len("/models/"):]
		writeJSON(w, map[string]any{"type": "model", "id": id, "object": "model", "display_name": id, "created_at": "2026-01-01T00:00:00Z"})
		return
	}
	var data []map[string]any
	for _, m := range models {
		data = append(data, map[string]any{"type": "model", "id": m, "object": "model", "display_name": m, "created_at": "2026-01-01T00:00:00Z", "owned_by": "airlock"})
	}
	writeJSON(w, map[string]any{"data": data, "object": "list", "has_more": false, "first_id": models[0], "last_id": models[len(models)-1]})
}
