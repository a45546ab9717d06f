package fsscope

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// cleanupTimeout bounds the undo work done with a detached context.
const cleanupTimeout = 30 * time.Second

// Session is the filesystem side of one sandbox session: its mounts, its
// overlay upper directories and their baselines, all kept in the session's
// state directory.
type Session struct {
	dir string

	mu    sync.Mutex
	st    state             // +checklocks:mu
	bases map[int]*baseline // +checklocks:mu
	// scans holds each workspace's entries as Setup scanned them, in walk
	// order, for Fresh. It is not persisted: a session loaded from disk
	// has none. The entries are never modified.
	scans [][]entry // +checklocks:mu
	// ra refuses and reports opens of the masks while the sandbox's mounts
	// are in place (WithReadAudit); raOwner is what it reports them under.
	ra      *ReadAudit // +checklocks:mu
	raOwner string     // +checklocks:mu
	watched []string   // +checklocks:mu
	// watchedView are the marks of masks InView, on the workspace
	// overlay's inodes; watchedLive those of revised deny_read patterns.
	watchedView []viewMark // +checklocks:mu
	watchedLive []viewMark // +checklocks:mu
}

// Option configures Setup.
type Option func(*config)

type config struct {
	backend QuotaBackend
	// imageCache holds formatted template quota images (WithImageCache).
	imageCache string
	readAudit  *ReadAudit
	owner      string
}

// WithReadAudit has a refuse and report every open of the session's
// deny_read masks as owner (see ReadAudit), from Setup (or Load) until
// the sandbox's mounts are removed.
func WithReadAudit(a *ReadAudit, owner string) Option {
	return func(c *config) { c.readAudit, c.owner = a, owner }
}

// WithQuotaBackend chooses the filesystem holding the upper directories
// (default QuotaImage).
func WithQuotaBackend(b QuotaBackend) Option {
	return func(c *config) { c.backend = b }
}

// WorkspaceInfo describes one workspace of a session.
type WorkspaceInfo struct {
	HostPath string `json:"host_path"`
	Target   string `json:"target"`
	Mode     string `json:"mode"`
	OnExit   string `json:"on_exit,omitempty"`
	Owner    Owner  `json:"owner"`
	Idmapped bool   `json:"idmapped"`
	Masks    int    `json:"masks"`
}

// WorkspaceOwner returns the owner of the first workspace's host directory:
// the user a session runs as when its manifest names none, so that it can
// write its workspace without an idmapped mount.
func WorkspaceOwner(p *policies.Policy) (Owner, error) {
	if p == nil || len(p.Workspaces) == 0 {
		return Owner{}, fmt.Errorf("policy has no workspace: %w", errdefs.ErrNotFound)
	}
	var st unix.Stat_t
	if err := unix.Stat(p.Workspaces[0].HostPath, &st); err != nil {
		return Owner{}, fmt.Errorf("workspace %s: %w", p.Workspaces[0].HostPath, err)
	}
	return Owner{UID: st.Uid, GID: st.Gid}, nil
}

// Setup prepares a session's filesystem view under stateDir (the session's
// private directory, created with mode 0700; it must not hold a session
// yet). For an overlay workspace it creates the quota-limited upper
// filesystem, records the host tree's baseline and mounts an overlay
// (lower = the host directory, read-only) in stateDir. For ro and rw
// workspaces and extra mounts it binds the host directory in stateDir,
// without the mounts beneath it. Where the workspace owner is not the
// sandbox user (owner), the workspace is mounted idmapped so that the
// sandbox user sees the owner's files as its own. It plans deny_read masks
// and returns the session; Mounts lists what the sandbox gets.
func Setup(ctx context.Context, stateDir string, p *policies.Policy, owner Owner, opts ...Option) (_ *Session, retErr error) {
	cfg := config{backend: QuotaImage}
	for _, o := range opts {
		o(&cfg)
	}
	if p == nil {
		return nil, fmt.Errorf("fsscope setup: no policy: %w", errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("fsscope setup: state directory %q is not absolute: %w", stateDir, errdefs.ErrInvalidArgument)
	}
	switch cfg.backend {
	case QuotaImage, QuotaTmpfs:
	default:
		return nil, fmt.Errorf("fsscope setup: unknown quota backend %q: %w", cfg.backend, errdefs.ErrInvalidArgument)
	}
	stateDir = filepath.Clean(stateDir)
	if err := os.MkdirAll(filepath.Dir(stateDir), 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(stateDir, stateFile)); err == nil {
			return nil, fmt.Errorf("fsscope setup: %s already holds a session: %w", stateDir, errdefs.ErrAlreadyExists)
		}
	}
	defer func() {
		if retErr != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if err := Cleanup(cctx, stateDir); err != nil {
				log.G(ctx).Warn("fsscope: undo failed setup", "dir", stateDir, "error", err)
			}
		}
	}()
	realState, err := filepath.EvalSymlinks(stateDir)
	if err != nil {
		return nil, err
	}
	s := &Session{dir: stateDir, bases: map[int]*baseline{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st = state{Version: stateVersion, Sandbox: owner, Started: time.Now().UnixNano()}
	s.scans = make([][]entry, 0, len(p.Workspaces))

	for _, d := range []string{masksDir, mntDir} {
		if err := os.Mkdir(s.path(d), 0o700); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(s.path(emptyFile), nil, 0); err != nil {
		return nil, err
	}
	if err := os.Mkdir(s.path(emptyDir), 0); err != nil {
		return nil, err
	}

	// Resolve and check every workspace before mounting anything.
	type wsPlan struct {
		w    policies.Workspace
		host string
	}
	plans := make([]wsPlan, 0, len(p.Workspaces))
	overlay := false
	for _, w := range p.Workspaces {
		if w.Mode == "" {
			w.Mode = policies.ModeOverlay
		}
		switch w.Mode {
		case policies.ModeOverlay:
			overlay = true
		case policies.ModeRO, policies.ModeRW:
		default:
			return nil, fmt.Errorf("workspace %s: unknown mode %q: %w", w.HostPath, w.Mode, errdefs.ErrInvalidArgument)
		}
		if err := checkTarget(w.Target); err != nil {
			return nil, fmt.Errorf("workspace %s: %w", w.HostPath, err)
		}
		host, err := hostDir(w.HostPath)
		if err != nil {
			return nil, fmt.Errorf("workspace %s: %w", w.HostPath, err)
		}
		if within(realState, host) || within(host, realState) {
			return nil, fmt.Errorf("workspace %s overlaps the session state directory %s: %w", host, stateDir, errdefs.ErrInvalidArgument)
		}
		plans = append(plans, wsPlan{w: w, host: host})
	}

	if overlay {
		size := p.Resources.Disk
		if size <= 0 {
			size = DefaultDisk
		}
		s.st.Quota = &quotaState{Backend: cfg.backend, Size: size}
		if err := os.Mkdir(s.path(upperDir), 0o700); err != nil {
			return nil, err
		}
		start := time.Now()
		switch cfg.backend {
		case QuotaImage:
			if err := newImage(ctx, cfg.imageCache, s.path(imageFile), size); err != nil {
				return nil, err
			}
			if err := mountImage(s.path(imageFile), s.path(upperDir), false); err != nil {
				return nil, err
			}
		case QuotaTmpfs:
			if err := mountTmpfs(s.path(upperDir), size); err != nil {
				return nil, err
			}
		}
		log.G(ctx).Debug("fsscope: quota filesystem ready", "backend", cfg.backend, "size", size, "took", time.Since(start))
	}

	viewMode := uint32(0)
	if cfg.readAudit != nil {
		viewMode = 0o444
	}
	for i, pl := range plans {
		ws, err := s.setupWorkspace(ctx, i, pl.w, pl.host, owner, viewMode)
		if err != nil {
			return nil, fmt.Errorf("workspace %s: %w", pl.w.HostPath, err)
		}
		s.st.Workspaces = append(s.st.Workspaces, ws)
	}
	for i, m := range p.Mounts {
		ms, err := s.setupMount(ctx, i, m)
		if err != nil {
			return nil, fmt.Errorf("mount %s: %w", m.HostPath, err)
		}
		s.st.Mounts = append(s.st.Mounts, ms)
	}
	if err := s.maskSourcesLocked(cfg.readAudit != nil); err != nil {
		return nil, err
	}
	s.st.Live = true
	if err := s.saveLocked(); err != nil {
		return nil, err
	}
	s.watchLocked(ctx, cfg.readAudit, cfg.owner)
	return s, nil
}

// maskSourcesLocked gives every file and directory mask a source of its
// own (an empty file or directory in masks/, owned by root), so that an
// open of it tells which mask it was. With audited, the sources are
// readable (0444, directories 0555): the open reaches the ReadAudit, which
// refuses it; otherwise they are mode 0 and the kernel refuses it.
func (s *Session) maskSourcesLocked(audited bool) error {
	fileMode, dirMode := uint32(0), uint32(0)
	if audited {
		fileMode, dirMode = 0o444, 0o555
	}
	give := func(name string, masks []mask) error {
		for k := range masks {
			m := &masks[k]
			if m.Kind == maskCopy || m.InView {
				continue
			}
			m.Source = fmt.Sprintf("%s/%s-%d", masksDir, name, k)
			p := s.path(m.Source)
			mode := fileMode
			if m.Kind == maskDir {
				mode = dirMode
				if err := os.Mkdir(p, 0o700); err != nil {
					return err
				}
			} else if err := os.WriteFile(p, nil, 0o600); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(mode)); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range s.st.Workspaces {
		if err := give("ws"+strconv.Itoa(i), s.st.Workspaces[i].Masks); err != nil {
			return err
		}
	}
	for i := range s.st.Mounts {
		if err := give("m"+strconv.Itoa(i), s.st.Mounts[i].Masks); err != nil {
			return err
		}
	}
	return nil
}

// watchLocked has a refuse and report opens of the masks (not of the
// sanitized git config copies, which the sandbox reads). A mask that
// cannot be watched stays a mask: it is logged, not an error.
func (s *Session) watchLocked(ctx context.Context, a *ReadAudit, owner string) {
	if a == nil {
		return
	}
	s.ra, s.raOwner = a, owner
	for i, w := range s.st.Workspaces {
		for _, m := range w.Masks {
			if !m.InView || shadowed(filepath.Join(s.wsUpper(i), "upper"), m.Path) {
				continue
			}
			key, err := a.watchView(owner, s.wsMnt(i), m.Path, w.MaskOwner, path.Join(w.Target, m.Path), m.Rule)
			if errors.Is(err, errNotInView) {
				// The sandbox removed or replaced it (a daemon restart
				// re-arms the marks): nothing of the mask is left to watch.
				continue
			}
			if err != nil {
				log.G(ctx).Warn("fsscope: opens of a mask will not be audited", "path", path.Join(w.Target, m.Path), "error", err)
				continue
			}
			s.watchedView = append(s.watchedView, viewMark{root: s.wsMnt(i), rel: m.Path, owner: w.MaskOwner, key: key})
		}
	}
	watch := func(target string, masks []mask) {
		for _, m := range masks {
			if m.Kind == maskCopy || m.Source == "" || m.InView {
				continue
			}
			src := s.path(m.Source)
			if err := a.watch(owner, src, path.Join(target, m.Path), m.Rule); err != nil {
				log.G(ctx).Warn("fsscope: opens of a mask will not be audited", "path", path.Join(target, m.Path), "error", err)
				continue
			}
			s.watched = append(s.watched, src)
		}
	}
	for _, w := range s.st.Workspaces {
		watch(w.Target, w.Masks)
	}
	for _, m := range s.st.Mounts {
		watch(m.Target, m.Masks)
	}
	s.watchRevisedLocked(ctx)
}

// shadowed reports whether the overlay's upper directory holds rel or
// replaces one of its parents (a whiteout, a file, a symlink or an opaque
// directory in its place): the sandbox removed or replaced the lower
// entry there. It never looks through a symlink.
func shadowed(upper, rel string) bool {
	t, err := openTree(upper)
	if err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	defer t.Close()
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		st, err := t.lstat(p)
		if err != nil {
			return !errors.Is(err, unix.ENOENT)
		}
		if i == len(parts)-1 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return true
		}
		if v, err := t.getxattr(p, xattrOpaque); err != nil || v == "y" {
			return true
		}
	}
	return false
}

// unwatchLocked removes the ReadAudit's marks of the masks.
func (s *Session) unwatchLocked() error {
	if s.ra == nil || len(s.watched)+len(s.watchedView)+len(s.watchedLive) == 0 {
		return nil
	}
	err := errors.Join(s.ra.unwatch(s.watched), s.ra.unwatchView(s.watchedView), s.ra.unwatchLive(s.watchedLive))
	s.watched, s.watchedView, s.watchedLive = nil, nil, nil
	return err
}

func (s *Session) setupWorkspace(ctx context.Context, i int, w policies.Workspace, host string, sandbox Owner, viewMode uint32) (wsState, error) {
	ws := wsState{
		HostPath:          host,
		Target:            path.Clean(w.Target),
		Mode:              w.Mode,
		DenyRead:          denyPatterns(w.DenyRead, w.DefaultDenyRead),
		Protect:           w.Protect,
		PreserveUntracked: w.PreserveUntracked,
		ProtectRefs:       w.ProtectRefs,
		GitAllow:          w.GitAllow,
		OnExit:            w.OnExit,
	}
	if ws.Mode == policies.ModeOverlay && ws.OnExit == "" {
		ws.OnExit = policies.OnExitReview
	}
	deny, err := glob.NewSet(ws.DenyRead, true)
	if err != nil {
		return ws, fmt.Errorf("deny_read: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := glob.NewSet(ws.Protect, true); err != nil {
		return ws, fmt.Errorf("protect: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := refPatterns(ws.ProtectRefs); err != nil {
		return ws, fmt.Errorf("protect_refs: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	t, err := openHostTree(host)
	if err != nil {
		return ws, err
	}
	defer t.Close()
	root, err := t.lstat("")
	if err != nil {
		return ws, err
	}
	ws.Owner = Owner{UID: root.Uid, GID: root.Gid}
	ws.RootIno, ws.RootDev = root.Ino, root.Dev
	ws.Idmap = ws.Owner != sandbox

	start := time.Now()
	entries, err := snapshot(ctx, t)
	if err != nil {
		return ws, fmt.Errorf("scan: %w", err)
	}
	if ws.Masks, err = s.treeMasks("ws"+strconv.Itoa(i), t, entries, deny, ws.Mode == policies.ModeRW); err != nil {
		return ws, err
	}
	if ws.Mode == policies.ModeOverlay {
		// A masked regular file is the frozen view's own entry, which the
		// sandbox may remove (a mount could not be).
		regular := make(map[string]bool, len(ws.Masks))
		for k := range entries {
			if entries[k].isRegular() {
				regular[entries[k].Path] = true
			}
		}
		if id, ok := pickMaskOwner(entries, ws.Owner, sandbox); ok {
			for k := range ws.Masks {
				m := &ws.Masks[k]
				m.InView = m.Kind == maskFile && regular[m.Path]
				if m.InView {
					ws.MaskOwner = id
				}
			}
		}
		if err := writeBaseline(s.baselineFile(i), entries); err != nil {
			return ws, err
		}
		// A commit updates the baseline in place; the scan stays as it was.
		s.bases[i] = newBaseline(slices.Clone(entries))
	}
	s.scans = append(s.scans, entries)
	if len(ws.Masks) > 0 {
		ws.Tracked, err = trackedDenied(ctx, host, ws.Owner, func(p string) bool { return maskedBy(ws.Masks, p) })
		if err != nil {
			log.G(ctx).Warn("fsscope: cannot tell which masked paths git tracks", "path", host, "error", err)
		}
	}
	log.G(ctx).Debug("fsscope: workspace scanned", "path", host, "entries", len(entries), "masks", len(ws.Masks), "took", time.Since(start))

	var ns *os.File
	if ws.Idmap {
		if ns, err = idmapUserns(ws.Owner, sandbox, ws.MaskOwner); err != nil {
			return ws, err
		}
	}
	target := s.wsMnt(i)
	if err := os.Mkdir(target, 0o700); err != nil {
		return ws, err
	}
	const tight = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if ws.Mode == policies.ModeRW {
		return ws, bindFD(t.fd, target, tight, ns)
	}
	// ro and overlay: a frozen view of the names scanned, so that nothing
	// created on the host later (a new .env, say) appears in the sandbox.
	if ws.Mode == policies.ModeRO {
		view, err := frozenView(t.fd, entries, ws.Masks, viewMasks{}, ns)
		if err != nil {
			return ws, err
		}
		defer unix.Close(view)
		return ws, attachDetached(view, target, tight|unix.MOUNT_ATTR_RDONLY, nil)
	}
	if st, err := stacked(t.fd); err != nil {
		return ws, err
	} else if st {
		return ws, fmt.Errorf("%s is on overlayfs: an overlay workspace over a frozen view of it would exceed the kernel's stacking depth; use a workspace on another filesystem, or mode = \"ro\" or \"rw\": %w", host, errdefs.ErrNotImplemented)
	}
	// Overlay: the upper root takes the host root's permissions and is
	// owned by the sandbox user, who sees it as the workspace root.
	up := s.wsUpper(i)
	for _, d := range []string{up, filepath.Join(up, "upper"), filepath.Join(up, "work")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return ws, err
		}
	}
	if err := os.Chmod(filepath.Join(up, "upper"), os.FileMode(root.Mode&0o777)); err != nil {
		return ws, err
	}
	if err := os.Chown(filepath.Join(up, "upper"), int(sandbox.UID), int(sandbox.GID)); err != nil {
		return ws, err
	}
	// The lower layer is the frozen view of exactly the directory scanned,
	// idmapped when needed; the overlay keeps its own reference to it.
	view, err := frozenView(t.fd, entries, ws.Masks, viewMasks{mode: viewMode, owner: ws.MaskOwner}, ns)
	if err != nil {
		return ws, err
	}
	defer unix.Close(view)
	return ws, mountOverlay(fdPath(view), filepath.Join(up, "upper"), filepath.Join(up, "work"), target, tight, nil)
}

// setupMount binds an extra mount's host path in the state directory. A
// file or directory whose own host path or target is covered by the
// default deny_read list (when the mount keeps it) is not bound at all: the
// sandbox gets an empty mask instead. A directory is scanned and its
// deny_read masks planned as a workspace's; a read-only directory is the
// frozen view of the names scanned (see frozenView), a read-write one the
// live host directory.
func (s *Session) setupMount(ctx context.Context, i int, m policies.Mount) (mountState, error) {
	ms := mountState{Target: path.Clean(m.Target), ReadOnly: m.ReadOnly, DenyRead: denyPatterns(m.DenyRead, m.DefaultDenyRead)}
	if err := checkTarget(m.Target); err != nil {
		return ms, err
	}
	deny, err := glob.NewSet(ms.DenyRead, true)
	if err != nil {
		return ms, fmt.Errorf("deny_read: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	host := filepath.Clean(m.HostPath)
	hfd, err := openHostPath(host, 0)
	if err != nil {
		return ms, err
	}
	defer unix.Close(hfd)
	var hst unix.Stat_t
	if err := unix.Fstat(hfd, &hst); err != nil {
		return ms, err
	}
	ms.HostPath, ms.Dir = host, hst.Mode&unix.S_IFMT == unix.S_IFDIR
	if m.DefaultDenyRead {
		defaults, err := glob.NewSet(DefaultDenyRead(), true)
		if err != nil {
			return ms, err
		}
		for _, p := range []string{host, ms.Target} {
			if pat, ok := defaults.Covers(strings.TrimPrefix(p, "/"), ms.Dir); ok {
				ms.Masked = true
				ms.Masks = []mask{{Path: "", Kind: map[bool]string{true: maskDir, false: maskFile}[ms.Dir], Rule: pat}}
				return ms, nil
			}
		}
	}
	target := s.mountMnt(i)
	attrs := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if m.ReadOnly {
		attrs |= unix.MOUNT_ATTR_RDONLY
	}
	if !ms.Dir {
		if err := os.WriteFile(target, nil, 0o600); err != nil {
			return ms, err
		}
		return ms, bindFD(hfd, target, attrs, nil)
	}
	if err := os.Mkdir(target, 0o700); err != nil {
		return ms, err
	}
	t, err := openHostTree(host)
	if err != nil {
		return ms, err
	}
	defer t.Close()
	var entries []entry
	if err := scan(ctx, t, func(e *entry, _ bool) error {
		entries = append(entries, *e)
		return nil
	}); err != nil {
		return ms, fmt.Errorf("scan: %w", err)
	}
	if ms.Masks, err = s.treeMasks("m"+strconv.Itoa(i), t, entries, deny, !m.ReadOnly); err != nil {
		return ms, err
	}
	if !m.ReadOnly {
		return ms, bindFD(t.fd, target, attrs, nil)
	}
	view, err := frozenView(t.fd, entries, ms.Masks, viewMasks{}, nil)
	if err != nil {
		return ms, err
	}
	defer unix.Close(view)
	return ms, attachDetached(view, target, attrs, nil)
}

// treeMasks plans the masks of a scanned workspace or mount: deny_read
// matches, credential-free copies of git configs and, for a tree the
// sandbox sees live (not through a frozen view), the directories under
// mount points; sorted by path.
func (s *Session) treeMasks(key string, t *tree, entries []entry, deny *glob.Set, live bool) ([]mask, error) {
	masks := planMasks(entries, deny)
	copies, err := s.sanitizedGitConfigs(key, t, entries, masks)
	if err != nil {
		return nil, err
	}
	masks = append(masks, copies...)
	if live {
		masks = append(masks, mountPointMasks(entries, masks)...)
	}
	slices.SortFunc(masks, func(a, b mask) int { return strings.Compare(a.Path, b.Path) })
	return masks, nil
}

// bindFD binds the directory open as fd (O_PATH) on target.
func bindFD(fd int, target string, attrs uint64, userns *os.File) error {
	mfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("clone mount for %s: %w", target, err)
	}
	defer unix.Close(mfd)
	return attachDetached(mfd, target, attrs, userns)
}

// hostDir checks that p names a directory through no symlink (see
// openHostTree) and returns it cleaned.
func hostDir(p string) (string, error) {
	fd, err := openHostPath(p, unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	unix.Close(fd)
	return filepath.Clean(p), nil
}

// resolveHostDir resolves p's symlinks, for reading a manifest's paths
// outside a session (airlock validate).
func resolveHostDir(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("host path %q is not absolute: %w", p, errdefs.ErrInvalidArgument)
	}
	host, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(host)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory: %w", host, errdefs.ErrInvalidArgument)
	}
	return host, nil
}

func checkTarget(t string) error {
	if !path.IsAbs(t) || path.Clean(t) == "/" || slices.Contains(strings.Split(t, "/"), "..") {
		return fmt.Errorf("target %q must be an absolute path below /: %w", t, errdefs.ErrInvalidArgument)
	}
	return nil
}

// sanitizedGitConfigs writes a credential-free copy of every git config
// file of the workspace that holds credentials, and returns the masks that
// bind the copies over the originals.
func (s *Session) sanitizedGitConfigs(name string, t *tree, entries []entry, masks []mask) ([]mask, error) {
	b := newBaseline(entries)
	var out []mask
	for _, gd := range gitDirs(b) {
		for _, e := range entries {
			if !e.isRegular() || !isGitConfigFile(gd, e.Path) || maskedBy(masks, e.Path) {
				continue
			}
			data, err := readTreeFile(t, e.Path, 1<<20)
			if err != nil {
				return nil, fmt.Errorf("read git config %s: %w", e.Path, err)
			}
			clean, changed := SanitizeGitConfig(data)
			if !changed {
				continue
			}
			src := fmt.Sprintf("%s/gitconfig-%s-%d", masksDir, name, len(out))
			if err := os.WriteFile(s.path(src), clean, 0o444); err != nil {
				return nil, err
			}
			if err := os.Chmod(s.path(src), 0o444); err != nil {
				return nil, err
			}
			out = append(out, mask{Path: e.Path, Kind: maskCopy, Source: src, Rule: "git config credentials"})
		}
	}
	return out, nil
}

func maskedBy(masks []mask, rel string) bool {
	for _, m := range masks {
		if m.Path == rel || strings.HasPrefix(rel, m.Path+"/") {
			return true
		}
	}
	return false
}

// maskBelow returns a mask strictly below the directory rel, if any.
func maskBelow(masks []mask, rel string) (string, bool) {
	for _, m := range masks {
		if strings.HasPrefix(m.Path, rel+"/") {
			return m.Path, true
		}
	}
	return "", false
}

// readTreeFile reads at most limit bytes of the regular file rel.
func readTreeFile(t *tree, rel string, limit int64) ([]byte, error) {
	f, err := t.openFile(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// Load re-opens a session after a daemon restart. It completes or undoes
// a commit that a crash interrupted, and notices mounts that disappeared
// (a reboot): the session is then no longer live.
func Load(stateDir string, opts ...Option) (*Session, error) {
	ctx := context.Background()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	st, err := readState(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no session in %s: %w", stateDir, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	s := &Session{dir: filepath.Clean(stateDir), st: *st, bases: map[int]*baseline{}}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := s.recoverJournalsLocked(ctx); err != nil {
		return nil, err
	}
	if s.st.Live {
		for i := range s.st.Workspaces {
			if ok, _ := isMountPoint(s.wsMnt(i)); !ok {
				log.G(ctx).Warn("fsscope: workspace mount is gone; the sandbox no longer has it", "dir", stateDir, "target", s.st.Workspaces[i].Target)
				s.st.Live = false
			}
		}
		if !s.st.Live {
			if err := s.unmountSandboxLocked(); err != nil {
				return nil, err
			}
			if err := s.saveLocked(); err != nil {
				return nil, err
			}
		}
	}
	if s.st.Live {
		s.watchLocked(ctx, cfg.readAudit, cfg.owner)
	}
	return s, nil
}

// lock takes the session's mutex and its state directory's file lock
// (another process may hold the same session).
func (s *Session) lock() (func(), error) {
	s.mu.Lock()
	f, err := os.OpenFile(s.path(lockFile), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		s.mu.Unlock()
		return nil, err
	}
	return func() {
		f.Close()
		s.mu.Unlock()
	}, nil
}

// Dir returns the session's state directory.
func (s *Session) Dir() string { return s.dir }

// Live reports whether the sandbox's mounts are in place (Setup was called
// and Teardown was not).
func (s *Session) Live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Live
}

// Workspaces describes the session's workspaces in manifest order.
func (s *Session) Workspaces() []WorkspaceInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WorkspaceInfo, 0, len(s.st.Workspaces))
	for _, w := range s.st.Workspaces {
		out = append(out, WorkspaceInfo{HostPath: w.HostPath, Target: w.Target, Mode: w.Mode, OnExit: w.OnExit, Owner: w.Owner, Idmapped: w.Idmap, Masks: len(w.Masks)})
	}
	return out
}

// Mounts returns the runtime-spec mounts of the sandbox, in order: the
// workspaces and extra mounts (parents before what is mounted inside
// them), then the deny_read masks, which cover paths inside them.
func (s *Session) Mounts() []specs.Mount {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mountsLocked()
}

func (s *Session) mountsLocked() []specs.Mount {
	type primary struct {
		m     specs.Mount
		depth int
	}
	var prim []primary
	for i, w := range s.st.Workspaces {
		opts := []string{"bind", "nosuid", "nodev"}
		if w.Mode == policies.ModeRO {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		prim = append(prim, primary{specs.Mount{Destination: w.Target, Type: "bind", Source: s.wsMnt(i), Options: opts}, depth(w.Target)})
	}
	maskOpts := []string{"bind", "ro", "nosuid", "nodev", "noexec"}
	for i, m := range s.st.Mounts {
		opts := []string{"bind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		src := s.mountMnt(i)
		if m.Masked {
			src, opts = s.maskSource(m.Masks[0]), slices.Clone(maskOpts)
		}
		prim = append(prim, primary{specs.Mount{Destination: m.Target, Type: "bind", Source: src, Options: opts}, depth(m.Target)})
	}
	slices.SortStableFunc(prim, func(a, b primary) int { return a.depth - b.depth })
	out := make([]specs.Mount, 0, len(prim))
	targets := make([]string, 0, len(prim))
	for _, p := range prim {
		out = append(out, p.m)
		targets = append(targets, p.m.Destination)
	}
	addMasks := func(target string, masks []mask) {
		for _, m := range masks {
			if m.InView {
				continue // the view's own entry, no mount
			}
			dest := path.Join(target, m.Path)
			if hiddenByOther(dest, target, targets) {
				continue
			}
			out = append(out, specs.Mount{Destination: dest, Type: "bind", Source: s.maskSource(m), Options: slices.Clone(maskOpts)})
		}
	}
	for _, w := range s.st.Workspaces {
		addMasks(w.Target, w.Masks)
	}
	for _, m := range s.st.Mounts {
		if !m.Masked {
			addMasks(m.Target, m.Masks)
		}
	}
	return out
}

// maskSource returns the host path bound over a masked path: the mask's
// own source, or (for a session set up before masks had their own) the
// shared empty file or directory.
func (s *Session) maskSource(m mask) string {
	switch {
	case m.Source != "":
		return s.path(m.Source)
	case m.Kind == maskDir:
		return s.path(emptyDir)
	}
	return s.path(emptyFile)
}

// hiddenByOther reports whether dest lies in another mount nested inside
// the workspace mounted at own (that mount hides the workspace there).
func hiddenByOther(dest, own string, targets []string) bool {
	for _, t := range targets {
		if t != own && within(t, own) && within(dest, t) {
			return true
		}
	}
	return false
}

// SpecOpt appends Mounts to a container spec.
func (s *Session) SpecOpt() oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, spec *oci.Spec) error {
		return oci.WithMounts(s.Mounts())(ctx, c, ctr, spec)
	}
}

// unmountSandboxLocked removes the mounts the sandbox's binds come from,
// and the ReadAudit's marks of its masks.
func (s *Session) unmountSandboxLocked() error {
	errs := []error{s.unwatchLocked()}
	for _, dir := range []string{s.path(mntDir), s.path(layersDir)} {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		for _, mp := range mps {
			errs = append(errs, unmount(mp))
		}
	}
	return errors.Join(errs...)
}

// Teardown removes the sandbox's mounts. With keepUpper, the overlays'
// upper directories (and baselines) stay for Diff, Commit and Discard;
// otherwise the whole state directory is removed. A commit interrupted by
// a crash is rolled back first, so the host tree is never left half
// changed.
func (s *Session) Teardown(ctx context.Context, keepUpper bool) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.recoverJournalsLocked(ctx); err != nil {
		return err
	}
	if err := s.unmountSandboxLocked(); err != nil {
		return err
	}
	hasUpper := s.st.Quota != nil
	if keepUpper && hasUpper {
		if s.st.Quota.Backend == QuotaImage {
			if err := unmount(s.path(upperDir)); err != nil {
				return err
			}
		}
		s.st.Live = false
		return s.saveLocked()
	}
	return unmountAllAndRemove(s.dir)
}

// Cleanup removes whatever a session left under stateDir after a crash:
// it rolls back an interrupted commit when the state allows, unmounts
// everything beneath stateDir (deepest first, detached) and removes it. It
// never deletes through a mount.
func Cleanup(ctx context.Context, stateDir string) error {
	stateDir = filepath.Clean(stateDir)
	if _, err := os.Lstat(stateDir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if st, err := readState(stateDir); err == nil {
		s := &Session{dir: stateDir, st: *st, bases: map[int]*baseline{}}
		s.mu.Lock()
		err := s.recoverJournalsLocked(ctx)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("roll back interrupted commit: %w", err)
		}
	}
	return unmountAllAndRemove(stateDir)
}

func unmountAllAndRemove(dir string) error {
	// Stacked mounts show up once per layer; a few rounds take them all.
	for range 8 {
		mps, err := mountsUnder(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			break
		}
		for _, mp := range mps {
			if err := unmount(mp); err != nil {
				return err
			}
		}
	}
	return removeStateDir(dir)
}

// ensureUpperLocked makes the quota filesystem available while the
// sandbox is gone: an image is mounted for the duration of the operation
// (release unmounts it), read-write so that the kernel can replay its
// journal after a host crash; a tmpfs must still be mounted.
func (s *Session) ensureUpperLocked() (release func(), err error) {
	noop := func() {}
	if s.st.Quota == nil {
		return noop, nil
	}
	mounted, err := isMountPoint(s.path(upperDir))
	if err != nil {
		return nil, err
	}
	if mounted {
		return noop, nil
	}
	if s.st.Quota.Backend != QuotaImage {
		return nil, fmt.Errorf("session %s: the tmpfs holding its changes is gone (a reboot?): %w", s.dir, errdefs.ErrDataLoss)
	}
	if err := mountImage(s.path(imageFile), s.path(upperDir), false); err != nil {
		return nil, err
	}
	return func() { unmount(s.path(upperDir)) }, nil
}

// Discard drops the changes of the session's overlay workspaces (all of
// them, or those mounted at targets). The sandbox must be gone.
func (s *Session) Discard(ctx context.Context, targets ...string) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if s.st.Live {
		return fmt.Errorf("discard: the session's sandbox still has its workspace mounted; tear it down first: %w", errdefs.ErrFailedPrecondition)
	}
	if err := s.recoverJournalsLocked(ctx); err != nil {
		return err
	}
	release, err := s.ensureUpperLocked()
	if err != nil {
		return err
	}
	defer release()
	for i, w := range s.st.Workspaces {
		if w.Mode != policies.ModeOverlay || !selected(w.Target, targets) {
			continue
		}
		for _, d := range []string{"upper", "work"} {
			t, err := openTree(filepath.Join(s.wsUpper(i), d))
			if err != nil {
				return err
			}
			err = t.removeAllBeneath("")
			t.Close()
			if err != nil {
				return fmt.Errorf("discard %s: %w", w.Target, err)
			}
		}
		log.G(ctx).Info("fsscope: changes discarded", "workspace", w.HostPath)
	}
	return nil
}

func selected(target string, targets []string) bool {
	return len(targets) == 0 || slices.ContainsFunc(targets, func(t string) bool { return path.Clean(t) == target })
}

// baselineLocked returns workspace i's baseline, reading it on first use.
func (s *Session) baselineLocked(i int) (*baseline, error) {
	if b := s.bases[i]; b != nil {
		return b, nil
	}
	b, err := readBaseline(s.baselineFile(i))
	if err != nil {
		return nil, err
	}
	s.bases[i] = b
	return b, nil
}

// Finish carries out each overlay workspace's on_exit once the sandbox is
// gone (after Teardown with keepUpper): "commit" commits the workspace
// (all or nothing), "discard" drops its changes, "review" leaves them.
// review reports whether changes are left for `airlock diff/commit`: a
// review workspace with changes, or a commit that was refused. res is the
// commit's result (nil when no workspace commits on exit).
func (s *Session) Finish(ctx context.Context, audit func(Event)) (res *CommitResult, review bool, err error) {
	if err := s.normaliseRW(audit); err != nil {
		return nil, true, err
	}
	var commit, discard, keep []string
	for _, w := range s.Workspaces() {
		if w.Mode != policies.ModeOverlay {
			continue
		}
		switch w.OnExit {
		case policies.OnExitCommit:
			commit = append(commit, w.Target)
		case policies.OnExitDiscard:
			discard = append(discard, w.Target)
		default:
			keep = append(keep, w.Target)
		}
	}
	if len(discard) > 0 {
		if err := s.Discard(ctx, discard...); err != nil {
			return nil, true, err
		}
	}
	if len(commit) > 0 {
		res, err = s.Commit(ctx, CommitOptions{Targets: commit, Audit: audit})
		if err != nil {
			return res, true, err
		}
	}
	if len(keep) > 0 {
		cs, err := s.Diff(ctx)
		if err != nil {
			return res, true, err
		}
		for _, w := range cs.Workspaces {
			if len(w.Changes) > 0 && slices.Contains(keep, w.Target) {
				review = true
			}
		}
	}
	return res, review, nil
}
