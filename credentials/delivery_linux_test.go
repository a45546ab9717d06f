package credentials

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	xunix "golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestPrepareMountsTmpfs: Prepare mounts a small tmpfs without devices,
// setuid or exec, owned by the session user, with one directory per
// sandbox directory; the minted files land on it.
func TestPrepareMountsTmpfs(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	t.Cleanup(func() { _ = mountinfo.UnmountAll(dir) })
	d := NewDelivery(t.Context(), &fakeMinter{})
	t.Cleanup(d.Close)
	const uid, gid = 4321, 8765
	p, err := d.Prepare(dir, []policies.Credential{fileCred("git", ""), envCred("reg", "REG"), fileCred("kube", "/k/token")}, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	tmpfs := filepath.Join(dir, TmpfsDir)
	var st xunix.Statfs_t
	if err := xunix.Statfs(tmpfs, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != xunix.TMPFS_MAGIC {
		t.Fatalf("%s is not a tmpfs (type %#x)", tmpfs, st.Type)
	}
	for _, f := range []int64{xunix.ST_NOSUID, xunix.ST_NODEV, xunix.ST_NOEXEC} {
		if st.Flags&f == 0 {
			t.Errorf("the credential tmpfs lacks flag %#x (flags %#x)", f, st.Flags)
		}
	}
	for _, sub := range []string{tmpfs, filepath.Join(tmpfs, "0"), filepath.Join(tmpfs, "1")} {
		fi, err := os.Stat(sub)
		if err != nil {
			t.Fatal(err)
		}
		s := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o500 || s.Uid != uid || s.Gid != gid {
			t.Errorf("%s: mode %v owner %d:%d, want 0500 %d:%d", sub, fi.Mode().Perm(), s.Uid, s.Gid, uid, gid)
		}
	}
	if entries, _ := os.ReadDir(tmpfs); len(entries) != 2 {
		t.Errorf("the tmpfs holds %d entries, want one directory per sandbox directory (2)", len(entries))
	}
	if err := p.Mint(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tmpfs, "1", "token"))
	if err != nil || string(b) != "tok-s1-kube-3" {
		t.Errorf("kube credential on the tmpfs: %q %v", b, err)
	}
}

// TestPrepareRollback: a Prepare that fails after mounting leaves nothing
// mounted. The tmpfs has 256 inodes; a policy asking for more sandbox
// directories than that fails on the tmpfs itself.
func TestPrepareRollback(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	t.Cleanup(func() { _ = mountinfo.UnmountAll(dir) })
	d := NewDelivery(t.Context(), &fakeMinter{})
	t.Cleanup(d.Close)
	var creds []policies.Credential
	for i := range 300 {
		creds = append(creds, fileCred(fmt.Sprintf("c%d", i), fmt.Sprintf("/d%d/token", i)))
	}
	if _, err := d.Prepare(dir, creds, 1000, 1000); err == nil {
		t.Fatal("Prepare of 300 credential directories on a 256-inode tmpfs succeeded")
	}
	if m, err := mountinfo.Under(dir); err != nil || len(m) != 0 {
		t.Errorf("a failed Prepare left mounts: %v %v", m, err)
	}
}
