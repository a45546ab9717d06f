package fsscope

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// freshFiles is the host tree of the Fresh tests.
var freshFiles = map[string]string{
	"a.txt":         "hello\n",
	"sub/b.txt":     "b\n",
	"sub/deep/c.go": "package c\n",
	"link":          "->a.txt",
	".git/HEAD":     "ref: refs/heads/main\n",
	".git/config":   "[core]\n\tbare = false\n",
	".env":          "SECRET=1\n",
}

func freshPolicy(host, mode string) *policies.Policy {
	w := overlayWS(host)
	w.Mode = mode
	if mode != policies.ModeOverlay {
		w.OnExit = ""
	}
	return policyWith(w)
}

func mustFresh(t *testing.T, s *Session) {
	t.Helper()
	fresh, reason, err := s.Fresh(t.Context())
	if err != nil || !fresh || reason != "" {
		t.Fatalf("Fresh = %v, %q, %v; want fresh", fresh, reason, err)
	}
}

// TestFresh: a workspace is fresh right after Setup, and any change of an
// entry on the host since makes it stale, whatever the workspace's mode.
func TestFresh(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, host string)
		want   string // the reason, with the host directory as "H"
	}{
		{"file added", func(t *testing.T, host string) {
			writeFiles(t, host, map[string]string{"new.txt": "n\n"})
		}, "path H/new.txt added"},
		{"deny_read file added in a subdirectory", func(t *testing.T, host string) {
			writeFiles(t, host, map[string]string{"sub/deep/server.key": "KEY\n"})
		}, "path H/sub/deep/server.key added"},
		{"content rewritten with the same size", func(t *testing.T, host string) {
			before := lstat(t, filepath.Join(host, "a.txt"))
			writeFiles(t, host, map[string]string{"a.txt": "HELLO\n"})
			if after := lstat(t, filepath.Join(host, "a.txt")); after.Mtim == before.Mtim {
				t.Fatal("the rewrite kept the mtime")
			}
		}, "path H/a.txt changed (mtime)"},
		{"git config gains a credential", func(t *testing.T, host string) {
			writeFiles(t, host, map[string]string{".git/config": gitConfigWithToken})
		}, "path H/.git/config changed (size)"},
		{"chmod", func(t *testing.T, host string) {
			if err := os.Chmod(filepath.Join(host, "sub/b.txt"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/b.txt changed (mode)"},
		{"chown", func(t *testing.T, host string) {
			if err := os.Lchown(filepath.Join(host, "sub/b.txt"), 0, 0); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/b.txt changed (owner)"},
		{"file removed", func(t *testing.T, host string) {
			if err := os.Remove(filepath.Join(host, "sub/b.txt")); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/b.txt removed"},
		{"directory removed", func(t *testing.T, host string) {
			if err := os.RemoveAll(filepath.Join(host, "sub/deep")); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/deep removed"},
		{"file replaced by a symlink", func(t *testing.T, host string) {
			p := filepath.Join(host, "sub/b.txt")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../.env", p); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/b.txt changed (type)"},
		{"symlink retargeted", func(t *testing.T, host string) {
			p := filepath.Join(host, "link")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(".env", p); err != nil {
				t.Fatal(err)
			}
		}, "path H/link changed"},
		{"hard link made", func(t *testing.T, host string) {
			if err := os.Link(filepath.Join(host, ".env"), filepath.Join(host, "sub/env-copy")); err != nil {
				t.Fatal(err)
			}
		}, "path H/.env changed (link count)"},
		{"file moved in place of a same-size file", func(t *testing.T, host string) {
			writeFiles(t, host, map[string]string{"sub/b2.txt": "B\n"})
			if err := os.Lchown(filepath.Join(host, "sub/b2.txt"), int(hostOwner.UID), int(hostOwner.GID)); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(host, "sub/b2.txt"), filepath.Join(host, "sub/b.txt")); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub/b.txt changed (inode)"},
		{"filesystem mounted on a directory", func(t *testing.T, host string) {
			p := filepath.Join(host, "sub/deep")
			if err := syscall.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { syscall.Unmount(p, syscall.MNT_DETACH) })
		}, "path H/sub/deep changed (mount)"},
		{"file created and removed again", func(t *testing.T, host string) {
			p := filepath.Join(host, "sub/tmp")
			writeFiles(t, host, map[string]string{"sub/tmp": "t\n"})
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}, "path H/sub changed ("},
		{"workspace directory replaced", func(t *testing.T, host string) {
			if err := os.Rename(host, host+".old"); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(host, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "workspace H was replaced"},
		{"workspace directory removed", func(t *testing.T, host string) {
			if err := os.RemoveAll(host); err != nil {
				t.Fatal(err)
			}
		}, "workspace H is gone"},
	}
	for _, mode := range []string{policies.ModeOverlay, policies.ModeRO, policies.ModeRW} {
		t.Run(mode, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					host := hostTree(t, hostOwner, freshFiles)
					s := setup(t, freshPolicy(host, mode), sandboxer, WithQuotaBackend(QuotaTmpfs))
					mustFresh(t, s)
					tt.change(t, host)
					fresh, reason, err := s.Fresh(t.Context())
					want := strings.ReplaceAll(tt.want, "H", host)
					if err != nil || fresh || !strings.HasPrefix(reason, want) {
						t.Errorf("after the change, Fresh = %v, %q, %v; want stale, %q", fresh, reason, err, want)
					}
				})
			}
		})
	}
}

// TestFreshChangesNothing: Fresh leaves the host tree, the sandbox's
// mounts and the session's state as they were, and the check repeats.
func TestFreshChangesNothing(t *testing.T) {
	host := hostTree(t, hostOwner, freshFiles)
	extra := hostTree(t, hostOwner, map[string]string{"tool.cfg": "cfg\n"})
	p := freshPolicy(host, policies.ModeOverlay)
	ro := overlayWS(hostTree(t, hostOwner, map[string]string{"r.txt": "r\n"}))
	ro.Mode, ro.Target, ro.OnExit = policies.ModeRO, "/src", ""
	p.Workspaces = append(p.Workspaces, ro)
	p.Mounts = []policies.Mount{{HostPath: extra, Target: "/etc/tool"}}
	s := setup(t, p, sandboxer)
	hostBefore := digest(t, host)
	mountsBefore, err := mountsUnder(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	stateBefore := readFile(t, filepath.Join(s.Dir(), stateFile))
	specBefore := s.Mounts()
	for range 3 {
		mustFresh(t, s)
	}
	if digest(t, host) != hostBefore {
		t.Error("Fresh changed the host tree")
	}
	if m, err := mountsUnder(s.Dir()); err != nil || !slices.Equal(m, mountsBefore) {
		t.Errorf("mounts after Fresh = %v, %v; want %v", m, err, mountsBefore)
	}
	if readFile(t, filepath.Join(s.Dir(), stateFile)) != stateBefore {
		t.Error("Fresh changed the session state")
	}
	if got := s.Mounts(); len(got) != len(specBefore) {
		t.Errorf("Mounts after Fresh: %d, want %d", len(got), len(specBefore))
	}
	// Extra mounts are plain binds: Setup planned nothing in them.
	writeFiles(t, extra, map[string]string{".env": "X\n"})
	mustFresh(t, s)
	// The second workspace is checked too.
	writeFiles(t, p.Workspaces[1].HostPath, map[string]string{"r2.txt": "r\n"})
	if fresh, reason, err := s.Fresh(t.Context()); err != nil || fresh || !strings.Contains(reason, "r2.txt added") {
		t.Errorf("after a change in the second workspace, Fresh = %v, %q, %v", fresh, reason, err)
	}
}

// TestFreshNoWorkspace: a session without workspaces is fresh.
func TestFreshNoWorkspace(t *testing.T) {
	extra := hostTree(t, hostOwner, map[string]string{"tool.cfg": "cfg\n"})
	p := policyWith()
	p.Mounts = []policies.Mount{{HostPath: extra, Target: "/etc/tool", ReadOnly: true}}
	s := setup(t, p, sandboxer)
	mustFresh(t, s)
}

// TestFreshLoaded: a session loaded from disk has no scan to compare
// with, so it is never fresh.
func TestFreshLoaded(t *testing.T) {
	host := hostTree(t, hostOwner, freshFiles)
	s := setup(t, freshPolicy(host, policies.ModeRW), sandboxer, WithQuotaBackend(QuotaTmpfs))
	loaded, err := Load(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	fresh, reason, err := loaded.Fresh(t.Context())
	if err != nil || fresh || reason != "not scanned in this process" {
		t.Errorf("Fresh of a loaded session = %v, %q, %v", fresh, reason, err)
	}
}

// TestFreshCanceled: a cancelled context fails the check; it is not
// reported as a difference.
func TestFreshCanceled(t *testing.T) {
	host := hostTree(t, hostOwner, freshFiles)
	s := setup(t, freshPolicy(host, policies.ModeRO), sandboxer)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	fresh, reason, err := s.Fresh(ctx)
	if err == nil || fresh || reason != "" {
		t.Errorf("Fresh(cancelled) = %v, %q, %v; want an error", fresh, reason, err)
	}
}

// TestFreshWalkOrder: Fresh relies on the scan listing entries in
// walkCompare order, strictly.
func TestFreshWalkOrder(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"a": "->x", "a.txt": "1", "a-b/c": "2", "b/a/z": "3", "b/a.z": "4", "b/a0": "5", "B": "6", "b/.a/": "",
	})
	tr, err := openTree(host)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	entries, err := snapshot(t.Context(), tr)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(entries); i++ {
		if walkCompare(entries[i-1].Path, entries[i].Path) >= 0 {
			t.Errorf("scan lists %q before %q", entries[i-1].Path, entries[i].Path)
		}
	}
}

// coarseDir mounts a fresh ext4 with 128-byte inodes, whose timestamps
// have whole-second resolution, on a new directory owned by the
// workspace owner.
func coarseDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(tempDir(t), "coarse")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "coarse.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(32 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.CommandContext(t.Context(), "mkfs.ext4", "-q", "-F", "-I", "128", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if err := mountImage(img, dir, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmount(dir); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := os.Chown(dir, int(hostOwner.UID), int(hostOwner.GID)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFreshCoarseTimestamps: where timestamps cannot show a rewrite
// within the same second, Fresh compares the content hash Setup
// recorded.
func TestFreshCoarseTimestamps(t *testing.T) {
	testutil.RequiresRoot(t)
	for attempt := 1; ; attempt++ {
		host := coarseDir(t)
		// Start at the beginning of a second, so that Setup and the
		// rewrite fit in it.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		writeFiles(t, host, map[string]string{"a.txt": "hello\n", "sub/b.txt": "b\n"})
		chownTree(t, host, hostOwner)
		before := lstat(t, filepath.Join(host, "a.txt"))
		if before.Mtim.Nsec != 0 || before.Ctim.Nsec != 0 {
			t.Fatalf("timestamps on the test filesystem are not coarse: %v %v", before.Mtim, before.Ctim)
		}
		s := setup(t, freshPolicy(host, policies.ModeOverlay), hostOwner, WithQuotaBackend(QuotaTmpfs))
		s.mu.Lock()
		hashed := slices.ContainsFunc(s.scans[0], func(e entry) bool { return e.Path == "a.txt" && e.Hash != "" })
		s.mu.Unlock()
		if !hashed {
			t.Fatal("Setup recorded no content hash on a filesystem with coarse timestamps")
		}
		mustFresh(t, s)
		writeFiles(t, host, map[string]string{"a.txt": "HELLO\n"})
		after := lstat(t, filepath.Join(host, "a.txt"))
		fresh, reason, err := s.Fresh(t.Context())
		if after.Mtim != before.Mtim || after.Ctim != before.Ctim {
			// The second ended before the rewrite: the metadata tells.
			if err != nil || fresh {
				t.Fatalf("after a rewrite, Fresh = %v, %q, %v", fresh, reason, err)
			}
			if attempt == 5 {
				t.Fatal("could not rewrite a file within the second it was written in")
			}
			continue
		}
		if want := "path " + host + "/a.txt changed (content)"; err != nil || fresh || reason != want {
			t.Errorf("after a rewrite within the same second, Fresh = %v, %q, %v; want stale, %q", fresh, reason, err, want)
		}
		return
	}
}
