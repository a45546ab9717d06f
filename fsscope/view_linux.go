package fsscope

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// frozenView returns a detached mount (a file descriptor for
// move_mount, or for the path /proc/self/fd/N) of a read-only overlay
// that shows the host directory hostFD (O_PATH) with exactly the names
// entries lists: a "names layer" (a private tmpfs holding every scanned
// directory, symlink and special file, and every regular file as an empty,
// metadata-only file whose data overlayfs reads from the host file at the
// same path) over the host directory as a data-only layer, which overlayfs
// never lists or looks names up in. A name created on the host after the
// scan is therefore not in the view, whatever it is called; a file that is
// masked (masks) is an empty file there with no path to its data, and a
// masked directory is empty. A mask InView has vm's mode and owner. Both
// layers are idmapped through userns when it is not nil.
//
// Nothing is attached anywhere: the layers and the overlay are detached
// mounts, which the kernel dissolves when the last reference (the
// overlay's own, then the caller's descriptor) goes, so making a view costs
// no unmount (each of which waits for an RCU grace period).
//
// Overlayfs follows the redirect with LOOKUP_BENEATH|LOOKUP_NO_SYMLINKS|
// LOOKUP_NO_XDEV, and only to a regular file: a host file replaced by a
// symlink during the session reads as an error, not as the link's target.
func frozenView(hostFD int, entries []entry, masks []mask, vm viewMasks, userns *os.File) (_ int, retErr error) {
	names, err := namesLayer(entries)
	if err != nil {
		return -1, err
	}
	defer unix.Close(names)
	if err := populateNames(names, entries, masks, vm); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return -1, fmt.Errorf("names layer: %w (the frozen view needs tmpfs with extended attributes: CONFIG_TMPFS_XATTR)", err)
		}
		return -1, fmt.Errorf("names layer: %w", err)
	}
	const layerAttrs = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	if err := setMountAttrs(names, layerAttrs, userns); err != nil {
		return -1, fmt.Errorf("names layer: %w", err)
	}
	data, err := unix.OpenTree(hostFD, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("clone workspace mount: %w", err)
	}
	defer unix.Close(data)
	if err := setMountAttrs(data, layerAttrs, userns); err != nil {
		return -1, fmt.Errorf("data layer: %w", err)
	}
	return frozenOverlay(fdPath(names), fdPath(data))
}

// fdPath names the file (or detached mount) open as fd.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// setMountAttrs sets MOUNT_ATTR_* flags on the detached mount mfd,
// idmapped through userns when it is not nil.
func setMountAttrs(mfd int, attrs uint64, userns *os.File) error {
	attr := unix.MountAttr{Attr_set: attrs}
	if userns != nil {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns.Fd())
	}
	if err := unix.MountSetattr(mfd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if userns != nil && errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("set mount attributes: %w (the filesystem may not support idmapped mounts)", err)
		}
		return fmt.Errorf("set mount attributes: %w", err)
	}
	return nil
}

// namesLayer returns a detached tmpfs mount for the names layer, bounded
// to what the entries need. tmpfs charges each inode and its extended
// attributes (here the redirect path) to the nr_inodes budget, 1 KiB per
// unit; a long symlink target takes a page, a sparse file none.
func namesLayer(entries []entry) (int, error) {
	var pathBytes, links int
	for i := range entries {
		pathBytes += len(entries[i].Path)
		if entries[i].isSymlink() {
			links++
		}
	}
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{
		{"source", "airlock-names"},
		{"mode", "0700"},
		{"size", strconv.Itoa(1<<20 + links*4096)},
		{"nr_inodes", strconv.Itoa(2*len(entries) + pathBytes/1024 + 64)},
	} {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return -1, fmt.Errorf("tmpfs option %s=%q: %w%s", o[0], o[1], err, fsErrorLog(fsfd))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create names layer: %w%s", err, fsErrorLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsmount names layer: %w", err)
	}
	return mfd, nil
}

// frozenOverlay makes the read-only overlay of the names layer over the
// data-only layer, and returns it as a detached mount.
func frozenOverlay(names, data string) (int, error) {
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen overlay: %w", err)
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
			return -1, fmt.Errorf("overlay option %s=%q: %w%s", o[0], o[1], err, fsErrorLog(fsfd))
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create frozen view: %w%s", err, fsErrorLog(fsfd))
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount frozen view: %w", err)
	}
	return mfd, nil
}

// populateNames creates every entry in the names layer (the detached
// mount mnt) with the host's owner, mode and modification time. A regular
// file is an empty file of the host file's size that overlayfs reads from
// the same path in the data layer; hard links stay hard links. A path a mask covers
// gets no redirect (a masked file is an empty file of mode 0, or, InView,
// of vm's mode and owner; a masked directory is empty), so
// nothing below a mask leads to the host's data.
// Device nodes are left out (the sandbox's mounts are nodev anyway). A
// mount point inside the host directory is an empty directory (or, for a
// file, absent): what lies under it was never scanned, so it is not shown.
//
// Directories are made first, in walk order; then the other entries, split
// in contiguous runs among up to GOMAXPROCS workers (this is most of the
// cost: a few system calls per file); then the hard links; then the
// directories' metadata, deepest first, so that filling them does not
// change their times.
func populateNames(mnt int, entries []entry, masks []mask, vm viewMasks) error {
	root, err := unix.Openat(mnt, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	masked := make(map[string]*mask, len(masks))
	for k := range masks {
		masked[masks[k].Path] = &masks[k]
	}
	// coveredBy reports whether p or a parent of p is masked.
	coveredBy := func(p string) (self, parent bool) {
		if len(masked) == 0 {
			return false, false
		}
		if masked[p] != nil {
			return true, false
		}
		for d := path.Dir(p); d != "." && d != "/"; d = path.Dir(d) {
			if masked[d] != nil {
				return false, true
			}
		}
		return false, false
	}
	var (
		dirs  []*entry
		files []*entry // everything else, in walk order
		links [][2]string
		first = map[uint64]string{}
		self  = map[*entry]*mask{}
	)
	for i := range entries {
		e := &entries[i]
		if e.Path == "" {
			dirs = append(dirs, e)
			continue
		}
		isSelf, parent := coveredBy(e.Path)
		switch {
		case parent:
			continue
		case e.Mount && !e.isDir():
			continue
		case e.isDir():
			if err := unix.Mkdirat(root, e.Path, 0o700); err != nil {
				return pathErr("mkdir", e.Path, err)
			}
			dirs = append(dirs, e)
			continue
		case e.isRegular() && e.Nlink > 1 && !isSelf:
			if f, ok := first[e.Ino]; ok {
				links = append(links, [2]string{f, e.Path})
				continue
			}
			first[e.Ino] = e.Path
		}
		if isSelf {
			self[e] = masked[e.Path]
		}
		files = append(files, e)
	}

	workers := min(runtime.GOMAXPROCS(0), 8, len(files)/256+1)
	var g errgroup.Group
	for w := range workers {
		run := files[w*len(files)/workers : (w+1)*len(files)/workers]
		g.Go(func() error { return makeNames(root, run, self, vm) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, l := range links {
		if err := unix.Linkat(root, l[0], root, l[1], 0); err != nil {
			return pathErr("link", l[1], err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		name := dirs[i].Path
		if name == "" {
			name = "."
		}
		if err := setMetaAt(root, name, dirs[i]); err != nil {
			return err
		}
	}
	return nil
}

// makeNames creates the non-directory entries run (in walk order, their
// directories made) beneath root; masked says which of them a mask covers.
// It keeps the last parent directory open, since a run visits a
// directory's files one after another.
func makeNames(root int, run []*entry, masked map[*entry]*mask, vm viewMasks) error {
	pdir, pfd := "", root
	defer func() {
		if pfd != root {
			unix.Close(pfd)
		}
	}()
	for _, e := range run {
		dir, base := path.Split(e.Path)
		dir = strings.TrimSuffix(dir, "/")
		if dir != pdir {
			fd := root
			if dir != "" {
				var err error
				if fd, err = unix.Openat(root, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
					return pathErr("open", dir, err)
				}
			}
			if pfd != root {
				unix.Close(pfd)
			}
			pdir, pfd = dir, fd
		}
		switch {
		case e.isRegular():
			if err := namesFile(pfd, base, e, masked[e], vm); err != nil {
				return err
			}
		case e.isSymlink():
			if err := unix.Symlinkat(e.Link, pfd, base); err != nil {
				return pathErr("symlink", e.Path, err)
			}
			if err := setMetaAt(pfd, base, e); err != nil {
				return err
			}
		case e.Mode&sIFMT == sIFIFO || e.Mode&sIFMT == sIFSOCK:
			if err := unix.Mknodat(pfd, base, e.Mode&(sIFMT|0o600), 0); err != nil {
				return pathErr("mknod", e.Path, err)
			}
			if err := setMetaAt(pfd, base, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// namesFile creates the regular file e (named base in the directory pfd)
// in the names layer: unmasked, a metadata-only file of the host file's
// size redirected to the same path in the data layer; masked (m), an
// empty file of mode 0, or, InView, of vm's mode and owner. A masked
// file keeps none of the host file's times.
func namesFile(pfd int, base string, e *entry, m *mask, vm viewMasks) error {
	data := m == nil
	mode, uid, gid := e.Mode&permMask, e.UID, e.GID
	switch {
	case m != nil && m.InView:
		mode, uid, gid = vm.mode, vm.owner, vm.owner
	case m != nil:
		mode = 0
	}
	fd, err := unix.Openat(pfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o777)
	if err != nil {
		return pathErr("create", e.Path, err)
	}
	defer unix.Close(fd)
	if data {
		if e.Size > 0 {
			if err := unix.Ftruncate(fd, e.Size); err != nil {
				return pathErr("truncate", e.Path, err)
			}
		}
		if err := unix.Fsetxattr(fd, xattrMetacopy, nil, 0); err != nil {
			return pathErr("setxattr", e.Path, err)
		}
		if err := unix.Fsetxattr(fd, xattrRedirect, []byte("/"+e.Path), 0); err != nil {
			return pathErr("setxattr", e.Path, err)
		}
	}
	if uid != 0 || gid != 0 {
		if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
			return pathErr("chown", e.Path, err)
		}
	}
	// The umask may have taken bits off, and creating a file sets no
	// setuid, setgid or sticky bit (chown would clear the first two): set
	// the mode unless creating the file gave exactly that.
	if mode&^0o777 != 0 || mode&processUmask != 0 {
		if err := unix.Fchmod(fd, mode); err != nil {
			return pathErr("chmod", e.Path, err)
		}
	}
	if m != nil {
		return nil // the time it was made, not the host file's
	}
	return futimens(fd, e)
}

// viewMasks is how a workspace's masks InView are made: mode is 0444 when
// a ReadAudit refuses their opens, 0 when the kernel does; owner is the
// workspace's MaskOwner.
type viewMasks struct {
	mode, owner uint32
}

// processUmask is the process's umask, read once (changing it to read it
// would race with other goroutines creating files).
var processUmask = readUmask()

// readUmask reads the umask from /proc/self/status; when it cannot, it
// assumes every bit is masked, so that modes are always set explicitly.
func readUmask() uint32 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o777
}

// futimens sets the open file's access and modification times to e's
// modification time.
func futimens(fd int, e *entry) error {
	ts := [2]unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	// utimensat(fd, NULL, ...) is futimens(3).
	if _, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); errno != 0 {
		return pathErr("utimes", e.Path, errno)
	}
	return nil
}

// setMetaAt gives the entry name in the directory dirfd (not a regular
// file) e's owner, mode and modification time, without following a
// symlink.
func setMetaAt(dirfd int, name string, e *entry) error {
	if err := unix.Fchownat(dirfd, name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return pathErr("chown", e.Path, err)
	}
	if !e.isSymlink() {
		if err := unix.Fchmodat(dirfd, name, e.Mode&permMask, 0); err != nil {
			return pathErr("chmod", e.Path, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.Mtime), unix.NsecToTimespec(e.Mtime)}
	if err := unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
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
