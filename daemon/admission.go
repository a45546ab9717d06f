package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
)

// admitter checks requests against the operator's admission policy and
// the host paths the daemon protects whatever that policy says: its root
// (state, keys, containerd's root and socket when embedded), the API
// sockets and an external containerd's socket; and, from writes only, its
// bin dir and binary (runc and airlock-init run from there as root) and
// the programs and files its exec issuers name (it runs them as root).
type admitter struct {
	cfg Config

	mu        sync.Mutex
	policy    *policies.Admission // +checklocks:mu
	paths     []string            // +checklocks:mu
	protected *policies.Protected // +checklocks:mu
}

func newAdmitter(cfg Config) *admitter {
	a := &admitter{cfg: cfg, policy: cfg.Admission, paths: []string{cfg.Root, cfg.Socket}}
	if a.policy == nil {
		a.policy = policies.DefaultAdmission()
	}
	if addr := cfg.Containerd; addr != "" {
		a.paths = append(a.paths, strings.TrimPrefix(addr, "unix://"))
	}
	a.mu.Lock()
	a.rebuildLocked()
	a.mu.Unlock()
	return a
}

// rebuildLocked builds the protected set from paths.
func (a *admitter) rebuildLocked() {
	pr := policies.NewProtected(a.paths...)
	pr.ProtectWrites(a.cfg.BinDir, a.cfg.SelfBinary)
	for _, argv := range a.cfg.Issuers {
		pr.ProtectWrites(argv...) // relative arguments are skipped
	}
	a.protected = pr
}

// protect adds a host path (an API socket) to the protected paths.
func (a *admitter) protect(path string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.paths = append(a.paths, abs)
	a.rebuildLocked()
}

// admit validates p and checks it against the admission policy; p comes
// back with defaults applied and its host paths resolved, and the
// warnings are for the caller. A policy the admission policy refuses is an
// errdefs.ErrPermissionDenied error naming each rule it breaks.
//
// owned are directories the in-process caller made for this session
// (api.CreateRequest.OwnedWorkspaces): admitted as its workspaces.
func (a *admitter) admit(p *policies.Policy, owned ...string) ([]string, error) {
	return a.admitIn(p, inProcess{owned: owned})
}

// inProcess are the workspaces an in-process caller names for a session
// that no API request can: see api.CreateRequest.OwnedWorkspaces and
// VolumeWorkspaces.
type inProcess struct {
	owned, volumes []string
}

// admitIn is admit with the in-process caller's workspaces.
func (a *admitter) admitIn(p *policies.Policy, in inProcess) ([]string, error) {
	owned := in.owned
	pol, pr := a.current()
	pol.FillDefaults(p)
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := a.runtimeAllows(p); err != nil {
		return nil, err
	}
	if len(owned) > 0 {
		pr = pr.WithOwned(owned...)
	}
	if len(in.volumes) > 0 {
		pr = pr.WithVolumes(in.volumes...)
	}
	return pol.Admit(p, pr)
}

// runtimeAllows refuses what the daemon's OCI runtime cannot confine.
// crun's devices cgroup always lets a container open /dev/console (5:1),
// the host's console, whatever the spec says (it adds its defaults after
// the spec's rules), where runc's does not: a session that may make
// device nodes (CAP_MKNOD) could make that one and open it.
func (a *admitter) runtimeAllows(p *policies.Policy) error {
	if a.cfg.Runtime != "crun" {
		return nil
	}
	for _, c := range p.Capabilities {
		if strings.EqualFold(strings.TrimPrefix(strings.ToUpper(c), "CAP_"), "MKNOD") {
			return fmt.Errorf("%w: capability %s refused on crun: crun's devices cgroup always allows /dev/console (5:1), the host's console, so a session that can make device nodes could open it; run such sessions on runc (airlockd --runtime runc)", errdefs.ErrPermissionDenied, c)
		}
	}
	return nil
}

func (a *admitter) current() (*policies.Admission, *policies.Protected) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.policy, a.protected
}

// admitSessions checks that one more sandbox fits the session limit when
// n count already.
func (a *admitter) admitSessions(n int) error {
	pol, _ := a.current()
	return pol.AdmitSessions(n)
}

// swap replaces the admission policy and returns the previous one.
func (a *admitter) swap(p *policies.Admission) *policies.Admission {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.policy
	a.policy = p
	return old
}

// Admission returns the admission policy the daemon enforces.
func (d *Daemon) Admission() *policies.Admission {
	pol, _ := d.admission.current()
	return pol
}

// ExposeAPI readies the daemon for its API being served on the unix
// socket path to group ("": to airlockd's user alone). Every member of
// group can create sessions, so serving a group needs an explicit
// admission policy (Config.Admission). The socket joins the protected
// paths.
func (d *Daemon) ExposeAPI(socket, group string) error {
	if group != "" && d.cfg.Admission == nil {
		return fmt.Errorf("socket group %q: every member of the group could ask for what the built-in admission policy admits, "+
			"which can be root-equivalent on this host; give an explicit admission policy (airlockd --admission FILE, see examples/airlockd/admission.hcl): %w",
			group, errdefs.ErrFailedPrecondition)
	}
	d.admission.protect(socket)
	return nil
}

// Protect refuses paths (and what is beneath or contains them) as
// workspaces and mounts, as the API socket is: other ways into the daemon
// (the console's socket, its token file) that no session may reach.
func (d *Daemon) Protect(paths ...string) {
	for _, p := range paths {
		d.admission.protect(p)
	}
}

// reserve takes a place under the session limit for a sandbox about to be
// prepared; release gives it back. The limit counts sessions in any
// state, sandboxes waiting in pools, and creates and pool fills under way.
func (d *Daemon) reserve() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.admission.admitSessions(len(d.sessions) + d.pools.Waiting() + d.reserved); err != nil {
		return err
	}
	d.reserved++
	return nil
}

func (d *Daemon) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reserved--
}

// unreserveLocked gives back the place s held under the session limit
// while it was prepared, once it counts as a session (or is abandoned).
func (d *Daemon) unreserveLocked(s *session) {
	if s.reserved {
		s.reserved = false
		d.reserved--
	}
}
