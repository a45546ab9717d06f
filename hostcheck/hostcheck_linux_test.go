package hostcheck

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestRunPassesHere runs every check on this machine, which has all airlock
// needs, and checks that each passes and that nothing is left behind: no
// new mount of the checked paths or under os.TempDir(), no open file (a
// detached mount lives as long as its fd), no directory in os.TempDir().
func TestRunPassesHere(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := testutil.RuntimeBinDir(t)
	ws := t.TempDir()
	mountsBefore := mountPoints(t)
	fdsBefore := openFilesAfterGC(t, noPidfd) // earlier tests' too
	tmpBefore := doctorTempDirs(t)

	rs := Run(t.Context(), Config{Paths: []string{ws, "/"}, BinDir: bin, Runtime: "crun"})

	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		if r.Status != StatusOK {
			t.Errorf("%s: %s: %s (fix: %s)", r.Name, r.Status, r.Detail, r.Fix)
		} else if r.Fix != "" {
			t.Errorf("%s: ok with a fix %q", r.Name, r.Fix)
		}
		t.Logf("%-12s %-4s %s", r.Name, r.Status, r.Detail)
	}
	want := []string{"kernel", "cgroup", "overlayfs", "tmpfs-xattr", "idmap", "idmap",
		"userns", "netns", "nftables", "fanotify", "loop", "seccomp", "crun-cgroup", "containerd", "runc", "crun"}
	if !slices.Equal(names, want) {
		t.Errorf("checks = %q, want %q", names, want)
	}
	if Failed(rs) {
		t.Errorf("Failed = true")
	}
	// Other processes on the machine may mount meanwhile: only a mount
	// on a checked path or a temporary directory of ours would be ours.
	for _, m := range mountPoints(t) {
		if slices.Contains(mountsBefore, m) {
			continue
		}
		mp := strings.Fields(m)[4]
		if mp == "/" || mp == ws || strings.HasPrefix(mp, filepath.Join(os.TempDir(), "airlock-doctor-")) {
			t.Errorf("mount left behind: %s", m)
		}
	}
	if after := openFilesAfterGC(t, func(fds []string) bool { return slices.Equal(fds, fdsBefore) }); !slices.Equal(after, fdsBefore) {
		t.Errorf("open files changed:\nbefore %q\nafter  %q", fdsBefore, after)
	}
	if after := doctorTempDirs(t); !slices.Equal(after, tmpBefore) {
		t.Errorf("temporary directories left: before %q, after %q", tmpBefore, after)
	}
}

func mountPoints(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// Mount ID, parent, device, root and mount point identify a mount.
		f := strings.Fields(line)
		out = append(out, strings.Join(f[:5], " "))
	}
	return out
}

// openFiles lists this process's open files (fd -> target).
func openFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue // the directory's own fd, closed by now
		}
		out = append(out, e.Name()+" -> "+target)
	}
	return out
}

// openFilesAfterGC is openFiles once garbage collection has closed what
// only it closes: containerd's GetUsernsFD starts a process and never
// releases its os.Process, whose pidfd goes with it. It waits until done
// says the list is complete, a second at most.
func openFilesAfterGC(t *testing.T, done func([]string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		runtime.GC()
		got := openFiles(t)
		if done(got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond) // the cleanup runs in its own goroutine
	}
}

func noPidfd(fds []string) bool {
	return !slices.ContainsFunc(fds, func(s string) bool { return strings.HasSuffix(s, "anon_inode:[pidfd]") })
}

func doctorTempDirs(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "airlock-doctor-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}
