package world

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

// MaxDryRunBody bounds the body of a request given to DryRun (a gzip
// push body is inflated up to the same bound). Held requests are smaller:
// the gateway holds at most 64 KiB of a body.
const MaxDryRunBody = maxRequestBody

// ServeAs returns a handler that serves the same API as Handler (under
// /git, /jobs, /services, /objects, ... ) with every request authenticated
// as subject holding scopes, without a token: whatever the request sends
// (an Authorization header included) is not looked at, and the services
// authorize it exactly as they authorize a verified token with these
// claims, with the same answers. A refusal is not reported to the token
// issuer, since there is no token. Requests are audited like any other,
// with Session = subject, an empty TokenID and Trusted set; pick a
// subject that is no session's id, or the runner (which keeps a run's
// world events by session) counts them as that session's.
//
// The caller is trusted: nothing limits scopes, so a handler made with
// "services.restart" or "git.*" changes the world like an operator's
// token. It is meant for in-process use by the runner (listing the
// world's items through an operator policy's read scopes); never serve
// it where a session can reach it.
func (w *World) ServeAs(subject string, scopes []string) (http.Handler, error) {
	claims, err := trusted(subject, scopes)
	if err != nil {
		return nil, err
	}
	inner := w.Handler()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		r = r.Clone(context.WithValue(r.Context(), trustedKey{}, claims))
		r.Header.Del("Authorization")
		inner.ServeHTTP(rw, r)
	}), nil
}

// trusted returns the claims of subject holding scopes, which must parse.
func trusted(subject string, scopes []string) (*verify.Claims, error) {
	if subject == "" {
		return nil, errors.New("world: empty subject")
	}
	set, err := scope.ParseSet(scopes)
	if err != nil {
		return nil, fmt.Errorf("world: scopes: %w", err)
	}
	return &verify.Claims{Subject: subject, Session: subject, Scopes: set.Strings()}, nil
}

// DryRunRequest is a held HTTP request, as a gateway holds it.
type DryRunRequest struct {
	// Host is the host name the request was sent to (a service's
	// audience or admin name, a port allowed), or Service names the
	// service (ServiceGit, ...). At least one is required; if both are
	// given they must agree.
	Host    string `json:"host,omitempty"`
	Service string `json:"service,omitempty"`
	Method  string `json:"method"`
	// Path is the path and query as the service is sent them
	// ("/v1/jobs:cancel", "/app.git/git-receive-pack"), without the
	// /jobs, /git, ... prefix of Handler.
	Path string `json:"path"`
	Body []byte `json:"body,omitempty"`
	// ContentType and ContentEncoding are the request's headers. The
	// only encoding understood is gzip, and only for git pushes (as the
	// git service does).
	ContentType     string `json:"content_type,omitempty"`
	ContentEncoding string `json:"content_encoding,omitempty"`
	// Bearer is the token the request carried, if any. It is looked at
	// only by the package registry, and only when it is one of the
	// registry's static tokens: the request is then authenticated with
	// that token, as the registry would (an expired one refused, a use
	// counted), instead of with the claims. Any other token is ignored.
	Bearer string `json:"bearer,omitempty"`
}

// DryRunResult is what a request would do if served now.
type DryRunResult struct {
	// Service is the service the request is for.
	Service string `json:"service"`
	// Effects are the changes serving it would make, as Diff names them
	// (empty, never nil, when it would change nothing).
	Effects []effect.Effect `json:"effects"`
	// Status, ContentType and Body are the service's answer. A push
	// refused for its credential is answered as the git service answers
	// it: 200 with git's report refusing every ref (Decision says deny).
	// For a push the claims allow, git's own report is not computed:
	// Status is 200 and Body is empty (RefUpdates say what git would do).
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body,omitempty"`
	// Decision and Reason are those the service's audit event would
	// carry: DecisionAllow, DecisionDeny (Reason "scope_denied" for a
	// credential refusal) or empty (the request failed before, e.g. an
	// unknown target).
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// RefUpdates are a push's commands, in order, with what git would do
	// with each.
	RefUpdates []RefUpdate `json:"ref_updates,omitempty"`
}

// RefUpdate is one command of a push and its outcome in a dry run.
type RefUpdate struct {
	Ref string `json:"ref"`
	// Old and New are commit ids; a New of zeros deletes the ref, an Old
	// of zeros creates it.
	Old string `json:"old"`
	New string `json:"new"`
	// Result is "ok" when the ref would change as the command says,
	// otherwise why it would not: the claims refuse the push, the ref is
	// not at Old, it is the current branch, ...
	Result string `json:"result"`
}

// DryRun computes what req would do if it were served now with the
// claims of subject holding scopes (as through ServeAs), without doing
// it: the JSON services serve it on a copy of the current state, and the
// effects are the difference the copy shows; a git push is checked as
// the git service checks it (every ref against the claims) and its
// commands are compared with the repository's refs, without running git.
// DryRun never changes w's state and records nothing in w's audit. It may
// run concurrently with requests to w: it sees the state at one moment.
//
// Limits: for a push, objects are not looked at (the pack may be missing
// or cut short), so an update git would refuse for a bad pack, or refuse
// by a hook, shows as applied. Only pushes can be dry-run on the git
// service: the other git requests change nothing.
func (w *World) DryRun(ctx context.Context, subject string, scopes []string, req DryRunRequest) (DryRunResult, error) {
	claims, err := trusted(subject, scopes)
	if err != nil {
		return DryRunResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return DryRunResult{}, err
	}
	name, err := w.dryRunService(req.Host, req.Service)
	if err != nil {
		return DryRunResult{}, err
	}
	if req.Method == "" || strings.ContainsAny(req.Method, " \t\r\n") {
		return DryRunResult{}, fmt.Errorf("world: dry run: bad method %q", req.Method)
	}
	u, err := url.ParseRequestURI(req.Path)
	if err != nil || !strings.HasPrefix(req.Path, "/") || u.Host != "" {
		return DryRunResult{}, fmt.Errorf("world: dry run: bad path %q: want an absolute path (and query) as the service is sent it", req.Path)
	}
	if len(req.Body) > MaxDryRunBody {
		return DryRunResult{}, fmt.Errorf("world: dry run: body of %d bytes is larger than the limit of %d", len(req.Body), MaxDryRunBody)
	}
	body, encoding := req.Body, req.ContentEncoding

	sc := w.scratch()
	var push *pushOutcome
	if name == ServiceGit {
		segs := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
		if req.Method != http.MethodPost || len(segs) != 2 || segs[0] != w.Repo()+".git" || segs[1] != "git-receive-pack" {
			return DryRunResult{}, fmt.Errorf("world: dry run: %s %s: only a push (POST /%s.git/git-receive-pack) can be dry-run on git; the other git requests change nothing", req.Method, req.Path, w.Repo())
		}
		if body, err = pushCommands(body, encoding); err != nil {
			return DryRunResult{}, err
		}
		encoding = ""
		push = &pushOutcome{w: w}
		sc.initHandlers(push.serve, push.refuse)
	}

	rctx := context.WithValue(ctx, trustedKey{}, claims)
	static := name == ServicePackages && req.Bearer != "" && w.HasRegistryToken(req.Bearer)
	if static {
		rctx = ctx
	}
	hr, err := http.NewRequestWithContext(rctx, req.Method, "http://"+w.audience(name)+"/", bytes.NewReader(body))
	if err != nil {
		return DryRunResult{}, fmt.Errorf("world: dry run: %w", err)
	}
	if static {
		hr.Header.Set("Authorization", "Bearer "+req.Bearer)
	}
	hr.URL.Path, hr.URL.RawPath, hr.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	if req.ContentType != "" {
		hr.Header.Set("Content-Type", req.ContentType)
	}
	if encoding != "" {
		hr.Header.Set("Content-Encoding", encoding)
	}
	before := sc.jsonSnapshot()
	rec := &recorder{header: http.Header{}}
	sc.handler(name).ServeHTTP(rec, hr)
	after := sc.jsonSnapshot()

	res := DryRunResult{
		Service:     name,
		Effects:     Diff(before, after),
		Status:      rec.status,
		ContentType: rec.header.Get("Content-Type"),
		Body:        rec.body.Bytes(),
	}
	if evs := sc.audit.since(0); len(evs) > 0 {
		res.Decision, res.Reason = evs[0].Decision, evs[0].Reason
	}
	if push != nil {
		if push.err != nil {
			return DryRunResult{}, push.err
		}
		res.Effects = append(res.Effects, push.effects...)
		res.RefUpdates = push.updates
	}
	if res.Effects == nil {
		res.Effects = []effect.Effect{}
	}
	sortEffects(res.Effects)
	return res, nil
}

// dryRunService resolves a request's host or service name.
func (w *World) dryRunService(host, service string) (string, error) {
	fromHost := ""
	if host != "" {
		h := host
		if hp, _, err := net.SplitHostPort(h); err == nil {
			h = hp
		}
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		for _, s := range w.services() {
			if h == s.audience || (s.admin != "" && h == s.admin) {
				fromHost = s.name
			}
		}
		if fromHost == "" {
			return "", fmt.Errorf("world: dry run: host %q is not a service of this world", host)
		}
	}
	switch {
	case service == "" && fromHost == "":
		return "", errors.New("world: dry run: no host and no service")
	case service == "":
		return fromHost, nil
	case !slices.ContainsFunc(w.services(), func(s serviceInfo) bool { return s.name == service }):
		return "", fmt.Errorf("world: dry run: unknown service %q", service)
	case fromHost != "" && fromHost != service:
		return "", fmt.Errorf("world: dry run: host %q is service %q, not %q", host, fromHost, service)
	}
	return service, nil
}

// audience returns the audience of the service called name.
func (w *World) audience(name string) string {
	for _, s := range w.services() {
		if s.name == name {
			return s.audience
		}
	}
	return ""
}

// handler returns the handler of the service called name.
func (w *World) handler(name string) http.Handler {
	for _, s := range w.services() {
		if s.name == name {
			return s.h
		}
	}
	return http.NotFoundHandler()
}

// scratch returns a world holding a copy of w's JSON state, with its own
// audit and handlers, sharing nothing w changes: objects' contents, the
// slices of issues and pastes' contents are shared but never written in
// place. It has no repository of its own.
func (w *World) scratch() *World {
	s := &World{
		verifier: w.verifier, fx: w.fx, cfg: w.cfg, now: w.now,
		audit: &auditLog{},
		dir:   w.dir, git: w.git, live: w.live,
	}
	s.cfg.sink = nil
	w.mu.Lock()
	s.jobs = slices.Clone(w.jobs)
	s.deployments = slices.Clone(w.deployments)
	s.objects = slices.Clone(w.objects)
	s.extra = w.extra.clone()
	w.mu.Unlock()
	s.initHandlers(func(c *call, _ []byte) {
		c.fail("internal", "", "", "world: scratch world cannot push")
	}, nil)
	return s
}

// pushCommands returns the part of a push body that holds its commands,
// inflated if encoding is gzip. A gzip stream cut short (a held body) is
// inflated as far as it goes; a command list cut short is an error.
func pushCommands(body []byte, encoding string) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("world: dry run: push body: gzip: %w", err)
		}
		out, err := io.ReadAll(io.LimitReader(zr, MaxDryRunBody))
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("world: dry run: push body: gzip: %w", err)
		}
		body = out
	default:
		return nil, fmt.Errorf("world: dry run: push body: content encoding %q is not understood (only gzip)", encoding)
	}
	if _, err := parsePushRequest(body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("world: dry run: the push's command list is truncated: the body (%d bytes) ends before its flush packet, so the push's ref updates are unknown", len(body))
		}
		return nil, fmt.Errorf("world: dry run: push body: %w", err)
	}
	return body, nil
}

// pushOutcome serves, in a dry run, a push the claims allow: it compares
// the push's commands with w's refs as git's receive-pack would and
// records the effects instead of running git.
type pushOutcome struct {
	w       *World
	effects []effect.Effect
	updates []RefUpdate
	err     error
}

// refuse records a push refused for its credential: nothing changes.
func (p *pushOutcome) refuse(req pushRequest, reasons map[string]string) {
	p.effects = nil
	p.updates = make([]RefUpdate, len(req.Updates))
	for i, u := range req.Updates {
		p.updates[i] = RefUpdate{Ref: u.Ref, Old: u.Old, New: u.New, Result: "refused: " + reasons[u.Ref]}
	}
}

func (p *pushOutcome) serve(c *call, body []byte) {
	c.ev.Status, c.done = http.StatusOK, true
	c.rw.WriteHeader(http.StatusOK)
	req, err := parsePushRequest(body)
	if err != nil {
		p.err = fmt.Errorf("world: dry run: push body: %w", err)
		return
	}
	w := p.w
	w.gitMu.RLock()
	refs, err := readRefs(os.DirFS(w.live), "refs/")
	var head []byte
	if err == nil {
		head, err = os.ReadFile(w.live + "/HEAD")
	}
	w.gitMu.RUnlock()
	if err != nil {
		p.err = fmt.Errorf("world: dry run: %w", err)
		return
	}
	current, _ := strings.CutPrefix(strings.TrimSpace(string(head)), "ref: ")
	p.effects, p.updates = pushEffects(req, refs, current)
}

// pushEffects returns what git's receive-pack does with req on a
// repository with refs and current branch head: a command applies if the
// ref is at its old id (absent for zeros; a deletion with zeros deletes
// whatever the value); the current branch cannot be deleted; with the
// atomic capability one refused command refuses all.
func pushEffects(req pushRequest, refs map[string]string, head string) ([]effect.Effect, []RefUpdate) {
	var effs []effect.Effect
	updates := make([]RefUpdate, len(req.Updates))
	failed := false
	for i, u := range req.Updates {
		cur, exists := refs[u.Ref]
		ru := RefUpdate{Ref: u.Ref, Old: u.Old, New: u.New, Result: "ok"}
		op := ""
		switch {
		case u.isDelete() && u.Ref == head:
			ru.Result = "refused: deletion of the current branch prohibited"
		case u.isDelete() && !exists:
			ru.Result = "no change: the ref does not exist"
		case u.isDelete() && isZeroID(u.Old):
			// git deletes a ref regardless of its value when the old id
			// is not an object it has.
			op = effect.DeleteBranch
		case isZeroID(u.Old) && exists:
			ru.Result = "refused: the ref already exists (at " + cur + ")"
		case !isZeroID(u.Old) && cur != u.Old:
			ru.Result = "refused: stale: the ref is not at " + u.Old
			if exists {
				ru.Result += " (it is at " + cur + ")"
			}
		case u.isDelete():
			op = effect.DeleteBranch
		case !exists:
			op = effect.CreateBranch
		case cur == u.New:
			ru.Result = "no change: the ref is already at " + u.New
		default:
			op = effect.UpdateBranch
		}
		if strings.HasPrefix(ru.Result, "refused") {
			failed = true
		}
		if op != "" {
			effs = append(effs, effect.Effect{Family: fixture.Branches, Op: op, Target: shortRef(u.Ref), Where: effect.World})
		}
		updates[i] = ru
	}
	if failed && req.Caps["atomic"] {
		for i := range updates {
			if updates[i].Result == "ok" {
				updates[i].Result = "refused: atomic push: another ref was refused"
			}
		}
		effs = nil
	}
	return effs, updates
}

// recorder is the response writer of a dry run.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if room := MaxDryRunBody - r.body.Len(); room > 0 {
		r.body.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
