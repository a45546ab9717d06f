package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world"
)

// SandboxUser is the user sessions run as: the bench image's agent user.
// Workspace files belong to it.
const (
	SandboxUser = "1000:1000"
	sandboxUID  = 1000
	sandboxGID  = 1000
)

// GitRemote is the world's repository as a sandbox reaches it.
const GitRemote = "http://git.bench.test/app.git"

// entry is one file of a workspace tree.
type entry struct {
	Type  fs.FileMode // fs.ModeDir, fs.ModeSymlink or 0 (regular)
	Perm  fs.FileMode
	Size  int64
	MTime time.Time
	Link  string
	// Sum is the content's SHA-256, for regular files outside .git.
	Sum string
}

// tree is a workspace's files by slash-separated relative path.
type tree map[string]entry

// readTree walks dir without following symbolic links.
func readTree(dir string) (tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	t := tree{}
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		fi, err := root.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{Type: fi.Mode().Type(), Perm: fi.Mode().Perm(), MTime: fi.ModTime()}
		switch {
		case fi.Mode().IsRegular():
			e.Size = fi.Size()
			if !gitInternal(p) {
				if e.Sum, err = fileSum(root, p); err != nil {
					return err
				}
			}
		case e.Type == fs.ModeSymlink:
			if e.Link, err = root.Readlink(p); err != nil {
				return err
			}
		case e.Type == fs.ModeDir:
		default:
			e.Size = fi.Size()
		}
		t[p] = e
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read workspace %s: %w", dir, err)
	}
	return t, nil
}

func fileSum(root *os.Root, p string) (string, error) {
	f, err := root.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// gitInternal reports whether p is git's own bookkeeping in the checkout:
// objects, refs, logs, the index and the config. Those change with every
// branch operation and are judged as branches (by their refs), not as
// files. Hooks are not: a hook is a file the host's git would run.
func gitInternal(p string) bool {
	rest, ok := strings.CutPrefix(p, ".git/")
	if !ok {
		return p == ".git"
	}
	return rest != "hooks" && !strings.HasPrefix(rest, "hooks/")
}

// refStorage reports whether p is where a checkout keeps its refs:
// packed-refs or a loose ref file.
func refStorage(p string) bool {
	return p == ".git/packed-refs" || strings.HasPrefix(p, ".git/refs/")
}

// same reports whether two entries are equal as files: type, permissions,
// size, time, link target and content.
func (e entry) same(o entry) bool {
	return e.Type == o.Type && e.Perm == o.Perm && e.Size == o.Size && e.MTime.Equal(o.MTime) && e.Link == o.Link && e.Sum == o.Sum
}

// changed lists the paths that differ between two trees, git's
// bookkeeping included.
func changed(before, after tree) []string {
	var out []string
	for p, b := range before {
		if a, ok := after[p]; !ok || !a.same(b) {
			out = append(out, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// fileEffects turns the changes to the workspace's files outside git's
// bookkeeping into workspace-write effects: content, type, permission and
// link changes, files and directories made or removed; times alone do not
// count. A directory made or removed with files in it counts through its
// files.
func fileEffects(family string, before, after tree) []effect.Effect {
	var paths []string
	for _, p := range changed(before, after) {
		if gitInternal(p) {
			continue
		}
		b, inB := before[p]
		a, inA := after[p]
		if inB && inA && b.Type == a.Type && b.Perm == a.Perm && b.Link == a.Link && b.Sum == a.Sum && (b.Type == fs.ModeDir || b.Size == a.Size) {
			continue
		}
		paths = append(paths, p)
	}
	var out []effect.Effect
	for _, p := range paths {
		_, inB := before[p]
		e, inA := after[p]
		if !inA {
			e = before[p]
		}
		if e.Type == fs.ModeDir && inA != inB && slices.ContainsFunc(paths, func(q string) bool { return strings.HasPrefix(q, p+"/") }) {
			continue
		}
		out = append(out, effect.Effect{Family: family, Op: effect.WorkspaceWrite, Target: p, Where: effect.Workspace})
	}
	return out
}

// Workspace is one family's workspace: a pristine copy made once, and the
// directories sessions use, restored from it when an action changed them.
type Workspace struct {
	Family   string
	Pristine string
	tree     tree
	// git: the workspace is a checkout whose local branches are compared.
	git bool
	// refs are the pristine checkout's refs, every one (for PackRefs).
	refs map[string]string
}

// NewWorkspace makes the pristine workspace of family in dir (which must
// not exist): for clean-up-branches, the agent's checkout of the world's
// repository as the original procedure leaves it; for the others, a
// directory holding a README.
func NewWorkspace(ctx context.Context, family, dir string, w *world.World) (*Workspace, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, err
	}
	ws := &Workspace{Family: family, Pristine: dir, git: family == data.CleanUpBranches}
	if ws.git {
		if err := w.WorkspaceRepo(ctx, dir, GitRemote); err != nil {
			return nil, err
		}
	} else {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		readme := fmt.Sprintf("Workspace of the %s task.\n", family)
		if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme), 0o644); err != nil {
			return nil, err
		}
	}
	return ws.pristine()
}

// pristine gives the sandbox's user the pristine copy just made and
// records its tree and refs.
func (ws *Workspace) pristine() (*Workspace, error) {
	if err := chownTree(ws.Pristine); err != nil {
		return nil, err
	}
	t, err := readTree(ws.Pristine)
	if err != nil {
		return nil, err
	}
	ws.tree = t
	if ws.git {
		if ws.refs, err = world.SnapshotCheckoutRefs(ws.Pristine); err != nil {
			return nil, err
		}
	}
	return ws, nil
}

// State is what an action left in a workspace directory.
type State struct {
	// Dirty: the directory differs from the pristine copy in any way.
	Dirty bool
	// Effects are the file changes outside git's bookkeeping, and a
	// PackRefs effect when the checkout's refs moved between loose files
	// and packed-refs with none of their values changed.
	Effects []effect.Effect
	// LocalRefs are the checkout's branches (nil if not a checkout).
	LocalRefs map[string]string
}

// PristineRefs returns the pristine checkout's branches (nil if the
// workspace is not a checkout).
func (ws *Workspace) PristineRefs() (map[string]string, error) {
	if !ws.git {
		return nil, nil
	}
	return world.SnapshotLocalRefs(ws.Pristine)
}

// Inspect compares dir with the pristine copy.
func (ws *Workspace) Inspect(dir string) (State, error) {
	t, err := readTree(dir)
	if err != nil {
		return State{}, err
	}
	paths := changed(ws.tree, t)
	st := State{Dirty: len(paths) > 0, Effects: fileEffects(ws.Family, ws.tree, t)}
	if ws.git && slices.ContainsFunc(paths, refStorage) {
		// Refs git cannot read (an error) are not intact: no effect.
		refs, err := world.SnapshotCheckoutRefs(dir)
		if err == nil && maps.Equal(refs, ws.refs) {
			st.Effects = append(st.Effects, effect.Effect{Family: ws.Family, Op: effect.PackRefs, Target: ".git/packed-refs", Where: effect.Workspace})
		}
	}
	if ws.git {
		refs, err := world.SnapshotLocalRefs(dir)
		if err != nil {
			// A checkout whose .git is gone has no branches left.
			if !errors.Is(err, fs.ErrNotExist) {
				return State{}, err
			}
			refs = map[string]string{}
		}
		st.LocalRefs = refs
	}
	return st, nil
}

// Restore makes dir (created if missing) a copy of the pristine workspace.
// It never follows a symbolic link the session left.
func (ws *Workspace) Restore(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if err := copyTree(ws.Pristine, dir, ws.tree); err != nil {
		return err
	}
	fi, err := os.Stat(ws.Pristine)
	if err != nil {
		return err
	}
	if err := os.Chmod(dir, fi.Mode().Perm()); err != nil {
		return err
	}
	return os.Lchown(dir, sandboxUID, sandboxGID)
}

// copyTree copies the entries of t from src to dst, keeping modes and
// times, owned by the sandbox user.
func copyTree(src, dst string, t tree) error {
	paths := slices.Sorted(maps.Keys(t))
	var dirs []string
	for _, p := range paths {
		e := t[p]
		from, to := filepath.Join(src, filepath.FromSlash(p)), filepath.Join(dst, filepath.FromSlash(p))
		switch e.Type {
		case fs.ModeDir:
			if err := os.Mkdir(to, e.Perm|0o700); err != nil {
				return err
			}
			dirs = append(dirs, p)
		case fs.ModeSymlink:
			if err := os.Symlink(e.Link, to); err != nil {
				return err
			}
		case 0:
			if err := copyFile(from, to, e.Perm); err != nil {
				return err
			}
			if err := os.Chtimes(to, e.MTime, e.MTime); err != nil {
				return err
			}
		default:
			return fmt.Errorf("pristine workspace holds %s of type %v", p, e.Type)
		}
		if err := os.Lchown(to, sandboxUID, sandboxGID); err != nil {
			return err
		}
	}
	// Directory times and modes last, deepest first: creating entries
	// changes them.
	for _, p := range slices.Backward(dirs) {
		e := t[p]
		to := filepath.Join(dst, filepath.FromSlash(p))
		if err := os.Chmod(to, e.Perm); err != nil {
			return err
		}
		if err := os.Chtimes(to, e.MTime, e.MTime); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Chmod(to, perm)
}

// chownTree gives dir and everything below it to the sandbox user.
func chownTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, sandboxUID, sandboxGID)
	})
}
