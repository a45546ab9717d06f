package mountinfo

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestUnescape(t *testing.T) {
	if got := Unescape(`/a\040b\011c\134d`); got != "/a b\tc\\d" {
		t.Errorf("unescape = %q", got)
	}
	if got := Unescape("/plain"); got != "/plain" {
		t.Errorf("unescape = %q", got)
	}
}

func TestUnderAndUnmountAll(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	deep := filepath.Join(dir, "a b", "c")
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{dir, filepath.Join(dir, "a b"), deep} {
		if err := unix.Mount("tmpfs", m, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
		if m != deep {
			if err := os.MkdirAll(deep, 0o700); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() { _ = UnmountAll(dir) })
	got, err := Under(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{deep, filepath.Join(dir, "a b"), dir}; !slices.Equal(got, want) {
		t.Fatalf("Under = %q, want %q (deepest first, unescaped)", got, want)
	}
	if err := UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := Under(dir); len(got) != 0 {
		t.Errorf("left mounted: %q", got)
	}
	if err := UnmountAll(dir); err != nil {
		t.Errorf("UnmountAll with nothing mounted: %v", err)
	}
}

// TestUnderAllocations: Under is called several times for every session
// (its workspace's exit and teardown, the daemon's teardown) with every
// other session's mounts in the table; what it allocates must not grow
// with the mounts it skips. It read the whole table, then made a string
// and a field slice of every line (about 1 MiB a session in a soak's
// heap profile).
func TestUnderAllocations(t *testing.T) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	lines := bytes.Count(data, []byte("\n"))
	dir := filepath.Join(t.TempDir(), "nothing mounted here")
	allocs := testing.AllocsPerRun(20, func() {
		if got, err := Under(dir); err != nil || len(got) != 0 {
			t.Fatalf("Under(%q) = %q, %v", dir, got, err)
		}
	})
	// Opening the file, its scanner and buffer: a few, whatever the
	// table's size.
	t.Logf("%v allocations a call, %d mounts in the table", allocs, lines)
	if allocs > 8 {
		t.Errorf("Under allocated %v times a call with %d mounts in the table, none under dir; want at most 8", allocs, lines)
	}
}
