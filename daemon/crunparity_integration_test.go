package daemon_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// The tests in this file check hardening properties that the OCI runtime,
// not airlock, puts into effect from the spec (or from its own defaults),
// so that a session on crun (AIRLOCK_RUNTIME=crun) is held as one on runc.

// admitRootWith swaps in, for the test, an admission policy that admits
// uid and gid 0 and caps.
func admitRootWith(t *testing.T, caps ...string) {
	t.Helper()
	a, diags := policies.DecodeAdmission("admission.hcl", []byte(`admission {
  host_paths   = ["`+t.TempDir()+`"]
  users        = ["0-4294967294"]
  groups       = ["0-4294967294"]
  capabilities = ["`+strings.Join(caps, `", "`)+`"]
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })
}

// TestDevicesCgroupAllowlist runs a root session with CAP_MKNOD that makes
// device nodes in /dev (a tmpfs without nodev) and opens them: the devices
// cgroup admits only the usual pseudo devices. runc's default list admits
// null, zero, full, random, urandom, tty, ptmx, the pty slaves and
// /dev/net/tun; none of them reaches the host. /dev/console (5:1) is the
// host's console (device numbers are global): a session must not read or
// write it. crun 1.8.1's own default list admits c 5:1 rwm (and not
// 10:200), and airlock's spec leaves the list to the runtime.
func TestDevicesCgroupAllowlist(t *testing.T) {
	testutil.RequiresRoot(t)
	admitRootWith(t, "CAP_MKNOD")
	script := `
import os, errno, stat
for name, kind, major, minor in [
        ("null", stat.S_IFCHR, 1, 3), ("zero", stat.S_IFCHR, 1, 5),
        ("mem", stat.S_IFCHR, 1, 1), ("kmem", stat.S_IFCHR, 1, 2), ("port", stat.S_IFCHR, 1, 4),
        ("kmsg", stat.S_IFCHR, 1, 11), ("console", stat.S_IFCHR, 5, 1),
        ("tty0", stat.S_IFCHR, 4, 0), ("tty1", stat.S_IFCHR, 4, 1), ("ttyS0", stat.S_IFCHR, 4, 64),
        ("fuse", stat.S_IFCHR, 10, 229), ("kvm", stat.S_IFCHR, 10, 232),
        ("vda", stat.S_IFBLK, 253, 0), ("sda", stat.S_IFBLK, 8, 0), ("loop0", stat.S_IFBLK, 7, 0)]:
    p = "/dev/probe-" + name
    try:
        os.mknod(p, 0o600 | kind, os.makedev(major, minor))
    except OSError as e:
        print(name, "mknod", errno.errorcode[e.errno]); continue
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
        print(name, "open ok")
    except OSError as e:
        print(name, "open", errno.errorcode[e.errno])
`
	p := policy("python3", "-c", script)
	p.User = "0:0"
	p.Capabilities = []string{"CAP_MKNOD"}
	r := runSession(t, p)
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	want := `null open ok
zero open ok
mem open EPERM
kmem open EPERM
port open EPERM
kmsg open EPERM
console open EPERM
tty0 open EPERM
tty1 open EPERM
ttyS0 open EPERM
fuse open EPERM
kvm open EPERM
vda open EPERM
sda open EPERM
loop0 open EPERM
`
	if r.stdout != want {
		t.Errorf("on %s, device nodes a root session with CAP_MKNOD made in /dev:\n%s\nwant:\n%s", h.Env.Runtime, r.stdout, want)
	}
}

// TestReadonlyProcPathsMountOptions: the read-only paths of the spec
// (/proc/sys, /proc/bus, /proc/irq, /proc/fs, ...) are remounted read-only
// keeping /proc's nosuid, nodev and noexec.
func TestReadonlyProcPathsMountOptions(t *testing.T) {
	testutil.RequiresRoot(t)
	r := runSession(t, policy("sh", "-c", `awk '$5 ~ "^/proc/" && $9 == "proc" {print $5, $6}' /proc/self/mountinfo | sort`))
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) < 4 {
		t.Fatalf("read-only /proc paths: %q", r.stdout)
	}
	for _, l := range lines {
		path, opts, _ := strings.Cut(l, " ")
		have := map[string]bool{}
		for _, o := range strings.Split(opts, ",") {
			have[o] = true
		}
		for _, o := range []string{"ro", "nosuid", "nodev", "noexec"} {
			if !have[o] {
				t.Errorf("on %s, %s is mounted %s: no %s", h.Env.Runtime, path, opts, o)
			}
		}
	}
}

// TestMaskedPathsAreEmpty: the masked /proc and /sys paths show nothing
// and cannot be written.
func TestMaskedPathsAreEmpty(t *testing.T) {
	testutil.RequiresRoot(t)
	script := `
for p in /proc/keys /proc/timer_list /proc/kallsyms /proc/interrupts /proc/kcore /proc/latency_stats /proc/sched_debug /proc/sysrq-trigger /proc/acpi /proc/scsi /sys/firmware /sys/kernel/debug /sys/devices/virtual/powercap; do
  if [ ! -e $p ]; then echo "$p absent"; continue; fi
  if [ -d $p ]; then n=$(ls -A $p | wc -l); else n=$(cat $p 2>/dev/null | wc -c); fi
  if (: > $p) 2>/dev/null; then w=writable; else w=refused; fi
  echo "$p $n $w"
done
`
	r := runSession(t, policy("sh", "-c", script))
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == "absent" {
			continue
		}
		// A masked file is /dev/null (writes vanish), a directory an empty
		// read-only tmpfs: only the contents count.
		if len(f) != 3 || f[1] != "0" {
			t.Errorf("on %s, masked path: %s", h.Env.Runtime, l)
		}
	}
}

// TestSessionNamespacesShareNothing: two sessions and the shim anchor
// they name as their sandbox each have their own cgroup, ipc, mount,
// network, pid and uts namespaces (none the host's) and their own cgroup,
// and a session sees only its own processes.
func TestSessionNamespacesShareNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	a := startSession(ctx, t, policy("sleep", "300"))
	b := startSession(ctx, t, policy("sleep", "300"))
	c := h.Daemon.Runtime().Client()
	pids := map[string]uint32{}
	for _, id := range []string{a, b, "shim-anchor"} {
		ctr, err := c.LoadContainer(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		tk, err := ctr.Task(ctx, nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		pids[id] = tk.Pid()
	}
	seen := map[string]string{}
	for _, n := range []string{"cgroup", "ipc", "mnt", "net", "pid", "uts"} {
		l, err := os.Readlink("/proc/self/ns/" + n)
		if err != nil {
			t.Fatal(err)
		}
		seen[l] = "host"
	}
	for id, pid := range pids {
		for _, n := range []string{"cgroup", "ipc", "mnt", "net", "pid", "uts"} {
			if id == "shim-anchor" && n == "cgroup" {
				// The anchor is no session; only its own namespaces matter.
				continue
			}
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, n))
			if err != nil {
				t.Fatal(err)
			}
			if other, ok := seen[l]; ok {
				t.Errorf("on %s, %s shares its %s namespace %s with %s", h.Env.Runtime, id, n, l, other)
			}
			seen[l] = id
		}
	}
	cgroups := map[string]string{}
	for id, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if other, ok := cgroups[l]; ok {
				t.Errorf("on %s, %s shares cgroup %s with %s", h.Env.Runtime, id, l, other)
			}
			cgroups[l] = id
		}
	}
	// The other sessions run sleep, the anchor airlock-init --pause.
	r := runSession(t, policy("sh", "-c", `grep -l -e 'slee[p]' -e 'paus[e]' /proc/[0-9]*/cmdline 2>/dev/null; echo done`))
	if r.stdout != "done\n" {
		t.Errorf("on %s, a session sees others' processes: %q", h.Env.Runtime, r.stdout)
	}
}
