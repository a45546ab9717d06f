package hostcgroup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/mountinfo"
)

// reexecEnv marks the process EnterNamespaceOf started, so that a
// namespace it could not leave is an error rather than a loop.
const reexecEnv = "AIRLOCK_HOSTCGROUP_REEXEC"

// EnterNamespaceOf re-executes this program, with the same arguments and
// environment, in the cgroup namespace of process pid when this process is
// in another one; it returns only when there is nothing to do, or with an
// error. A container's first process gives the pid of its parent, the
// container runtime's shim, which runs in the host's namespaces: with the
// host's PID namespace (hostPID) it is seen; in a container's own PID
// namespace the parent is outside it (pid 0) and nothing can be done.
func EnterNamespaceOf(pid int) error {
	if pid <= 0 {
		return errors.New("the parent process is outside this PID namespace: the host's cgroup namespace is out of reach (in a pod, hostPID gives it)")
	}
	self, err := os.Readlink("/proc/self/ns/cgroup")
	if err != nil {
		return fmt.Errorf("this process's cgroup namespace: %w", err)
	}
	target, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/cgroup", pid))
	if err != nil {
		return fmt.Errorf("the cgroup namespace of process %d: %w", pid, err)
	}
	if self == target {
		return nil
	}
	if os.Getenv(reexecEnv) != "" {
		return fmt.Errorf("still in cgroup namespace %s after re-executing in process %d's (%s)", self, pid, target)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/cgroup", pid))
	if err != nil {
		return err
	}
	defer f.Close()
	// The namespace is the calling thread's: the exec must happen on it.
	runtime.LockOSThread()
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWCGROUP); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("join process %d's cgroup namespace %s: %w", pid, target, err)
	}
	env := append(os.Environ(), reexecEnv+"=1")
	err = syscall.Exec(exe, os.Args, env)
	// The thread is in another namespace than the process's others: it
	// must not run anything else.
	return fmt.Errorf("re-execute %s in process %d's cgroup namespace: %w", exe, pid, err)
}

// mount is a cgroup file system mounted under Root.
type mount struct {
	point, root, fstype string
	// shared is whether the mount is in a shared peer group (its
	// mounts and unmounts beneath propagate to its peers).
	shared bool
	// options are the super block's options: the v1 hierarchy's
	// controllers (and name=).
	options []string
}

// mounts reads the cgroup file systems mounted at or under Root in this
// process's mount namespace that are not hidden by a later mount at their
// point or above it.
func mounts() ([]mount, error) {
	all, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(m mount) bool {
		under := m.point == Root || strings.HasPrefix(m.point, Root+"/")
		return !under || (m.fstype != "cgroup" && m.fstype != "cgroup2")
	}), nil
}

// readMounts reads a mountinfo file: every mount not hidden by a later
// one at its point or above it.
func readMounts(file string) ([]mount, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mount
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m, ok := parseMountInfo(sc.Text())
		if !ok {
			continue
		}
		// A mount hides what was mounted at its point or beneath it
		// (one at / or /sys too).
		out = slices.DeleteFunc(out, func(o mount) bool {
			return o.point == m.point || strings.HasPrefix(o.point, strings.TrimSuffix(m.point, "/")+"/")
		})
		out = append(out, m)
	}
	return out, sc.Err()
}

// parseMountInfo parses one line of /proc/PID/mountinfo:
// "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER".
func parseMountInfo(line string) (mount, bool) {
	fields := strings.Fields(line)
	sep := slices.Index(fields, "-")
	if len(fields) < 6 || sep < 6 || len(fields) < sep+4 {
		return mount{}, false
	}
	return mount{
		root:    mountinfo.Unescape(fields[3]),
		point:   mountinfo.Unescape(fields[4]),
		shared:  slices.ContainsFunc(fields[6:sep], func(f string) bool { return strings.HasPrefix(f, "shared:") }),
		fstype:  fields[sep+1],
		options: strings.Split(fields[sep+3], ","),
	}, true
}

// Partial lists the cgroup mounts under Root that show a cgroup below
// their hierarchy's root, as seen from this process's cgroup namespace.
func Partial() ([]string, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.root != "/" {
			out = append(out, fmt.Sprintf("%s (%s)", m.point, m.root))
		}
	}
	return out, nil
}

// MountFullView mounts every cgroup hierarchy whose mount under Root shows
// only a cgroup below its root afresh over it, rooted at the hierarchy's
// root as this process's cgroup namespace sees it (call
// EnterNamespaceOf first), in this process's mount namespace. Root's
// mounts are made private first, so that nothing of it reaches another
// mount namespace. It refuses to act in the mount namespace of process ref
// (the parent: on a host, or in a container's shell, the namespace is
// shared with others).
func MountFullView(ref int) error {
	ms, err := mounts()
	if err != nil {
		return err
	}
	var partial []mount
	for _, m := range ms {
		if m.root != "/" {
			partial = append(partial, m)
		}
	}
	missing, err := missingHierarchies(ms)
	if err != nil {
		return err
	}
	if len(partial) == 0 && len(missing) == 0 {
		return nil
	}
	shared := ref <= 0
	if !shared {
		self, err1 := os.Readlink("/proc/self/ns/mnt")
		other, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", ref))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		shared = self == other
	}
	if shared {
		if len(partial) > 0 {
			return fmt.Errorf("the cgroup mounts under %s show cgroups below their hierarchies' roots (%s at %s), in a mount namespace this process does not have to itself (its parent's, or its parent is outside its PID namespace): not mounted over", Root, partial[0].point, partial[0].root)
		}
		// A host's own choice of what to mount.
		return nil
	}
	// Nothing done here may reach another mount namespace. A mount or
	// unmount propagates along its parent mount's peer group: the mount
	// that holds Root (a cgroup2 mount at Root is a child of /sys's, say,
	// whose peers a container with Bidirectional volumes shares with the
	// host) becomes a slave, which receives but sends nothing, and
	// Root's own mounts private.
	all, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	if p, ok := holder(all, filepath.Dir(Root)); ok && p.shared {
		if err := unix.Mount("", p.point, "", unix.MS_SLAVE, ""); err != nil {
			return fmt.Errorf("make %s, the mount that holds %s, a slave: %w", p.point, Root, err)
		}
	}
	if err := unix.Mount("", Root, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s private: %w", Root, err)
	}
	for _, m := range partial {
		data := superOptions(m)
		// The kernel refuses a superblock mounted again at the root of a
		// mount of its own (EBUSY): the partial mount goes first.
		if err := unix.Unmount(m.point, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the partial cgroup mount at %s: %w", m.point, err)
		}
		if below, err := mounts(); err == nil && slices.ContainsFunc(below, func(b mount) bool {
			return b.point == m.point && b.fstype == m.fstype && b.root == "/"
		}) {
			continue // the whole hierarchy was mounted there beneath it
		}
		if err := mountHierarchy(m.fstype, m.point, strings.Join(data, ",")); err != nil {
			return err
		}
	}
	for _, m := range missing {
		if m.fstype == "cgroup2" {
			// The v2 hierarchy has one set of flags for the whole
			// machine, which a mount sets: the host's own
			// (nsdelegate, memory_recursiveprot, ...), read from
			// ref's mount table, are kept.
			host, err := readMounts(fmt.Sprintf("/proc/%d/mountinfo", ref))
			if err != nil {
				return fmt.Errorf("the host's cgroup2 mount options: %w", err)
			}
			if i := slices.IndexFunc(host, func(h mount) bool { return h.fstype == "cgroup2" }); i >= 0 {
				m.options = superOptions(host[i])
			}
		}
		if err := os.MkdirAll(m.point, 0o755); err != nil {
			return fmt.Errorf("a directory for the %s hierarchy: %w", m.fstype, err)
		}
		if err := mountHierarchy(m.fstype, m.point, strings.Join(m.options, ",")); err != nil {
			return err
		}
	}
	if left, err := Partial(); err != nil || len(left) > 0 {
		return fmt.Errorf("cgroup mounts still partial after mounting afresh (in a cgroup namespace of a container's own?): %v %v", left, err)
	}
	return nil
}

// superOptions are a cgroup mount's super block options (its v1
// controllers, its v2 flags), without the mount's own rw or ro.
func superOptions(m mount) []string {
	var out []string
	for _, o := range m.options {
		if o != "rw" && o != "ro" {
			out = append(out, o)
		}
	}
	return out
}

// holder returns the mount that holds path: the one at the longest mount
// point that is path or above it.
func holder(all []mount, path string) (mount, bool) {
	var best mount
	found := false
	for _, m := range all {
		if (m.point == path || m.point == "/" || strings.HasPrefix(path, m.point+"/")) && (!found || len(m.point) >= len(best.point)) {
			best, found = m, true
		}
	}
	return best, found
}

func mountHierarchy(fstype, point, data string) error {
	if err := unix.Mount(fstype, point, fstype, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return fmt.Errorf("mount the %s hierarchy (%s) at %s: %w", fstype, data, point, err)
	}
	return nil
}

// missingHierarchies returns the hierarchies this process is in (its
// /proc/self/cgroup) that no mount under Root shows, with where to mount
// each: a hybrid host's v2 hierarchy, which runc does not mount in a v1
// container but the host's runc still kills the container's processes
// through, at Root/unified; a v1 one at Root/CONTROLLERS; the v2 one of a
// host without v1 at Root.
func missingHierarchies(ms []mount) ([]mount, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var out []mount
	for _, line := range lines {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			if slices.ContainsFunc(ms, func(m mount) bool { return m.fstype == "cgroup2" }) {
				continue
			}
			point := Root
			if len(lines) > 1 {
				point = filepath.Join(Root, "unified")
			}
			out = append(out, mount{point: point, fstype: "cgroup2"})
			continue
		}
		ctrls := strings.Split(parts[1], ",")
		if slices.ContainsFunc(ms, func(m mount) bool {
			return m.fstype == "cgroup" && !slices.ContainsFunc(ctrls, func(c string) bool { return !slices.Contains(m.options, c) })
		}) {
			continue
		}
		opts := ctrls
		if name, ok := strings.CutPrefix(parts[1], "name="); ok {
			opts = []string{"none", parts[1]}
			ctrls = []string{name}
		}
		out = append(out, mount{point: filepath.Join(Root, strings.Join(ctrls, ",")), fstype: "cgroup", options: opts})
	}
	return out, nil
}

// Own returns the cgroup path of process pid (0: this one), as its
// /proc/PID/cgroup shows it to this process: the first hierarchy's that is
// not the root (a hierarchy a container runtime leaves out keeps its
// processes at the root), else the root.
func Own(pid int) (string, error) {
	p := "/proc/self/cgroup"
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/cgroup", pid)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		found = true
		if parts[2] != "/" {
			return parts[2], nil
		}
	}
	if found {
		return "/", nil
	}
	return "", fmt.Errorf("%s names no cgroup", p)
}

// Hierarchies returns the directories of the hierarchies mounted under
// root ("" is Root): root itself when it is the v2 hierarchy, else each v1
// hierarchy beneath it (and a hybrid host's v2 one).
func Hierarchies(root string) []string {
	if root == "" {
		root = Root
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err == nil {
		return []string{root}
	}
	ents, _ := os.ReadDir(root)
	var out []string
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			continue // the symbolic links of co-mounted controllers
		}
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// Move makes the cgroup at cgroupPath (from the hierarchies' roots) in
// every hierarchy mounted under root ("" is Root), with its parents, and
// moves process pid into it: its children are born there.
func Move(root string, pid int, cgroupPath string) error {
	if root == "" {
		root = Root
	}
	if !path.IsAbs(cgroupPath) {
		return fmt.Errorf("cgroup path %q is not absolute", cgroupPath)
	}
	hs := Hierarchies(root)
	if len(hs) == 0 {
		return fmt.Errorf("no cgroup hierarchy under %s", root)
	}
	for _, h := range hs {
		dir := filepath.Join(h, cgroupPath)
		if err := mkdirCgroup(h, dir); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move process %d into %s: %w", pid, dir, err)
		}
	}
	return nil
}

// mkdirCgroup makes dir and its parents below the hierarchy h; a v1
// cpuset cgroup takes no process before its cpus and mems are set, which
// each new one copies from its parent.
func mkdirCgroup(h, dir string) error {
	rel, err := filepath.Rel(h, dir)
	if err != nil || rel == "." {
		return err
	}
	cur := h
	for _, p := range strings.Split(rel, string(filepath.Separator)) {
		parent := cur
		cur = filepath.Join(cur, p)
		if err := os.Mkdir(cur, 0o755); err != nil {
			if errors.Is(err, os.ErrExist) {
				continue
			}
			return fmt.Errorf("make cgroup %s: %w", cur, err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				continue // not a v1 cpuset hierarchy
			}
			if have, err := os.ReadFile(filepath.Join(cur, f)); err == nil && strings.TrimSpace(string(have)) != "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(cur, f), b, 0); err != nil {
				return fmt.Errorf("set %s of cgroup %s: %w", f, cur, err)
			}
		}
	}
	return nil
}

// Remove removes the cgroup at cgroupPath in every hierarchy under root
// ("" is Root) when it holds no process and no cgroup; best effort.
func Remove(root, cgroupPath string) {
	if root == "" {
		root = Root
	}
	for _, h := range Hierarchies(root) {
		_ = os.Remove(filepath.Join(h, cgroupPath))
	}
}
