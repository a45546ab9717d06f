package httprule

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// The tests below push with a real git client to a real git http-backend
// (CGI) through a handler that does what the gateway does with a push:
// read the ref updates (ReadPush), decide, and send the bytes read and the
// rest of the body on. A push that lands proves consumed was replayed
// byte for byte.

// gitRules: pushes only to refs/heads/agent/** and tags, every other push
// denied; requests that are not pushes, and pushes of no updates (git's
// probe), pass by default.
var gitRules = []policies.HTTPHost{{
	Host: "git.test",
	Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/**", "refs/tags/*"}, Action: policies.HTTPAllow},
		{Refs: []string{"refs/**"}, Action: policies.HTTPDeny},
	},
}}

// gitPost is one receive-pack request the handler saw.
type gitPost struct {
	encoding      string
	contentLength int64
	raw           []byte // the whole body as received
	consumed      []byte
	updates       []RefUpdate
	err           error
	decision      Decision
}

type gitServer struct {
	url  string
	repo string // the bare repository's git dir
	env  []string

	mu    sync.Mutex
	posts []gitPost
}

const pushMax = 1 << 20

// newGitServer serves an empty bare repository "srv.git" over smart HTTP.
func newGitServer(t *testing.T, objectFormat string) *gitServer {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("these tests push with git: %v", err)
	}
	root := t.TempDir()
	s := &gitServer{repo: filepath.Join(root, "srv.git"), env: gitEnv(t)}
	git(t, s.env, root, "init", "-q", "--bare", "--object-format="+objectFormat, "srv.git")
	git(t, s.env, s.repo, "config", "http.receivepack", "true")
	set, err := Compile(gitRules)
	if err != nil {
		t.Fatal(err)
	}
	backend := &cgi.Handler{
		Path: gitPath,
		Args: []string{"http-backend"},
		Env:  append([]string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}, s.env...),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := NormalizePath(r.URL.EscapedPath())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h := set.For("git.test")
		req := Request{Method: r.Method, Path: p}
		if !IsReceivePack(r.Method, p) {
			if d := h.Decide(req); d.Action != policies.HTTPAllow {
				http.Error(w, d.Rule, http.StatusForbidden)
				return
			}
			backend.ServeHTTP(w, r)
			return
		}
		var raw bytes.Buffer
		body := io.TeeReader(r.Body, &raw)
		post := gitPost{encoding: r.Header.Get("Content-Encoding"), contentLength: r.ContentLength}
		post.updates, post.consumed, post.err = ReadPush(body, post.encoding, pushMax)
		if post.err == nil {
			req.IsPush, req.Push = true, post.updates
			post.decision = h.Decide(req)
		}
		if post.err != nil || post.decision.Action != policies.HTTPAllow {
			io.Copy(io.Discard, body)
			post.raw = raw.Bytes()
			s.record(post)
			http.Error(w, "refused", http.StatusForbidden)
			return
		}
		// Go's CGI host refuses chunked bodies (git sends a large push
		// chunked), so the replay is read whole before the backend.
		replay, err := io.ReadAll(io.MultiReader(bytes.NewReader(post.consumed), body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		post.raw = raw.Bytes()
		s.record(post)
		r.Body = io.NopCloser(bytes.NewReader(replay))
		r.ContentLength, r.TransferEncoding = int64(len(replay)), nil
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/srv.git"
	return s
}

func (s *gitServer) record(p gitPost) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts = append(s.posts, p)
}

// takePosts returns the receive-pack requests seen since the last call.
func (s *gitServer) takePosts() []gitPost {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.posts
	s.posts = nil
	return p
}

// ref returns the object id of ref in the served repository, "" if none.
func (s *gitServer) ref(t *testing.T, ref string) string {
	t.Helper()
	out, err := gitCmd(s.env, s.repo, "rev-parse", "-q", "--verify", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// gitEnv is an environment that reads no configuration of the machine's
// and talks to no proxy.
func gitEnv(t *testing.T) []string {
	home := t.TempDir()
	cfg := filepath.Join(home, "gitconfig")
	if err := os.WriteFile(cfg, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + cfg,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.test",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.test",
	}
}

func gitCmd(env []string, dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env
	return cmd
}

func git(t *testing.T, env []string, dir string, args ...string) string {
	t.Helper()
	out, err := gitCmd(env, dir, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// clientRepo makes a repository with one commit whose file holds size
// random bytes (hex, so that gzip can shrink them a little but not much).
func clientRepo(t *testing.T, env []string, objectFormat string) string {
	t.Helper()
	dir := t.TempDir()
	git(t, env, dir, "init", "-q", "--object-format="+objectFormat, ".")
	commit(t, env, dir, 100)
	return dir
}

func commit(t *testing.T, env []string, dir string, size int) string {
	t.Helper()
	b := make([]byte, (size+1)/2)
	rand.Read(b)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte(hex.EncodeToString(b)[:size]), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, env, dir, "add", "f")
	git(t, env, dir, "commit", "-q", "-m", "c")
	return git(t, env, dir, "rev-parse", "HEAD")
}

// checkPost checks the invariants of a request ReadPush read: consumed
// is a prefix of the body, and for a plain body it ends exactly at the
// flush-pkt.
func checkPost(t *testing.T, p gitPost) {
	t.Helper()
	if !bytes.HasPrefix(p.raw, p.consumed) {
		t.Fatalf("consumed (%d bytes) is not a prefix of the body (%d bytes)", len(p.consumed), len(p.raw))
	}
	if p.encoding == "" {
		if !bytes.HasSuffix(p.consumed, []byte("0000")) {
			t.Fatalf("consumed does not end with the flush-pkt: %q", p.consumed)
		}
		again, rest, err := ReadPush(bytes.NewReader(p.consumed), "", len(p.consumed))
		if err != nil || !slices.Equal(again, p.updates) || !bytes.Equal(rest, p.consumed) {
			t.Fatalf("consumed alone reads as %v, %v", again, err)
		}
	}
}

func zeros(n int) string { return strings.Repeat("0", n) }

func TestReadPushRealGit(t *testing.T) {
	for _, format := range []string{"sha1", "sha256"} {
		t.Run(format, func(t *testing.T) {
			idLen := map[string]int{"sha1": 40, "sha256": 64}[format]
			s := newGitServer(t, format)
			env := s.env
			dir := clientRepo(t, env, format)
			first := git(t, env, dir, "rev-parse", "HEAD")

			// A small push: one new ref, the body not compressed.
			git(t, env, dir, "push", "-q", s.url, "HEAD:refs/heads/agent/a")
			posts := s.takePosts()
			if len(posts) != 1 {
				t.Fatalf("%d receive-pack requests, want 1", len(posts))
			}
			p := posts[0]
			checkPost(t, p)
			want := []RefUpdate{{Old: zeros(idLen), New: first, Ref: "refs/heads/agent/a"}}
			if p.encoding != "" || !slices.Equal(p.updates, want) {
				t.Fatalf("encoding %q, updates %v; want none, %v", p.encoding, p.updates, want)
			}
			if len(p.consumed) >= len(p.raw) {
				t.Fatalf("consumed the whole body (%d bytes): the pack should follow the updates", len(p.raw))
			}
			if got := s.ref(t, "refs/heads/agent/a"); got != first {
				t.Fatalf("server has agent/a at %q, want %s", got, first)
			}

			// Two refs, one updated and one created.
			second := commit(t, env, dir, 8000)
			git(t, env, dir, "push", "-q", s.url, "HEAD:refs/heads/agent/a", "HEAD:refs/tags/v1")
			p = s.takePosts()[0]
			checkPost(t, p)
			want = []RefUpdate{
				{Old: first, New: second, Ref: "refs/heads/agent/a"},
				{Old: zeros(idLen), New: second, Ref: "refs/tags/v1"},
			}
			if !slices.Equal(p.updates, want) {
				t.Fatalf("updates %v, want %v", p.updates, want)
			}
			if got := s.ref(t, "refs/tags/v1"); got != second {
				t.Fatalf("server has v1 at %q, want %s", got, second)
			}

			// A protected ref, alone or beside an allowed one: refused,
			// and the server's refs stay as they were.
			for _, refspecs := range [][]string{
				{"HEAD:refs/heads/main"},
				{"HEAD:refs/heads/agent/b", "HEAD:refs/heads/main"},
			} {
				args := append([]string{"push", "-q", s.url}, refspecs...)
				if out, err := gitCmd(env, dir, args...).CombinedOutput(); err == nil {
					t.Fatalf("push %v succeeded:\n%s", refspecs, out)
				}
				p = s.takePosts()[0]
				checkPost(t, p)
				if p.decision.Action != policies.HTTPDeny || p.decision.Index != 1 {
					t.Fatalf("push %v: %+v, want rule 2's deny", refspecs, p.decision)
				}
				if s.ref(t, "refs/heads/main") != "" || s.ref(t, "refs/heads/agent/b") != "" {
					t.Fatalf("push %v changed the server's refs", refspecs)
				}
			}

			// A deletion: no pack follows, the whole body is consumed.
			git(t, env, dir, "push", "-q", s.url, ":refs/tags/v1")
			p = s.takePosts()[0]
			checkPost(t, p)
			want = []RefUpdate{{Old: second, New: zeros(idLen), Ref: "refs/tags/v1"}}
			if !slices.Equal(p.updates, want) || !p.updates[0].IsDelete() || !bytes.Equal(p.consumed, p.raw) {
				t.Fatalf("updates %v, consumed %d of %d bytes; want %v and all", p.updates, len(p.consumed), len(p.raw), want)
			}
			if s.ref(t, "refs/tags/v1") != "" {
				t.Fatal("the tag is still on the server")
			}
		})
	}
}

// A push larger than http.postBuffer is sent chunked, uncompressed, after
// a probe of a lone flush-pkt, which updates nothing and so passes.
func TestReadPushRealGitLarge(t *testing.T) {
	s := newGitServer(t, "sha1")
	env := s.env
	dir := clientRepo(t, env, "sha1")
	head := commit(t, env, dir, 300<<10)
	git(t, env, dir, "-c", "http.postBuffer=65520", "push", "-q", s.url, "HEAD:refs/heads/agent/big")
	posts := s.takePosts()
	if len(posts) != 2 {
		t.Fatalf("%d receive-pack requests, want the probe and the push", len(posts))
	}
	probe, push := posts[0], posts[1]
	checkPost(t, probe)
	checkPost(t, push)
	if string(probe.raw) != "0000" || len(probe.updates) != 0 || probe.decision.Action != policies.HTTPAllow {
		t.Fatalf("probe: body %q, updates %v, %+v", probe.raw, probe.updates, probe.decision)
	}
	if push.contentLength != -1 || push.encoding != "" || len(push.updates) != 1 || push.updates[0].New != head {
		t.Fatalf("push: length %d, encoding %q, updates %v", push.contentLength, push.encoding, push.updates)
	}
	if got := s.ref(t, "refs/heads/agent/big"); got != head {
		t.Fatalf("server has agent/big at %q, want %s", got, head)
	}
}

// git sends push bodies uncompressed; git http-backend also takes them
// gzipped, as other clients may send them. A real push's body, gzipped,
// is read and replayed to a second server, where it lands.
func TestReadPushRealGitGzip(t *testing.T) {
	a := newGitServer(t, "sha1")
	dir := clientRepo(t, a.env, "sha1")
	head := commit(t, a.env, dir, 300<<10)
	git(t, a.env, dir, "push", "-q", a.url, "HEAD:refs/heads/agent/a", "HEAD:refs/tags/v1")
	plain := a.takePosts()[0]

	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(plain.raw)
	zw.Close()
	b := newGitServer(t, "sha1")
	req, err := http.NewRequest("POST", b.url+"/git-receive-pack", bytes.NewReader(z.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-git-receive-pack-request")
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	p := b.takePosts()[0]
	checkPost(t, p)
	if !slices.Equal(p.updates, plain.updates) || len(p.updates) != 2 {
		t.Fatalf("gzip body read as %v, plain as %v", p.updates, plain.updates)
	}
	if len(p.consumed) > maxGzipOverread+1024 || len(p.consumed) >= len(p.raw) {
		t.Fatalf("consumed %d of %d compressed bytes: more than the bounded buffer past the updates", len(p.consumed), len(p.raw))
	}
	if got := b.ref(t, "refs/heads/agent/a"); got != head {
		t.Fatalf("second server has agent/a at %q, want %s", got, head)
	}
}
