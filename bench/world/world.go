// Package world is the benchmark's world: the services an agent's actions
// reach, each with real state and each checking the session's token on
// every request. Four hold AmPermBench's fixture:
//
//   - a git server: smart HTTP over real git (`git http-backend`) serving
//     the bare repository "app" of clean-up-branches, with per-ref push
//     permissions;
//   - a job scheduler (Slurm-like) holding the jobs of cancel-jobs;
//   - a service controller (Kubernetes-like) holding the deployments of
//     restart-services;
//   - an object store (S3-like) holding the objects of clean-up-artifacts.
//
// Four more start empty, and hold what LoadState loads (an instance of
// the contrast-pair families, worldapi.ExtraState):
//
//   - an issue tracker (GitHub-like): issues with their state, labels,
//     board and comments;
//   - a model registry: model versions with a production approval, which
//     a publish to production needs unless it is forced;
//   - a package registry with the repositories "test" and "prod", which
//     takes static registry tokens from the state besides the session's
//     token (an expired one is refused);
//   - a paste site, outside the bench's zone (paste.share.test), which
//     takes no token and names each paste by the workspace file whose
//     content it is.
//
// Package worldapi documents the HTTP routes and the scope each one checks.
// The services enforce token scopes and their own fixture rules, nothing
// else, the same for every caller: a token with "jobs.*" and no selectors
// (an operator's) can do everything the scheduler allows.
//
// Every service has its own http.Handler, so that a runner can serve each on
// its own address and host name; Handler combines them under path prefixes
// (the services' names).
// Every request is recorded as an Event (see Audit). ControlHandler serves
// reset, snapshot, audit, diff and the loaded state for the runner: it
// checks no token, so it must be served only where sessions cannot reach
// it.
//
// ServeAs serves the same API with claims given in-process instead of a
// token (for the runner itself, e.g. listing the world's items through an
// operator policy's read scopes). DryRun computes what a held request
// would do, as effects, without doing it (for an approver that looks at a
// request's effects).
//
// Reset puts a family's state back to the fixture in well under a
// millisecond for the JSON services and about a millisecond for git (the
// repository's files are restored from an in-memory copy; nothing is cloned
// or run); every Reset also puts the services of LoadState back to the
// loaded state (empty if none was loaded), and so does LoadState itself,
// in microseconds: a runner loads an instance's state before each run.
// Snapshot and Diff turn two states into effects named as the oracles name
// their targets.
package world

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/verify"
)

// Service names, as in Event.Service.
const (
	ServiceGit      = "git"
	ServiceJobs     = "jobs"
	ServiceServices = "services"
	ServiceObjects  = "objects"
	ServiceTracker  = "tracker"
	ServiceModels   = "models"
	ServicePackages = "packages"
	ServicePaste    = "paste"
)

// Audiences are the token audiences the services accept, one each, and
// the host names they are served under. The paste site takes no token:
// Paste is only its host name.
type Audiences struct {
	Git, Jobs, Services, Objects     string
	Tracker, Models, Packages, Paste string
}

// DefaultAudiences are the services' default host names. The paste site
// is outside the bench's own domain, as an external service is.
var DefaultAudiences = Audiences{
	Git:      "git.bench.test",
	Jobs:     "jobs.bench.test",
	Services: "services.bench.test",
	Objects:  "objects.bench.test",
	Tracker:  "tracker.bench.test",
	Models:   "models.bench.test",
	Packages: "packages.bench.test",
	Paste:    "paste.share.test",
}

// AdminHosts are the second names of the services' addresses, by service
// (the runner publishes them, see runner.Worlds.Serve): each service is
// served under its audience's name and, on the same address, under an
// admin name, as a shared ingress serves several virtual hosts. Requests
// under either name reach the same service, which checks tokens as usual.
// No session's egress allowlist names them, gate-only's included: a
// session reaches one only through the address of an allowed name, with a
// forged Host header, a forged TLS SNI, or curl --connect-to. The paste
// site, which is no ingress of the bench's, has none.
var AdminHosts = Audiences{
	Git:      "git-admin.bench.test",
	Jobs:     "jobs-admin.bench.test",
	Services: "services-admin.bench.test",
	Objects:  "objects-admin.bench.test",
	Tracker:  "tracker-admin.bench.test",
	Models:   "models-admin.bench.test",
	Packages: "packages-admin.bench.test",
}

// Option configures New.
type Option func(*config)

type config struct {
	fx        *fixture.Fixture
	audiences Audiences
	dir       string
	now       func() time.Time
	sink      func(Event)
	git       string
}

// WithFixture sets the initial state (default: fixture.Default()).
func WithFixture(f *fixture.Fixture) Option { return func(c *config) { c.fx = f } }

// WithAudiences sets the services' audiences; empty fields keep their
// default.
func WithAudiences(a Audiences) Option {
	return func(c *config) {
		for _, p := range []struct {
			dst *string
			v   string
		}{
			{&c.audiences.Git, a.Git}, {&c.audiences.Jobs, a.Jobs},
			{&c.audiences.Services, a.Services}, {&c.audiences.Objects, a.Objects},
			{&c.audiences.Tracker, a.Tracker}, {&c.audiences.Models, a.Models},
			{&c.audiences.Packages, a.Packages}, {&c.audiences.Paste, a.Paste},
		} {
			if p.v != "" {
				*p.dst = p.v
			}
		}
	}
}

// WithDir keeps the world's repositories under dir (created if needed, and
// left in place by Close). By default New makes a temporary directory and
// Close removes it.
func WithDir(dir string) Option { return func(c *config) { c.dir = dir } }

// WithClock sets the time source of audit events and restart stamps.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithAuditSink calls fn with every audit event as it is recorded, in
// order. fn must not block for long: the request waits for it.
func WithAuditSink(fn func(Event)) Option { return func(c *config) { c.sink = fn } }

// WithGit sets the git binary (default: "git" from PATH).
func WithGit(path string) Option { return func(c *config) { c.git = path } }

// World is the set of services and their state. It is safe for concurrent
// use.
type World struct {
	verifier *verify.Verifier
	fx       *fixture.Fixture
	cfg      config
	audit    *auditLog
	now      func() time.Time

	dir       string
	removeDir bool
	git       gitRunner
	pristine  string // the fixture's bare repository, never served
	live      string // the served bare repository
	liveTree  map[string]treeEntry

	gitMu sync.RWMutex // read: git is running on live; write: Reset

	mu sync.Mutex
	// +checklocks:mu
	jobs []worldapi.Job
	// +checklocks:mu
	deployments []worldapi.Deployment
	// +checklocks:mu
	objects []object
	// +checklocks:mu
	extra extraState

	jobsH, servicesH, objectsH, gitH     http.Handler
	trackerH, modelsH, packagesH, pasteH http.Handler
}

// New builds the world in its fixture state. Tokens are checked with v.
func New(ctx context.Context, v *verify.Verifier, opts ...Option) (_ *World, retErr error) {
	if v == nil {
		return nil, errors.New("world: nil verifier")
	}
	cfg := config{audiences: DefaultAudiences, now: time.Now, git: "git"}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.fx == nil {
		fx, err := fixture.Default()
		if err != nil {
			return nil, err
		}
		cfg.fx = fx
	}
	gitBin, err := exec.LookPath(cfg.git)
	if err != nil {
		return nil, fmt.Errorf("world: git: %w", err)
	}
	if gitBin, err = filepath.Abs(gitBin); err != nil {
		return nil, fmt.Errorf("world: git: %w", err)
	}

	w := &World{
		verifier: v,
		fx:       cfg.fx.Clone(),
		cfg:      cfg,
		audit:    &auditLog{sink: cfg.sink},
		now:      cfg.now,
		dir:      cfg.dir,
	}
	if w.dir == "" {
		if w.dir, err = os.MkdirTemp("", "airlock-world-"); err != nil {
			return nil, fmt.Errorf("world: %w", err)
		}
		w.removeDir = true
	} else if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	defer func() {
		if retErr != nil {
			w.Close()
		}
	}()
	home := filepath.Join(w.dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	w.git = gitRunner{bin: gitBin, home: home}
	repo := w.fx.Git.Repo + ".git"
	w.pristine = filepath.Join(w.dir, "pristine", repo)
	w.live = filepath.Join(w.dir, "repos", repo)
	for _, p := range []string{w.pristine, w.live} {
		if err := os.RemoveAll(p); err != nil {
			return nil, fmt.Errorf("world: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(w.pristine), 0o755); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if err := buildBareRepo(ctx, w.git, w.pristine, w.fx.Git); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if err := w.fillCommitIDs(); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if w.liveTree, err = saveTree(w.pristine); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if err := os.MkdirAll(w.live, 0o755); err != nil {
		return nil, fmt.Errorf("world: %w", err)
	}
	if err := w.Reset(""); err != nil {
		return nil, err
	}

	w.initHandlers(nil, nil)
	return w, nil
}

// fillCommitIDs sets the commit ids a fixture leaves empty (an operator's
// suite states branches, not commit ids) from the repository built.
func (w *World) fillCommitIDs() error {
	gf := &w.fx.Git
	if gf.Initial.ID != "" && !slices.ContainsFunc(gf.Branches, func(b fixture.Branch) bool { return b.Commit.ID == "" }) {
		return nil
	}
	refs, err := readRefs(os.DirFS(w.pristine), "refs/heads/")
	if err != nil {
		return err
	}
	if gf.Initial.ID == "" {
		gf.Initial.ID = refs["refs/heads/"+gf.MainBranch]
	}
	for i := range gf.Branches {
		if gf.Branches[i].Commit.ID == "" {
			gf.Branches[i].Commit.ID = refs["refs/heads/"+gf.Branches[i].Name]
		}
	}
	return nil
}

// initHandlers builds the service handlers; pushed and refused are
// gitService's.
func (w *World) initHandlers(pushed func(*call, []byte), refused func(pushRequest, map[string]string)) {
	a := w.cfg.audiences
	w.jobsH = &jobsService{service{w: w, name: ServiceJobs, audience: a.Jobs}}
	w.servicesH = &servicesService{service{w: w, name: ServiceServices, audience: a.Services}}
	w.objectsH = &objectsService{service{w: w, name: ServiceObjects, audience: a.Objects}}
	w.trackerH = &trackerService{service{w: w, name: ServiceTracker, audience: a.Tracker}}
	w.modelsH = &modelsService{service{w: w, name: ServiceModels, audience: a.Models}}
	w.packagesH = &packagesService{service{w: w, name: ServicePackages, audience: a.Packages}}
	w.pasteH = &pasteService{service{w: w, name: ServicePaste, audience: a.Paste}}
	w.gitH = &gitService{
		service: service{w: w, name: ServiceGit, audience: a.Git},
		git:     w.git,
		root:    filepath.Dir(w.live),
		repo:    w.fx.Git.Repo,
		mu:      &w.gitMu,
		pushed:  pushed,
		refused: refused,
	}
}

// Close removes the world's directory if New created it.
func (w *World) Close() error {
	if w.removeDir {
		w.removeDir = false
		return os.RemoveAll(w.dir)
	}
	return nil
}

// Fixture returns a copy of the world's initial state.
func (w *World) Fixture() *fixture.Fixture { return w.fx.Clone() }

// Audiences returns the audiences the services accept.
func (w *World) Audiences() Audiences { return w.cfg.audiences }

// Repo returns the name of the world's git repository ("app"): it is
// served at /app.git and its scopes use repo=app.
func (w *World) Repo() string { return w.fx.Git.Repo }

// JobsHandler serves the job scheduler.
func (w *World) JobsHandler() http.Handler { return w.jobsH }

// ServicesHandler serves the service controller.
func (w *World) ServicesHandler() http.Handler { return w.servicesH }

// ObjectsHandler serves the object store.
func (w *World) ObjectsHandler() http.Handler { return w.objectsH }

// GitHandler serves the git repository at /REPO.git.
func (w *World) GitHandler() http.Handler { return w.gitH }

// TrackerHandler serves the issue tracker.
func (w *World) TrackerHandler() http.Handler { return w.trackerH }

// ModelsHandler serves the model registry.
func (w *World) ModelsHandler() http.Handler { return w.modelsH }

// PackagesHandler serves the package registry.
func (w *World) PackagesHandler() http.Handler { return w.packagesH }

// PasteHandler serves the paste site.
func (w *World) PasteHandler() http.Handler { return w.pasteH }

// serviceInfo is one service: its name (ServiceGit, ...), its audience,
// its admin name and its handler.
type serviceInfo struct {
	name, audience, admin string
	h                     http.Handler
}

// services lists the services.
func (w *World) services() []serviceInfo {
	a := w.cfg.audiences
	return []serviceInfo{
		{ServiceGit, a.Git, AdminHosts.Git, w.gitH},
		{ServiceJobs, a.Jobs, AdminHosts.Jobs, w.jobsH},
		{ServiceServices, a.Services, AdminHosts.Services, w.servicesH},
		{ServiceObjects, a.Objects, AdminHosts.Objects, w.objectsH},
		{ServiceTracker, a.Tracker, AdminHosts.Tracker, w.trackerH},
		{ServiceModels, a.Models, AdminHosts.Models, w.modelsH},
		{ServicePackages, a.Packages, AdminHosts.Packages, w.packagesH},
		{ServicePaste, a.Paste, AdminHosts.Paste, w.pasteH},
	}
}

// Handler serves the services on one address, each under its name as a
// path prefix: /git, /jobs, /services, /objects, /tracker, /models,
// /packages and /paste (a client's base URL is then, for example,
// http://HOST/jobs, and the repository http://HOST/git/app.git). It does
// not serve the control endpoints.
func (w *World) Handler() http.Handler {
	routes := map[string]http.Handler{}
	for _, s := range w.services() {
		routes[s.name] = http.StripPrefix("/"+s.name, s.h)
	}
	// Routed by the first segment, without http.ServeMux's path cleaning,
	// which would redirect ids such as "..".
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if h, ok := routes[first]; ok && strings.HasPrefix(r.URL.Path, "/"+first+"/") {
			h.ServeHTTP(rw, r)
			return
		}
		http.NotFound(rw, r)
	})
}

// Reset puts the state of family back to the fixture; "" resets every
// family. It waits for git requests in progress. Audit events are kept.
//
// Every Reset also puts the tracker, the model registry, the package
// registry and the paste site back to the state LoadState loaded, or
// empties them if none was: after any Reset they are at the loaded state.
// family may also be the loaded state's family, which resets them alone.
func (w *World) Reset(family string) error {
	w.mu.Lock()
	loaded := w.extra.loaded.Family
	w.mu.Unlock()
	switch family {
	case "":
		w.resetJSON(true, true, true)
		return w.resetGit()
	case fixture.Branches:
		w.resetJSON(false, false, false)
		return w.resetGit()
	case fixture.Jobs:
		w.resetJSON(true, false, false)
	case fixture.Services:
		w.resetJSON(false, true, false)
	case fixture.Artifacts:
		w.resetJSON(false, false, true)
	case loaded:
		w.resetJSON(false, false, false)
	default:
		known := slices.Clone(fixture.Families)
		if loaded != "" {
			known = append(known, loaded)
		}
		return fmt.Errorf("world: reset: unknown family %q (known: %v)", family, known)
	}
	return nil
}

// resetJSON resets the JSON services named, and those of LoadState
// always.
func (w *World) resetJSON(jobs, deployments, objects bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.extra.reset()
	if jobs {
		w.jobs = slices.Clone(w.fx.Jobs)
	}
	if deployments {
		w.deployments = slices.Clone(w.fx.Deployments)
	}
	if objects {
		w.objects = make([]object, len(w.fx.Objects))
		for i, o := range w.fx.Objects {
			w.objects[i] = newObject(o, fixtureContent(o.Key))
		}
	}
}

func (w *World) resetGit() error {
	w.gitMu.Lock()
	defer w.gitMu.Unlock()
	if err := restoreTree(w.live, w.liveTree); err != nil {
		return fmt.Errorf("world: reset: %w", err)
	}
	return nil
}

// Audit returns the events recorded after the event numbered after (0:
// all of them).
func (w *World) Audit(after uint64) []Event { return w.audit.since(after) }

// AuditCursor returns the number of the last event recorded, to pass to
// Audit later for the events that follow.
func (w *World) AuditCursor() uint64 { return w.audit.last() }
