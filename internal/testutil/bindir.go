package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// RuntimeBinDir returns the directory holding containerd, runc and crun:
// AIRLOCK_BIN_DIR, as make test sets it, or else _output/bin at the root of
// the module, where make deps puts them. It fails the test when they are
// not there.
func RuntimeBinDir(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("AIRLOCK_BIN_DIR")
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			tb.Fatal(err)
		}
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = filepath.Join(d, "_output", "bin")
				break
			}
			if filepath.Dir(d) == d {
				tb.Fatalf("no go.mod above %s and no AIRLOCK_BIN_DIR", wd)
			}
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range []string{"containerd", "runc", "crun"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			tb.Fatalf("%v (run make deps, or set AIRLOCK_BIN_DIR)", err)
		}
	}
	return dir
}
