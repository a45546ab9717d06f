// Package hostcheck checks the kernel and host for what airlock uses, the
// way `airlock doctor` reports it: one Result per check, OK or what fails
// and how to fix it.
//
// Every check exercises the feature itself, cheaply, and leaves nothing
// behind: the overlay and tmpfs mounts are detached mounts, attached
// nowhere and gone when their fds are closed, the idmapped mount is a
// detached clone dropped the same way, the network namespace is left again
// at once, and temporary directories live under os.TempDir() and are
// removed.
//
// The checks, in order:
//
//   - kernel: the release (uname), reported only;
//   - cgroup: cgroup v2 at /sys/fs/cgroup with the cpu, memory and pids
//     controllers, or, since airlock's runtime handles both (see
//     runtime.Cgroups), cgroup v1 hierarchies of those controllers below
//     it;
//   - overlayfs: listed in /proc/filesystems, and an overlay mount works;
//   - tmpfs-xattr: a trusted.* extended attribute on a tmpfs file (the
//     frozen view of a workspace keeps its whiteouts there);
//   - idmap: an idmapped mount of each Config.Paths entry's filesystem;
//   - userns: user.max_user_namespaces is above 0;
//   - netns: a network namespace can be made and left;
//   - nftables: netlink nftables answers a table listing;
//   - fanotify: permission events (deny_read's audit); a warning only,
//     since airlock still enforces deny_read without it, unaudited;
//   - loop: /dev/loop-control opens (the workspace quota's image);
//   - seccomp: the kernel has seccomp filter mode;
//   - containerd, runc: with Config.BinDir, the binaries' versions,
//     compared with the versions hack/versions.env pins (ContainerdVersion
//     and RuncVersion here; a test keeps the two in step). Another version
//     is a warning. crun too, when the bin dir holds one (CrunVersion, the
//     Debian package's upstream version);
//   - crun-cgroup: with Config.Runtime "crun", a cgroup layout crun
//     accepts: crun refuses a hybrid host (v1 controllers with a v2
//     hierarchy at /sys/fs/cgroup/unified) whose v2 hierarchy holds a
//     controller.
//
// Checks that need root report "warn" with the detail "needs root" when
// the process is not root.
package hostcheck

import "context"

// Statuses of a Result.
const (
	StatusOK   = "ok"
	StatusWarn = "warn"
	StatusFail = "fail"
)

// Versions of the runtime binaries airlock is built and tested with; they
// must equal CONTAINERD_VERSION and RUNC_VERSION in hack/versions.env
// (TestPinnedVersions checks).
const (
	ContainerdVersion = "v2.4.2"
	RuncVersion       = "v1.5.3"
	// CrunVersion is the upstream part of CRUN_VERSION, Debian's package.
	CrunVersion = "v1.8.1"
)

// Result is the outcome of one check.
type Result struct {
	// Name identifies the check: "kernel", "cgroup2", "idmap", ...
	Name string `json:"name"`
	// Status is StatusOK, StatusWarn or StatusFail.
	Status string `json:"status"`
	// Detail says what was found, or what failed.
	Detail string `json:"detail"`
	// Fix says what to do about a warning or failure: a kernel config
	// option, a package, a sysctl or a flag. Empty when Status is ok.
	Fix string `json:"fix,omitempty"`
}

// Config says what to check besides the kernel.
type Config struct {
	// Paths are workspace roots whose filesystems must support idmapped
	// mounts. None by default.
	Paths []string
	// BinDir holds containerd and runc. Empty: their versions are not
	// checked.
	BinDir string
	// Runtime is the OCI runtime airlockd runs sessions on (--runtime);
	// "crun" adds the crun-cgroup check.
	Runtime string
}

// Failed reports whether any result has StatusFail.
func Failed(rs []Result) bool {
	for _, r := range rs {
		if r.Status == StatusFail {
			return true
		}
	}
	return false
}

// NeedsRoot is the Detail of a check skipped because the process is not
// root.
const NeedsRoot = "needs root"

// Run runs every check and returns their results in order.
func Run(ctx context.Context, cfg Config) []Result {
	return run(ctx, cfg, defaultHost())
}
