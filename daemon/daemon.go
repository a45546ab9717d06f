// Package daemon is airlockd's session manager. It owns the session table
// and each session's record under the root, the session lifecycle (one
// state machine, lifecycle.go), warm pools and admission. A sandbox is
// assembled from the layers' spec options: the runtime's hardening and
// policy options, fsscope's workspaces, credentials' delivery, egress's
// perimeter and the launch directory; each layer owns its own plumbing
// behind its front door, and its audit events reach the session's log
// (package internal/audit). The exported methods are what package
// daemon/httpapi serves as the HTTP+JSON API of package api.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/steps"
	"github.com/airlock-sandbox/airlock/metrics"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Version is airlockd's version string.
var Version = "0.1.0-dev"

// Config configures a Daemon.
type Config struct {
	// Root holds all state: sessions, containerd's root and state, runc's root.
	Root string
	// Containerd is the address of an existing containerd; empty starts an
	// embedded one under Root.
	Containerd string
	// BinDir holds containerd, containerd-shim-runc-v2 and runc.
	BinDir string
	// Namespace is the containerd namespace; default "airlock".
	Namespace string
	// SelfBinary is airlockd's own absolute path; containerd's shim runs it
	// as the log writer of session output when BinDir has no airlock-logger.
	SelfBinary string
	// Issuers are external credential issuers: name -> argv of a command
	// speaking the exec issuer protocol (see package credentials).
	Issuers map[string][]string
	// Egress configures the network perimeter.
	Egress egress.Config
	// Approver, if set, is asked about every request the L7 gateway
	// holds for a decision (airlockd --approver); its failure or silence
	// leaves the request to a person.
	Approver approvals.Approver
	// Pools are policies whose warm pools (their `pool` blocks) the
	// daemon fills from the start. They pass admission like any request.
	Pools []policies.Policy
	// Admission is the operator's admission policy; nil is
	// policies.DefaultAdmission. Serving the API to a group
	// (httpapi.Serve with a group, see ExposeAPI) needs an explicit one.
	Admission *policies.Admission
	// Socket is the API socket httpapi.Serve will be given; admission refuses it,
	// and every directory containing it, as a host path from the start.
	Socket string
	// Metrics, if set, counts what the daemon does and reads its state
	// at each scrape (airlockd --metrics-listen); nil: no metrics.
	Metrics *metrics.Metrics
	// ShimPerSession gives every session a runc shim of its own. By
	// default sessions share one shim, kept alive by a small anchor
	// container: a session starts and ends without starting or stopping
	// a shim process, but a crash of that shim ends every running session.
	ShimPerSession bool
	// PoolRefill is how many sandboxes one warm pool prepares at once;
	// 0 is DefaultPoolRefill.
	PoolRefill int
	// MaxPreparing bounds the sandboxes prepared at once, by creates and
	// pool refills together; more wait their turn, creates first. 0 is
	// DefaultMaxPreparing; negative: no bound.
	MaxPreparing int
	// Runtime is the OCI runtime the shim runs for every session: "runc"
	// (the default) or "crun", each an executable of that name in BinDir.
	// A session keeps the runtime it was created with across restarts.
	Runtime string
	// CgroupParent is the cgroup (from the hierarchies' roots) under which
	// the sessions' cgroups, the shim anchor's and the embedded
	// containerd's (where the shims it starts are born) are made; empty
	// is the root. airlockd --cgroup-parent resolves it (package
	// hostcgroup): in a DaemonSet's pod it keeps them out of the
	// container's cgroup, which a restart of the container kills whole.
	CgroupParent string
}

// DefaultMaxPreparing is how many sandboxes are prepared at once unless
// the daemon is told otherwise (airlockd --max-preparing): four per CPU
// it may use (GOMAXPROCS, which follows a cgroup's CPU quota).
// On 2 cores, 100 sessions created at once took 12.4 to 14.7 s each at
// the median unbounded, 7.3 to 7.4 s with 8 or 12 places, the whole
// burst no slower (hack/perf.sh -only density -density 100).
func DefaultMaxPreparing() int { return 4 * goruntime.GOMAXPROCS(0) }

func maxPreparing(n int) int {
	switch {
	case n < 0:
		return 0
	case n == 0:
		return DefaultMaxPreparing()
	}
	return n
}

// DefaultPoolRefill is how many sandboxes a warm pool prepares at once
// unless the daemon is told otherwise (airlockd --pool-refill).
const DefaultPoolRefill = 2

// Daemon manages sessions.
type Daemon struct {
	cfg      Config
	prefix   string
	rt       sandboxRuntime
	runtime  *runtime.Runtime // rt, when it is containerd (nil in tests of a fake)
	embedded *runtime.Embedded
	cgroups  runtime.Cgroups

	// The layers each session is assembled from, besides the runtime.
	// creds mints the sessions' credentials and delivers them.
	creds  *credentials.Delivery
	egress *egress.Perimeter // nil without an uplink
	fs     *workspaces
	// approvals holds the requests the L7 gateway's ask rules hold,
	// until they are decided.
	approvals *approvals.Store
	// admission checks every request and pool against the operator's
	// admission policy.
	admission *admitter

	// stopCtx is the daemon's root context: cancelled by Close.
	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	// pools keep sandboxes prepared ahead of their sessions.
	pools  *warmPools
	starts *startQueue // bounds the sandboxes prepared at once

	mu       sync.Mutex
	sessions map[string]*session // +checklocks:mu
	// creating counts creates in progress, so that the shared parent
	// cgroups are never removed under one.
	creating int // +checklocks:mu
	// reserved counts creates and pool fills under way, for the session
	// limit.
	reserved int // +checklocks:mu
}

// New starts (or re-attaches to) containerd, loads the sessions recorded
// under the root and reconciles them with what containerd has.
func New(ctx context.Context, cfg Config) (_ *Daemon, retErr error) {
	if cfg.Root == "" || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("root %q must be an absolute path: %w", cfg.Root, errdefs.ErrInvalidArgument)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "airlock"
	}
	if !filepath.IsAbs(cfg.SelfBinary) {
		return nil, fmt.Errorf("self binary %q must be an absolute path", cfg.SelfBinary)
	}
	if cfg.Runtime == "" {
		cfg.Runtime = runtime.DefaultOCIRuntime
	}
	if !slices.Contains(runtime.OCIRuntimes, cfg.Runtime) {
		return nil, fmt.Errorf("runtime %q: want one of %s: %w", cfg.Runtime, strings.Join(runtime.OCIRuntimes, ", "), errdefs.ErrInvalidArgument)
	}
	ociBinary := filepath.Join(cfg.BinDir, cfg.Runtime)
	if _, err := os.Stat(ociBinary); err != nil {
		return nil, fmt.Errorf("runtime %s: %w (make deps installs runc and crun into the bin dir)", cfg.Runtime, err)
	}
	for _, d := range []string{cfg.Root, filepath.Join(cfg.Root, "sessions"), filepath.Join(cfg.Root, cfg.Runtime)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.BinDir, launch.Binary)); err != nil {
		return nil, fmt.Errorf("%s, the first process of every sandbox, is missing from the bin dir (make build puts it there): %w", launch.Binary, err)
	}
	if err := noteCgroupParent(cfg, runtime.Cgroups{}); err != nil {
		return nil, err
	}
	d, err := newDaemon(ctx, cfg)
	if err != nil {
		return nil, err
	}
	address := cfg.Containerd
	if address == "" {
		d.embedded = &runtime.Embedded{Dir: filepath.Join(cfg.Root, "containerd"), BinDir: cfg.BinDir,
			Cgroup: containerdCgroup(cfg, d.prefix)}
		started, err := d.embedded.EnsureStarted(ctx)
		if err != nil {
			return nil, err
		}
		if started {
			// A containerd this start made: a start that fails after it
			// ends it (shims outlive it, and the next start makes another
			// that finds them); one already running is left alone.
			defer func() {
				if retErr != nil {
					if err := d.embedded.Stop(context.WithoutCancel(ctx), 10*time.Second); err != nil {
						log.G(ctx).Warn("stopping the containerd a failed start made", "error", err)
					}
				}
			}()
		}
		address = d.embedded.Address()
	}
	rcfg := runtime.Config{
		Address:      address,
		Namespace:    cfg.Namespace,
		OCIBinary:    ociBinary,
		OCIRoot:      filepath.Join(cfg.Root, cfg.Runtime),
		OCIRuntime:   cfg.Runtime,
		LoggerBinary: loggerBinary(cfg),
		FIFODir:      filepath.Join(cfg.Root, "fifo"),
		ShimGroup:    shimGroupOf(cfg),
	}
	if d.embedded != nil {
		rcfg.ShimStateDir = filepath.Join(d.embedded.Dir, "state")
	}
	rt, err := runtime.New(ctx, rcfg)
	if err != nil {
		return nil, err
	}
	d.runtime = rt
	defer func() {
		if retErr != nil {
			rt.Close()
		}
	}()
	perimeter, err := egress.Open(ctx, d.prefix, cfg.Egress)
	if err != nil {
		return nil, err
	}
	if err := d.open(ctx, rt, perimeter); err != nil {
		return nil, err
	}
	if d.embedded != nil {
		// A containerd that dies is started again; the sessions' watches
		// wait on their sandboxes again once it answers. (One given with
		// --containerd is reconnected to when it comes back.)
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.embedded.Supervise(log.With(d.stopCtx, "component", "containerd"), time.Second, 30*time.Second, d.readShimExits)
		}()
	}
	return d, nil
}

// readShimExits asks the shims of the sessions that run, while
// containerd is down, whether their sandbox ended: a restarted containerd
// cleans up such a task without reporting its exit, and rewait takes the
// exit kept here instead of calling the session lost.
func (d *Daemon) readShimExits(ctx context.Context) {
	for _, s := range d.sessionList() {
		s.mu.Lock()
		state, id := s.rec.State, s.rec.ID
		s.mu.Unlock()
		if state != api.StateRunning && state != api.StateCreated {
			continue
		}
		if st, err := d.rt.ShimState(ctx, id); err == nil && st.Exists && !st.Running {
			s.mu.Lock()
			s.shimExit = &ending{code: int(st.ExitCode), at: st.ExitedAt.UTC(), reason: "exited"}
			s.mu.Unlock()
		}
	}
}

// newDaemon checks the admission policy and the configured pools against
// it, before anything is started.
func newDaemon(ctx context.Context, cfg Config) (*Daemon, error) {
	d := &Daemon{cfg: cfg, prefix: runtime.Prefix(cfg.Root), sessions: map[string]*session{}}
	d.admission = newAdmitter(cfg)
	d.approvals = approvals.New(approvals.WithApprover(cfg.Approver))
	for i := range cfg.Pools {
		p := &cfg.Pools[i]
		if _, err := d.admission.admit(p); err != nil {
			return nil, fmt.Errorf("pool %q: %w", p.Label, err)
		}
		if p.Pool == nil || p.Pool.Size == 0 {
			return nil, fmt.Errorf("pool %q: the manifest has no `pool { size = N }` block: %w", p.Label, errdefs.ErrInvalidArgument)
		}
	}
	log.G(ctx).Info("admission policy", "policy", d.Admission().String())
	return d, nil
}

// open starts the daemon on a runtime and a perimeter (nil: no uplink):
// credentials, workspaces, the sessions recorded under the root
// reconciled with what the runtime has, the shim anchor and the pools. On
// error the perimeter is closed and nothing keeps running.
func (d *Daemon) open(ctx context.Context, rt sandboxRuntime, perimeter *egress.Perimeter) (retErr error) {
	d.rt, d.egress = rt, perimeter
	d.stopCtx, d.stop = context.WithCancel(context.WithoutCancel(ctx))
	d.starts = newStartQueue(maxPreparing(d.cfg.MaxPreparing))
	d.pools = &warmPools{
		prepare: func(ctx context.Context, p policies.Policy) (*session, error) { return d.prepare(ctx, p, true) },
		turn: func(ctx context.Context) (func(), error) {
			queued, release, err := d.starts.acquire(ctx, true)
			d.cfg.Metrics.ObserveStartQueue(metrics.QueueRefill, queued)
			return release, err
		},
		discard: d.discard, reserve: d.reserve, release: d.release, ctx: d.stopCtx,
		refill: cmp.Or(d.cfg.PoolRefill, DefaultPoolRefill),
		pools:  map[string]*pool{}, held: map[*session]*pool{}, dropped: map[*session]bool{},
	}
	defer func() {
		if retErr != nil {
			d.stop()
			d.wg.Wait()
			_ = d.egress.Close(ctx)
		}
	}()
	if err := d.openCredentials(); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			d.creds.Close()
		}
	}()
	d.fs = openWorkspaces(ctx, d.cfg.Root, d.maskRead)
	defer func() {
		if retErr != nil {
			d.fs.Close()
		}
	}()
	if err := d.reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile sessions: %w", err)
	}
	d.egress.Reconcile(ctx, d.runningEgress)
	anchor := d.rt.StartAnchor(log.With(d.stopCtx, "component", "shim-anchor"), anchorOptions(d.cfg, d.prefix))
	d.wg.Add(1)
	go func() { defer d.wg.Done(); <-anchor }()
	for i := range d.cfg.Pools {
		d.pools.ensure(&d.cfg.Pools[i])
	}
	d.cfg.Metrics.SetSource(d.metricsState)
	return nil
}

func shimGroupOf(cfg Config) string {
	if cfg.ShimPerSession {
		return ""
	}
	return shimGroup
}

// loggerBinary is the small airlock-logger from the bin dir, or airlockd
// itself (which has a logger mode) when the bin dir has none.
func loggerBinary(cfg Config) string {
	p := filepath.Join(cfg.BinDir, "airlock-logger")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return cfg.SelfBinary
}

// Close stops the daemon's background work. Running sessions keep running
// and are re-adopted by the next daemon on the same root.
func (d *Daemon) Close(ctx context.Context) error {
	d.stop()
	// Held requests are denied while the gateway can still answer them.
	d.approvals.Close(ctx)
	// Prepared sandboxes belong to no session: they go with the daemon.
	d.pools.close(ctx)
	d.mu.Lock()
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
	d.mu.Lock()
	sessions := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		s.stopTimer()
		sessions = append(sessions, s)
	}
	d.mu.Unlock()
	err := d.egress.Close(ctx)
	d.wg.Wait()
	d.creds.Close()
	// Merged decisions still counting are written before the daemon goes.
	for _, s := range sessions {
		_ = s.audit.Close()
	}
	anchorErr := d.rt.StopAnchor(ctx)
	// The anchor's cgroup, once the anchor is gone (a shim killed under it
	// leaves it behind); a running anchor's stays.
	d.cgroups.Remove(anchorOptions(d.cfg, d.prefix).CgroupPath)
	return errors.Join(err, anchorErr, d.fs.Close(), d.rt.Close())
}

// StopContainerd stops the embedded containerd, if this daemon started one.
// Call it after Close, once the sessions are removed: shims of live
// sessions outlive containerd by design.
func (d *Daemon) StopContainerd(ctx context.Context) error {
	if d.embedded == nil {
		return nil
	}
	err := d.embedded.Stop(ctx, 10*time.Second)
	// With containerd gone and no session left, what is still running of
	// this daemon is ended, and the cgroups the anchor and the sessions
	// left (their processes were still exiting when their removal was
	// first tried) go, for up to five seconds.
	d.mu.Lock()
	idle := len(d.sessions) == 0 && d.creating == 0
	d.mu.Unlock()
	if idle {
		// Nothing of this daemon may run now: a shim or logger still
		// alive (a create cut short can leave one) would outlive it.
		endOrphans(ctx, d.embedded.Address(), d.cfg.Root, d.prefix,
			[]string{loggerBinary(d.cfg), d.cfg.SelfBinary}, 5*time.Second)
		anchor, parent := anchorOptions(d.cfg, d.prefix).CgroupPath, filepath.Dir(d.CgroupPath("x"))
		for deadline := time.Now().Add(5 * time.Second); ; {
			d.cgroups.RemoveTree(anchor)
			d.cgroups.RemoveTree(parent)
			if !d.cgroups.Exists(anchor) && !d.cgroups.Exists(parent) || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// Stopped sessions kept for their diff leave empty cgroups, and the
	// shims of their ended tasks are still exiting: passes over them for
	// up to five seconds while no session runs (a running session's
	// cgroup, and its parents, stay).
	d.mu.Lock()
	running := d.creating > 0
	d.mu.Unlock()
	for _, s := range d.sessionList() {
		s.mu.Lock()
		running = running || s.rec.State == api.StateRunning || s.rec.State == api.StateCreated
		s.mu.Unlock()
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if d.removeCgroups() || running {
			break
		}
		if time.Now().After(deadline) {
			log.G(ctx).Warn("cgroups of airlockd's left after its containerd stopped (a process still in one?)", "root", d.cfg.Root)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// sessionList returns the daemon's sessions, read under d.mu: their own
// locks are taken after it is let go.
func (d *Daemon) sessionList() []*session {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		out = append(out, s)
	}
	return out
}

// removeCgroups removes the daemon's empty cgroups under every cgroup parent
// its root has used, and the parents it made once empty (tidyCgroups); it
// reports whether none of them is left.
func (d *Daemon) removeCgroups() bool {
	return tidyCgroups(d.cfg.Root, d.prefix, d.cfg.CgroupParent, d.cgroups)
}

// Runtime returns the runtime (for tests and image management).
func (d *Daemon) Runtime() *runtime.Runtime { return d.runtime }

// Images lists the runtime's images by name.
func (d *Daemon) Images(ctx context.Context) ([]api.Image, error) { return d.runtime.Images(ctx) }

// ImportImage imports the images of an OCI or Docker archive.
func (d *Daemon) ImportImage(ctx context.Context, r io.Reader, name string) ([]api.Image, error) {
	return d.runtime.ImportImage(ctx, r, name)
}

// Version reports the daemon's version and root, and containerd's version
// when containerd answers.
func (d *Daemon) Version(ctx context.Context) api.Version {
	v := api.Version{Version: Version, Root: d.cfg.Root}
	if d.runtime == nil {
		return v
	}
	if cv, err := d.runtime.Client().Version(ctx); err == nil {
		v.Containerd = cv.Version
	}
	return v
}

func (d *Daemon) sessionDir(id string) string { return filepath.Join(d.cfg.Root, "sessions", id) }

// cgroupOf is the cgroup of session id: the one it was made in (as the
// daemon holds it, else as its record on disk says: what a create cut
// short or a pooled sandbox left), or, with no record, the one it would be
// made in now.
func (d *Daemon) cgroupOf(id string) string {
	d.mu.Lock()
	s := d.sessions[id]
	d.mu.Unlock()
	if s != nil {
		return s.cgroup
	}
	if rec, err := readRecord(d.sessionDir(id)); err == nil && rec != nil {
		if rec.Cgroup != "" {
			return rec.Cgroup
		}
		return path.Join("/", "airlock-"+d.prefix, id)
	}
	return d.CgroupPath(id)
}

// CgroupPath is the cgroup (relative to a hierarchy's root) a session's
// processes run in.
func (d *Daemon) CgroupPath(id string) string {
	return path.Join("/", d.cfg.CgroupParent, "airlock-"+d.prefix, id)
}

// containerdCgroup is the embedded containerd's cgroup under a cgroup
// parent: beside the sessions' parent, not beneath it.
func containerdCgroup(cfg Config, prefix string) string {
	if cfg.CgroupParent == "" {
		return ""
	}
	return path.Join("/", cfg.CgroupParent, "airlock-"+prefix+"-containerd")
}

func (d *Daemon) get(id string) (*session, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s, ok := d.sessions[id]
	if !ok {
		return nil, fmt.Errorf("no session %q: %w", id, errdefs.ErrNotFound)
	}
	return s, nil
}

// CheckSession returns what the session methods return for an id that
// names no session (an errdefs.ErrNotFound error, or ErrInvalidArgument for
// a malformed id), and nil for a known session.
func (d *Daemon) CheckSession(id string) error {
	_, err := d.get(id)
	return err
}

// Create validates the policy, checks it against the admission policy and
// creates a session; with start it also starts the main process. A policy
// with a warm pool takes one of its prepared sandboxes; otherwise the
// sandbox is prepared now. The returned session carries the policy's
// warnings. A refused policy creates nothing. The request's labels are
// recorded with the session before its command can run: a caller that
// dies during a create finds, by its labels, the session it made (a
// create cut short before that leaves none, see reconcile).
func (d *Daemon) Create(ctx context.Context, req api.CreateRequest) (*api.Session, error) {
	if err := api.ValidateLabels(req.Labels); err != nil {
		return nil, err
	}
	p := *req.Policy.Clone()
	warnings, err := d.admission.admitIn(&p, inProcess{owned: req.OwnedWorkspaces, volumes: req.VolumeWorkspaces})
	if err != nil {
		return nil, err
	}
	v, err := d.create(ctx, p, req.Start, maps.Clone(req.Labels))
	if err != nil {
		return nil, err
	}
	v.Warnings = append(warnings, v.Warnings...)
	return v, nil
}

func (d *Daemon) create(ctx context.Context, p policies.Policy, start bool, labels map[string]string) (v *api.Session, err error) {
	if len(p.Command) == 0 {
		return nil, fmt.Errorf("policy has no command (set `command` or pass `-- CMD`): %w", errdefs.ErrInvalidArgument)
	}
	began := time.Now()
	defer func() {
		if err == nil {
			d.cfg.Metrics.ObserveStart(time.Since(began), v.Warm, start)
		}
	}()
	key := poolKey(&p)
	for {
		s := d.pools.take(key, func(s *session) {
			// It keeps its place under the session limit until claim
			// counts it as a session (or abandons it).
			d.mu.Lock()
			s.reserved = true
			d.reserved++
			d.mu.Unlock()
		})
		if s == nil {
			break
		}
		v, err := func() (*api.Session, error) {
			defer d.pools.replenish(key)
			return d.claim(log.With(ctx, "session", s.rec.ID, "label", p.Label), s, p, labels, start, true)
		}()
		if err == nil || !errors.Is(err, errStalePool) {
			return v, err
		}
		d.pools.stale(key)
		log.G(ctx).Info("discarded a prepared sandbox", "session", s.rec.ID, "reason", err)
	}
	// At the session limit, prepared sandboxes of other pools give their
	// places to the session (a few tries: a filler may take a freed place
	// first).
	err = d.reserve()
	for tries := 0; err != nil && tries < 3 && d.pools.evict(ctx); tries++ {
		err = d.reserve()
	}
	if err != nil {
		return nil, err
	}
	queued, release, err := d.starts.acquire(ctx, false)
	d.cfg.Metrics.ObserveStartQueue(metrics.QueueCreate, queued)
	if err != nil {
		d.release()
		return nil, fmt.Errorf("waited %s for a place among the sandboxes being prepared: %w", queued.Round(time.Millisecond), err)
	}
	if queued > 0 {
		log.G(ctx).Info("create waited for a place to prepare its sandbox", "waited", queued.Round(time.Millisecond).String())
	}
	s, err := func() (*session, error) {
		defer release()
		return d.prepare(ctx, p, false)
	}()
	if err != nil {
		d.release()
		return nil, err
	}
	d.mu.Lock()
	s.reserved = true
	d.mu.Unlock()
	v, err = d.claim(log.With(ctx, "session", s.rec.ID, "label", p.Label), s, p, labels, start, false)
	d.mu.Lock()
	d.unreserveLocked(s)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	v.Queued = policies.Duration(queued)
	if why := d.pools.whyCold(key, &p); why != "" {
		v.Warnings = append(v.Warnings, why)
	}
	if p.Pool != nil && p.Pool.Size > 0 {
		d.pools.ensure(&p)
	}
	return v, nil
}

// Start starts a created session's main process.
func (d *Daemon) Start(ctx context.Context, id string) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	if err := s.start(log.With(ctx, "session", id)); err != nil {
		return nil, err
	}
	return s.view(), nil
}

// Stop ends a running session: SIGTERM to every process, SIGKILL after grace.
func (d *Daemon) Stop(ctx context.Context, id string, grace time.Duration) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	running := s.rec.State == api.StateRunning
	s.mu.Unlock()
	if running {
		// Who asked is on record (a socket user, a Kubernetes user
		// through the node endpoint, the node agent itself).
		s.audit.EmitControl(ctx, api.AuditEvent{Session: id, Layer: "session", Action: "stop_requested",
			Fields: map[string]any{"by": caller.Name(ctx), "grace": grace.String()}})
	}
	if err := s.stop(log.With(ctx, "session", id), "stopped", grace); err != nil {
		return nil, err
	}
	return s.view(), nil
}

// Wait blocks until the session's main process has exited.
func (d *Daemon) Wait(ctx context.Context, id string) (*api.WaitResponse, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	state, exited := s.rec.State, s.exited
	s.mu.Unlock()
	if state == api.StateCreated {
		return nil, fmt.Errorf("session %q has not been started: %w", id, errdefs.ErrFailedPrecondition)
	}
	select {
	case <-exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &api.WaitResponse{ExitCode: -1, Reason: s.rec.Reason}
	if s.rec.ExitCode != nil {
		resp.ExitCode = *s.rec.ExitCode
	}
	return resp, nil
}

// Remove deletes a session and everything it owns. A running session is
// refused unless force is set, in which case it is killed first.
func (d *Daemon) Remove(ctx context.Context, id string, force bool) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	ctx = log.With(ctx, "session", id)
	s.mu.Lock()
	state, review := s.rec.State, s.rec.Review
	s.mu.Unlock()
	if review && !force {
		return fmt.Errorf("session %q has workspace changes waiting for review; commit or discard them first, or remove with force to drop them: %w", id, errdefs.ErrFailedPrecondition)
	}
	switch state {
	case api.StateRunning:
		if !force {
			return fmt.Errorf("session %q is running; stop it first or remove with force: %w", id, errdefs.ErrFailedPrecondition)
		}
		if err := s.stop(ctx, "stopped", 0); err != nil {
			return err
		}
	case api.StateCreated:
		if err := s.stop(ctx, "stopped", 0); err != nil {
			return err
		}
	}
	began := time.Now()
	if err := d.teardown(ctx, id); err != nil {
		s.mu.Lock()
		s.rec.State = api.StateUnknown
		_ = s.saveLocked()
		s.mu.Unlock()
		return err
	}
	d.cfg.Metrics.ObserveTeardown(metrics.PhaseRemove, time.Since(began))
	_ = s.audit.Close()
	d.mu.Lock()
	delete(d.sessions, id)
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
	d.cfg.Metrics.SessionRemoved(id)
	log.G(ctx).Info("session removed")
	// Its place under the session limit is free: pools that stopped
	// filling at the limit (or gave a sandbox up to a session) go on.
	d.pools.resume()
	return nil
}

// teardown removes every object a session owns, then its directory.
// The network and the containerd objects go side by side; the session's
// files only once the task (if one was left) is deleted, so that nothing
// of the sandbox still runs on them.
func (d *Daemon) teardown(ctx context.Context, id string) (retErr error) {
	step := steps.New()
	defer func() {
		if retErr == nil {
			step.Log(ctx, "session teardown steps", "phase", "remove")
		}
	}()
	step.Run("credentials", func() { d.creds.Revoke(ctx, id) })
	step.Run("approvals", func() { d.approvals.CancelSession(ctx, id) })
	var netErr, rtErr error
	step.Go("network", func() { netErr = d.egress.Discard(ctx, id) })
	step.Go("containerd", func() { rtErr = d.rt.Delete(ctx, id) })
	step.Wait()
	if err := errors.Join(netErr, rtErr); err != nil {
		return err
	}
	// runc removes the cgroup with the task; a create cut short (the
	// daemon killed while runc made the task) can leave it, empty.
	step.Run("cgroup", func() { d.cgroups.Remove(d.cgroupOf(id)) })
	dir := d.sessionDir(id)
	var err error
	step.Run("workspace", func() { err = cleanupFS(ctx, dir) })
	if err != nil {
		return err
	}
	step.Run("mounts", func() { err = mountinfo.UnmountAll(dir) })
	if err != nil {
		return err
	}
	step.Run("dir", func() { err = os.RemoveAll(dir) })
	return err
}

// List returns all sessions, newest first.
func (d *Daemon) List(ctx context.Context) []api.Session {
	d.mu.Lock()
	all := make([]*session, 0, len(d.sessions))
	for _, s := range d.sessions {
		all = append(all, s)
	}
	d.mu.Unlock()
	out := make([]api.Session, 0, len(all))
	for _, s := range all {
		out = append(out, *s.view())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Inspect returns one session with the resources it owns.
func (d *Daemon) Inspect(ctx context.Context, id string) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	v := s.view()
	if err := d.egress.UplinkDown(); err != nil && v.State == api.StateRunning && v.Policy.Egress != nil {
		v.Warnings = append(v.Warnings, err.Error()+": the session's network has no way out until the gateway rebuilds it")
	}
	res, err := d.rt.Resources(ctx, id)
	switch {
	case errdefs.IsUnavailable(err):
		// containerd is down (and being restarted): the session's state
		// is the daemon's own; only the resource list needs containerd.
		v.Warnings = append(v.Warnings, "containerd unavailable, retrying: resources not listed")
		return v, nil
	case err != nil:
		return nil, err
	}
	for _, r := range res {
		kind, name, _ := strings.Cut(r, "/")
		v.Resources = append(v.Resources, api.Resource{Kind: kind, Name: name})
	}
	return v, nil
}

// Exec runs an extra process in a running session.
func (d *Daemon) Exec(ctx context.Context, id string, o runtime.ExecOptions) (int, error) {
	s, err := d.get(id)
	if err != nil {
		return -1, err
	}
	s.mu.Lock()
	state := s.rec.State
	// The spec holds no credential: the env-delivered ones come from the
	// session's plan, before the caller's variables. (A session this
	// daemon re-adopted while it ran has none; see credentials.Plan.Env.)
	if credEnv := s.creds.Env(); len(credEnv) > 0 {
		o.Env = append(append([]string{}, credEnv...), o.Env...)
	}
	s.mu.Unlock()
	if state != api.StateRunning {
		return -1, fmt.Errorf("session %q is %s, not running: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	if len(o.Args) == 0 {
		return -1, fmt.Errorf("exec needs a command: %w", errdefs.ErrInvalidArgument)
	}
	o.ExecID = "exec-" + newID()
	cmd := strings.Join(o.Args, " ")
	if len(cmd) > 512 {
		cmd = cmd[:512] + "..."
	}
	s.audit.EmitControl(ctx, api.AuditEvent{Session: id, Layer: "session", Action: "exec", Subject: cmd,
		Fields: map[string]any{"by": caller.Name(ctx), "exec_id": o.ExecID, "tty": o.TTY}})
	return d.rt.Exec(ctx, id, o)
}

// reconcile loads recorded sessions and matches them with containerd:
// running ones are re-adopted, dead ones get their exit recorded, half-made
// ones and containerd objects without a record are removed.
func (d *Daemon) reconcile(ctx context.Context) error {
	entries, err := os.ReadDir(filepath.Join(d.cfg.Root, "sessions"))
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() || validID(e.Name()) != nil {
			continue
		}
		id := e.Name()
		sctx := log.With(ctx, "session", id)
		rec, err := readRecord(d.sessionDir(id))
		if err != nil || rec.ID != id || rec.State == stateCreating || rec.State == statePooled {
			if rec != nil && rec.State == statePooled {
				log.G(sctx).Info("removing a sandbox prepared for a pool by the previous daemon")
			} else {
				log.G(sctx).Warn("removing a session whose creation did not finish", "error", err)
			}
			if err := d.teardown(sctx, id); err != nil {
				log.G(sctx).Error("teardown", "error", err)
				known[id] = true
			}
			continue
		}
		known[id] = true
		dir := d.sessionDir(id)
		tally := newAuditTally(filepath.Join(dir, audit.File), auditSize(dir))
		cg := rec.Cgroup
		if cg == "" {
			// Made before the path was recorded, when no cgroup
			// parent existed.
			cg = path.Join("/", "airlock-"+d.prefix, rec.ID)
		}
		s := &session{d: d, dir: dir, cgroup: cg, audit: d.newAudit(dir, rec.Policy.Resources.AuditSize, tally), tally: tally, rec: *rec, exited: make(chan struct{})}
		s.audit.SetPolicyVersion(rec.version())
		if rec.Dropping != "" {
			s.finishDrop(sctx)
		} else if s.fs, err = d.fs.load(sctx, s.dir, id); err != nil {
			log.G(sctx).Error("load workspace state", "error", err)
		} else if s.fs == nil && s.rec.Review {
			// Its state is gone, by a removal a daemon without
			// record.Dropping began: nothing is left to review.
			log.G(sctx).Warn("the changes kept for review are gone; the session has none to review")
			s.rec.Review = false
			_ = s.save()
		}
		end, err := s.readopt(sctx)
		if end != nil {
			s.finish(sctx, *end)
		}
		if err != nil {
			log.G(sctx).Error("reconcile", "error", err)
			s.rec.State = api.StateUnknown
			_ = s.save()
		}
		d.mu.Lock()
		d.sessions[id] = s
		d.mu.Unlock()
	}
	owned, err := d.rt.Owned(ctx)
	if err != nil {
		return err
	}
	for id := range owned {
		if known[id] {
			continue
		}
		log.G(ctx).Warn("removing containerd objects of an unknown session", "session", id)
		if err := d.rt.Delete(ctx, id); err != nil {
			log.G(ctx).Error("remove orphan", "session", id, "error", err)
		}
	}
	return nil
}

// releaseCgroupParentsLocked removes the shared parent cgroups once
// nothing of the daemon needs them: no session, no create in progress, no
// prepared sandbox; a busy parent is left alone. Every path that ends a
// session or a sandbox calls it, holding d.mu, which a create also takes
// before runc runs.
func (d *Daemon) releaseCgroupParentsLocked() {
	if len(d.sessions) == 0 && d.creating == 0 && d.pools.Waiting() == 0 {
		// With no session of its own, whatever empty cgroup is left
		// beneath the parent (a create cut short by a kill, whose
		// teardown found its cgroup still busy) goes too; one that holds
		// a process stays.
		d.cgroups.RemoveTree(filepath.Dir(d.CgroupPath("x")))
	}
}
