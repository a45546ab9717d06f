package netns_test

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// nsInode is the inode of the network namespace behind a /proc ns link.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestCreateLeavesNoThreadBehind creates namespaces, and dialers in them,
// from many goroutines at once and checks that every thread of the process, the main thread
// included, is still in the namespace the process started in. A thread
// that stayed in a new namespace would keep it alive after Remove, and
// when it is the main thread, /proc/self/ns/net (what the `--uplink host`
// gateway opens as "the daemon's namespace") would name the new one.
func TestCreateLeavesNoThreadBehind(t *testing.T) {
	testutil.RequiresRoot(t)
	runtime.LockOSThread()
	want := nsInode(t, "/proc/thread-self/ns/net")
	runtime.UnlockOSThread()
	if got := nsInode(t, "/proc/self/ns/net"); got != want {
		t.Fatalf("main thread in netns %d before the test, this thread in %d", got, want)
	}

	dir := t.TempDir()
	// Create makes dir a shared mount point, as `ip netns add` does.
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	const workers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				p, err := netns.Create(dir, "n"+string(rune('a'+w))+string(rune('a'+i)))
				if err != nil {
					errs <- err
					return
				}
				d, err := netns.NewDialer(p)
				if err != nil {
					errs <- err
					return
				}
				d.Close()
				if err := netns.Remove(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// A closed dialer's thread leaves its namespace after Close returns.
	var stray []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stray = stray[:0]
		tasks, err := filepath.Glob("/proc/self/task/*/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			if got, err := os.Readlink(task); err == nil && nsInode(t, task) != want {
				stray = append(stray, task+" in "+got)
			}
		}
		if len(stray) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, s := range stray {
		t.Errorf("thread %s, not the process's namespace", s)
	}
}
