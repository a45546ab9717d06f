package daemon

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/runtime"
)

// orphan is a process of this daemon that outlived its purpose.
type orphan struct {
	pid int
	cmd string
}

// findOrphans lists, once containerd is stopped and no session is left,
// the processes of this daemon still alive: shims of its containerd
// (address), loggers writing under its root (their binary is one of
// loggers), and anything in its cgroups (named "airlock-"+prefix), such as
// a sandbox whose shim went first. A create cut short at the wrong moment
// can leave a shim or a logger behind; nothing else would ever end them.
// The caller's own process is never listed.
func findOrphans(address, root, prefix string, loggers []string) []orphan {
	var out []orphan
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if o := findOrphan(pid, address, root, prefix, loggers); o != nil {
			out = append(out, *o)
		}
	}
	return out
}

// findOrphan is findOrphans for one pid: nil unless it is one.
func findOrphan(pid int, address, root, prefix string, loggers []string) *orphan {
	if pid == os.Getpid() {
		return nil
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return nil
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if isShimOf(args, address) || isLoggerUnder(args, root, loggers) || inCgroups(pid, "airlock-"+prefix) {
		return &orphan{pid: pid, cmd: strings.Join(args, " ")}
	}
	return nil
}

func isShimOf(args []string, address string) bool {
	if !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
		return false
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-address" && args[i+1] == address {
			return true
		}
	}
	return false
}

func isLoggerUnder(args []string, root string, loggers []string) bool {
	// airlockd in its logger mode is told apart from a daemon by its
	// arguments.
	if !slices.Contains(loggers, args[0]) || !runtime.IsLoggerCall(args[1:]) {
		return false
	}
	for _, a := range args[1:] {
		if strings.HasPrefix(a, root+"/") {
			return true
		}
	}
	return false
}

// inCgroups reports whether pid lives in a cgroup whose path has a
// component starting with name (the sessions' parent, the shim anchor's).
func inCgroups(pid int, name string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[2], "/") {
			if strings.HasPrefix(c, name) {
				return true
			}
		}
	}
	return false
}

// endOrphans kills what findOrphans lists, again and again until it
// lists nothing (a process in the cgroups may fork while it looks) or
// timeout has passed, logging each. Each is signalled through a pidfd
// opened while it still matched, so a pid reused in between is never hit.
func endOrphans(ctx context.Context, address, root, prefix string, loggers []string, timeout time.Duration) {
	seen := map[int]bool{}
	for deadline := time.Now().Add(timeout); ; {
		orphans := findOrphans(address, root, prefix, loggers)
		live := 0
		for _, o := range orphans {
			fd, err := unix.PidfdOpen(o.pid, 0)
			if err != nil {
				continue // gone
			}
			// Still the process listed, now pinned by fd.
			if still := findOrphan(o.pid, address, root, prefix, loggers); still != nil && !zombie(o.pid) {
				if !seen[o.pid] {
					log.G(ctx).Warn("ending a process left behind with no session", "pid", o.pid, "cmd", o.cmd)
					seen[o.pid] = true
				}
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				live++
			}
			unix.Close(fd)
		}
		if live == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombie reports whether pid has exited and waits for its parent.
func zombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}
