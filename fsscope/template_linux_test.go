package fsscope

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A copied template is a valid, empty ext4 filesystem of the right size
// that takes no more disk than the template, and the template is built once.
func TestImageFromTemplate(t *testing.T) {
	testutil.RequiresRoot(t)
	cache := filepath.Join(t.TempDir(), "cache")
	dir := t.TempDir()
	const size = 64 << 20
	a, b := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.img")
	if err := newImage(context.Background(), cache, a, size); err != nil {
		t.Fatal(err)
	}
	tmpl := filepath.Join(cache, "ext4-67108864.img")
	st1, err := os.Stat(tmpl)
	if err != nil {
		t.Fatalf("no template after the first image: %v", err)
	}
	if err := newImage(context.Background(), cache, b, size); err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(tmpl)
	if !st1.ModTime().Equal(st2.ModTime()) {
		t.Error("the template was rebuilt for the second image")
	}
	for _, img := range []string{a, b} {
		st, err := os.Stat(img)
		if err != nil || st.Size() != size {
			t.Fatalf("%s: %v size %d, want %d", img, err, st.Size(), size)
		}
		out, err := exec.Command("e2fsck", "-n", "-f", img).CombinedOutput()
		if err != nil {
			t.Errorf("e2fsck %s: %v\n%s", img, err, out)
		}
		if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > size/4 {
			t.Errorf("%s uses %d bytes on disk; a sparse copy of an empty filesystem needs far less", img, used)
		}
	}
	// The copies hold the same bytes as the template.
	ta, _ := os.ReadFile(tmpl)
	ab, _ := os.ReadFile(a)
	if !bytes.Equal(ta, ab) {
		t.Error("copy differs from the template")
	}
	// Each copy is its own file: writing one leaves the other alone.
	f, err := os.OpenFile(a, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), size-1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	bb, _ := os.ReadFile(b)
	if bb[size-1] != 0 {
		t.Error("writing one copy changed another")
	}
	// An existing destination is never overwritten.
	if err := newImage(context.Background(), cache, a, size); err == nil {
		t.Error("newImage overwrote an existing image")
	}
}

// TestRemoveStaleTemplates: a template a killed daemon was formatting
// (named after its pid) is removed; one a running process formats, and
// the finished templates, stay.
func TestRemoveStaleTemplates(t *testing.T) {
	cache := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{
		"ext4-1048576.img": true,
		fmt.Sprintf("ext4-1048576.img.tmp-%d", dead.Process.Pid): false,
		fmt.Sprintf("ext4-2097152.img.tmp-%d", os.Getpid()):      true,
		"ext4-1048576.img.tmp-x":                                 true,
	}
	for name := range names {
		if err := os.WriteFile(filepath.Join(cache, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveStaleTemplates(cache); err != nil {
		t.Fatal(err)
	}
	for name, keep := range names {
		if _, err := os.Stat(filepath.Join(cache, name)); (err == nil) != keep {
			t.Errorf("%s: kept %v, want %v", name, err == nil, keep)
		}
	}
	if err := RemoveStaleTemplates(filepath.Join(cache, "none")); err != nil {
		t.Errorf("a cache not made yet: %v", err)
	}
}
