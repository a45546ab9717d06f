package fsscope

import (
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// frozenView mounts, on target, a read-only overlay that shows the host
// directory hostFD (O_PATH) with exactly the names entries lists: a
// "names layer" (a private tmpfs holding every scanned directory, symlink
// and special file, and every regular file as an empty, metadata-only file
// whose data overlayfs reads from the host file at the same path) over the
// host directory as a data-only layer, which overlayfs never lists or
// looks names up in. A name created on the host after the scan is therefore
// not in the view, whatever it is called; a file that is masked (masks) is
// an empty file there with no path to its data, and a masked directory is
// empty. Both layers are idmapped through userns when it is not nil.
//
// layers is a private, empty directory where the layers are attached while
// the overlay is made; they are detached before frozenView returns (the
// overlay holds its own references). attrs are the MOUNT_ATTR_* flags of
// the view.
//
// Overlayfs follows the redirect with LOOKUP_BENEATH|LOOKUP_NO_SYMLINKS|
// LOOKUP_NO_XDEV, and only to a regular file: a host file replaced by a
// symlink during the session reads as an error, not as the link's target.
func frozenView(hostFD int, entries []entry, masks []mask, layers, target string, attrs uint64, userns *os.File) (retErr error) {
	namesDir := path.Join(layers, "names")
	dataDir := path.Join(layers, "data")
	for _, d := range []string{namesDir, dataDir} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	defer func() {
		for _, d := range []string{namesDir, dataDir} {
			if err := unmount(d); err != nil && retErr == nil {
				retErr = err
			}
			if err := os.Remove(d); err != nil && retErr == nil {
				retErr = err
			}
		}
	}()
	if err := mountNamesLayer(namesDir, entries); err != nil {
		return err
	}
	if err := populateNames(namesDir, entries, masks); err != nil {
		return fmt.Errorf("names layer: %w", err)
	}
	if userns != nil {
		// Idmap the names layer: re-attach it idmapped in place.
		if err := remountIdmapped(namesDir, userns); err != nil {
			return err
		}
	}
	if err := bindFD(hostFD, dataDir, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, userns); err != nil {
		return err
	}
	return mountFrozenOverlay(namesDir, dataDir, target, attrs)
}

// mountNamesLayer mounts a tmpfs for the names layer on dir, bounded to
// the inodes it needs (and a little more, for the root).
func mountNamesLayer(dir string, entries []entry) error {
	opts := fmt.Sprintf("mode=0700,size=%d,nr_inodes=%d", 1<<20+len(entries)*64, len(entries)+16)
	if err := unix.Mount("airlock-names", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mount names layer on %s: %w", dir, err)
	}
	return nil
}

// remountIdmapped replaces the mount on dir with an idmapped clone of it.
func remountIdmapped(dir string, userns *os.File) error {
	mfd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("clone names layer: %w", err)
	}
	defer unix.Close(mfd)
	if err := unmount(dir); err != nil {
		return err
	}
	return attachDetached(mfd, dir, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, userns)
}

// mountFrozenOverlay mounts the read-only overlay of the names layer over
// the data-only layer on target.
func mountFrozenOverlay(names, data, target string, attrs uint64) error {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{
		{"lowerdir+", names},
		{"datadir+", data},
		{"metacopy", "on"},
		{"redirect_dir", "follow"},
		{"index", "off"},
		{"xino", "off"},
	} {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return fmt.Errorf("overlay option %s=%q: %w%s", o[0], o[1], err, fsErrorLog(fsfd))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create frozen view of %s: %w%s", data, err, fsErrorLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	return attachDetached(mfd, target, attrs|unix.MOUNT_ATTR_RDONLY, nil)
}

// populateNames creates every entry in the names layer mounted on dir, in
// walk order, with the host's owner, mode and times. A regular file is an
// empty file of the host file's size that overlayfs reads from the same
// path in the data layer; hard links stay hard links. A path a mask covers
// gets no redirect (a masked file is an empty file, a masked directory is
// empty), so nothing below a mask leads to the host's data. Device nodes
// are left out (the sandbox's mounts are nodev anyway).
func populateNames(dir string, entries []entry, masks []mask) error {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	masked := make(map[string]bool, len(masks))
	for _, m := range masks {
		masked[m.Path] = true
	}
	// coveredBy reports whether p or a parent of p is masked.
	coveredBy := func(p string) (self, parent bool) {
		if masked[p] {
			return true, false
		}
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if masked[d] {
				return false, true
			}
		}
		return false, false
	}
	links := map[uint64]string{}
	var dirs []*entry
	for i := range entries {
		e := &entries[i]
		if e.Path == "" {
			dirs = append(dirs, e)
			continue
		}
		self, parent := coveredBy(e.Path)
		if parent {
			continue
		}
		switch {
		case e.isDir() || e.Mount:
			if err := unix.Mkdirat(root, e.Path, 0o700); err != nil {
				return pathErr("mkdir", e.Path, err)
			}
			dirs = append(dirs, e)
			continue
		case e.isRegular():
			if first, ok := links[e.Ino]; ok && e.Nlink > 1 && !self {
				if err := unix.Linkat(root, first, root, e.Path, 0); err != nil {
					return pathErr("link", e.Path, err)
				}
				continue
			}
			if err := namesFile(root, e, !self); err != nil {
				return err
			}
			if e.Nlink > 1 && !self {
				links[e.Ino] = e.Path
			}
			continue
		case e.isSymlink():
			if err := unix.Symlinkat(e.Link, root, e.Path); err != nil {
				return pathErr("symlink", e.Path, err)
			}
		case e.Mode&sIFMT == sIFIFO || e.Mode&sIFMT == sIFSOCK:
			if err := unix.Mknodat(root, e.Path, e.Mode&(sIFMT|0o600), 0); err != nil {
				return pathErr("mknod", e.Path, err)
			}
		default:
			continue
		}
		if err := setMeta(root, e); err != nil {
			return err
		}
	}
	// Directories last, deepest first, so that creating their contents
	// does not change the times they get.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setMeta(root, dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// namesFile creates the regular file e in the names layer: with data, a
// metadata-only file of the host file's size redirected to the same path
// in the data layer; without, an empty file of mode 0.
func namesFile(root int, e *entry, data bool) error {
	fd, err := unix.Openat(root, e.Path, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return pathErr("create", e.Path, err)
	}
	err = func() error {
		if !data {
			return nil
		}
		if err := unix.Ftruncate(fd, e.Size); err != nil {
			return pathErr("truncate", e.Path, err)
		}
		if err := unix.Fsetxattr(fd, xattrMetacopy, nil, 0); err != nil {
			return pathErr("setxattr", e.Path, err)
		}
		if err := unix.Fsetxattr(fd, xattrRedirect, []byte("/"+e.Path), 0); err != nil {
			return pathErr("setxattr", e.Path, err)
		}
		return nil
	}()
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = pathErr("close", e.Path, cerr)
	}
	if err != nil {
		return err
	}
	if !data {
		m := *e
		m.Mode = sIFREG
		return setMeta(root, &m)
	}
	return setMeta(root, e)
}

// setMeta gives the entry (not a regular file) its owner, mode and
// modification time, without following a symlink.
func setMeta(root int, e *entry) error {
	name := e.Path
	if name == "" {
		name = "."
	}
	if err := unix.Fchownat(root, name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("chown", e.Path, err)
	}
	if !e.isSymlink() {
		if err := unix.Fchmodat(root, name, e.Mode&permMask, 0); err != nil {
			return pathErr("chmod", e.Path, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	if err := unix.UtimesNanoAt(root, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("utimes", e.Path, err)
	}
	return nil
}

func pathErr(op, p string, err error) error {
	return &os.PathError{Op: op, Path: p, Err: err}
}

// overlayfsMagic is overlayfs's f_type.
const overlayfsMagic = 0x794c7630

// stacked reports whether the directory open as fd is on overlayfs, where
// a copy-on-write workspace over a frozen view would exceed the kernel's
// stacking depth (two overlays on top of a filesystem at most).
func stacked(fd int) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, err
	}
	return st.Type == overlayfsMagic, nil
}
