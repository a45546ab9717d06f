package world

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// maxGitRequest bounds a git request body (a push's pack included).
const maxGitRequest = 64 << 20

// gitService serves the world's repositories over git's smart HTTP
// protocol, through `git http-backend` run as a CGI program.
//
// Permissions: fetching (clone, fetch, ls-remote, the dumb protocol) needs
// git.fetch repo=NAME. The ref advertisement for a push needs git.fetch or
// any git.push/git.delete_ref scope for the repository. A push is checked
// before git sees it: every ref update needs git.push repo=NAME ref=REF
// (creation and update) or git.delete_ref repo=NAME ref=REF (deletion), REF
// being the full ref name ("refs/heads/alex/x"). If any update is denied,
// the whole push is refused with git's own report ("! [remote rejected]
// REF (permission denied: ...)") and nothing changes. Beyond that, git's
// rules apply (for example, the current branch cannot be deleted).
type gitService struct {
	service
	git  gitRunner
	root string // GIT_PROJECT_ROOT
	repo string
	mu   *sync.RWMutex // held for reading while git runs; Reset holds it for writing
	// pushed, if set, serves an allowed push instead of git (a dry run);
	// body is the push's inflated body. refused, if set, is told the
	// reasons of a push refused for its credential.
	pushed  func(c *call, body []byte)
	refused func(req pushRequest, reasons map[string]string)
}

func (s *gitService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	if !ok || len(segs) < 2 || segs[0] != s.repo+".git" {
		c.noRoute()
		return
	}
	rest := strings.Join(segs[1:], "/")
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	fetch := scope.Request{Action: "git.fetch", Attrs: map[string]string{"repo": s.repo}}
	c.ev.Targets = []string{s.repo}
	switch {
	case rest == "info/refs" && read && r.URL.Query().Get("service") == "git-receive-pack":
		c.ev.Action = "git.push"
		if !s.authenticate(c) {
			return
		}
		if !c.claims.Allows(fetch) && !mayPush(c.claims, s.repo) && !c.authorize(fetch, s.repo) {
			return
		}
		c.allow()
		s.backend(c, nil)
	case read && (rest == "info/refs" || rest == "HEAD" || strings.HasPrefix(rest, "objects/")),
		rest == "git-upload-pack" && r.Method == http.MethodPost:
		c.ev.Action = "git.fetch"
		if !s.authenticate(c) || !c.authorize(fetch, s.repo) {
			return
		}
		var body []byte
		if r.Method == http.MethodPost {
			if body, ok = s.readBody(c, false); !ok {
				return
			}
		}
		c.allow()
		s.backend(c, body)
	case rest == "git-receive-pack" && r.Method == http.MethodPost:
		c.ev.Action = "git.push"
		if !s.authenticate(c) {
			return
		}
		s.push(c)
	default:
		c.noRoute()
	}
}

// authenticate is call.authenticate with git's flavour: the challenge is
// Basic (git then asks its credential helper), and the anonymous first
// request git always makes is recorded as a challenge, not a denial.
func (s *gitService) authenticate(c *call) bool {
	c.rw.Header().Set("WWW-Authenticate", `Basic realm="airlock-world"`)
	c.challenge = true
	if c.authenticate() {
		c.rw.Header().Del("WWW-Authenticate")
		return true
	}
	return false
}

// mayPush reports whether some scope of claims lets it push to or delete a
// ref of repo.
func mayPush(claims *verify.Claims, repo string) bool {
	for _, raw := range claims.Scopes {
		sc, err := scope.Parse(raw)
		if err != nil {
			continue
		}
		action := sc.Action()
		if action != "git.push" && action != "git.delete_ref" && action != "git.*" {
			continue
		}
		probe := action
		if action == "git.*" {
			probe = "git.push"
		}
		repoOnly := action
		for _, sel := range sc.Selectors() {
			if sel.Key == "repo" {
				repoOnly += " repo=" + sel.Pattern
			}
		}
		if s, err := scope.Parse(repoOnly); err == nil && s.Allows(scope.Request{Action: probe, Attrs: map[string]string{"repo": repo}}) {
			return true
		}
	}
	return false
}

// readBody reads the whole request body (git sends large ones chunked,
// which CGI cannot pass on), inflating it if it is gzip-encoded and
// inflate is set.
func (s *gitService) readBody(c *call, inflate bool) ([]byte, bool) {
	var src io.Reader = c.r.Body
	if inflate && strings.EqualFold(c.r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(c.r.Body)
		if err != nil {
			c.fail(worldapi.ClassInvalidArgument, "", "", "bad gzip body: "+err.Error())
			return nil, false
		}
		defer zr.Close()
		src = zr
		c.r.Header.Del("Content-Encoding")
	}
	body, err := io.ReadAll(io.LimitReader(src, maxGitRequest+1))
	switch {
	case err != nil:
		c.fail(worldapi.ClassInvalidArgument, "", "", "read request: "+err.Error())
		return nil, false
	case len(body) > maxGitRequest:
		c.fail(worldapi.ClassInvalidArgument, "", "", fmt.Sprintf("request larger than %d bytes", maxGitRequest))
		return nil, false
	}
	return body, true
}

// push checks every ref update of a receive-pack request against the
// token and passes the request to git only if all are allowed.
func (s *gitService) push(c *call) {
	body, ok := s.readBody(c, true)
	if !ok {
		return
	}
	req, err := parsePushRequest(body)
	if err != nil {
		c.fail(worldapi.ClassInvalidArgument, "", "", err.Error())
		return
	}
	c.ev.Targets = c.ev.Targets[:0]
	var denied error
	reasons := map[string]string{}
	for i, u := range req.Updates {
		c.ev.Targets = append(c.ev.Targets, shortRef(u.Ref))
		action := "git.push"
		if u.isDelete() {
			action = "git.delete_ref"
		}
		if i == 0 {
			c.ev.Action = action
		}
		err := c.check(scope.Request{Action: action, Attrs: map[string]string{"repo": s.repo, "ref": u.Ref}})
		if err == nil {
			continue
		}
		reasons[u.Ref] = "permission denied: " + err.Error()
		if denied == nil {
			denied = err
			c.ev.Action = action
		}
	}
	if denied != nil {
		for _, u := range req.Updates {
			if reasons[u.Ref] == "" {
				reasons[u.Ref] = "not updated: another ref of this push was denied"
			}
		}
		if s.refused != nil {
			s.refused(req, reasons)
		}
		c.ev.Decision, c.ev.Reason, c.ev.Error = DecisionDeny, verify.Reason(denied), denied.Error()
		c.ev.Status, c.done = http.StatusOK, true
		c.record()
		h := c.rw.Header()
		h.Set("Content-Type", "application/x-git-receive-pack-result")
		h.Set("Cache-Control", "no-cache")
		c.rw.WriteHeader(http.StatusOK)
		c.rw.Write(pushRefusal(req, reasons, "airlock world: push refused: "+denied.Error()))
		return
	}
	c.allow()
	if s.pushed != nil {
		s.pushed(c, body)
		return
	}
	s.backend(c, body)
}

// backend runs git http-backend for the request; body, if not nil,
// replaces the request body.
func (s *gitService) backend(c *call, body []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := c.r
	r.Header.Del("Authorization")
	if body != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
	}
	user := "anonymous"
	if c.claims != nil {
		user = c.claims.Subject
	}
	var stderr limitedBuffer
	h := &cgi.Handler{
		Path:   s.git.bin,
		Args:   []string{"http-backend"},
		Dir:    s.root,
		Env:    s.git.env("GIT_PROJECT_ROOT="+s.root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER="+user),
		Stderr: &stderr,
	}
	rec := &statusRecorder{ResponseWriter: c.rw, status: http.StatusOK}
	h.ServeHTTP(rec, r)
	c.ev.Status, c.done = rec.status, true
	if msg := strings.TrimSpace(stderr.String()); msg != "" {
		if rec.status >= 400 {
			c.ev.Error = msg
		}
		log.G(r.Context()).Debug("git http-backend", "path", r.URL.Path, "status", rec.status, "stderr", msg)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
