package fsscope

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// stagingPrefix names the directory a commit stages new content and keeps
// replaced entries in, inside the workspace root (renames need the same
// filesystem). It exists only while a commit runs.
const stagingPrefix = ".airlock-commit-"

// maxRuleRead bounds the files the rules read (git configs, packed-refs).
const maxRuleRead = 64 << 20

// Operations a commit performs on the host.
const (
	opRemove  = "remove"  // move a file or symlink into the staging directory
	opRmdir   = "rmdir"   // remove an empty directory
	opMkdir   = "mkdir"   // create a directory
	opCreate  = "create"  // move a staged file or symlink to a free path
	opReplace = "replace" // exchange a staged file or symlink with the host's
	opChmod   = "chmod"   // change permission bits
)

// op is one step of a commit. The list of ops is journaled before the
// host is touched, so that a crash can be undone.
type op struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
	Type string `json:"type,omitempty"` // create/replace: file or symlink
	// Src is the path in the upper directory the content comes from.
	Src       string `json:"src,omitempty"`
	Staged    string `json:"staged,omitempty"`
	StagedIno uint64 `json:"staged_ino,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	UID       uint32 `json:"uid"`
	GID       uint32 `json:"gid"`
	Mtime     int64  `json:"mtime,omitempty"`
	// Old is the host entry the op replaces, removes or changes.
	Old *entry `json:"old,omitempty"`
}

// Journal phases.
const (
	phaseStaging  = "staging"
	phaseApplying = "applying"
	phaseDone     = "done"
)

type journal struct {
	Phase   string `json:"phase"`
	Staging string `json:"staging"`
	Ops     []op   `json:"ops"`
}

// commitPlan is what Commit will do in one workspace.
type commitPlan struct {
	ws        int
	w         *wsState
	base      *baseline
	changes   []Change
	accepted  []int
	rejected  []Rejection
	conflicts []Conflict
	ops       []op
}

// testHookBeforeOp, when set, runs before each op is applied; an error
// fails the commit there. Tests use it to race and to break commits.
var testHookBeforeOp func(o op) error

// Commit applies the change sets of the overlay workspaces to the host
// directories. Rules (protect, preserve_untracked, protect_refs, git hooks
// and command-running git config, special files) reject changes; a change
// whose host path changed since the session started is a conflict. Without
// Partial, any rejection or conflict means nothing is applied. Each
// workspace is applied as a unit: every file is staged first (a full disk
// fails here, with nothing changed), then moved into place with atomic
// renames; on any error the applied steps are undone. A crash is undone by
// the next Load, Commit, Discard, Teardown or Cleanup. The upper directory
// is never modified, so a failed commit loses nothing. The sandbox must be
// gone (Teardown with keepUpper).
func (s *Session) Commit(ctx context.Context, o CommitOptions) (*CommitResult, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if s.st.Live {
		return nil, fmt.Errorf("commit: the session's sandbox still has its workspace mounted; tear it down first: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.recoverJournalsLocked(ctx); err != nil {
		return nil, err
	}
	release, err := s.ensureUpperLocked()
	if err != nil {
		return nil, err
	}
	defer release()

	res := &CommitResult{Applied: []string{}}
	audit := func(ev Event) {
		if o.Audit != nil {
			ev.Time = time.Now().UTC()
			o.Audit(ev)
		}
	}
	var plans []*commitPlan
	for i := range s.st.Workspaces {
		w := &s.st.Workspaces[i]
		if w.Mode != policies.ModeOverlay || !selected(w.Target, o.Targets) {
			continue
		}
		plan, err := s.planCommitLocked(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("commit %s: %w", w.HostPath, err)
		}
		plans = append(plans, plan)
		for _, r := range plan.rejected {
			res.Rejected = append(res.Rejected, r)
			audit(Event{Type: EventRejected, Path: r.Path, HostPath: hostPathOf(w, r.Path), Rule: r.Rule, Reason: r.Reason})
		}
		for _, c := range plan.conflicts {
			res.Conflicts = append(res.Conflicts, c)
			audit(Event{Type: EventConflict, Path: c.Path, HostPath: hostPathOf(w, c.Path), Reason: c.Reason})
		}
	}
	if !o.Partial && (len(res.Rejected) > 0 || len(res.Conflicts) > 0) {
		var errs []error
		if len(res.Conflicts) > 0 {
			errs = append(errs, fmt.Errorf("%d paths changed on the host since the session started: %w", len(res.Conflicts), errdefs.ErrConflict))
		}
		if len(res.Rejected) > 0 {
			errs = append(errs, fmt.Errorf("%d changes rejected by the workspace rules: %w", len(res.Rejected), errdefs.ErrPermissionDenied))
		}
		return res, fmt.Errorf("commit: nothing applied: %w", errors.Join(errs...))
	}
	for _, plan := range plans {
		if len(plan.ops) == 0 {
			continue
		}
		start := time.Now()
		if err := s.applyLocked(ctx, plan); err != nil {
			return res, fmt.Errorf("commit %s: %w", plan.w.HostPath, err)
		}
		for _, i := range plan.accepted {
			c := plan.changes[i]
			p := path.Join(plan.w.Target, c.Path)
			res.Applied = append(res.Applied, p)
			audit(Event{Type: EventApplied, Path: p, HostPath: filepath.Join(plan.w.HostPath, c.Path), Kind: c.Kind})
		}
		log.G(ctx).Info("fsscope: changes committed", "workspace", plan.w.HostPath, "changes", len(plan.accepted), "ops", len(plan.ops), "took", time.Since(start))
	}
	return res, nil
}

// hostPathOf maps a sandbox path of workspace w to the host.
func hostPathOf(w *wsState, sandboxPath string) string {
	rel := strings.TrimPrefix(strings.TrimPrefix(sandboxPath, w.Target), "/")
	return filepath.Join(w.HostPath, rel)
}

// planCommitLocked computes a workspace's change set, evaluates the rules,
// finds conflicts and turns the accepted changes into ops.
func (s *Session) planCommitLocked(ctx context.Context, i int) (*commitPlan, error) {
	w := &s.st.Workspaces[i]
	base, err := s.baselineLocked(i)
	if err != nil {
		return nil, err
	}
	changes, err := s.diffWorkspaceLocked(ctx, i)
	if err != nil {
		return nil, err
	}
	plan := &commitPlan{ws: i, w: w, base: base, changes: changes}
	if len(changes) == 0 {
		return plan, nil
	}
	host, err := openTree(w.HostPath)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	upper, err := openTree(filepath.Join(s.wsUpper(i), "upper"))
	if err != nil {
		return nil, err
	}
	defer upper.Close()
	env := &ruleEnv{
		ws:      w,
		base:    base,
		changes: changes,
		readOld: func(rel string) ([]byte, error) { return readIfExists(host, rel) },
		readNew: func(rel string) ([]byte, error) { return readIfExists(upper, rel) },
		gitStatus: func(wt string, paths []string) (map[string]trackState, error) {
			return gitTrackState(ctx, filepath.Join(w.HostPath, wt), w.Owner, paths)
		},
	}
	rej, err := env.evaluate()
	if err != nil {
		return nil, err
	}
	conflicts, err := findConflicts(host, base, changes, rej)
	if err != nil {
		return nil, err
	}
	blocked := map[int]string{}
	for i, r := range rej {
		blocked[i] = r.Reason
	}
	for i, c := range conflicts {
		blocked[i] = c
	}
	deps := blockDependents(changes, blocked)
	// A protected ref kept only by changes committed together (a loose
	// ref's removal and the packed-refs entry that replaces it): one
	// blocked blocks the others, and what depends on those.
	for {
		more := blockCoupled(changes, env.coupled, unionReasons(blocked, deps))
		if len(more) == 0 {
			break
		}
		maps.Copy(deps, more)
		for i, r := range blockDependents(changes, unionReasons(blocked, deps)) {
			if _, ok := deps[i]; !ok {
				deps[i] = r
			}
		}
	}
	for i := range changes {
		sp := path.Join(w.Target, changes[i].Path)
		switch {
		case rej[i].Rule != "":
			r := rej[i]
			r.Path = sp
			plan.rejected = append(plan.rejected, r)
		case conflicts[i] != "":
			plan.conflicts = append(plan.conflicts, Conflict{Path: sp, Reason: conflicts[i]})
		case deps[i] != "":
			plan.rejected = append(plan.rejected, Rejection{Path: sp, Rule: RuleDependency, Reason: deps[i]})
		default:
			plan.accepted = append(plan.accepted, i)
		}
	}
	plan.ops = buildOps(changes, plan.accepted, base, w.Owner)
	return plan, nil
}

// unionReasons returns the entries of a and b, a's first.
func unionReasons(a, b map[int]string) map[int]string {
	out := make(map[int]string, len(a)+len(b))
	maps.Copy(out, b)
	maps.Copy(out, a)
	return out
}

func readIfExists(t *tree, rel string) ([]byte, error) {
	data, err := readTreeFile(t, rel, maxRuleRead)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return nil, nil
	}
	return data, err
}

// findConflicts compares the host paths the changes touch with the
// baseline. It returns a reason per conflicting change.
func findConflicts(host *tree, base *baseline, changes []Change, skip map[int]Rejection) (map[int]string, error) {
	out := map[int]string{}
	created := map[string]bool{}
	for _, c := range changes {
		if createsDir(&c) {
			created[c.Path] = true
		}
	}
	present := func(rel string) (string, error) {
		e := base.get(rel)
		if e == nil {
			return "created on the host since the session started", nil
		}
		st, err := host.lstat(rel)
		switch {
		case errors.Is(err, unix.ENOENT):
			return "deleted on the host since the session started", nil
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
			return "on the host, the path now goes through a symlink or a mount", nil
		case err != nil:
			return "", err
		}
		same, err := matchesBaseline(host, e, st)
		if err != nil {
			return "", err
		}
		if !same {
			return "changed on the host since the session started", nil
		}
		return "", nil
	}
	absent := func(rel string) (string, error) {
		if base.get(rel) != nil {
			return "deleted on the host since the session started", nil
		}
		_, err := host.lstat(rel)
		switch {
		case err == nil:
			return "created on the host since the session started", nil
		case errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
			return "on the host, the path now goes through a symlink or a mount", nil
		default:
			return "", err
		}
		// Its parent must be the directory the session saw, or a new one.
		if p := parentRel(rel); !created[p] {
			return present(p)
		}
		return "", nil
	}
	for i, c := range changes {
		if _, ok := skip[i]; ok {
			continue
		}
		var reason string
		var err error
		switch c.Kind {
		case KindAdded:
			reason, err = absent(c.Path)
		case KindRenamed:
			if reason, err = absent(c.Path); reason == "" && err == nil {
				reason, err = present(c.OldPath)
			}
		default:
			reason, err = present(c.Path)
		}
		if err != nil {
			return nil, err
		}
		if reason != "" {
			out[i] = reason
		}
	}
	return out, nil
}

// buildOps turns accepted changes into ops: removals deepest first, then
// creations parents first, then permission changes.
func buildOps(changes []Change, accepted []int, base *baseline, owner Owner) []op {
	var removes, creates, chmods []op
	newOp := func(kind string, c *Change, p string) op {
		o := op{Kind: kind, Path: p, UID: owner.UID, GID: owner.GID}
		if e := base.get(p); e != nil && kind != opCreate && kind != opMkdir {
			old := *e
			o.Old = &old
			o.UID, o.GID = e.UID, e.GID
		}
		return o
	}
	content := func(kind string, c *Change, oldOwner *entry) op {
		o := newOp(kind, c, c.Path)
		// New content never keeps setuid, setgid or world-write, even
		// where the host file had them.
		o.Type, o.Src, o.Mode = c.Type, c.Path, newMode(c.Mode)
		if oldOwner != nil {
			o.UID, o.GID = oldOwner.UID, oldOwner.GID
		}
		return o
	}
	for _, i := range accepted {
		c := &changes[i]
		old := base.get(c.Path)
		switch c.Kind {
		case KindAdded:
			if c.Type == TypeDir {
				o := newOp(opMkdir, c, c.Path)
				o.Mode = newMode(c.Mode)
				creates = append(creates, o)
			} else {
				creates = append(creates, content(opCreate, c, nil))
			}
		case KindModified, KindSymlink:
			creates = append(creates, content(opReplace, c, old))
		case KindMode:
			o := newOp(opChmod, c, c.Path)
			o.Mode = newMode(c.Mode)
			if old != nil {
				o.Mode = committedMode(c.Mode, old.Mode)
			}
			chmods = append(chmods, o)
		case KindDeleted:
			if c.Type == TypeDir {
				removes = append(removes, newOp(opRmdir, c, c.Path))
			} else {
				removes = append(removes, newOp(opRemove, c, c.Path))
			}
		case KindRenamed:
			creates = append(creates, content(opCreate, c, nil))
			removes = append(removes, newOp(opRemove, c, c.OldPath))
		case KindType:
			switch {
			case c.OldType != TypeDir && c.Type != TypeDir:
				creates = append(creates, content(opReplace, c, old))
			case c.Type == TypeDir:
				removes = append(removes, newOp(opRemove, c, c.Path))
				o := newOp(opMkdir, c, c.Path)
				o.Old, o.Mode = nil, newMode(c.Mode)
				creates = append(creates, o)
			default:
				removes = append(removes, newOp(opRmdir, c, c.Path))
				creates = append(creates, content(opCreate, c, nil))
			}
		}
	}
	slices.SortStableFunc(removes, func(a, b op) int {
		if d := depth(b.Path) - depth(a.Path); d != 0 {
			return d
		}
		return strings.Compare(b.Path, a.Path)
	})
	slices.SortStableFunc(creates, func(a, b op) int {
		if d := depth(a.Path) - depth(b.Path); d != 0 {
			return d
		}
		return strings.Compare(a.Path, b.Path)
	})
	ops := append(removes, creates...)
	return append(ops, chmods...)
}

// applyLocked stages and applies a plan's ops, undoing them on failure.
func (s *Session) applyLocked(ctx context.Context, plan *commitPlan) (retErr error) {
	w := plan.w
	host, err := openTree(w.HostPath)
	if err != nil {
		return err
	}
	defer host.Close()
	root, err := host.lstat("")
	if err != nil {
		return err
	}
	if root.Ino != w.RootIno || root.Dev != w.RootDev {
		return fmt.Errorf("the workspace directory was replaced on the host since the session started: %w", errdefs.ErrConflict)
	}
	upper, err := openTree(filepath.Join(s.wsUpper(plan.ws), "upper"))
	if err != nil {
		return err
	}
	defer upper.Close()

	token := make([]byte, 8)
	if _, err := rand.Read(token); err != nil {
		return err
	}
	jr := &journal{Phase: phaseStaging, Staging: stagingPrefix + hex.EncodeToString(token), Ops: plan.ops}
	for k := range jr.Ops {
		if jr.Ops[k].Src != "" {
			jr.Ops[k].Staged = strconv.Itoa(k)
		}
	}
	jfile := s.journalFile(plan.ws)
	if err := writeJSONAtomic(jfile, jr); err != nil {
		return err
	}
	a := newApplier(host, jr.Staging)
	started, committed := 0, false
	defer func() {
		if retErr == nil || committed {
			// Once applied, a failure to tidy up is finished by recovery.
			return
		}
		// Undo what was started, then forget the attempt. If undoing fails
		// the journal stays, and the next operation on the session retries.
		err := a.rollback(jr.Ops[:started])
		a.close()
		if err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("undo: %w", err))
			return
		}
		s.refreshBaseline(host, plan.base, jr.Ops, false)
		if err := writeBaseline(s.baselineFile(plan.ws), plan.base.entries); err != nil {
			retErr = errors.Join(retErr, err)
		}
		if err := host.removeAllBeneath(jr.Staging); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("remove staging directory: %w", err))
			return
		}
		os.Remove(jfile)
	}()
	if err := unix.Mkdirat(host.fd, jr.Staging, 0o700); err != nil {
		return fmt.Errorf("create staging directory: %w", err)
	}
	for _, d := range []string{"new", "old"} {
		if err := unix.Mkdirat(host.fd, jr.Staging+"/"+d, 0o700); err != nil {
			return fmt.Errorf("create staging directory: %w", err)
		}
	}
	if err := a.open(); err != nil {
		return err
	}
	defer a.close()
	for k := range jr.Ops {
		if err := ctx.Err(); err != nil {
			return err
		}
		if jr.Ops[k].Staged == "" {
			continue
		}
		if err := a.stage(upper, &jr.Ops[k]); err != nil {
			if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
				return fmt.Errorf("stage %s: %w: %w", jr.Ops[k].Path, err, errdefs.ErrResourceExhausted)
			}
			return fmt.Errorf("stage %s: %w", jr.Ops[k].Path, err)
		}
	}
	if err := host.syncfs(); err != nil {
		return fmt.Errorf("sync staged files: %w", err)
	}
	jr.Phase = phaseApplying
	if err := writeJSONAtomic(jfile, jr); err != nil {
		return err
	}
	for k := range jr.Ops {
		if testHookBeforeOp != nil {
			if err := testHookBeforeOp(jr.Ops[k]); err != nil {
				return err
			}
		}
		started = k + 1
		if err := a.apply(k, &jr.Ops[k]); err != nil {
			return fmt.Errorf("%s %s: %w", jr.Ops[k].Kind, jr.Ops[k].Path, err)
		}
	}
	if err := host.syncfs(); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	jr.Phase = phaseDone
	if err := writeJSONAtomic(jfile, jr); err != nil {
		return err
	}
	committed = true
	a.close()
	return s.finishLocked(plan.ws, host, plan.base, jr)
}

// finishLocked completes an applied commit: it drops the staging
// directory (the replaced and removed host entries), records the new host
// state in the baseline, and removes the journal.
func (s *Session) finishLocked(ws int, host *tree, base *baseline, jr *journal) error {
	if err := host.removeAllBeneath(jr.Staging); err != nil {
		return fmt.Errorf("remove staging directory: %w", err)
	}
	s.refreshBaseline(host, base, jr.Ops, true)
	if err := writeBaseline(s.baselineFile(ws), base.entries); err != nil {
		return err
	}
	return os.Remove(s.journalFile(ws))
}

// refreshBaseline records the host state of the paths ops touched. After a
// commit every touched path is re-read; after an undo, only entries that
// are the very ones the session saw (their ctime moved with the renames)
// or directories recreated in their place.
func (s *Session) refreshBaseline(host *tree, base *baseline, ops []op, applied bool) {
	for _, o := range ops {
		st, err := host.lstat(o.Path)
		if err != nil {
			if applied && errors.Is(err, unix.ENOENT) {
				base.remove(o.Path)
			}
			continue
		}
		if !applied {
			if o.Old == nil || (st.Ino != o.Old.Ino && o.Kind != opRmdir) {
				continue
			}
		}
		e := entryFromStat(o.Path, st)
		if e.isSymlink() {
			e.Link, _ = host.readlink(o.Path)
		} else if e.isRegular() && coarseTimes(st) && st.Size <= hashLimit {
			e.Hash, _ = hashFile(host, o.Path)
		}
		base.set(e)
	}
}

// applier performs ops relative to a workspace root and its staging
// directory.
type applier struct {
	host         *tree
	staging      string
	newFd, oldFd int
}

func newApplier(host *tree, staging string) *applier {
	return &applier{host: host, staging: staging, newFd: -1, oldFd: -1}
}

func (a *applier) open() error {
	var err error
	if a.newFd, err = a.host.open(a.staging+"/new", unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		return err
	}
	if a.oldFd, err = a.host.open(a.staging+"/old", unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
		unix.Close(a.newFd)
		a.newFd = -1
		return err
	}
	return nil
}

func (a *applier) close() {
	if a.newFd >= 0 {
		unix.Close(a.newFd)
	}
	if a.oldFd >= 0 {
		unix.Close(a.oldFd)
	}
	a.newFd, a.oldFd = -1, -1
}

// stage writes an op's new content into the staging directory, owned and
// permissioned as it will be on the host.
func (a *applier) stage(upper *tree, o *op) error {
	switch o.Type {
	case TypeSymlink:
		target, err := upper.readlink(o.Src)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(target, a.newFd, o.Staged); err != nil {
			return err
		}
		if err := unix.Fchownat(a.newFd, o.Staged, int(o.UID), int(o.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(a.newFd, o.Staged, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		o.StagedIno = st.Ino
		return nil
	case TypeFile:
	default:
		return fmt.Errorf("cannot stage a %s", o.Type)
	}
	src, err := upper.openFile(o.Src)
	if err != nil {
		return err
	}
	defer src.Close()
	var sst unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &sst); err != nil {
		return err
	}
	if sst.Mode&sIFMT != sIFREG {
		return fmt.Errorf("%s is no longer a regular file in the upper directory", o.Src)
	}
	fd, err := unix.Openat(a.newFd, o.Staged, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(fd), o.Staged)
	defer dst.Close()
	if _, err := copyFile(dst, src); err != nil {
		return err
	}
	if err := unix.Fchown(fd, int(o.UID), int(o.GID)); err != nil {
		return err
	}
	// After fchown, which clears setuid/setgid anyway: only permission bits.
	if err := unix.Fchmod(fd, o.Mode&0o777); err != nil {
		return err
	}
	o.Mtime = sst.Mtim.Nano()
	ts := []unix.Timespec{sst.Mtim, sst.Mtim}
	if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	o.StagedIno = st.Ino
	return dst.Close()
}

// hostState stats the op's host path through its parent.
func (a *applier) hostState(o *op) (pfd int, name string, st *unix.Stat_t, err error) {
	pfd, name, err = a.host.parent(o.Path)
	if err != nil {
		return -1, "", nil, err
	}
	var s unix.Stat_t
	err = unix.Fstatat(pfd, name, &s, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return pfd, name, nil, nil
	case err != nil:
		unix.Close(pfd)
		return -1, "", nil, err
	}
	return pfd, name, &s, nil
}

// apply performs op k after checking that the host path is still what the
// plan expects.
func (a *applier) apply(k int, o *op) error {
	pfd, name, st, err := a.hostState(o)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch o.Kind {
	case opCreate, opMkdir:
		if st != nil {
			return fmt.Errorf("created on the host meanwhile: %w", errdefs.ErrConflict)
		}
	default:
		if st == nil || o.Old == nil {
			return fmt.Errorf("deleted on the host meanwhile: %w", errdefs.ErrConflict)
		}
		if same, err := matchesBaseline(a.host, o.Old, st); err != nil {
			return err
		} else if !same {
			return fmt.Errorf("changed on the host meanwhile: %w", errdefs.ErrConflict)
		}
	}
	switch o.Kind {
	case opRemove:
		return unix.Renameat2(pfd, name, a.oldFd, strconv.Itoa(k), unix.RENAME_NOREPLACE)
	case opRmdir:
		return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
	case opMkdir:
		return mkdirOwned(pfd, name, o.Mode, o.UID, o.GID)
	case opCreate:
		return unix.Renameat2(a.newFd, o.Staged, pfd, name, unix.RENAME_NOREPLACE)
	case opReplace:
		return unix.Renameat2(a.newFd, o.Staged, pfd, name, unix.RENAME_EXCHANGE)
	case opChmod:
		return unix.Fchmodat(pfd, name, o.Mode, unix.AT_SYMLINK_NOFOLLOW)
	}
	return fmt.Errorf("unknown op %q", o.Kind)
}

// mkdirOwned creates a directory and gives it its owner and mode without
// following a symlink put in its place.
func mkdirOwned(pfd int, name string, mode, uid, gid uint32) error {
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return err
	}
	return unix.Fchmod(fd, mode)
}

// rollback undoes whatever of ops the host shows as done, last first. It
// decides from the host's state alone, so it also undoes a commit a crash
// interrupted.
func (a *applier) rollback(ops []op) error {
	if len(ops) == 0 {
		return nil
	}
	if a.newFd < 0 || a.oldFd < 0 {
		if err := a.open(); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil // the staging directory was never made: nothing happened
			}
			return err
		}
	}
	var errs []error
	for k := len(ops) - 1; k >= 0; k-- {
		if err := a.undo(k, &ops[k]); err != nil {
			errs = append(errs, fmt.Errorf("undo %s %s: %w", ops[k].Kind, ops[k].Path, err))
		}
	}
	return errors.Join(errs...)
}

func (a *applier) undo(k int, o *op) error {
	pfd, name, st, err := a.hostState(o)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		// Its parent is gone or is no longer a plain directory, and
		// nothing is followed to undo it. If the staging directory shows
		// the op was applied, its content must not be dropped with it.
		if a.stagingShowsApplied(k, o) {
			return fmt.Errorf("%w: the path is no longer reachable without following a symlink or crossing a mount; %s keeps the data", err, a.staging)
		}
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch o.Kind {
	case opRemove:
		var bst unix.Stat_t
		if st == nil && unix.Fstatat(a.oldFd, strconv.Itoa(k), &bst, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return unix.Renameat2(a.oldFd, strconv.Itoa(k), pfd, name, unix.RENAME_NOREPLACE)
		}
	case opRmdir:
		if st == nil && o.Old != nil {
			return mkdirOwned(pfd, name, o.Old.Mode&permMask, o.Old.UID, o.Old.GID)
		}
	case opMkdir:
		if st != nil && st.Mode&sIFMT == sIFDIR && o.Old == nil {
			if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOTEMPTY) {
				return err
			}
		}
	case opCreate:
		if st != nil && st.Ino == o.StagedIno && o.StagedIno != 0 {
			return unix.Renameat2(pfd, name, a.newFd, o.Staged, unix.RENAME_NOREPLACE)
		}
	case opReplace:
		if st != nil && st.Ino == o.StagedIno && o.StagedIno != 0 {
			return unix.Renameat2(a.newFd, o.Staged, pfd, name, unix.RENAME_EXCHANGE)
		}
	case opChmod:
		if st != nil && o.Old != nil && st.Ino == o.Old.Ino && st.Mode&permMask == o.Mode {
			return unix.Fchmodat(pfd, name, o.Old.Mode&permMask, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	return nil
}

// stagingShowsApplied reports whether op k moved content into or out of
// the staging directory.
func (a *applier) stagingShowsApplied(k int, o *op) bool {
	var st unix.Stat_t
	switch o.Kind {
	case opCreate, opReplace:
		err := unix.Fstatat(a.newFd, o.Staged, &st, unix.AT_SYMLINK_NOFOLLOW)
		return err != nil || st.Ino != o.StagedIno
	case opRemove:
		return unix.Fstatat(a.oldFd, strconv.Itoa(k), &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	return false
}

// recoverJournalsLocked finishes or undoes commits a crash interrupted: an
// applied one ("done") is completed, any other is undone, so the host
// tree is either the committed one or the one the session saw.
func (s *Session) recoverJournalsLocked(ctx context.Context) error {
	for i, w := range s.st.Workspaces {
		data, err := os.ReadFile(s.journalFile(i))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		var jr journal
		if err := json.Unmarshal(data, &jr); err != nil {
			return fmt.Errorf("commit journal %s: %w", s.journalFile(i), err)
		}
		if !strings.HasPrefix(jr.Staging, stagingPrefix) || strings.Contains(jr.Staging, "/") {
			return fmt.Errorf("commit journal %s: bad staging name %q", s.journalFile(i), jr.Staging)
		}
		base, err := s.baselineLocked(i)
		if err != nil {
			return err
		}
		host, err := openTree(w.HostPath)
		if err != nil {
			return err
		}
		err = func() error {
			defer host.Close()
			if jr.Phase == phaseDone {
				log.G(ctx).Warn("fsscope: completing a commit interrupted after it was applied", "workspace", w.HostPath)
				return s.finishLocked(i, host, base, &jr)
			}
			log.G(ctx).Warn("fsscope: undoing a commit interrupted by a crash", "workspace", w.HostPath, "phase", jr.Phase)
			a := newApplier(host, jr.Staging)
			if jr.Phase == phaseApplying {
				if err := a.rollback(jr.Ops); err != nil {
					a.close()
					return err
				}
				a.close()
				s.refreshBaseline(host, base, jr.Ops, false)
				if err := writeBaseline(s.baselineFile(i), base.entries); err != nil {
					return err
				}
			}
			if err := host.removeAllBeneath(jr.Staging); err != nil {
				return err
			}
			return os.Remove(s.journalFile(i))
		}()
		if err != nil {
			return fmt.Errorf("recover interrupted commit in %s: %w", w.HostPath, err)
		}
	}
	return nil
}
