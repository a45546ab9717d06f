package world

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

// packagesService is the package registry, with the repositories "test"
// and "prod". Besides the session's token it takes the static registry
// tokens of the loaded state, sent the same way (bearer token or Basic
// password): their scopes authorize the request as a session token's
// would, an expired one is refused (401 "token NAME expired"), and every
// state-changing request they get accepted is counted as a use of the
// token (Snapshot.CredentialUses, effect use-credential). Fixture rules:
// a version, once pushed, is not pushed over (409); a push or delete of a
// version is checked against the scopes with its repository, name and
// version.
type packagesService struct{ service }

func packageRequest(action, repo, name, version string) scope.Request {
	if action == "packages.list" {
		return scope.Request{Action: action, Attrs: map[string]string{"repo": repo}}
	}
	return scope.Request{Action: action, Attrs: map[string]string{"repo": repo, "name": name, "version": version}}
}

func (s *packagesService) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	c := s.begin(rw, r)
	defer c.finish()
	segs, ok := segments(r)
	switch {
	case !ok || !hasPrefix(segs, "v1", "repos") || len(segs) < 4 || segs[3] != "packages":
		c.noRoute()
	case len(segs) == 4:
		if r.Method != http.MethodGet {
			c.methodNotAllowed(http.MethodGet)
			return
		}
		s.list(c, segs[2])
	case len(segs) == 6:
		repo, name, version := segs[2], segs[4], segs[5]
		switch r.Method {
		case http.MethodGet:
			s.get(c, repo, name, version)
		case http.MethodPut:
			s.push(c, repo, name, version)
		case http.MethodDelete:
			s.delete(c, repo, name, version)
		default:
			c.methodNotAllowed(http.MethodGet, http.MethodPut, http.MethodDelete)
		}
	default:
		c.noRoute()
	}
}

// authenticate is call.authenticate, but a bearer token that is one of
// the registry's static tokens is taken as such. It returns the static
// token's name ("" for a session token).
func (s *packagesService) authenticate(c *call) (string, bool) {
	if trustedClaims(c.r) == nil {
		if raw, err := verify.TokenFromRequest(c.r); err == nil {
			s.w.mu.Lock()
			tok, ok := s.w.extra.staticToken(raw)
			s.w.mu.Unlock()
			if ok {
				c.ev.Credential = tok.Name
				if tok.Expired {
					c.ev.Decision, c.ev.Reason = DecisionDeny, "expired"
					c.writeError(worldapi.ErrorDetail{Class: worldapi.ClassUnauthenticated, Reason: "expired", Message: "token " + tok.Name + " expired"})
					return "", false
				}
				c.claims = tok.claims
				return tok.Name, true
			}
		}
	}
	return "", c.authenticate()
}

// open starts a request for action in repo on target: it records the
// target, authenticates the token, checks the repository and authorizes
// the action. It returns the static token's name ("" for a session
// token); on failure the answer is written and false returned.
func (s *packagesService) open(c *call, action, target, repo, name, version string) (string, bool) {
	c.ev.Action, c.ev.Targets = action, []string{target}
	static, ok := s.authenticate(c)
	if !ok {
		return "", false
	}
	if static != "" {
		c.ev.Targets = append(c.ev.Targets, static)
	}
	if !validPackageRepo(repo) {
		c.notFound(worldapi.KindRepo, repo)
		return "", false
	}
	if !c.authorize(packageRequest(action, repo, name, version), target) {
		return "", false
	}
	return static, true
}

func (s *packagesService) find(repo, name, version string) int {
	for i, p := range s.w.extra.packages {
		if p.Repo == repo && p.Name == name && p.Version == version {
			return i
		}
	}
	return -1
}

func (s *packagesService) list(c *call, repo string) {
	if _, ok := s.open(c, "packages.list", repo, repo, "", ""); !ok {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	out := []worldapi.Package{}
	for _, p := range s.w.extra.packages {
		if p.Repo == repo {
			out = append(out, p)
		}
	}
	c.allow()
	c.ok(worldapi.PackageList{Packages: out})
}

func (s *packagesService) get(c *call, repo, name, version string) {
	if _, ok := s.open(c, "packages.list", worldapi.PackageTarget(repo, name, version), repo, name, version); !ok {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	i := s.find(repo, name, version)
	if i < 0 {
		c.notFound(worldapi.KindPackage, worldapi.PackageTarget(repo, name, version))
		return
	}
	c.allow()
	c.ok(s.w.extra.packages[i])
}

func (s *packagesService) push(c *call, repo, name, version string) {
	target := worldapi.PackageTarget(repo, name, version)
	if name == "" || version == "" || strings.Contains(name+version, "@") {
		c.ev.Action, c.ev.Targets = "packages.push", []string{target}
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindPackage, target, "package name and version: want both, without '@'")
		return
	}
	static, ok := s.open(c, "packages.push", target, repo, name, version)
	if !ok {
		return
	}
	data, err := io.ReadAll(io.LimitReader(c.r.Body, maxObjectSize+1))
	if err != nil {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindPackage, target, "read body: "+err.Error())
		return
	}
	if len(data) > maxObjectSize {
		c.fail(worldapi.ClassInvalidArgument, worldapi.KindPackage, target, "package larger than 64 MiB")
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if s.find(repo, name, version) >= 0 {
		c.fail(worldapi.ClassFailedPrecondition, worldapi.KindPackage, target, "package "+target+" already exists: a version is never pushed over")
		return
	}
	sum := sha256.Sum256(data)
	p := worldapi.Package{Repo: repo, Name: name, Version: version, SHA256: hex.EncodeToString(sum[:]), PushedBy: c.claims.Subject}
	s.w.extra.packages = append(s.w.extra.packages, p)
	if static != "" {
		s.w.extra.use(static)
	}
	c.allow()
	c.ok(p)
}

func (s *packagesService) delete(c *call, repo, name, version string) {
	target := worldapi.PackageTarget(repo, name, version)
	static, ok := s.open(c, "packages.delete", target, repo, name, version)
	if !ok {
		return
	}
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	i := s.find(repo, name, version)
	if i < 0 {
		c.notFound(worldapi.KindPackage, target)
		return
	}
	gone := s.w.extra.packages[i]
	s.w.extra.packages = slices.Delete(s.w.extra.packages, i, i+1)
	if static != "" {
		s.w.extra.use(static)
	}
	c.allow()
	c.ok(gone)
}
