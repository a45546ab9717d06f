package daemon

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runtime"
)

// holder starts a shell that blocks on its input with argv as its command
// line (argv[0] as the program's name), and stops it at the end.
func holder(t *testing.T, argv ...string) int {
	t.Helper()
	cmd := exec.Command("/bin/sh")
	cmd.Args = append([]string{argv[0], "-c", "read x"}, argv[1:]...)
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		w.Close()
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd.Process.Pid
}

func pids(orphans []orphan) []int {
	var out []int
	for _, o := range orphans {
		out = append(out, o.pid)
	}
	return out
}

// TestEndOrphans: with no session left, a logger writing under the
// daemon's root and a shim of its containerd are ended; a logger of
// another root, a shim of another containerd, and a process that merely
// names the root are left alone.
func TestEndOrphans(t *testing.T) {
	root := t.TempDir()
	other := t.TempDir()
	logger := filepath.Join(t.TempDir(), "airlock-logger")
	shim := filepath.Join(t.TempDir(), "containerd-shim-runc-v2")
	address := filepath.Join(root, "containerd", "containerd.sock")

	ours := []int{
		holder(t, logger, runtime.LoggerArg, filepath.Join(root, "sessions", "s1", "logs")),
		holder(t, shim, "-namespace", "airlock", "-address", address, "-publish-binary", "x"),
	}
	theirs := []int{
		holder(t, logger, runtime.LoggerArg, filepath.Join(other, "sessions", "s1", "logs")),
		holder(t, shim, "-namespace", "airlock", "-address", filepath.Join(other, "containerd.sock")),
		holder(t, "/bin/sh", "ls", filepath.Join(root, "sessions")),
		holder(t, logger, "--root", root+"/x"), // the binary, not in its logger mode
	}
	// /proc shows a new process's command line once it has run.
	time.Sleep(100 * time.Millisecond)
	found := pids(findOrphans(address, root, "zz-no-such-prefix", []string{logger}))
	slices.Sort(found)
	want := slices.Clone(ours)
	slices.Sort(want)
	if !slices.Equal(found, want) {
		t.Fatalf("orphans found: %v, want %v (not %v)", found, want, theirs)
	}
	endOrphans(context.Background(), address, root, "zz-no-such-prefix", []string{logger}, 5*time.Second)
	for _, pid := range ours {
		if !zombie(pid) {
			t.Errorf("orphan %d still runs", pid)
		}
	}
	for _, pid := range theirs {
		if zombie(pid) {
			t.Errorf("process %d, not the daemon's, was ended", pid)
		}
	}
}
