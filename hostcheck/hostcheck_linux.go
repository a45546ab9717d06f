package hostcheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/containerd/containerd/v2/core/mount"
	"golang.org/x/sys/unix"
)

// host is what the checks read of the machine; tests replace parts.
type host struct {
	cgroupRoot string
	euid       int
}

func defaultHost() host {
	return host{cgroupRoot: "/sys/fs/cgroup", euid: os.Geteuid()}
}

// check is one named check. needsRoot checks are not run without root.
type check struct {
	name      string
	needsRoot bool
	fn        func() Result
}

func run(ctx context.Context, cfg Config, h host) []Result {
	checks := []check{
		{"kernel", false, checkKernel},
		{"cgroup", false, func() Result { return checkCgroup(h.cgroupRoot) }},
		{"overlayfs", true, checkOverlay},
		{"tmpfs-xattr", true, checkTmpfsXattr},
	}
	for _, p := range cfg.Paths {
		checks = append(checks, check{"idmap", true, func() Result { return checkIdmap(p) }})
	}
	checks = append(checks,
		check{"userns", false, checkUserns},
		check{"netns", true, checkNetns},
		check{"nftables", true, checkNftables},
		check{"fanotify", true, checkFanotify},
		check{"loop", true, checkLoop},
		check{"seccomp", false, checkSeccomp},
	)
	if cfg.Runtime == "crun" {
		checks = append(checks, check{"crun-cgroup", false, func() Result { return checkCrunCgroup(h.cgroupRoot) }})
	}
	if cfg.BinDir != "" {
		checks = append(checks,
			check{"containerd", false, func() Result {
				return checkBinary(ctx, "containerd", filepath.Join(cfg.BinDir, "containerd"), ContainerdVersion)
			}},
			check{"runc", false, func() Result {
				return checkBinary(ctx, "runc", filepath.Join(cfg.BinDir, "runc"), RuncVersion)
			}},
		)
		if crun := filepath.Join(cfg.BinDir, "crun"); cfg.Runtime == "crun" || exists(crun) {
			checks = append(checks, check{"crun", false, func() Result {
				return checkBinary(ctx, "crun", crun, CrunVersion)
			}})
		}
	}
	out := make([]Result, 0, len(checks))
	for _, c := range checks {
		var r Result
		if c.needsRoot && h.euid != 0 {
			r = Result{Status: StatusWarn, Detail: NeedsRoot, Fix: "run airlock doctor as root"}
		} else {
			r = c.fn()
		}
		r.Name = c.name
		out = append(out, r)
	}
	return out
}

func ok(format string, args ...any) Result {
	return Result{Status: StatusOK, Detail: fmt.Sprintf(format, args...)}
}

func fail(fix, format string, args ...any) Result {
	return Result{Status: StatusFail, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

func checkKernel() Result {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fail("check that /proc is mounted and uname(2) works", "uname: %v", err)
	}
	return ok("Linux %s", unix.ByteSliceToString(u.Release[:]))
}

// requiredControllers are the cgroup v2 controllers airlock sets limits
// with.
var requiredControllers = []string{"cpu", "memory", "pids"}

func checkCgroup(root string) Result {
	const fixV2 = "mount cgroup v2 at /sys/fs/cgroup (systemd.unified_cgroup_hierarchy=1 on the kernel command line; CONFIG_CGROUPS=y)"
	const fixCtl = "enable the controllers: CONFIG_CGROUP_SCHED, CONFIG_MEMCG, CONFIG_CGROUP_PIDS, and no cgroup_disable= on the kernel command line"
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fail(fixV2, "%s: %v", root, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return checkCgroupV1(root, fixV2, fixCtl)
	}
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fail(fixV2, "%v", err)
	}
	have := strings.Fields(string(data))
	var missing []string
	for _, c := range requiredControllers {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fail(fixCtl, "controllers missing from %s: %s",
			filepath.Join(root, "cgroup.controllers"), strings.Join(missing, " "))
	}
	return ok("cgroup v2 at %s with %s", root, strings.Join(requiredControllers, ", "))
}

// checkCrunCgroup checks that crun will take the cgroup layout under
// root: a v2 hierarchy, v1 alone, or hybrid with no controller on the
// hybrid's v2 hierarchy (crun: "cgroups in hybrid mode not supported,
// drop all controllers from cgroupv2").
func checkCrunCgroup(root string) Result {
	var st unix.Statfs_t
	if err := unix.Statfs(root, &st); err != nil {
		return fail("mount cgroups at "+root, "%s: %v", root, err)
	}
	unified := filepath.Join(root, "unified")
	var ust unix.Statfs_t
	hybrid := st.Type != unix.CGROUP2_SUPER_MAGIC && unix.Statfs(unified, &ust) == nil && ust.Type == unix.CGROUP2_SUPER_MAGIC
	var ctl []byte
	if hybrid {
		var err error
		if ctl, err = os.ReadFile(filepath.Join(unified, "cgroup.controllers")); err != nil {
			return fail("check the cgroup v2 hierarchy at "+unified, "%v", err)
		}
	}
	return crunCgroupResult(root, hybrid, strings.Fields(string(ctl)))
}

// crunCgroupResult is checkCrunCgroup's verdict on what it read.
func crunCgroupResult(root string, hybrid bool, v2Controllers []string) Result {
	if !hybrid || len(v2Controllers) == 0 {
		return ok("crun takes the cgroup layout at %s", root)
	}
	var mounts []string
	for _, c := range v2Controllers {
		dir := filepath.Join(root, c)
		mounts = append(mounts, fmt.Sprintf("mkdir -p %s && mount -t cgroup -o %s cgroup %s", dir, c, dir))
	}
	return fail("mount each as a cgroup v1 hierarchy, as hack/install-deps.sh does: "+strings.Join(mounts, "; ")+"; or run sessions on runc (--runtime runc)",
		"hybrid cgroups with %s on the v2 hierarchy at %s: crun refuses every session (cgroups in hybrid mode not supported)",
		strings.Join(v2Controllers, " "), filepath.Join(root, "unified"))
}

// checkCgroupV1 checks for a v1 hierarchy of each required controller
// below root (root/cpu, root/memory, root/pids).
func checkCgroupV1(root, fixV2, fixCtl string) Result {
	var missing []string
	for _, c := range requiredControllers {
		var st unix.Statfs_t
		if err := unix.Statfs(filepath.Join(root, c), &st); err != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) == len(requiredControllers):
		return fail(fixV2, "%s is neither cgroup v2 nor holds cgroup v1 hierarchies of %s",
			root, strings.Join(requiredControllers, ", "))
	case len(missing) > 0:
		return fail(fixCtl, "cgroup v1 at %s without a hierarchy of %s", root, strings.Join(missing, " "))
	}
	return ok("cgroup v1 at %s with %s (v2 is preferred)", root, strings.Join(requiredControllers, ", "))
}

// detachedTmpfs makes a small tmpfs as a detached mount, attached nowhere:
// no other process sees it, and it goes when the returned fd is closed.
func detachedTmpfs() (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen tmpfs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "size", "1m"); err != nil {
		return -1, fmt.Errorf("tmpfs size: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("create tmpfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount tmpfs: %w", err)
	}
	return mfd, nil
}

// fdPath names the file or mount behind fd.
func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

func checkOverlay() Result {
	const fix = "enable CONFIG_OVERLAY_FS (or modprobe overlay)"
	listed, err := filesystemListed("overlay")
	if err != nil {
		return fail("check that /proc is mounted", "%v", err)
	}
	if err := probeOverlay(); err != nil {
		return fail(fix, "%v", err)
	}
	if !listed {
		return ok("overlay mounts (the mount loaded the module)")
	}
	return ok("overlay mounts with lower, upper and work directories")
}

// probeOverlay mounts an overlay whose layers are on a detached tmpfs, as
// a detached mount itself, and writes through it.
func probeOverlay() error {
	tfd, err := detachedTmpfs()
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	for _, d := range []string{"lower", "upper", "work"} {
		if err := unix.Mkdirat(tfd, d, 0o700); err != nil {
			return fmt.Errorf("mkdir %s on tmpfs: %w", d, err)
		}
	}
	root := fdPath(tfd)
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{{"lowerdir", root + "/lower"}, {"upperdir", root + "/upper"}, {"workdir", root + "/work"}} {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return fmt.Errorf("overlay option %s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("create overlay: %w", err)
	}
	ofd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("fsmount overlay: %w", err)
	}
	defer unix.Close(ofd)
	// A write through the overlay lands in the upper directory.
	f, err := unix.Openat(ofd, "probe", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write through overlay: %w", err)
	}
	unix.Close(f)
	if err := unix.Faccessat(tfd, "upper/probe", unix.F_OK, 0); err != nil {
		return fmt.Errorf("a file written through the overlay is not in its upper directory: %w", err)
	}
	return nil
}

// filesystemListed reports whether /proc/filesystems lists fstype.
func filesystemListed(fstype string) (bool, error) {
	f, err := os.Open("/proc/filesystems")
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 0 && fields[len(fields)-1] == fstype {
			return true, nil
		}
	}
	return false, s.Err()
}

func checkTmpfsXattr() Result {
	if err := probeTmpfsXattr(); err != nil {
		return fail("enable CONFIG_TMPFS_XATTR (the workspace's frozen view keeps its whiteouts in trusted.* attributes on tmpfs)", "%v", err)
	}
	return ok("trusted.* extended attributes on tmpfs")
}

func probeTmpfsXattr() error {
	tfd, err := detachedTmpfs()
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	fd, err := unix.Openat(tfd, "probe", unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create a file on tmpfs: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Fsetxattr(fd, "trusted.airlock.probe", []byte("1"), 0); err != nil {
		return fmt.Errorf("setxattr trusted.airlock.probe on tmpfs: %w", err)
	}
	buf := make([]byte, 8)
	n, err := unix.Fgetxattr(fd, "trusted.airlock.probe", buf)
	if err != nil || string(buf[:max(n, 0)]) != "1" {
		return fmt.Errorf("getxattr trusted.airlock.probe on tmpfs: %q, %v", buf[:max(n, 0)], err)
	}
	return nil
}

func checkIdmap(path string) Result {
	userns, err := mount.GetUsernsFD("0:100000:1", "0:100000:1")
	if err != nil {
		return fail("enable CONFIG_USER_NS and set user.max_user_namespaces above 0",
			"%s: user namespace for the idmapping: %v", path, err)
	}
	defer userns.Close()
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fail("pass an existing directory with --path (open_tree needs Linux 5.2 or later)",
			"%s: open_tree: %v", path, err)
	}
	// The clone is detached: closing its fd drops it.
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(userns.Fd())}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		fs := fsType(path)
		return fail("put workspaces on a filesystem with idmapped mounts (ext4, xfs, btrfs, tmpfs on Linux 6.3+); Linux 5.12 or later",
			"%s (%s): idmapped mount: %v", path, fs, err)
	}
	return ok("%s (%s)", path, fsType(path))
}

// fsType names the filesystem path is on, from /proc/self/mountinfo.
func fsType(path string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown filesystem"
	}
	defer f.Close()
	abs, err := filepath.Abs(path)
	if err != nil {
		return "unknown filesystem"
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	best, typ := "", "unknown filesystem"
	s := bufio.NewScanner(f)
	for s.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(s.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if (abs == mp || strings.HasPrefix(abs, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, typ = mp, fields[sep+1]
		}
	}
	return typ
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func checkUserns() Result {
	const fix = "enable CONFIG_USER_NS and set the sysctl user.max_user_namespaces above 0 (sysctl -w user.max_user_namespaces=15000)"
	data, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	if err != nil {
		return fail(fix, "%v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fail(fix, "user.max_user_namespaces: %v", err)
	}
	if n <= 0 {
		return fail(fix, "user.max_user_namespaces is %d", n)
	}
	return ok("user.max_user_namespaces = %d", n)
}

// checkNetns makes a network namespace on a locked thread and goes back
// to the thread's own, as egress/netns's Do does (gVisor's joinNetNS): if
// going back fails, the thread stays locked and dies with the goroutine.
func checkNetns() Result {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current netns: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- os.NewSyscallError("unshare network namespace", err)
			return
		}
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("return to the original netns: %w", os.NewSyscallError("setns", err))
			return // the thread stays locked and dies
		}
		runtime.UnlockOSThread()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return fail("enable CONFIG_NET_NS", "%v", err)
	}
	return ok("network namespaces")
}

func checkFanotify() Result {
	const fix = "enable CONFIG_FANOTIFY and CONFIG_FANOTIFY_ACCESS_PERMISSIONS; without them deny_read is enforced but reads of masked paths are not audited"
	warn := func(format string, args ...any) Result {
		return Result{Status: StatusWarn, Detail: fmt.Sprintf(format, args...), Fix: fix}
	}
	dir, err := os.MkdirTemp("", "airlock-doctor-")
	if err != nil {
		return warn("%v", err)
	}
	defer os.RemoveAll(dir)
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return warn("fanotify_init(FAN_CLASS_CONTENT): %v", err)
	}
	// The mark is what needs the permission events; it goes with the fd,
	// closed before the directory is removed (the mask has no FAN_ONDIR,
	// so opening the directory never waits on this fd anyway).
	defer unix.Close(fd)
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_INODE, unix.FAN_OPEN_PERM, unix.AT_FDCWD, dir); err != nil {
		return warn("fanotify_mark(FAN_OPEN_PERM): %v", err)
	}
	return ok("fanotify permission events")
}

func checkLoop() Result {
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("enable CONFIG_BLK_DEV_LOOP (or modprobe loop); the workspace quota's image is attached to a loop device", "%v", err)
	}
	f.Close()
	return ok("/dev/loop-control")
}

func checkSeccomp() Result {
	const fix = "enable CONFIG_SECCOMP and CONFIG_SECCOMP_FILTER"
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fail("check that /proc is mounted", "%v", err)
	}
	mode := ""
	for _, line := range bytes.Split(status, []byte("\n")) {
		if v, found := bytes.CutPrefix(line, []byte("Seccomp:")); found {
			mode = strings.TrimSpace(string(v))
		}
	}
	if mode == "" {
		return fail(fix, "/proc/self/status has no Seccomp field")
	}
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil {
		return fail(fix, "prctl(PR_GET_SECCOMP): %v", err)
	}
	// SECCOMP_GET_ACTION_AVAIL answers only with filter mode built in.
	action := uint32(unix.SECCOMP_RET_ERRNO)
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); errno != 0 {
		return fail(fix, "seccomp filter mode: SECCOMP_GET_ACTION_AVAIL(SECCOMP_RET_ERRNO): %v", errno)
	}
	return ok("filter mode (this process: mode %s)", mode)
}

func checkNftables() Result {
	tables, err := listNftTables()
	if err != nil {
		return fail("enable CONFIG_NF_TABLES and CONFIG_NF_TABLES_INET (or modprobe nf_tables)", "list tables: %v", err)
	}
	return ok("netlink nftables (%d tables)", tables)
}

// checkBinary runs path --version and compares its version with pin.
func checkBinary(ctx context.Context, name, path, pin string) Result {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return fail(fmt.Sprintf("run make deps (it builds containerd and runc into _output/bin), or point --bin-dir at the directory holding %s", name),
			"%s --version: %v", path, err)
	}
	v := parseVersion(string(out))
	if v == "" {
		return Result{Status: StatusWarn, Detail: fmt.Sprintf("%s --version printed no version: %q", path, firstLine(string(out))),
			Fix: fmt.Sprintf("use %s %s (make deps)", name, pin)}
	}
	if v != pin {
		return Result{Status: StatusWarn, Detail: fmt.Sprintf("%s %s at %s; airlock is tested with %s", name, v, path, pin),
			Fix: fmt.Sprintf("run make deps for %s %s, or point --bin-dir at it", name, pin)}
	}
	return ok("%s %s at %s", name, v, path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
