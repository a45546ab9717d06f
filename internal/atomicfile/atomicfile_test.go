package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "tok", []byte("one"), 0o400, -1, -1); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "tok", []byte("two"), 0o400, os.Getuid(), os.Getgid()); err != nil {
		t.Fatalf("replacing a 0400 file: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "tok"))
	if err != nil || string(b) != "two" {
		t.Fatalf("content %q, %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "tok"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Fatalf("mode %#o, want 0400", fi.Mode().Perm())
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
		t.Fatalf("owner %d:%d", st.Uid, st.Gid)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestWriteRefusesBadNames(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"", ".", "..", "a/b", "../x", "a\x00b", ".tmp-x"} {
		if err := Write(dir, name, []byte("x"), 0o400, -1, -1); err == nil {
			t.Errorf("Write(%q) succeeded", name)
		}
	}
}

func TestWriteDoesNotFollowSymlinkOutOfDir(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	target := filepath.Join(outside, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The rename replaces the link itself; the target is never written.
	if err := os.Symlink(target, filepath.Join(dir, "tok")); err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, "tok", []byte("new"), 0o400, -1, -1); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("symlink target overwritten: %q", b)
	}
	fi, _ := os.Lstat(filepath.Join(dir, "tok"))
	if fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("tok is still a symlink")
	}
}

func TestWriteMissingDir(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "nope"), "tok", nil, 0o400, -1, -1)
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("Write into a missing dir = %v", err)
	}
}
