package daemontest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/mountinfo"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Census is what a daemon on a root left on the machine, by kind ("process",
// "mount", "loop", "cgroup", "net", "session-dir"), each with the objects'
// names. Empty after every session was removed and the daemon stopped with
// --stop-containerd: the resources the perf harness's teardown tracks per
// session, counted for the whole daemon.
type Census map[string][]string

// Total is how many objects the census found.
func (c Census) Total() int {
	n := 0
	for _, v := range c {
		n += len(v)
	}
	return n
}

// String lists the census by kind, "none" when empty.
func (c Census) String() string {
	if c.Total() == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range c {
			if !yield(k) {
				return
			}
		}
	}) {
		if len(c[k]) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", k, strings.Join(c[k], ", ")))
		}
	}
	return strings.Join(parts, "; ")
}

// TakeCensus counts what the daemon on root left: processes whose command
// line names root (containerd, the shims, the loggers) or that live in its
// cgroups (the shim anchor's pause process, sandboxes), mounts under root,
// loop devices backed by files under root, its cgroups, its namespaces,
// interfaces and nftables tables (and the uplink's peer in uplinkNetns, if
// set), and session directories. self (the caller, and airlockd while it
// runs if the caller wants it left out) is not counted.
func TakeCensus(root, uplinkNetns string, skip ...int) Census {
	root = filepath.Clean(root)
	prefix := runtime.Prefix(root)
	c := Census{}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() || slices.Contains(skip, pid) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		cg, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cgroup"))
		if strings.Contains(cmd, root+"/") || strings.Contains(cmd, root+" ") || strings.Contains(string(cg), "airlock-"+prefix) {
			if st, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie its parent has yet to reap
			}
			if len(cmd) > 120 {
				cmd = cmd[:120] + "..."
			}
			c["process"] = append(c["process"], fmt.Sprintf("%d %s", pid, cmd))
		}
	}
	if m, err := mountinfo.Under(root); err == nil {
		c["mount"] = append(c["mount"], m...)
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), root+"/") {
			c["loop"] = append(c["loop"], filepath.Base(filepath.Dir(filepath.Dir(l)))+" "+strings.TrimSpace(string(b)))
		}
	}
	// The sessions' parent and the shim anchor's, in every hierarchy.
	for _, pat := range []string{"/sys/fs/cgroup/airlock-" + prefix + "*", "/sys/fs/cgroup/*/airlock-" + prefix + "*"} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				c["cgroup"] = append(c["cgroup"], p)
			}
		}
	}
	if left, err := netns.Leftovers(netns.DefaultDir, netns.PrefixFor(root), uplinkNetns); err != nil {
		c["net"] = append(c["net"], "error: "+err.Error())
	} else {
		c["net"] = append(c["net"], left...)
	}
	if entries, err := os.ReadDir(filepath.Join(root, "sessions")); err == nil {
		for _, e := range entries {
			c["session-dir"] = append(c["session-dir"], e.Name())
		}
	}
	for k, v := range c {
		if len(v) == 0 {
			delete(c, k)
		}
	}
	return c
}

// ContainerdObjects lists the session containers, the containers other
// than the shim anchor and the leases left in the airlock
// namespace of the containerd at address (which must be running).
func ContainerdObjects(ctx context.Context, address string) ([]string, error) {
	cc, err := containerd.New(address, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	defer cc.Close()
	nctx := namespaces.WithNamespace(ctx, "airlock")
	var out []string
	ctrs, err := cc.Containers(nctx)
	if err != nil {
		return nil, err
	}
	for _, ctr := range ctrs {
		if ctr.ID() != runtime.AnchorID {
			out = append(out, "container "+ctr.ID())
		}
	}
	ls, err := cc.LeasesService().List(nctx)
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		out = append(out, "lease "+l.ID)
	}
	return out, nil
}
