package mountinfo

import (
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
