// Package hostcgroup gives a daemon that runs in a container (a
// Kubernetes DaemonSet's privileged pod) the host's cgroup hierarchies,
// so that what it starts can be placed in cgroups outside its own
// container's: a container's removal kills every process of the
// container's cgroup and the cgroups beneath it (runc's kill of all its
// processes), and sessions meant to outlive a restart of the daemon's
// container must not be among them.
//
// Three steps, each a no-op on a host:
//   - EnterNamespaceOf re-executes the process in its parent's cgroup
//     namespace (a container's parent is the runtime's shim, on the host)
//     when it is in another one (a cgroup v2 container's private
//     namespace shows the container's cgroup as the root);
//   - MountFullView mounts the hierarchies afresh over /sys/fs/cgroup
//     where the mounts there show a cgroup below a hierarchy's root (runc
//     bind-mounts the container's own cgroup there under v1): in the
//     container's mount namespace only;
//   - Resolve turns the operator's parent path into one from the
//     hierarchies' roots, and Move places a process there.
//
// None of it makes a process more privileged than it is: joining another
// cgroup namespace and mounting a cgroup file system both take
// CAP_SYS_ADMIN in the host's user namespace, which only a privileged
// container has; the shim is seen only in the host's PID namespace
// (hostPID).
package hostcgroup

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Resolve returns the cgroup path parent names: an absolute path as it is
// (cleaned); a relative one beside the kubelet's pod cgroups, under the
// cgroup that holds kubepods (or kubepods.slice) in own, the path of the
// calling process's cgroup.
func Resolve(parent, own string) (string, error) {
	if parent == "" {
		return "", errors.New("no cgroup parent")
	}
	if path.IsAbs(parent) {
		return path.Clean(parent), nil
	}
	clean := path.Clean(parent)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("cgroup parent %q: a relative path must name a cgroup beneath the kubelet's cgroup root", parent)
	}
	parts := strings.Split(own, "/")
	for i, p := range parts {
		if p == "kubepods" || p == "kubepods.slice" {
			return path.Join("/", strings.Join(parts[:i], "/"), clean), nil
		}
	}
	return "", fmt.Errorf("cgroup parent %q: a relative path is placed beside the kubelet's pod cgroups, and this process's cgroup %s is under no kubepods cgroup (give an absolute path)", parent, own)
}
