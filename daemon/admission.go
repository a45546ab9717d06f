package daemon

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
)

// openAdmission sets the daemon's admission policy and the host paths it
// protects whatever the policy says: its root (state, keys, containerd's
// root and socket when embedded), the API socket and an external
// containerd's socket; and, from writes only, its bin dir and binary
// (runc and airlock-init run from there as root) and the programs and
// files its exec issuers name (it runs them as root).
func (d *Daemon) openAdmission() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.admission = d.cfg.Admission
	if d.admission == nil {
		d.admission = policies.DefaultAdmission()
	}
	d.protectedPaths = []string{d.cfg.Root, d.cfg.Socket}
	if a := d.cfg.Containerd; a != "" {
		d.protectedPaths = append(d.protectedPaths, strings.TrimPrefix(a, "unix://"))
	}
	d.protected = d.newProtectedLocked()
}

// newProtectedLocked builds the protected set from protectedPaths.
func (d *Daemon) newProtectedLocked() *policies.Protected {
	pr := policies.NewProtected(d.protectedPaths...)
	pr.ProtectWrites(d.cfg.BinDir, d.cfg.SelfBinary)
	for _, argv := range d.cfg.Issuers {
		pr.ProtectWrites(argv...) // relative arguments are skipped
	}
	return pr
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
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.protectedPaths = append(d.protectedPaths, abs)
	d.protected = d.newProtectedLocked()
	return nil
}

// admit validates p and checks it against the admission policy; p comes
// back with defaults applied and its host paths resolved, and the
// warnings are for the caller. A policy the admission policy refuses is an
// errdefs.ErrPermissionDenied error naming each rule it breaks.
func (d *Daemon) admit(p *policies.Policy) ([]string, error) {
	d.mu.Lock()
	d.admission.FillDefaults(p)
	d.mu.Unlock()
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	d.mu.Lock()
	a, pr := d.admission, d.protected
	d.mu.Unlock()
	return a.Admit(p, pr)
}

// countLocked is what the session limit counts: sessions in any state,
// sandboxes waiting in pools, and creates and pool fills under way.
func (d *Daemon) countLocked() int {
	return len(d.sessions) + d.pooledLocked() + d.reserved
}

// reserve takes a place under the session limit for a sandbox about to be
// prepared; release gives it back.
func (d *Daemon) reserve() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.admission.AdmitSessions(d.countLocked()); err != nil {
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

// Admission returns the admission policy the daemon enforces.
func (d *Daemon) Admission() *policies.Admission {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.admission
}

// unreserveLocked gives back the place s held under the session limit
// while it was prepared, once it counts as a session (or is abandoned).
func (d *Daemon) unreserveLocked(s *session) {
	if s.reserved {
		s.reserved = false
		d.reserved--
	}
}
