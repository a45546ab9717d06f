package fsscope

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/core/mount"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// overlayOptions keep the upper directory a plain description of the
// changes: no redirects (directory renames copy instead), no metacopy
// (a copied-up file carries its data), no index and no xino.
var overlayOptions = [][2]string{
	{"redirect_dir", "off"},
	{"metacopy", "off"},
	{"index", "off"},
	{"xino", "off"},
}

// mountOverlay mounts an overlay of lower (read-only), upper and work on
// target with the new mount API, so that paths need no escaping. attrs are
// MOUNT_ATTR_* flags; a non-nil userns makes the mount idmapped.
func mountOverlay(lower, upper, work, target string, attrs uint64, userns *os.File) (retErr error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	set := func(k, v string) error {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return fmt.Errorf("overlay option %s=%q: %w%s", k, v, err, fsErrorLog(fsfd))
		}
		return nil
	}
	if err := set("lowerdir+", lower); err != nil {
		return err
	}
	if err := set("upperdir", upper); err != nil {
		return err
	}
	if err := set("workdir", work); err != nil {
		return err
	}
	for _, o := range overlayOptions {
		if err := set(o[0], o[1]); err != nil {
			return err
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create overlay of %s: %w%s", lower, err, fsErrorLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	return attachDetached(mfd, target, attrs, userns)
}

func attachDetached(mfd int, target string, attrs uint64, userns *os.File) error {
	attr := unix.MountAttr{Attr_set: attrs}
	if userns != nil {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns.Fd())
	}
	if attr.Attr_set != 0 {
		if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			if userns != nil && errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("set attributes of mount for %s: %w (the filesystem may not support idmapped mounts)", target, err)
			}
			return fmt.Errorf("set attributes of mount for %s: %w", target, err)
		}
	}
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach mount on %s: %w", target, err)
	}
	return nil
}

// fsErrorLog reads the messages the kernel left on an fs context.
func fsErrorLog(fsfd int) string {
	var msgs []string
	buf := make([]byte, 512)
	for range 16 {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		msgs = append(msgs, strings.TrimSpace(string(buf[:n])))
	}
	if len(msgs) == 0 {
		return ""
	}
	return " (" + strings.Join(msgs, "; ") + ")"
}

// idmapUserns returns a user namespace that maps the on-disk owner to the
// sandbox user, for an idmapped mount: a file owned by from appears owned by
// to, and a file the sandbox user creates is stored as owned by from.
//
// Making one forks a process into a new user namespace (10-20 ms from a
// daemon-sized process on a 2-core host), so each mapping is made once
// and kept for the life of the process: the namespace has no process in
// it and serves only as the mapping an idmapped mount takes over, so
// sessions with the same owner and sandbox user can share it. The file
// belongs to the cache; callers must not close it.
func idmapUserns(from, to Owner, maskOwner uint32) (*os.File, error) {
	key := usernsKey{from, to, maskOwner}
	usernsCache.mu.Lock()
	defer usernsCache.mu.Unlock()
	if f := usernsCache.m[key]; f != nil {
		return f, nil
	}
	uids, gids := fmt.Sprintf("%d:%d:1", from.UID, to.UID), fmt.Sprintf("%d:%d:1", from.GID, to.GID)
	if maskOwner != 0 {
		// The owner of masks InView stays itself, a valid ID, so that the
		// sandbox can remove them (the kernel refuses to remove a file
		// whose owner an idmapped mount cannot map: EOVERFLOW).
		uids += fmt.Sprintf(",%d:%d:1", maskOwner, maskOwner)
		gids += fmt.Sprintf(",%d:%d:1", maskOwner, maskOwner)
	}
	f, err := mount.GetUsernsFD(uids, gids)
	if err != nil {
		return nil, fmt.Errorf("user namespace for idmapped mount: %w", err)
	}
	if usernsCache.m == nil {
		usernsCache.m = map[usernsKey]*os.File{}
	}
	usernsCache.m[key] = f
	return f, nil
}

type usernsKey struct {
	from, to  Owner
	maskOwner uint32
}

// pickMaskOwner returns the ID that owns a workspace's masks InView: the
// first of 65534 ("nobody"), 65533, ... down to 60000 that no scanned
// entry has as its uid or gid and that is neither the owner's nor the
// sandbox user's. The sandbox, not its owner, can then remove such a mask
// but not change its mode, times or content; and since no file of the
// view has that ID, mapping it to itself in the idmapping changes nothing
// else. False if every candidate is taken.
func pickMaskOwner(entries []entry, owner, sandbox Owner) (uint32, bool) {
	used := map[uint32]bool{owner.UID: true, owner.GID: true, sandbox.UID: true, sandbox.GID: true}
	for i := range entries {
		used[entries[i].UID], used[entries[i].GID] = true, true
	}
	for id := uint32(65534); id >= 60000; id-- {
		if !used[id] {
			return id, true
		}
	}
	return 0, false
}

// usernsCache holds idmapUserns's namespaces, one per mapping.
var usernsCache struct {
	mu sync.Mutex
	m  map[usernsKey]*os.File
}

// unmount detaches the mount on target. A missing mount is not an error.
func unmount(target string) error {
	err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	switch {
	case err == nil, errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
		return nil
	}
	return fmt.Errorf("unmount %s: %w", target, err)
}

// mountsUnder returns the mount points at or beneath dir, deepest first.
func mountsUnder(dir string) ([]string, error) { return mountinfo.Under(dir) }

// isMountPoint reports whether path is listed as a mount point.
func isMountPoint(path string) (bool, error) {
	m, err := mountsUnder(path)
	if err != nil {
		return false, err
	}
	return slices.Contains(m, filepath.Clean(path)), nil
}
