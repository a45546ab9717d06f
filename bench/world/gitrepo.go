package world

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/fixture"
)

// gitRunner runs git with a clean environment: no system or global
// configuration, an empty HOME, nothing inherited but PATH.
type gitRunner struct {
	bin  string // absolute path of git
	home string
}

func (g gitRunner) env(extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + g.home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"LC_ALL=C",
	}, extra...)
}

func (g gitRunner) run(ctx context.Context, dir string, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, g.bin, args...)
	cmd.Dir = dir
	cmd.Env = g.env()
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// bareConfig is appended to the world's bare repositories' config:
// receive-pack over HTTP without REMOTE_USER, and no automatic gc (which
// would repack behind the reset's back).
const bareConfig = `[http]
	receivepack = true
[receive]
	autogc = false
[gc]
	auto = 0
`

// buildBareRepo creates the fixture's repository as a bare repository at
// dir (which must not exist) with git fast-import, packs its refs, and
// checks every commit id against the fixture.
func buildBareRepo(ctx context.Context, g gitRunner, dir string, gf fixture.Git) error {
	if _, err := g.run(ctx, "", nil, "init", "--quiet", "--bare", "--template=", "--initial-branch="+gf.MainBranch, dir); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(bareConfig)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if _, err := g.run(ctx, dir, bytes.NewReader(fastImportStream(gf)), "fast-import", "--quiet", "--date-format=raw"); err != nil {
		return err
	}
	// One pack and one packed-refs file: few files for Reset to check.
	if _, err := g.run(ctx, dir, nil, "repack", "-a", "-d", "-q"); err != nil {
		return err
	}
	if _, err := g.run(ctx, dir, nil, "pack-refs", "--all", "--prune"); err != nil {
		return err
	}
	refs, err := readRefs(os.DirFS(dir), "refs/")
	if err != nil {
		return err
	}
	want := map[string]string{"refs/heads/" + gf.MainBranch: gf.Initial.ID}
	for _, b := range gf.Branches {
		want["refs/heads/"+b.Name] = b.Commit.ID
	}
	for ref, id := range want {
		if id == "" && refs[ref] != "" {
			continue // a fixture of an operator's suite: the id is git's
		}
		if refs[ref] != id {
			return fmt.Errorf("fixture repository: %s is %q, the fixture says %s (git %s?)", ref, refs[ref], id, g.bin)
		}
	}
	if len(refs) != len(want) {
		return fmt.Errorf("fixture repository: %d refs, want %d", len(refs), len(want))
	}
	return nil
}

// fastImportStream renders the fixture as a git fast-import stream: the
// initial commit on the main branch, then each branch as one commit on it,
// with the fixture's identity and dates, so that the commit ids are those
// of the original procedure (git commit -m MESSAGE).
func fastImportStream(gf fixture.Git) []byte {
	var b bytes.Buffer
	ident := fmt.Sprintf("%s <%s>", gf.UserName, gf.UserEmail)
	commit := func(ref string, mark int, c fixture.Commit, from int) {
		when := fmt.Sprintf("%d +0000", c.Date.Unix())
		msg := c.Message + "\n"
		fmt.Fprintf(&b, "commit %s\nmark :%d\nauthor %s %s\ncommitter %s %s\ndata %d\n%s", ref, mark, ident, when, ident, when, len(msg), msg)
		if from > 0 {
			fmt.Fprintf(&b, "from :%d\n", from)
		}
		fmt.Fprintf(&b, "M 100644 inline %s\ndata %d\n%s\n", c.RelPath, len(c.Content), c.Content)
	}
	commit("refs/heads/"+gf.MainBranch, 1, gf.Initial, 0)
	for i, br := range gf.Branches {
		commit("refs/heads/"+br.Name, i+2, br.Commit, 1)
	}
	b.WriteString("done\n")
	return b.Bytes()
}

// maxRefFile bounds the size of packed-refs and loose ref files read.
const maxRefFile = 16 << 20

// readRefs reads the refs under prefix (e.g. "refs/" or "refs/heads/") of
// the git directory fsys, without running git: packed-refs first, then
// loose refs, which win. Symbolic refs and lock files are skipped. It
// returns full ref names mapped to object ids.
func readRefs(fsys fs.FS, prefix string) (map[string]string, error) {
	return readRefValues(fsys, prefix, false)
}

// readRefValues is readRefs; with symbolic, a symbolic loose ref is kept
// as "ref: TARGET".
func readRefValues(fsys fs.FS, prefix string, symbolic bool) (map[string]string, error) {
	refs := map[string]string{}
	if data, err := readLimited(fsys, "packed-refs"); err == nil {
		if err := parsePackedRefs(data, prefix, refs); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	root := strings.TrimSuffix(prefix, "/")
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() || strings.HasSuffix(p, ".lock") {
			return nil
		}
		data, err := readLimited(fsys, p)
		if err != nil {
			return err
		}
		id := strings.TrimSpace(string(data))
		if target, ok := strings.CutPrefix(id, "ref:"); ok {
			if symbolic {
				refs[p] = "ref: " + strings.TrimSpace(target)
			}
			return nil
		}
		if !isObjectID(id) {
			return fmt.Errorf("ref %s: bad content %q", p, truncate(id, 80))
		}
		refs[p] = id
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read refs: %w", err)
	}
	return refs, nil
}

// parsePackedRefs adds the refs of a packed-refs file that start with
// prefix to refs.
func parsePackedRefs(data []byte, prefix string, refs map[string]string) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || line[0] == '#' || line[0] == '^' {
			continue
		}
		id, name, ok := strings.Cut(line, " ")
		if !ok || !isObjectID(id) || !strings.HasPrefix(name, "refs/") {
			return fmt.Errorf("packed-refs line %d: %q", n, truncate(line, 80))
		}
		if strings.HasPrefix(name, prefix) {
			refs[name] = id
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("packed-refs: %w", err)
	}
	return nil
}

func readLimited(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRefFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxRefFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", name, maxRefFile)
	}
	return data, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// treeEntry is one file or directory of a saved tree.
type treeEntry struct {
	dir  bool
	mode fs.FileMode
	data []byte
}

// saveTree records every directory and regular file under dir, with the
// files' contents, keyed by slash-separated relative path.
func saveTree(dir string) (map[string]treeEntry, error) {
	tree := map[string]treeEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			tree[rel] = treeEntry{dir: true, mode: info.Mode().Perm()}
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			tree[rel] = treeEntry{mode: info.Mode().Perm(), data: data}
		default:
			return fmt.Errorf("%s: not a regular file or directory", p)
		}
		return nil
	})
	return tree, err
}

// restoreTree makes dir hold exactly tree: it removes what tree does not
// have, rewrites files whose content differs, and recreates what is
// missing. Unchanged files are left alone, so restoring a lightly used
// repository touches a handful of files.
func restoreTree(dir string, tree map[string]treeEntry) error {
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		e, ok := tree[rel]
		switch {
		case !ok || e.dir != d.IsDir() || (!e.dir && !d.Type().IsRegular()):
			if err := os.RemoveAll(p); err != nil {
				return err
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		case e.dir:
			seen[rel] = true
			return nil
		}
		cur, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Equal(cur, e.data) {
			seen[rel] = true
		} else if err := os.Remove(p); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore %s: %w", dir, err)
	}
	var missing []string
	for rel := range tree {
		if !seen[rel] {
			missing = append(missing, rel)
		}
	}
	slices.Sort(missing) // parents before children
	for _, rel := range missing {
		e, p := tree[rel], filepath.Join(dir, filepath.FromSlash(rel))
		if e.dir {
			if err := os.MkdirAll(p, e.mode); err != nil {
				return fmt.Errorf("restore %s: %w", dir, err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("restore %s: %w", dir, err)
		}
		if err := os.WriteFile(p, e.data, e.mode); err != nil {
			return fmt.Errorf("restore %s: %w", dir, err)
		}
	}
	return nil
}

// copyTree copies the regular files and directories of src to dst.
func copyTree(src, dst string) error {
	tree, err := saveTree(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return restoreTree(dst, tree)
}

// shortRef names a ref of the world's repository as the oracles do:
// "origin/<branch>" for a branch, "origin/<full name>" otherwise.
func shortRef(ref string) string {
	if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		return "origin/" + b
	}
	return "origin/" + ref
}
