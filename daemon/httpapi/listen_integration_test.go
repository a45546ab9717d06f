package httpapi_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// reachableByOthers reports whether a user other than the owner (and not
// in its group) could connect to the socket at p: it needs write
// permission on the socket and search permission on every directory
// above it.
func reachableByOthers(t *testing.T, p string) bool {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o002 == 0 {
		return false
	}
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		di, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if di.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == "/" {
			return true
		}
	}
}

// TestListenHasNoUmaskWindow binds the API socket under umask 0, which
// gives a socket mode 0777, and checks at the moment of the bind that no
// other user could reach it, and that the socket ends up 0600 (or 0660
// and group-owned with a group) in place.
func TestListenHasNoUmaskWindow(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, group := range []string{"", "0"} {
		// Reachable from / by everyone, as /run/airlock is.
		dir, err := os.MkdirTemp("/tmp", "al-listen-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "api.sock")
		var bound string
		var reachable bool
		httpapi.SetAfterBind(func(p string) {
			bound = p
			reachable = reachableByOthers(t, p)
		})
		old := syscall.Umask(0)
		l, err := httpapi.Listen(sock, group)
		syscall.Umask(old)
		httpapi.SetAfterBind(nil)
		if err != nil {
			t.Fatal(err)
		}
		if bound == "" {
			t.Fatal("the bind hook was not called")
		}
		if reachable {
			t.Errorf("group %q: the socket was reachable by other users right after the bind at %s", group, bound)
		}
		fi, err := os.Stat(sock)
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o600)
		if group != "" {
			want = 0o660
		}
		if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != want {
			t.Errorf("group %q: socket mode %v, want socket %v", group, fi.Mode(), want)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			t.Errorf("socket owned by %d:%d", st.Uid, st.Gid)
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		c.Close()
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Errorf("socket directory holds %v, want only the socket", entries)
		}
		l.Close()
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("socket left after Close: %v", err)
		}
	}
}

// TestListenRefusesUnsafeSocketDirectory checks that Listen refuses to
// serve from a directory another user owns or others can write to:
// whoever can write there can replace the socket with their own.
func TestListenRefusesUnsafeSocketDirectory(t *testing.T) {
	testutil.RequiresRoot(t)
	foreign := t.TempDir()
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(foreign, 0o755); err != nil {
		t.Fatal(err)
	}
	worldWritable := t.TempDir()
	if err := os.Chmod(worldWritable, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	groupWritable := t.TempDir()
	if err := os.Chmod(groupWritable, 0o775); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dir, want string }{
		{foreign, "belongs to uid 65534"},
		{worldWritable, "mode 1777"},
		{groupWritable, "mode 0775"},
	} {
		sock := filepath.Join(tc.dir, "api.sock")
		l, err := httpapi.Listen(sock, "")
		if err == nil {
			l.Close()
			t.Errorf("Listen in %s succeeded", tc.dir)
			continue
		}
		if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen in %s: %v, want a permission error saying %q", tc.dir, err, tc.want)
		}
		if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("refused Listen left %s", sock)
		}
	}
}
