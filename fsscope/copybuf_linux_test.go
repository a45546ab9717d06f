package fsscope

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestCopyFile copies a file within one filesystem (copy_file_range) and
// across two (/dev/shm and the test's temporary directory, when they
// differ: the pooled buffer), from an offset, and checks every byte.
func TestCopyFile(t *testing.T) {
	want := make([]byte, 300<<10+17)
	if _, err := rand.Read(want); err != nil {
		t.Fatal(err)
	}
	dirs := []string{t.TempDir()}
	if shm, err := os.MkdirTemp("/dev/shm", "copyfile-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs = append(dirs, shm)
	}
	for _, from := range dirs {
		for _, to := range dirs {
			src := filepath.Join(from, "src")
			if err := os.WriteFile(src, want, 0o600); err != nil {
				t.Fatal(err)
			}
			sf, err := os.Open(src)
			if err != nil {
				t.Fatal(err)
			}
			// From an offset: the copy takes the rest.
			if _, err := sf.Seek(1000, 0); err != nil {
				t.Fatal(err)
			}
			df, err := os.Create(filepath.Join(to, "dst"))
			if err != nil {
				t.Fatal(err)
			}
			n, err := copyFile(df, sf)
			sf.Close()
			df.Close()
			if err != nil || n != int64(len(want)-1000) {
				t.Fatalf("%s -> %s: %d, %v; want %d", from, to, n, err, len(want)-1000)
			}
			got, err := os.ReadFile(filepath.Join(to, "dst"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want[1000:]) {
				t.Fatalf("%s -> %s: the copy differs", from, to)
			}
		}
	}
}

// TestCopyPooledAllocates nothing per copy of a file into a hash: its
// buffer comes from the pool (io.Copy would allocate 32 KiB each time).
func TestCopyPooledAllocates(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 100<<10)
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	copyOnce := func() {
		if _, err := f.Seek(0, 0); err != nil {
			t.Fatal(err)
		}
		h.Reset()
		if n, err := copyPooled(h, f); err != nil || n != int64(len(data)) {
			t.Fatal(n, err)
		}
	}
	copyOnce()
	const runs = 100
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		copyOnce()
	}
	runtime.ReadMemStats(&after)
	// Under the race detector sync.Pool drops a quarter of what it is
	// given back, on purpose: a buffer every fourth copy on average.
	limit := uint64(1 << 10)
	if raceEnabled {
		limit = copyBufSize / 2
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > limit {
		t.Errorf("%d bytes allocated a copy, want under %d", per, limit)
	}
}
