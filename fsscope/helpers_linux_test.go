package fsscope

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// Users of the integration tests: the workspace owner and a different
// sandbox user (which makes the workspace mount idmapped).
var (
	hostOwner = Owner{UID: 1000, GID: 1000}
	sandboxer = Owner{UID: 2000, GID: 2000}
)

// tempDir returns a new directory whose parents other users can traverse
// (t.TempDir makes them 0700), so that a non-root process reaches it.
func tempDir(t *testing.T) string {
	t.Helper()
	testutil.RequiresRoot(t)
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// hostTree creates a workspace owned by owner. Keys are paths; a value
// starting with "->" makes a symlink, a key ending in "/" a directory.
func hostTree(t *testing.T, owner Owner, files map[string]string) string {
	t.Helper()
	root := tempDir(t)
	writeFiles(t, root, files)
	chownTree(t, root, owner)
	return root
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := files[k]
		p := filepath.Join(root, k)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(k, "/"):
			err := os.MkdirAll(p, 0o755)
			if err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(v, "->"):
			if err := os.Symlink(strings.TrimPrefix(v, "->"), p); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func chownTree(t *testing.T, root string, o Owner) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(o.UID), int(o.GID))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// digest summarises a tree (paths, types, modes, owners, contents, link
// targets) to tell whether anything in it changed.
func digest(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := fmt.Sprintf("%s %o %d:%d", rel, st.Mode, st.Uid, st.Gid)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		case syscall.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func overlayWS(host string) policies.Workspace {
	return policies.Workspace{HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitReview}
}

func policyWith(ws ...policies.Workspace) *policies.Policy {
	return &policies.Policy{Label: "test", Image: "img", Workspaces: ws, Resources: policies.Resources{Disk: 64 << 20}}
}

// setup starts a session and removes it at the end of the test.
func setup(t *testing.T, p *policies.Policy, sandbox Owner, opts ...Option) *Session {
	t.Helper()
	testutil.RequiresRoot(t)
	dir := filepath.Join(t.TempDir(), "fs")
	s, err := Setup(t.Context(), dir, p, sandbox, opts...)
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	t.Cleanup(func() {
		if err := Cleanup(context.Background(), dir); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
		if m, _ := mountsUnder(dir); len(m) > 0 {
			t.Errorf("mounts left under %s: %v", dir, m)
		}
	})
	return s
}

// stop tears the sandbox down and keeps the changes for review.
func stop(t *testing.T, s *Session) {
	t.Helper()
	if err := s.Teardown(t.Context(), true); err != nil {
		t.Fatalf("Teardown(keep): %v", err)
	}
}

// merged returns the host-side path of workspace i's mount while live.
func merged(s *Session, i int) string { return s.wsMnt(i) }

func mustProbe(t *testing.T, s *Session, who Owner, actions ...probeAction) []probeResult {
	t.Helper()
	res := runProbe(t, s.Mounts(), who.UID, who.GID, actions...)
	for _, r := range res {
		if !r.ok() {
			t.Fatalf("sandbox action failed: %v", r)
		}
	}
	return res
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// git runs git in dir with the commit rules' hardened environment.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(slices.Clone(gitEnv), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// changeKinds renders a change set compactly: "path kind [old]".
func changeKinds(cs *ChangeSet) []string {
	var out []string
	for _, w := range cs.Workspaces {
		for _, c := range w.Changes {
			s := c.Path + " " + string(c.Kind)
			if c.OldPath != "" {
				s += " " + c.OldPath
			}
			out = append(out, s)
		}
	}
	return out
}
