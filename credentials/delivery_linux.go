package credentials

import (
	"fmt"

	xunix "golang.org/x/sys/unix"
)

// mountTmpfs mounts the small tmpfs that holds a sandbox's credential
// files on dir, owned by uid:gid, without devices, setuid or exec.
func mountTmpfs(dir string, uid, gid uint32) error {
	opts := fmt.Sprintf("size=1m,nr_inodes=256,mode=0500,uid=%d,gid=%d", uid, gid)
	return xunix.Mount("tmpfs", dir, "tmpfs", xunix.MS_NOSUID|xunix.MS_NODEV|xunix.MS_NOEXEC, opts)
}

// unmountTmpfs detaches the tmpfs on dir.
func unmountTmpfs(dir string) error { return xunix.Unmount(dir, xunix.MNT_DETACH) }
