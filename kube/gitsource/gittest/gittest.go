// Package gittest serves real git repositories over smart HTTP on
// loopback (git http-backend through net/http/cgi) for tests of the git
// workspace sources.
package gittest

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server serves the bare repositories under its root, fetches and pushes
// alike, and records the requests it was sent.
type Server struct {
	// URL is the server's base URL: a repository NAME is URL/NAME.git.
	URL  string
	root string
	t    testing.TB

	mu       sync.Mutex
	requests []string // +checklocks:mu
	// redirect maps a request path prefix to a location to redirect to.
	redirect map[string]string // +checklocks:mu
	// user and token, when set, are the basic authentication every
	// request must carry.
	user, token string // +checklocks:mu
}

// Env is the environment the git commands of tests run with: no system or
// global configuration, a fixed identity.
func Env() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.test",
		"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.test",
	}
}

// Git runs git in dir and returns its trimmed output; it fails the test on
// an error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v: %s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// NewServer starts a server on loopback; it stops with the test.
func NewServer(t testing.TB) *Server {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git sources need git (make deps installs it): %v", err)
	}
	s := &Server{root: t.TempDir(), t: t, redirect: map[string]string{}}
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  append([]string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1"}, Env()...),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		var to string
		for prefix, loc := range s.redirect {
			if strings.HasPrefix(r.URL.Path, prefix) {
				to = loc + strings.TrimPrefix(r.URL.Path, prefix)
			}
		}
		user, token := s.user, s.token
		s.mu.Unlock()
		if u, p, ok := r.BasicAuth(); token != "" && (!ok || u != user || p != token) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		if to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Create makes the bare repository NAME.git, which takes pushes, with one
// commit on main holding files (path to content), and returns its URL.
func (s *Server) Create(name string, files map[string]string) string {
	s.t.Helper()
	bare := filepath.Join(s.root, name+".git")
	Git(s.t, s.root, "init", "-q", "--bare", "--initial-branch=main", bare)
	Git(s.t, bare, "config", "http.receivepack", "true")
	s.Commit(name, "main", files, "initial")
	return s.URL + "/" + name + ".git"
}

// Commit adds a commit to branch of repository name, writing files, and
// returns its id.
func (s *Server) Commit(name, branch string, files map[string]string, message string) string {
	s.t.Helper()
	bare := filepath.Join(s.root, name+".git")
	work := s.t.TempDir()
	Git(s.t, work, "init", "-q", "--initial-branch="+branch)
	if out := exec.Command("git", "--git-dir", bare, "rev-parse", "-q", "--verify", "refs/heads/"+branch); out.Run() == nil {
		Git(s.t, work, "fetch", "-q", bare, branch)
		Git(s.t, work, "reset", "-q", "--hard", "FETCH_HEAD")
	}
	for p, content := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			s.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			s.t.Fatal(err)
		}
	}
	Git(s.t, work, "add", "-A")
	Git(s.t, work, "commit", "-q", "--allow-empty", "-m", message)
	Git(s.t, work, "push", "-q", bare, "HEAD:refs/heads/"+branch)
	return Git(s.t, work, "rev-parse", "HEAD")
}

// Tag tags the tip of branch of repository name.
func (s *Server) Tag(name, branch, tag string) {
	s.t.Helper()
	Git(s.t, filepath.Join(s.root, name+".git"), "tag", tag, "refs/heads/"+branch)
}

// Rev is the commit id of ref in repository name, or "" when it has none.
func (s *Server) Rev(name, ref string) string {
	cmd := exec.Command("git", "--git-dir", filepath.Join(s.root, name+".git"), "rev-parse", "-q", "--verify", ref+"^{commit}")
	cmd.Env = Env()
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Show is the content of path in ref of repository name.
func (s *Server) Show(name, ref, path string) string {
	s.t.Helper()
	return Git(s.t, filepath.Join(s.root, name+".git"), "show", ref+":"+path)
}

// Files lists the paths in ref of repository name.
func (s *Server) Files(name, ref string) []string {
	s.t.Helper()
	out := Git(s.t, filepath.Join(s.root, name+".git"), "ls-tree", "-r", "--name-only", ref)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// Redirect answers requests whose path starts with prefix with a 302 to
// location and the rest of the path.
func (s *Server) Redirect(prefix, location string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.redirect[prefix] = location
}

// RequireAuth has every later request carry basic authentication with
// user and token.
func (s *Server) RequireAuth(user, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.user, s.token = user, token
}

// Requests are the requests the server was sent, as "METHOD PATH".
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}
