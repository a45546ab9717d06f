package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CgroupRoot is where the cgroup hierarchies are mounted: the v2 unified
// hierarchy at its root, or the v1 controllers below it.
const CgroupRoot = "/sys/fs/cgroup"

// Cgroups reads and removes cgroups of sessions by their path relative to
// a hierarchy's root (what the OCI spec's cgroupsPath holds), in every
// hierarchy mounted under Root, v1 or v2.
type Cgroups struct {
	// Root is where the hierarchies are mounted; empty is CgroupRoot.
	Root string
}

func (c Cgroups) root() string {
	if c.Root == "" {
		return CgroupRoot
	}
	return c.Root
}

// Empty reports whether the cgroup at path is known to hold no process:
// its cgroup.procs (v2, or the v1 pids or memory hierarchy) could be read
// and is empty. A cgroup that cannot be read is not known to be empty.
func (c Cgroups) Empty(path string) bool {
	for _, dir := range []string{
		filepath.Join(c.root(), path),
		filepath.Join(c.root(), "pids", path),
		filepath.Join(c.root(), "memory", path),
	} {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err == nil {
			return len(bytes.TrimSpace(b)) == 0
		}
	}
	return false
}

// OOMKilled reports whether the kernel's OOM killer acted in the memory
// cgroup at path (v1 memory.oom_control or v2 memory.events).
func (c Cgroups) OOMKilled(path string) bool {
	for _, f := range []string{
		filepath.Join(c.root(), "memory", path, "memory.oom_control"),
		filepath.Join(c.root(), path, "memory.events"),
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			if k == "oom_kill" && strings.TrimSpace(v) != "0" {
				return true
			}
		}
	}
	return false
}

// Remove removes the (empty) cgroup at path in every hierarchy. A cgroup
// that still holds processes or children is left alone: removal is best
// effort, and its error is not reported.
func (c Cgroups) Remove(path string) {
	_ = os.Remove(filepath.Join(c.root(), path))
	entries, err := os.ReadDir(c.root())
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			_ = os.Remove(filepath.Join(c.root(), e.Name(), path))
		}
	}
}

// Exists reports whether the cgroup at path is there in any hierarchy.
func (c Cgroups) Exists(path string) bool {
	if _, err := os.Stat(filepath.Join(c.root(), path)); err == nil && path != "" && path != "/" {
		return true
	}
	entries, err := os.ReadDir(c.root())
	if err != nil {
		return false
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(c.root(), e.Name(), path)); err == nil && e.IsDir() {
			return true
		}
	}
	return false
}

// RemoveTree removes the cgroup at path and every cgroup beneath it that
// holds no process, deepest first, in every hierarchy: what a create cut
// short or a killed shim left behind. A cgroup that still holds processes
// (and those above it) is left alone; removal is best effort.
func (c Cgroups) RemoveTree(path string) {
	roots := []string{c.root()}
	if entries, err := os.ReadDir(c.root()); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				roots = append(roots, filepath.Join(c.root(), e.Name()))
			}
		}
	}
	for _, r := range roots {
		removeEmptyTree(filepath.Join(r, path))
	}
}

// removeEmptyTree removes the directories of the tree at dir, children
// first; a cgroup's control files go with its directory.
func removeEmptyTree(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() {
			removeEmptyTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = os.Remove(dir)
}

// KillInit sends SIGKILL to a session's init (the container's pid 1) by
// pidfd, after checking through the pidfd's process that it is still in
// the session's cgroup, so a recycled pid is never signalled. Killing the
// init of a PID namespace kills every process in it.
func KillInit(pid uint32, cgroup string) error {
	if pid == 0 {
		return errors.New("no pid known")
	}
	fd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// The pidfd pins the process; if pid was recycled after it was opened
	// the check reads another process, and the signal below then fails
	// with ESRCH on the dead one.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if !cgroupListed(string(b), cgroup) {
		return fmt.Errorf("pid %d is not in cgroup %s", pid, cgroup)
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// cgroupListed reports whether a /proc/PID/cgroup listing places the
// process in path (or below it) in any hierarchy.
func cgroupListed(listing, path string) bool {
	for _, line := range strings.Split(listing, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[2] == path || strings.HasPrefix(parts[2], path+"/")) {
			return true
		}
	}
	return false
}
