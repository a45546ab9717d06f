package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Bounds of what a page shows.
const (
	// maxDiff bounds the unified diff shown, in bytes.
	maxDiff = 2 << 20
	// maxAudit is how many of a session's last audit events are shown.
	maxAudit = 1000
	// maxForm bounds a POST's body.
	maxForm = 16 << 10
)

// By is who the console's decisions are taken in the name of (with the
// peer's user on a unix socket: "console: alice (uid 1000)").
const By = "console"

// securityHeaders are set on every response.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Cache-Control":           "no-store",
	// same-origin: the console's own POSTs carry their Origin and
	// Referer; no other site learns a console URL.
	"Referrer-Policy":              "same-origin",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
}

//go:embed templates/*.html static/console.css
var files embed.FS

var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"when":   when,
	"mode":   func(m uint32) string { return fmt.Sprintf("%04o", m) },
	"body":   bodyText,
	"fields": fieldsText,
	"text":   escapeText,
	"line":   lineText,
	"exit": func(s api.Session) string {
		if s.ExitCode == nil {
			return ""
		}
		return fmt.Sprint(*s.ExitCode)
	},
}).ParseFS(files, "templates/*.html"))

// Option configures New.
type Option func(*handler)

// WithToken asks every request for the bearer token tok (once, then the
// session cookie).
func WithToken(tok string) Option { return func(h *handler) { h.auth.token = []byte(tok) } }

// WithPeerCheck admits a unix socket's peers by check; a connection
// without peer credentials is refused.
func WithPeerCheck(check func(Peer) error) Option {
	return func(h *handler) { h.auth.peerCheck = check }
}

// WithLoopbackNames accepts only requests whose Host names loopback
// (localhost, 127.0.0.1, [::1]) on any port: a web page whose name is
// rebound to 127.0.0.1 sends its own name. For a unix socket console,
// which a browser reaches through a forwarded port.
func WithLoopbackNames() Option { return func(h *handler) { h.auth.loopbackNames = true } }

// WithHosts accepts only requests whose Host is one of hosts
// (host:port, lower case).
func WithHosts(hosts ...string) Option {
	return func(h *handler) { h.auth.hosts = append(h.auth.hosts, hosts...) }
}

type handler struct {
	d    Daemon
	auth *auth
	mux  *http.ServeMux
	// base is the random path every page lives under once logged in
	// ("/c/<32 hex digits>/"), and the login cookie's Path. Browsers send
	// a cookie to every port of its host: the cookie of a console on
	// 127.0.0.1 would also go to any other server on 127.0.0.1 (a local
	// user's) the browser is sent to, but only to a path under base, which
	// that server cannot know.
	base string
}

// New returns the console's handler serving d. Without WithToken or
// WithPeerCheck, it admits every request: the caller must have
// authenticated it.
func New(d Daemon, opts ...Option) http.Handler {
	h := &handler{d: d, auth: newAuth(), mux: http.NewServeMux(), base: "/c/" + rand.Text() + "/"}
	for _, o := range opts {
		o(h)
	}
	h.auth.cookiePath = h.base
	h.mux.HandleFunc("GET /{$}", h.handleIndex)
	h.mux.HandleFunc("GET /sessions/{id}", h.handleSession)
	h.mux.HandleFunc("POST /approvals/{id}", h.handleDecide)
	h.mux.HandleFunc("POST /sessions/{id}/commit", h.handleCommit)
	h.mux.HandleFunc("POST /sessions/{id}/discard", h.handleDiscard)
	h.mux.HandleFunc("GET /console.css", func(w http.ResponseWriter, r *http.Request) { serveCSS(w) })
	return h
}

// loginKey carries a request's login cookie to its handler.
type loginKey struct{}

// bearerLogin is the login of a request that carries the bearer token
// itself (never a cookie's value, which is hex).
const bearerLogin = "bearer"

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for k, v := range securityHeaders {
		w.Header().Set(k, v)
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	h.serve(sw, r)
	log.G(r.Context()).Log(r.Context(), slog.LevelDebug, "console", "method", r.Method, "path", r.URL.Path,
		"status", sw.status, "duration", time.Since(start))
}

func (h *handler) serve(w http.ResponseWriter, r *http.Request) {
	a := h.auth
	if !a.hostOK(r) {
		h.fail(w, r, http.StatusMisdirectedRequest, "This console answers to its loopback address only, not to host "+r.Host+".")
		return
	}
	if a.peerCheck != nil {
		p, ok := peerFrom(r.Context())
		if !ok {
			h.fail(w, r, http.StatusForbidden, "The connection's peer credentials could not be read.")
			return
		}
		if err := a.peerCheck(p); err != nil {
			h.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
	}
	rest, inBase := strings.CutPrefix(r.URL.Path, h.base)
	if !inBase {
		h.enter(w, r)
		return
	}
	login, ok := a.loggedIn(r)
	switch {
	case ok:
	case len(a.token) == 0:
		// Authenticated by the peer, or by the caller of New: a cookie
		// only to bind the CSRF tokens to.
		if r.Method != http.MethodGet {
			h.fail(w, r, http.StatusForbidden, "No console session: load a page of the console first.")
			return
		}
		login = a.login(w)
	default:
		// A client that sends the token with every request (a script):
		// no cookie, and no login kept, which would crowd out a
		// browser's; its forms' CSRF token is bound to the token.
		tok, inQuery := presented(r)
		if inQuery || !a.tokenOK(tok) {
			h.unauthorized(w, r, "")
			return
		}
		login = bearerLogin
	}
	r.URL.Path = "/" + rest
	r.URL.RawPath = ""
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if !sameOrigin(r) {
			h.fail(w, r, http.StatusForbidden, "This form was not sent from the console's own page (Origin).")
			return
		}
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "Bad form: "+err.Error())
			return
		}
		if !a.csrfOK(login, r.PostForm.Get(csrfField)) {
			h.fail(w, r, http.StatusForbidden, "This form's CSRF token is not this console session's: reload the page.")
			return
		}
	}
	h.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loginKey{}, login)))
}

// enter serves what is outside the console's base path: the style sheet,
// and the way in. A GET with the token (?token= or an Authorization
// header; on a unix socket, any GET: the peer was checked) gets a login
// cookie and a redirect to the base path, which takes the token off the
// address bar and the history. Nothing else is served there.
func (h *handler) enter(w http.ResponseWriter, r *http.Request) {
	a := h.auth
	// Nothing outside the base path keeps a connection: a local user
	// could otherwise hold every connection the console serves at once
	// with requests that need no login.
	w.Header().Set("Connection", "close")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/console.css":
		serveCSS(w)
	case len(a.token) == 0 && r.Method == http.MethodGet:
		// A unix socket's peer, checked already.
		a.login(w)
		http.Redirect(w, r, h.base, http.StatusSeeOther)
	case r.Method == http.MethodGet:
		tok, _ := presented(r)
		switch {
		case a.tokenOK(tok):
			a.login(w)
			http.Redirect(w, r, h.base, http.StatusSeeOther)
		case tok != "":
			h.unauthorized(w, r, "That is not the console's token.")
		default:
			h.unauthorized(w, r, "")
		}
	case r.Method == http.MethodPost && r.URL.Path == "/login" && len(a.token) > 0:
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			h.fail(w, r, http.StatusBadRequest, "Bad form: "+err.Error())
			return
		}
		if !a.tokenOK(strings.TrimSpace(r.PostForm.Get("token"))) {
			h.unauthorized(w, r, "That is not the console's token.")
			return
		}
		a.login(w)
		http.Redirect(w, r, h.base, http.StatusSeeOther)
	default:
		h.fail(w, r, http.StatusNotFound, "There is nothing here: open the console first.")
	}
}

// unauthorized answers 401 with the login form, and why.
func (h *handler) unauthorized(w http.ResponseWriter, r *http.Request, why string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="airlock console"`)
	w.Header().Set("Connection", "close")
	h.render(w, r, http.StatusUnauthorized, "login.html", "log in", why)
}

func serveCSS(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	b, _ := files.ReadFile("static/console.css")
	_, _ = w.Write(b)
}

// by names who decides through r.
func (h *handler) by(r *http.Request) string {
	if p, ok := peerFrom(r.Context()); ok {
		return By + ": " + p.Name()
	}
	return By
}

// page is what every template gets.
type page struct {
	Title string
	// Base is the console's base path for links and forms ("/" before
	// the way in).
	Base string
	CSRF string
	// Back is where a decision's form returns to.
	Back string
	Data any
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	login, _ := r.Context().Value(loginKey{}).(string)
	p := page{Title: title, Data: data, Back: r.URL.Path, Base: "/"}
	if login != "" {
		p.CSRF = h.auth.csrf(login)
		p.Base = h.base
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		log.G(r.Context()).Error("console: render", "template", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusMisdirectedRequest || status == http.StatusNotFound {
		// Refused before the body was read: do not wait for it.
		w.Header().Set("Connection", "close")
	}
	h.render(w, r, status, "error.html", http.StatusText(status), msg)
}

func (h *handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := httpapi.ErrorDetail(err)
	if status >= 500 {
		log.G(r.Context()).Error("console: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	h.fail(w, r, status, detail.Message)
}

type indexData struct {
	Sessions  []api.Session
	Approvals []api.Approval
}

func (h *handler) handleIndex(w http.ResponseWriter, r *http.Request) {
	ss := h.d.List(r.Context())
	slices.SortFunc(ss, func(a, b api.Session) int { return b.Created.Compare(a.Created) })
	h.render(w, r, http.StatusOK, "index.html", "airlock", indexData{Sessions: ss, Approvals: h.d.Approvals().List("")})
}

type sessionData struct {
	S         *api.Session
	Approvals []api.Approval
	// Changes is the change set under review; DiffNote says why there
	// is none.
	Changes  *api.ChangeSet
	Diff     []diffLine
	DiffCut  bool
	DiffNote string
	Audit    []api.AuditEvent
	// AuditSkipped counts the earlier events not shown; AuditErr is a
	// failure to read them.
	AuditSkipped int
	AuditErr     string
}

// validID matches a session id as the API takes it.
var validID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

func (h *handler) handleSession(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		h.fail(w, r, http.StatusBadRequest, "Malformed session id.")
		return
	}
	s, err := h.d.Inspect(ctx, id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	data := sessionData{S: s, Approvals: h.d.Approvals().List(id)}
	switch {
	case s.Review:
		h.loadDiff(ctx, id, &data)
	case s.State == "running":
		data.DiffNote = "The session is running: its changes can be reviewed once it has ended."
	default:
		data.DiffNote = "No change waits for review."
	}
	h.loadAudit(ctx, id, &data)
	h.render(w, r, http.StatusOK, "session.html", "session "+id, data)
}

// errDiffCut stops a unified diff at maxDiff.
var errDiffCut = errors.New("diff longer than the console shows")

type cappedBuffer struct{ bytes.Buffer }

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxDiff - c.Len(); len(p) > room {
		c.Buffer.Write(p[:max(room, 0)])
		return max(room, 0), errDiffCut
	}
	return c.Buffer.Write(p)
}

func (h *handler) loadDiff(ctx context.Context, id string, data *sessionData) {
	cs, err := h.d.Diff(ctx, id)
	if err != nil {
		_, detail := httpapi.ErrorDetail(err)
		data.DiffNote = "No diff: " + detail.Message
		return
	}
	data.Changes = cs
	write, err := h.d.UnifiedDiff(id)
	if err != nil {
		_, detail := httpapi.ErrorDetail(err)
		data.DiffNote = "No unified diff: " + detail.Message
		return
	}
	var buf cappedBuffer
	if err := write(ctx, &buf); err != nil {
		if !errors.Is(err, errDiffCut) {
			_, detail := httpapi.ErrorDetail(err)
			data.DiffNote = "The unified diff failed: " + detail.Message
			return
		}
		data.DiffCut = true
	}
	if buf.Len() > 0 {
		data.Diff = classifyDiff(strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n"))
	}
}

func (h *handler) loadAudit(ctx context.Context, id string, data *sessionData) {
	ring := make([]api.AuditEvent, 0, maxAudit)
	n := 0
	err := h.d.AuditEach(ctx, id, func(raw json.RawMessage) error {
		var ev api.AuditEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		if len(ring) < maxAudit {
			ring = append(ring, ev)
		} else {
			ring[n%maxAudit] = ev
		}
		n++
		return nil
	})
	if err != nil {
		_, detail := httpapi.ErrorDetail(err)
		data.AuditErr = detail.Message
	}
	if n > maxAudit {
		k := n % maxAudit
		ring = append(ring[k:], ring[:k]...)
		data.AuditSkipped = n - maxAudit
	}
	data.Audit = ring
}

// back returns the page a form returns to: the index or a session's.
func back(r *http.Request) string {
	b := r.PostForm.Get("back")
	if id, ok := strings.CutPrefix(b, "/sessions/"); ok && validID.MatchString(id) {
		return b
	}
	return "/"
}

func (h *handler) handleDecide(w http.ResponseWriter, r *http.Request) {
	var allow bool
	switch r.PostForm.Get("decision") {
	case api.DecisionAllow:
		allow = true
	case api.DecisionDeny:
	default:
		h.fail(w, r, http.StatusBadRequest, "The decision must be allow or deny.")
		return
	}
	if _, err := h.d.Approvals().Decide(r.Context(), r.PathValue("id"), allow, r.PostForm.Get("reason"), h.by(r)); err != nil {
		h.failErr(w, r, err)
		return
	}
	http.Redirect(w, r, h.base+strings.TrimPrefix(back(r), "/"), http.StatusSeeOther)
}

type commitData struct {
	ID     string
	Result *api.CommitResult
}

func (h *handler) handleCommit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		h.fail(w, r, http.StatusBadRequest, "Malformed session id.")
		return
	}
	res, err := h.d.Commit(r.Context(), id, api.CommitRequest{Partial: r.PostForm.Get("partial") == "1"})
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	log.G(r.Context()).Info("console: commit", "session", id, "committed", res.Committed, "by", h.by(r))
	h.render(w, r, http.StatusOK, "commit.html", "commit "+id, commitData{ID: id, Result: res})
}

func (h *handler) handleDiscard(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID.MatchString(id) {
		h.fail(w, r, http.StatusBadRequest, "Malformed session id.")
		return
	}
	if err := h.d.Discard(r.Context(), id); err != nil {
		h.failErr(w, r, err)
		return
	}
	log.G(r.Context()).Info("console: discard", "session", id, "by", h.by(r))
	http.Redirect(w, r, h.base+"sessions/"+id, http.StatusSeeOther)
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
