package daemon

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// layerPolicy is the layer of a revision's audit event.
const layerPolicy = "policy"

// Update revises a created or running session's policy, live. The revised
// policy goes through validation and admission as at create; its
// difference with the running policy (policies.Diff) is applied if every
// part of it can be: today, egress allow and deny entries, http rules and
// inspect (see egress.Perimeter.Revise), the workspaces' commit rules
// (fsscope.Session.ReviseRules), secrets (secrets.Set.Revise) and
// credentials (credentials.Plan.Revise).
// Anything else that differs refuses the revision as a whole, naming each
// field and why, and nothing changes. An applied revision gets the next
// policy version and is recorded in the session's record first; then its
// secrets and credentials are revised, all or nothing: if a secret's new
// source cannot be read or a token cannot be minted, the record is put
// back and the revision refused, the old secrets and credentials
// standing. Then its network and the L7 gateway are changed: requests
// held for approval that the revised http rules allow or deny are decided
// by them, and open connections are decided again (see Server.Recheck in
// egress/l7). It is one audit event (layer
// "policy", action "revised"); every event after it names the new
// version. A revision that changes nothing keeps the version.
func (d *Daemon) Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Session, error) {
	return d.update(ctx, id, func(*policies.Policy) (*policies.Policy, error) { return req.Policy.Clone(), nil }, nil)
}

// update is Update of the policy revise returns, given the running one
// under the session's revision lock; origin are fields the revision's
// audit event carries besides its own (what asked for it).
func (d *Daemon) update(ctx context.Context, id string, revise func(running *policies.Policy) (*policies.Policy, error), origin map[string]any) (*api.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	ctx = log.With(ctx, "session", id)
	s.revising.Lock()
	defer s.revising.Unlock()
	s.mu.Lock()
	state, running, version := s.rec.State, s.rec.Policy.Clone(), s.rec.version()
	ending := s.endingLocked()
	s.mu.Unlock()
	if state != api.StateRunning && state != api.StateCreated {
		return nil, fmt.Errorf("session %q is %s: only a created or running session's policy can be revised: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	if ending {
		return nil, fmt.Errorf("session %q is ending: its policy can no longer be revised: %w", id, errdefs.ErrFailedPrecondition)
	}
	rp, err := revise(running.Clone())
	if err != nil {
		return nil, err
	}
	p := *rp
	if len(p.Command) == 0 {
		// The running command stands; admission checks a complete policy.
		p.Command = running.Command
	}
	p.Pool, p.Terminal = running.Pool, running.Terminal
	warnings, err := d.admission.admitIn(&p, inProcess{owned: d.ownedWorkspaces(running), volumes: d.volumeWorkspaces(running)})
	if err != nil {
		return nil, err
	}
	rev := policies.Diff(running, &p)
	if len(rev.Refused) > 0 {
		var parts []string
		for _, r := range rev.Refused {
			parts = append(parts, r.Field+": "+r.Reason)
		}
		return nil, fmt.Errorf("session %q: revision refused, nothing changed: %s: %w", id, strings.Join(parts, "; "), errdefs.ErrFailedPrecondition)
	}
	if !rev.Changed() {
		v := s.view()
		v.Warnings = warnings
		return v, nil
	}
	revised := policies.Revised(running, &p)
	next := version + 1

	// The record first: a daemon that dies before the network is revised
	// re-adopts the session under the revised policy (its DNS decisions
	// and its CIDR rules; see egress.Perimeter.Reconcile). The credential
	// directories stay bound where they were when the sandbox was made.
	s.mu.Lock()
	prevDirs := s.rec.CredentialDirs
	s.rec.Policy, s.rec.PolicyVersion = *revised, next
	if rev.Credentials.Revises() {
		s.rec.CredentialDirs = s.creds.Layout()
	}
	err = s.saveLocked()
	if err != nil {
		s.rec.Policy, s.rec.PolicyVersion, s.rec.CredentialDirs = *running, version, prevDirs
	}
	s.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("session %q: record the revision: %w", id, err)
	}
	out := &api.Revision{Version: next, Previous: version, Allow: rev.Allow, Deny: rev.Deny}
	fields := map[string]any{"previous_version": version}
	maps.Copy(fields, origin)
	var subjects []string
	putBack := func(err error) error {
		s.mu.Lock()
		s.rec.Policy, s.rec.PolicyVersion, s.rec.CredentialDirs = *running, version, prevDirs
		serr := s.saveLocked()
		s.mu.Unlock()
		if serr != nil {
			log.G(ctx).Error("put the record back after a refused revision", "error", serr)
		}
		return fmt.Errorf("session %q: revision refused, nothing changed: %w", id, err)
	}
	undoRules := func() {}
	if len(rev.Workspaces) > 0 {
		// The commit rules decide the next commit; added deny_read
		// patterns mask what they match at once.
		s.mu.Lock()
		fs, pid := s.fs, s.pid
		s.mu.Unlock()
		if fs == nil {
			return nil, putBack(fmt.Errorf("the session's workspaces are not set up: %w", errdefs.ErrFailedPrecondition))
		}
		// The sandbox's mount namespace: the processes in it are the ones
		// an added deny_read pattern refuses, wherever they chroot.
		if pid == 0 {
			return nil, putBack(fmt.Errorf("the sandbox has no process yet: %w", errdefs.ErrFailedPrecondition))
		}
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err == nil {
			err = fs.SetSandbox(ns)
		}
		if err != nil {
			return nil, putBack(fmt.Errorf("the sandbox's mount namespace: %w: %w", err, errdefs.ErrFailedPrecondition))
		}
		wr, undo, err := fs.Revise(ctx, revised.Workspaces)
		if err != nil {
			return nil, putBack(err)
		}
		undoRules = undo
		out.Workspaces = rev.Workspaces
		fields["workspaces"] = rev.Workspaces
		if len(wr.DenyRead) > 0 {
			out.DenyRead = wr.DenyRead
			for _, m := range wr.Masked {
				out.Masked = append(out.Masked, api.MaskedPath{Path: m.Path, Rule: m.Rule})
			}
			fields["deny_read"], fields["masked"] = wr.DenyRead, len(wr.Masked)
		}
		subjects = append(subjects, "workspace")
	}
	undoSecrets := func() {}
	if rev.Secrets.Revises() {
		// Before the credentials: a secret that takes a credential's
		// token must know it when the token is minted.
		s.mu.Lock()
		set := s.secrets
		s.mu.Unlock()
		undo, err := set.Revise(revised.Secrets)
		if err != nil {
			undoRules()
			return nil, putBack(err)
		}
		undoSecrets = undo
		out.Secrets = &rev.Secrets
		fields["secrets"] = rev.Secrets
		subjects = append(subjects, "secrets")
	}
	if rev.Credentials.Revises() {
		cr, err := s.reviseCredentials(ctx, revised.Credentials, rev.Credentials)
		if err != nil {
			// Nothing was minted or revoked: the revision is refused and
			// the record put back.
			undoSecrets()
			undoRules()
			return nil, putBack(err)
		}
		out.Credentials = credentialRevision(cr, rev.Credentials)
		out.CredentialsReminted = len(cr.Reminted) + len(cr.Added)
		fields["credentials"] = out.Credentials
		fields["credentials_reminted"] = out.CredentialsReminted
		subjects = append(subjects, "credentials")
		if cr.Undelivered != nil {
			log.G(ctx).Error("deliver revised credentials", "error", cr.Undelivered)
			fields["credentials_undelivered"] = cr.Undelivered.Error()
		}
	}
	s.audit.SetPolicyVersion(next)
	if rev.Allow.Changed() || rev.Deny.Changed() || rev.L7Changed() && revised.Egress != nil {
		sc := d.egressConfig(s, *revised, "")
		nr, rerr := d.egress.Revise(ctx, id, sc)
		if rerr != nil {
			// The record holds the revision: the session's DNS decisions
			// follow it; what failed is in the log and the audit.
			log.G(ctx).Error("revise egress", "error", rerr)
			err = rerr
		}
		out.Unpinned, out.ConnectionsCut = nr.Unpinned, nr.Cut
		fields["allow"], fields["deny"], fields["connections_cut"] = rev.Allow, rev.Deny, nr.Cut
		if len(nr.Unpinned) > 0 {
			fields["unpinned"] = nr.Unpinned
		}
		if rev.HTTP.Changed() {
			out.HTTP = &rev.HTTP
			fields["http"] = rev.HTTP
		}
		if rev.Inspect {
			out.Inspect = true
			fields["inspect"] = revised.Egress.Inspect
		}
		if rev.Approval {
			out.Approval = true
			fields["approval_timeout"] = approvalTimeout(revised.Approval).String()
		}
		subjects = append([]string{"egress"}, subjects...)
	}
	ev := api.AuditEvent{Session: id, Layer: layerPolicy, Action: "revised", Subject: strings.Join(subjects, ","), PolicyVersion: next, Fields: fields}
	if err != nil {
		ev.Reason = "the network was not fully revised: " + err.Error()
	}
	s.audit.EmitControl(ctx, ev)
	if err != nil {
		return nil, fmt.Errorf("session %q: revision %d recorded, but its network was not fully revised: %w", id, next, err)
	}
	log.G(ctx).Info("policy revised", "version", next, "allow_added", rev.Allow.Added, "allow_removed", rev.Allow.Removed,
		"credentials_reminted", out.CredentialsReminted, "credentials_removed", rev.Credentials.Removed)
	v := s.view()
	v.Warnings, v.Revision = warnings, out
	return v, nil
}

// reviseCredentials revises the session's credentials (credentials.Plan.Revise).
func (s *session) reviseCredentials(ctx context.Context, creds []policies.Credential, ch policies.CredentialChange) (*credentials.Revision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creds == nil {
		return nil, fmt.Errorf("the session's credentials are not set up: %w", errdefs.ErrFailedPrecondition)
	}
	// Checked again under the lock stop and finish take before they
	// revoke the session's credentials: a revision that came after would
	// mint tokens no one revokes until the session is torn down.
	if s.endingLocked() {
		return nil, fmt.Errorf("session %q is ending: its credentials are revoked: %w", s.rec.ID, errdefs.ErrFailedPrecondition)
	}
	return s.creds.Revise(ctx, s.rec.ID, creds, ch)
}

// endingLocked reports whether the session is being stopped or its end
// recorded (its credentials are revoked, or about to be).
func (s *session) endingLocked() bool {
	return s.rec.Stopping != "" || s.rec.Exited != nil || s.rec.State == api.StateStopped
}

// credentialRevision is cr as the API tells it.
func credentialRevision(cr *credentials.Revision, ch policies.CredentialChange) *api.CredentialRevision {
	conv := func(ids []credentials.TokenID) []api.CredentialToken {
		var out []api.CredentialToken
		for _, t := range ids {
			out = append(out, api.CredentialToken{Name: t.Name, ID: t.ID})
		}
		return out
	}
	return &api.CredentialRevision{Reminted: conv(cr.Reminted), Added: conv(cr.Added), Revoked: conv(cr.Revoked),
		Removed: ch.Removed, Kept: conv(cr.Kept)}
}

// reconcileCredentials brings the broker's grants of a re-adopted session
// in line with its recorded policy (credentials.Plan.Reconcile): a daemon
// that died between recording a revision and revising the credentials
// would otherwise refresh them under the withdrawn grants. What it did is
// one audit event (layer "policy", action "reconciled").
func (s *session) reconcileCredentials(ctx context.Context) {
	cr, err := s.creds.Reconcile(ctx, s.rec.ID)
	if err == nil && cr == nil {
		return
	}
	ev := api.AuditEvent{Session: s.rec.ID, Layer: layerPolicy, Action: "reconciled", Subject: "credentials", PolicyVersion: s.rec.version(),
		Reason: "the broker's grants differed from the recorded policy (a revision recorded, not applied)"}
	if cr != nil {
		ev.Fields = map[string]any{"credentials": credentialRevision(cr, policies.CredentialChange{})}
	}
	if err != nil {
		// What could not be re-minted was revoked instead.
		log.G(ctx).Error("reconcile the credentials with the recorded policy", "error", err)
		ev.Reason = "not every credential could be brought in line with the recorded policy (those that could not be re-minted were revoked): " + err.Error()
	} else {
		log.G(ctx).Warn("credentials reconciled with the recorded policy", "reminted", len(cr.Reminted), "added", len(cr.Added), "revoked", len(cr.Revoked))
	}
	if s.audit != nil {
		s.audit.EmitControl(ctx, ev)
	}
}

// volumeWorkspaces are the host paths of running's workspaces under the
// admission policy's volume_paths: only an in-process caller's volumes
// (api.CreateRequest.VolumeWorkspaces) can be there (no API caller may
// name a path under them), so a revision re-admits them as they were
// admitted, if the policy still admits them.
func (d *Daemon) volumeWorkspaces(running *policies.Policy) []string {
	pol, _ := d.admission.current()
	var out []string
	for _, w := range running.Workspaces {
		if pol.UnderVolumePaths(w.HostPath) {
			out = append(out, w.HostPath)
		}
	}
	return out
}

// ownedWorkspaces are the host paths of running's workspaces under the
// daemon's root: only an in-process caller's own directories
// (api.CreateRequest.OwnedWorkspaces) can be there, so a revision
// re-admits them as they were admitted.
func (d *Daemon) ownedWorkspaces(running *policies.Policy) []string {
	var owned []string
	root := filepath.Clean(d.cfg.Root) + string(filepath.Separator)
	for _, w := range running.Workspaces {
		if strings.HasPrefix(w.HostPath, root) {
			owned = append(owned, w.HostPath)
		}
	}
	return owned
}
