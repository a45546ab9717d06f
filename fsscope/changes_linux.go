package fsscope

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// Overlayfs xattrs on the upper directory.
const (
	xattrOpaque   = "trusted.overlay.opaque"
	xattrRedirect = "trusted.overlay.redirect"
	xattrMetacopy = "trusted.overlay.metacopy"
)

// binarySniff is how much of a file is searched for a NUL byte to call it
// binary, as git does.
const binarySniff = 8000

// Diff returns the change set of every overlay workspace: what the upper
// directory holds compared with the host directory.
func (s *Session) Diff(ctx context.Context) (*ChangeSet, error) {
	return s.overlayChanges(ctx, "diff", func(i int, w *wsState) (WorkspaceChanges, error) {
		changes, err := s.diffWorkspaceLocked(ctx, i)
		return WorkspaceChanges{HostPath: w.HostPath, Target: w.Target, Changes: changes}, err
	})
}

// Review is Diff with the commit policy's verdict: per workspace, the
// changes a commit would reject (with the rule and the reason) and those
// that conflict with host changes, as Commit would find them now.
func (s *Session) Review(ctx context.Context) (*ChangeSet, error) {
	return s.overlayChanges(ctx, "review", func(i int, w *wsState) (WorkspaceChanges, error) {
		plan, err := s.planCommitLocked(ctx, i)
		if err != nil {
			return WorkspaceChanges{}, err
		}
		return WorkspaceChanges{HostPath: w.HostPath, Target: w.Target,
			Changes: plan.changes, Rejected: plan.rejected, Conflicts: plan.conflicts}, nil
	})
}

// overlayChanges runs one per overlay workspace, under the session's lock
// and with the upper directories mounted.
func (s *Session) overlayChanges(ctx context.Context, verb string, one func(i int, w *wsState) (WorkspaceChanges, error)) (*ChangeSet, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	release, err := s.ensureUpperLocked()
	if err != nil {
		return nil, err
	}
	defer release()
	cs := &ChangeSet{Workspaces: []WorkspaceChanges{}}
	for i := range s.st.Workspaces {
		w := &s.st.Workspaces[i]
		if w.Mode != policies.ModeOverlay {
			continue
		}
		wc, err := one(i, w)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", verb, w.HostPath, err)
		}
		cs.Workspaces = append(cs.Workspaces, wc)
	}
	return cs, nil
}

// diffWorkspaceLocked computes workspace i's changes. The quota
// filesystem must be mounted.
func (s *Session) diffWorkspaceLocked(ctx context.Context, i int) ([]Change, error) {
	upper, err := openTree(filepath.Join(s.wsUpper(i), "upper"))
	if err != nil {
		return nil, err
	}
	defer upper.Close()
	lower, err := openTree(s.st.Workspaces[i].HostPath)
	if err != nil {
		return nil, err
	}
	defer lower.Close()
	d := &differ{ctx: ctx, upper: upper, lower: lower, hidden: s.st.Workspaces[i].hiddenPaths()}
	if err := d.dir("", true, false); err != nil {
		return nil, err
	}
	if err := d.detectRenames(); err != nil {
		return nil, err
	}
	slices.SortFunc(d.changes, func(a, b Change) int { return strings.Compare(a.Path, b.Path) })
	return d.changes, nil
}

// differ compares an overlay's upper directory with its lower (the host).
type differ struct {
	ctx          context.Context
	upper, lower *tree
	changes      []Change
	// hidden says which paths' host content the sandbox was never shown
	// (deny_read): never compared for a rename, so that the change set
	// cannot confirm a guess of it.
	hidden func(rel string) bool
}

// lowerStat stats rel in the lower tree; nil when it does not exist there
// (or cannot be reached without a symlink or a mount crossing, in which
// case the overlay did not show it either).
func (d *differ) lowerStat(rel string) (*unix.Stat_t, error) {
	st, err := d.lower.lstat(rel)
	switch {
	case err == nil:
		return st, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return nil, nil
	}
	return nil, err
}

// dir compares the upper directory rel with the lower one. lowerDir says
// whether the lower has a directory at rel that the overlay merges (no
// opaque parent hides it); opaque whether the overlay hides the lower's
// entries of rel.
func (d *differ) dir(rel string, lowerDir, opaque bool) error {
	if err := d.ctx.Err(); err != nil {
		return err
	}
	names, err := d.upper.readDir(rel)
	if err != nil {
		return err
	}
	for _, name := range names {
		p := joinRel(rel, name)
		ust, err := d.upper.lstat(p)
		if err != nil {
			return err
		}
		var lst *unix.Stat_t
		if lowerDir {
			if lst, err = d.lowerStat(p); err != nil {
				return err
			}
		}
		if isWhiteout(ust) {
			if lst != nil {
				if err := d.deleted(p, lst); err != nil {
					return err
				}
			}
			continue
		}
		if err := d.entry(p, ust, lst, opaque); err != nil {
			return err
		}
	}
	if opaque && lowerDir {
		// Everything of the lower directory the upper does not name is gone.
		lnames, err := d.lower.readDir(rel)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		for _, name := range lnames {
			if _, found := slices.BinarySearch(names, name); found {
				continue
			}
			p := joinRel(rel, name)
			lst, err := d.lowerStat(p)
			if err != nil {
				return err
			}
			if lst != nil {
				if err := d.deleted(p, lst); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (d *differ) entry(p string, ust, lst *unix.Stat_t, parentOpaque bool) error {
	utype := ust.Mode & sIFMT
	c := Change{Path: p, Type: fileType(ust.Mode), Mode: ust.Mode & permMask}
	if lst != nil && lst.Mode&sIFMT != utype {
		c.Kind, c.OldType, c.OldMode = KindType, fileType(lst.Mode), lst.Mode&permMask
	}
	switch utype {
	case sIFDIR:
		if v, err := d.upper.getxattr(p, xattrRedirect); err != nil || v != "" {
			return fmt.Errorf("%s: overlay redirect found; the upper directory must come from an overlay mounted with redirect_dir=off: %w", p, errdefs.ErrNotImplemented)
		}
		op, err := d.upper.getxattr(p, xattrOpaque)
		if err != nil {
			return err
		}
		switch {
		case lst == nil:
			c.Kind = KindAdded
		case c.Kind == KindType:
			if err := d.lowerDescendantsDeleted(p, lst); err != nil {
				return err
			}
		case committedMode(ust.Mode, lst.Mode) != lst.Mode&permMask:
			c.Kind, c.OldMode = KindMode, lst.Mode&permMask
		}
		if c.Kind != "" {
			d.changes = append(d.changes, c)
		}
		merged := lst != nil && c.Kind != KindType
		return d.dir(p, merged, merged && (op == "y" || parentOpaque))
	case sIFREG:
		if v, err := d.upper.getxattr(p, xattrMetacopy); err != nil {
			return err
		} else if v != "" {
			return fmt.Errorf("%s: overlay metacopy found; the upper directory must come from an overlay mounted with metacopy=off: %w", p, errdefs.ErrNotImplemented)
		}
		c.Size = ust.Size
		switch {
		case lst == nil:
			c.Kind = KindAdded
		case c.Kind == KindType:
			if lst.Mode&sIFMT == sIFDIR {
				if err := d.lowerDescendantsDeleted(p, lst); err != nil {
					return err
				}
			}
		default:
			same, err := d.sameContent(p, ust, lst)
			if err != nil {
				return err
			}
			switch {
			case !same:
				c.Kind, c.OldMode = KindModified, lst.Mode&permMask
				if c.Binary, err = d.sniffBinary(d.lower, p); err != nil {
					return err
				}
			case committedMode(ust.Mode, lst.Mode) != lst.Mode&permMask:
				c.Kind, c.OldMode = KindMode, lst.Mode&permMask
			default:
				return nil // copied up (touch, chown, open for writing) but unchanged
			}
		}
		if !c.Binary {
			bin, err := d.sniffBinary(d.upper, p)
			if err != nil {
				return err
			}
			c.Binary = bin
		}
	case sIFLNK:
		target, err := d.upper.readlink(p)
		if err != nil {
			return err
		}
		c.LinkTarget, c.Mode = target, 0o777
		switch {
		case lst == nil:
			c.Kind = KindAdded
		case c.Kind == KindType:
			if lst.Mode&sIFMT == sIFDIR {
				if err := d.lowerDescendantsDeleted(p, lst); err != nil {
					return err
				}
			}
		default:
			old, err := d.lower.readlink(p)
			if err != nil {
				return err
			}
			if old == target {
				return nil
			}
			c.Kind, c.OldLink = KindSymlink, old
		}
	default:
		// Devices, FIFOs and sockets are listed so that commit can refuse them.
		if c.Kind == "" {
			c.Kind = KindAdded
		}
		if lst != nil && lst.Mode&sIFMT == sIFDIR {
			if err := d.lowerDescendantsDeleted(p, lst); err != nil {
				return err
			}
		}
	}
	if c.Kind == KindType && lst != nil && lst.Mode&sIFMT == sIFLNK {
		if old, err := d.lower.readlink(p); err == nil {
			c.OldLink = old
		}
	}
	d.changes = append(d.changes, c)
	return nil
}

// newMode is the mode a commit gives new content (an entry the host did
// not have, or a file whose content changed): the permission bits without
// world-write; never setuid, setgid or sticky.
func newMode(sandboxMode uint32) uint32 { return committedMode(sandboxMode, 0) }

// committedMode is the mode a commit gives a host entry whose mode was
// hostMode when the sandbox set sandboxMode: the permission bits, and the
// setuid, setgid, sticky and world-write bits only where the host had
// them already. A difference in those bits alone is therefore no change.

func committedMode(sandboxMode, hostMode uint32) uint32 {
	return sandboxMode&0o775 | hostMode&sandboxMode&0o7002
}

// deleted records the removal of the lower entry p and, for a directory,
// of everything beneath it.
func (d *differ) deleted(p string, lst *unix.Stat_t) error {
	c := Change{Path: p, Kind: KindDeleted, Type: fileType(lst.Mode), Mode: lst.Mode & permMask}
	switch lst.Mode & sIFMT {
	case sIFREG:
		c.Size = lst.Size
	case sIFLNK:
		if t, err := d.lower.readlink(p); err == nil {
			c.LinkTarget = t
		}
	}
	d.changes = append(d.changes, c)
	if lst.Mode&sIFMT == sIFDIR {
		return d.lowerDescendantsDeleted(p, lst)
	}
	return nil
}

// lowerDescendantsDeleted records the removal of everything beneath the
// lower directory p.
func (d *differ) lowerDescendantsDeleted(p string, lst *unix.Stat_t) error {
	if lst.Mode&sIFMT != sIFDIR {
		return nil
	}
	return d.lower.walk(p, func(rel string, st *unix.Stat_t) (bool, error) {
		if rel == p {
			return true, nil
		}
		c := Change{Path: rel, Kind: KindDeleted, Type: fileType(st.Mode), Mode: st.Mode & permMask}
		switch st.Mode & sIFMT {
		case sIFREG:
			c.Size = st.Size
		case sIFLNK:
			if t, err := d.lower.readlink(rel); err == nil {
				c.LinkTarget = t
			}
		}
		d.changes = append(d.changes, c)
		return st.Dev == d.lower.dev, nil
	})
}

// sameContent compares two regular files byte by byte.
func (d *differ) sameContent(p string, ust, lst *unix.Stat_t) (bool, error) {
	if ust.Size != lst.Size {
		return false, nil
	}
	uf, err := d.upper.openFile(p)
	if err != nil {
		return false, err
	}
	defer uf.Close()
	lf, err := d.lower.openFile(p)
	if err != nil {
		return false, err
	}
	defer lf.Close()
	return sameReaders(uf, lf)
}

// compareBufs holds pairs of buffers for sameReaders.
var compareBufs = sync.Pool{New: func() any { return new([2][32 << 10]byte) }}

func sameReaders(a, b io.Reader) (bool, error) {
	bufs := compareBufs.Get().(*[2][32 << 10]byte)
	defer compareBufs.Put(bufs)
	ba, bb := bufs[0][:], bufs[1][:]
	for {
		na, errA := io.ReadFull(a, ba)
		nb, errB := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		switch {
		case errA != nil && !endA:
			return false, errA
		case errB != nil && !endB:
			return false, errB
		case endA || endB:
			return endA && endB, nil
		}
	}
}

func (d *differ) sniffBinary(t *tree, p string) (bool, error) {
	f, err := t.openFile(p)
	if err != nil {
		return false, err
	}
	defer f.Close()
	b := copyBufs.Get().(*[copyBufSize]byte)
	defer copyBufs.Put(b)
	buf := b[:binarySniff]
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false, err
	}
	return bytes.IndexByte(buf[:n], 0) >= 0, nil
}

// detectRenames pairs a deleted regular file with an added one of the same
// (non-empty) content: overlayfs records a rename as a copy plus a
// whiteout. A hidden file is never paired.
func (d *differ) detectRenames() error {
	deleted := map[int64][]int{}
	for i, c := range d.changes {
		if c.Kind == KindDeleted && c.Type == TypeFile && c.Size > 0 && (d.hidden == nil || !d.hidden(c.Path)) {
			deleted[c.Size] = append(deleted[c.Size], i)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	var added []int
	for i, c := range d.changes {
		if c.Kind == KindAdded && c.Type == TypeFile && len(deleted[c.Size]) > 0 {
			added = append(added, i)
		}
	}
	if len(added) == 0 {
		return nil
	}
	hashes := map[int][32]byte{}
	hashOf := func(t *tree, i int) ([32]byte, error) {
		if h, ok := hashes[i]; ok {
			return h, nil
		}
		f, err := t.openFile(d.changes[i].Path)
		if err != nil {
			return [32]byte{}, err
		}
		defer f.Close()
		hh := sha256.New()
		if _, err := copyPooled(hh, f); err != nil {
			return [32]byte{}, err
		}
		var h [32]byte
		copy(h[:], hh.Sum(nil))
		hashes[i] = h
		return h, nil
	}
	byHash := map[[32]byte][]int{}
	for _, idxs := range deleted {
		for _, i := range idxs {
			h, err := hashOf(d.lower, i)
			if err != nil {
				return err
			}
			byHash[h] = append(byHash[h], i)
		}
	}
	drop := map[int]bool{}
	for _, ai := range added {
		h, err := hashOf(d.upper, ai)
		if err != nil {
			return err
		}
		cands := byHash[h]
		if len(cands) == 0 {
			continue
		}
		// Prefer the deleted file with the same name (a move between
		// directories), then the first.
		pick := 0
		for k, di := range cands {
			if path.Base(d.changes[di].Path) == path.Base(d.changes[ai].Path) {
				pick = k
				break
			}
		}
		di := cands[pick]
		byHash[h] = slices.Delete(cands, pick, pick+1)
		c := &d.changes[ai]
		c.Kind, c.OldPath, c.OldMode = KindRenamed, d.changes[di].Path, d.changes[di].Mode
		drop[di] = true
	}
	if len(drop) > 0 {
		out := d.changes[:0]
		for i, c := range d.changes {
			if !drop[i] {
				out = append(out, c)
			}
		}
		d.changes = out
	}
	return nil
}
