package fsscope

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestReadOnlyMounts: ro workspaces and read-only extra mounts refuse
// every write; an rw workspace writes through, as the workspace owner.
func TestReadOnlyMounts(t *testing.T) {
	roHost := hostTree(t, hostOwner, map[string]string{"a.txt": "a\n", "d/b.txt": "b\n"})
	rwHost := hostTree(t, hostOwner, map[string]string{"c.txt": "c\n"})
	extra := hostTree(t, hostOwner, map[string]string{"tool.cfg": "cfg\n"})
	roBefore, extraBefore := digest(t, roHost), digest(t, extra)
	ro := overlayWS(roHost)
	ro.Mode, ro.Target, ro.OnExit = policies.ModeRO, "/src", ""
	rw := overlayWS(rwHost)
	rw.Mode, rw.Target, rw.OnExit = policies.ModeRW, "/out", ""
	p := policyWith(ro, rw)
	p.Mounts = []policies.Mount{
		{HostPath: extra, Target: "/etc/tool", ReadOnly: true},
		{HostPath: filepath.Join(extra, "tool.cfg"), Target: "/etc/tool.cfg", ReadOnly: true},
	}
	s := setup(t, p, sandboxer)
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "write", Path: "/src/a.txt", Arg: "x"},
		probeAction{Op: "write", Path: "/src/new", Arg: "x"},
		probeAction{Op: "remove", Path: "/src/d/b.txt"},
		probeAction{Op: "chmod", Path: "/src/a.txt", Arg: "777"},
		probeAction{Op: "rename", Path: "/src/a.txt", Arg: "/src/z"},
		probeAction{Op: "mkdir", Path: "/src/newdir"},
		probeAction{Op: "symlink", Path: "/src/l", Arg: "a.txt"},
		probeAction{Op: "write", Path: "/etc/tool/tool.cfg", Arg: "x"},
		probeAction{Op: "write", Path: "/etc/tool/new", Arg: "x"},
		probeAction{Op: "write", Path: "/etc/tool.cfg", Arg: "x"},
	)
	for _, r := range res {
		if r.ok() || r.Errno != int(syscall.EROFS) {
			t.Errorf("write to a read-only mount: %v, want EROFS", r)
		}
	}
	res = mustProbe(t, s, sandboxer,
		probeAction{Op: "read", Path: "/src/a.txt"},
		probeAction{Op: "read", Path: "/etc/tool.cfg"},
		probeAction{Op: "write", Path: "/out/c.txt", Arg: "c2\n"},
		probeAction{Op: "write", Path: "/out/new.txt", Arg: "n\n"},
	)
	if res[0].Data != "a\n" || res[1].Data != "cfg\n" {
		t.Errorf("reads: %v", res)
	}
	if digest(t, roHost) != roBefore || digest(t, extra) != extraBefore {
		t.Error("a read-only host path changed")
	}
	if got := readFile(t, filepath.Join(rwHost, "c.txt")); got != "c2\n" {
		t.Errorf("rw workspace c.txt = %q", got)
	}
	if st := lstat(t, filepath.Join(rwHost, "new.txt")); st.Uid != hostOwner.UID || st.Gid != hostOwner.GID {
		t.Errorf("file the sandbox made in an rw workspace is owned by %d:%d, want %v", st.Uid, st.Gid, hostOwner)
	}
	// Nothing to commit in ro and rw workspaces.
	if cs, err := s.Diff(t.Context()); err != nil || len(cs.Workspaces) != 0 {
		t.Errorf("Diff = %+v, %v", cs, err)
	}
}

// TestDiskQuota: filling the upper directory fails with ENOSPC in the
// sandbox at the quota, for both backends.
func TestDiskQuota(t *testing.T) {
	for _, backend := range []QuotaBackend{QuotaImage, QuotaTmpfs} {
		t.Run(string(backend), func(t *testing.T) {
			host := hostTree(t, hostOwner, map[string]string{"a": "a\n"})
			p := policyWith(overlayWS(host))
			p.Resources.Disk = 16 << 20
			s := setup(t, p, sandboxer, WithQuotaBackend(backend))
			res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, probeAction{Op: "fill", Path: "/workspace/big"})
			if res[0].Errno != int(syscall.ENOSPC) {
				t.Fatalf("filling the workspace: %v, want ENOSPC", res[0])
			}
			if n, _ := strconv.Atoi(res[0].Data); n < 8 || n > 16 {
				t.Errorf("%s MiB written before ENOSPC with a 16 MiB quota", res[0].Data)
			}
			if st := lstat(t, filepath.Join(host, "a")); st.Size != 2 {
				t.Error("host changed")
			}
		})
	}
}

// TestTeardownRemovesEverything checks /proc/self/mountinfo and the state
// directory after removal, after keeping the upper for review, and after a
// daemon crash followed by a restart (Load) or a cleanup.
func TestTeardownRemovesEverything(t *testing.T) {
	testutil.RequiresRoot(t)
	mkPolicy := func(t *testing.T) *policies.Policy {
		ov := hostTree(t, hostOwner, map[string]string{".env": "e", "a": "a"})
		ro := hostTree(t, hostOwner, map[string]string{"b": "b"})
		w2 := overlayWS(ro)
		w2.Mode, w2.Target, w2.OnExit = policies.ModeRO, "/ro", ""
		p := policyWith(overlayWS(ov), w2)
		p.Mounts = []policies.Mount{{HostPath: ro, Target: "/extra", ReadOnly: true}}
		return p
	}
	assertGone := func(t *testing.T, dir string) {
		t.Helper()
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), dir) {
			t.Errorf("mounts under %s remain:\n%s", dir, grepLines(string(data), dir))
		}
		if exists(dir) {
			t.Errorf("%s still exists", dir)
		}
		if out, _ := exec.Command("losetup", "-a").CombinedOutput(); strings.Contains(string(out), dir) {
			t.Errorf("loop device still attached: %s", out)
		}
	}
	start := func(t *testing.T) (*Session, string) {
		dir := filepath.Join(t.TempDir(), "fs")
		s, err := Setup(t.Context(), dir, mkPolicy(t), sandboxer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Cleanup(context.Background(), dir) })
		if m, _ := mountsUnder(dir); len(m) != 4 {
			t.Fatalf("mounts under the state directory: %v", m)
		}
		return s, dir
	}

	t.Run("remove", func(t *testing.T) {
		s, dir := start(t)
		if err := s.Teardown(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		assertGone(t, dir)
	})
	t.Run("keep for review, then remove", func(t *testing.T) {
		s, dir := start(t)
		if err := os.WriteFile(filepath.Join(merged(s, 0), "new"), []byte("n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.Teardown(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		if m, _ := mountsUnder(dir); len(m) != 0 {
			t.Errorf("mounts while kept for review: %v", m)
		}
		// The daemon restarts while the session waits for review.
		s2, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if s2.Live() {
			t.Error("a reviewed session loads as live")
		}
		cs, err := s2.Diff(t.Context())
		if err != nil || cs.Len() != 1 {
			t.Fatalf("Diff after restart = %v, %v", changeKinds(cs), err)
		}
		if err := s2.Teardown(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		assertGone(t, dir)
	})
	t.Run("crash then restart", func(t *testing.T) {
		s, dir := start(t)
		want := s.Mounts()
		// The daemon dies: the Session is dropped with everything mounted.
		s2, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !s2.Live() || len(s2.Mounts()) != len(want) {
			t.Fatalf("reloaded session: live %v, mounts %v", s2.Live(), s2.Mounts())
		}
		for i := range want {
			if s2.Mounts()[i].Destination != want[i].Destination || s2.Mounts()[i].Source != want[i].Source {
				t.Errorf("mount %d = %+v, want %+v", i, s2.Mounts()[i], want[i])
			}
		}
		if err := s2.Teardown(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		assertGone(t, dir)
	})
	t.Run("crash then cleanup", func(t *testing.T) {
		_, dir := start(t)
		if err := Cleanup(t.Context(), dir); err != nil {
			t.Fatal(err)
		}
		assertGone(t, dir)
	})
	t.Run("failed setup leaves nothing", func(t *testing.T) {
		p := mkPolicy(t)
		p.Workspaces = append(p.Workspaces, policies.Workspace{HostPath: "/nonexistent/dir", Target: "/x", Mode: policies.ModeOverlay})
		dir := filepath.Join(t.TempDir(), "fs")
		if _, err := Setup(t.Context(), dir, p, sandboxer); err == nil {
			t.Fatal("Setup with a missing workspace succeeded")
		}
		assertGone(t, dir)
	})
	t.Run("second setup in the same directory", func(t *testing.T) {
		_, dir := start(t)
		if _, err := Setup(t.Context(), dir, mkPolicy(t), sandboxer); !errdefs.IsAlreadyExists(err) {
			t.Fatalf("second Setup = %v", err)
		}
		if m, _ := mountsUnder(dir); len(m) != 4 {
			t.Errorf("the refused Setup touched the first session's mounts: %v", m)
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestUpperInUse: while a sandbox still holds the overlay (here, a bind
// of it standing in for the sandbox's mount namespace), the quota image is
// not mounted a second time for review.
func TestUpperInUse(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"a": "a\n"})
	s := setup(t, policyWith(overlayWS(host)), hostOwner)
	if err := os.WriteFile(filepath.Join(merged(s, 0), "a"), []byte("b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	held := filepath.Join(t.TempDir(), "held")
	if err := os.Mkdir(held, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(merged(s, 0), held, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(held, syscall.MNT_DETACH) })
	stop(t, s)
	if _, err := s.Diff(t.Context()); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Diff while the overlay is still in use = %v", err)
	}
	if err := syscall.Unmount(held, 0); err != nil {
		t.Fatal(err)
	}
	// The loop device goes once the last user of the filesystem is gone.
	cs, err := s.Diff(t.Context())
	for i := 0; errdefs.IsFailedPrecondition(err) && i < 100; i++ {
		runtime.Gosched()
		cs, err = s.Diff(t.Context())
	}
	if err != nil || cs.Len() != 1 {
		t.Fatalf("Diff after the sandbox let go = %v, %v", changeKinds(cs), err)
	}
}
