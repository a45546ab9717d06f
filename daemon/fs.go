package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// fsDir is where a session's filesystem state (overlays, upper dirs,
// baselines, masks) lives inside its directory.
const fsDir = "fs"

// workspaces sets up and re-opens sessions' filesystem views, with the
// daemon-wide template cache and the read audit of deny_read masks.
type workspaces struct {
	templates string
	// readAudit refuses and audits opens of deny_read masks; nil when the
	// kernel offers no fanotify permission events (the masks are then
	// mode 0, and opens of them fail unaudited).
	readAudit *fsscope.ReadAudit
}

// openWorkspaces starts the read audit, whose refused opens go to onRead.
func openWorkspaces(ctx context.Context, root string, onRead func(fsscope.MaskRead)) *workspaces {
	w := &workspaces{templates: filepath.Join(root, "fs-templates")}
	if err := fsscope.RemoveStaleTemplates(w.templates); err != nil {
		log.G(ctx).Warn("remove quota image templates a killed daemon left half-made", "error", err)
	}
	ra, err := fsscope.NewReadAudit(onRead)
	if err != nil {
		log.G(ctx).Warn("opens of deny_read masks will not be audited", "error", err)
		return w
	}
	w.readAudit = ra
	return w
}

func (w *workspaces) Close() error { return w.readAudit.Close() }

// setup prepares session id's workspaces and mounts in its directory.
// Sessions without any get nothing from the host.
func (w *workspaces) setup(ctx context.Context, sessionDir, id string, p *policies.Policy, uid, gid uint32) (*fsscope.Session, error) {
	if len(p.Workspaces) == 0 && len(p.Mounts) == 0 {
		return nil, nil
	}
	fs, err := fsscope.Setup(ctx, filepath.Join(sessionDir, fsDir), p, fsscope.Owner{UID: uid, GID: gid},
		fsscope.WithImageCache(w.templates), fsscope.WithReadAudit(w.readAudit, id))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !errdefs.IsInvalidArgument(err) {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
		return nil, err
	}
	return fs, nil
}

// load re-opens a session's filesystem state after a restart. State
// whose removal a killed daemon began (fsscope removes its state file
// first) holds no session: what is left of it is removed, and load
// returns nil.
func (w *workspaces) load(ctx context.Context, sessionDir, id string) (*fsscope.Session, error) {
	dir := filepath.Join(sessionDir, fsDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	fs, err := fsscope.Load(dir, fsscope.WithReadAudit(w.readAudit, id))
	if errdefs.IsNotFound(err) {
		log.G(ctx).Info("finishing the removal of workspace state begun before the restart")
		return nil, cleanupFS(ctx, sessionDir)
	}
	return fs, err
}

// finishFS runs once the sandbox is gone: it unmounts the session's view
// and carries out each workspace's on_exit (commit with the commit policy,
// discard, or keep for review). Every commit decision is audited. review
// reports whether changes wait for `airlock diff/commit/discard`.
func (s *session) finishFS(ctx context.Context) (review bool, err error) {
	fs := s.fs
	if fs == nil {
		return false, nil
	}
	res, review, err := fs.Exit(ctx, s.fsAudit(ctx, "commit policy"))
	if res != nil {
		log.G(ctx).Info("workspace committed on exit", "applied", len(res.Applied), "rejected", len(res.Rejected), "conflicts", len(res.Conflicts))
	}
	switch {
	case review:
		if err != nil && res != nil {
			// A refused commit, audited decision by decision: the
			// changes wait for review.
			log.G(ctx).Info("workspace commit on exit refused; changes kept for review", "error", err)
			err = nil
		}
		return true, err
	case err != nil:
		return false, err
	}
	s.fs = nil
	return false, nil
}

// fsAudit records commit decisions and normalised modes, each with who
// committed: the commit policy at exit, or the API's caller
// (caller.Name: a socket user, a Kubernetes user through the node
// endpoint).
func (s *session) fsAudit(ctx context.Context, by string) func(fsscope.Event) {
	return func(ev fsscope.Event) {
		ae := ev.AuditEvent(s.rec.ID)
		ae.Fields["by"] = by
		s.audit.EmitOutcome(ctx, s.withRepair(ae))
	}
}

// auditDenyRead records, when the session starts, what deny_read hides
// (see fsscope.DenyReadEvents).
func (s *session) auditDenyRead(ctx context.Context) {
	if s.fs == nil {
		return
	}
	for _, ev := range fsscope.DenyReadEvents(s.rec.ID, s.fs.DenyRead()) {
		s.audit.Emit(ctx, ev)
	}
}

// reviewable returns the session's filesystem state once its sandbox has
// ended, or an error saying why the request cannot be served.
func (d *Daemon) reviewable(id string) (*session, *fsscope.Session, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec.State == api.StateRunning || s.rec.State == api.StateCreated {
		return nil, nil, fmt.Errorf("session %q is %s; stop it before reviewing its changes: %w", id, s.rec.State, errdefs.ErrFailedPrecondition)
	}
	if s.fs == nil {
		return nil, nil, fmt.Errorf("session %q has no changes waiting for review: %w", id, errdefs.ErrNotFound)
	}
	return s, s.fs, nil
}

// Diff returns the change set of a stopped session's overlay workspaces,
// with what a commit would reject or find in conflict, and why.
func (d *Daemon) Diff(ctx context.Context, id string) (*api.ChangeSet, error) {
	_, fs, err := d.reviewable(id)
	if err != nil {
		return nil, err
	}
	cs, err := fs.Review(ctx)
	if err != nil {
		return nil, err
	}
	out := *cs
	if out.Workspaces == nil {
		out.Workspaces = []api.WorkspaceChanges{}
	}
	return &out, nil
}

// Commit applies a stopped session's changes to the host under its commit
// policy.
func (d *Daemon) Commit(ctx context.Context, id string, req api.CommitRequest) (*api.CommitResult, error) {
	s, fs, err := d.reviewable(id)
	if err != nil {
		return nil, err
	}
	s.keepChangeSummary(ctx, fs)
	res, cerr := fs.Commit(ctx, fsscope.CommitOptions{Partial: req.Partial, Targets: req.Targets, Audit: s.fsAudit(ctx, caller.Name(ctx))})
	if res == nil {
		return nil, cerr
	}
	out := *res
	out.Committed = len(out.Applied) > 0
	if cerr == nil && len(out.Rejected) == 0 && len(out.Conflicts) == 0 {
		s.dropReview(ctx, api.OutcomeCommitted)
	} else if out.Committed {
		// Part of the changes went: what still waits is summarised
		// again.
		s.mu.Lock()
		s.rec.Changes = nil
		_ = s.saveLocked()
		s.mu.Unlock()
	}
	return &out, nil
}

// Discard drops a stopped session's changes.
func (d *Daemon) Discard(ctx context.Context, id string) error {
	s, fs, err := d.reviewable(id)
	if err != nil {
		return err
	}
	s.keepChangeSummary(ctx, fs)
	if err := fs.Discard(ctx); err != nil {
		return err
	}
	ev := api.AuditEvent{Time: time.Now().UTC(), Session: id, Layer: "fs", Action: "discarded",
		Reason: "the workspace changes were discarded", Fields: map[string]any{"by": caller.Name(ctx)}}
	s.mu.Lock()
	if c := s.rec.Changes; c != nil {
		ev.Fields["added"], ev.Fields["modified"], ev.Fields["deleted"] = c.Added, c.Modified, c.Deleted
	}
	s.mu.Unlock()
	s.audit.Emit(ctx, ev)
	s.dropReview(ctx, api.OutcomeDiscarded)
	return nil
}

// dropReview removes the kept upper directories once nothing is left to
// review, and records the outcome in the change summary. The outcome is
// saved before the removal starts (record.Dropping): a daemon killed in
// the middle of it leaves the next one what was decided.
func (s *session) dropReview(ctx context.Context, outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fs == nil {
		return
	}
	s.rec.Dropping = outcome
	if err := s.saveLocked(); err != nil {
		log.G(ctx).Warn("remove reviewed workspace state: record the outcome", "session", s.rec.ID, "error", err)
	}
	if err := s.fs.Teardown(ctx, false); err != nil {
		log.G(ctx).Warn("remove reviewed workspace state", "session", s.rec.ID, "error", err)
		// The session stays reviewable: a next commit or discard sets
		// the outcome it decides, not this one.
		s.rec.Dropping = ""
		_ = s.saveLocked()
		return
	}
	s.fs = nil
	s.reviewedLocked(outcome)
	_ = s.saveLocked()
}

// reviewedLocked records that the changes under review were committed or
// discarded.
func (s *session) reviewedLocked(outcome string) {
	s.rec.Review, s.rec.Dropping = false, ""
	if s.rec.Changes != nil {
		c := *s.rec.Changes
		c.Outcome = outcome
		s.rec.Changes = &c
	}
}

// finishDrop finishes, after a restart, the removal of reviewed
// workspace state that the previous daemon began (record.Dropping).
func (s *session) finishDrop(ctx context.Context) {
	if err := cleanupFS(ctx, s.dir); err != nil {
		log.G(ctx).Error("finish removing reviewed workspace state", "error", err)
		return
	}
	log.G(ctx).Info("finished removing the workspace state of changes reviewed before the restart", "outcome", s.rec.Dropping)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reviewedLocked(s.rec.Dropping)
	_ = s.saveLocked()
}

// cleanupFS removes whatever filesystem state a session left, mounted or not.
func cleanupFS(ctx context.Context, sessionDir string) error {
	dir := filepath.Join(sessionDir, fsDir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return fsscope.Cleanup(ctx, dir)
}

// maskRead audits a refused open of a deny_read mask.
func (d *Daemon) maskRead(r fsscope.MaskRead) {
	if s, err := d.get(r.Owner); err == nil {
		s.audit.Emit(d.stopCtx, s.withRepair(r.AuditEvent()))
	}
}

// UnifiedDiff checks that a session's changes can be reviewed, as Diff
// does, and returns the function writing them to w as a unified diff.
func (d *Daemon) UnifiedDiff(id string) (func(ctx context.Context, w io.Writer) error, error) {
	_, fs, err := d.reviewable(id)
	if err != nil {
		return nil, err
	}
	return fs.UnifiedDiff, nil
}
