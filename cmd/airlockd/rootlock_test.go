package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLockRootWaitsForTheOther(t *testing.T) {
	root := t.TempDir()
	first, err := lockRoot(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	// A second airlockd on the root waits; one that is told to stop
	// meanwhile gives up with a clear error.
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := lockRoot(ctx, root); err == nil {
		t.Fatal("the root was locked twice")
	}
	got := make(chan error, 1)
	go func() {
		f, err := lockRoot(context.Background(), root)
		if err == nil {
			f.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the second lock returned (%v) while the first was held", err)
	case <-time.After(400 * time.Millisecond):
	}
	first.Close()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second lock was not taken once the first was let go")
	}
}

// TestLockRootRefusesASymlink: a symbolic link planted as the lock file
// (by whoever can write the root) is not followed: the lock fails, and the
// file it names is neither made nor locked.
func TestLockRootRefusesASymlink(t *testing.T) {
	root := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, filepath.Join(root, rootLockFile)); err != nil {
		t.Fatal(err)
	}
	if f, err := lockRoot(context.Background(), root); err == nil {
		f.Close()
		t.Fatal("the lock was taken through a symbolic link")
	}
	if _, err := os.Lstat(target); err == nil {
		t.Errorf("%s was made through the symbolic link", target)
	}
}
