package daemon_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
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
        ("null", stat.S_IFCHR, 1, 3), ("zero", stat.S_IFCHR, 1, 5), ("full", stat.S_IFCHR, 1, 7),
        ("random", stat.S_IFCHR, 1, 8), ("urandom", stat.S_IFCHR, 1, 9), ("tty", stat.S_IFCHR, 5, 0),
        ("ptmx", stat.S_IFCHR, 5, 2),
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
	if h.Env.Runtime == "crun" {
		// crun's devices cgroup always allows /dev/console: the daemon
		// refuses a session that could make the node.
		_, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p, Start: true})
		status, detail := httpapi.ErrorDetail(err)
		if status != http.StatusForbidden || !strings.Contains(detail.Message, "/dev/console") {
			t.Fatalf("a session with CAP_MKNOD on crun: %d %+v, want 403 naming /dev/console", status, detail)
		}
		return
	}
	r := runSession(t, p)
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	want := `null open ok
zero open ok
full open ok
random open ok
urandom open ok
tty open ENXIO
ptmx open ok
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
// (/proc/sys, /proc/bus, /proc/irq, /proc/fs, ...) are remounted read-only,
// on runc keeping /proc's nosuid, nodev and noexec.
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
		want := []string{"ro", "nosuid", "nodev", "noexec"}
		if h.Env.Runtime == "crun" {
			// crun 1.8 remounts them read-only alone (README: OCI
			// runtimes); proc files hold no device node or program.
			want = want[:1]
		}
		for _, o := range want {
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

// seccompProbe makes each system call (x86_64 numbers) with harmless
// arguments and prints how it fared: EPERM is the default profile's
// refusal, any other outcome the kernel's answer to a call the filter let
// through.
const seccompProbe = `import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
def t(name, nr, *args):
    r = sc(nr, *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    print("sys %s=%s" % (name, "ok" if r >= 0 else errno.errorcode.get(e, e)))
# x86_64 numbers
t("unshare_user", 272, 0x10000000)
t("unshare_ns", 272, 0x00020000)
t("unshare_net", 272, 0x40000000)
t("mount", 165, 0, 0, 0, 0, 0)
t("keyctl", 250, 0, 0, 0, 0, 0)
t("add_key", 248, 0, 0, 0, 0, 0)
t("request_key", 249, 0, 0, 0, 0)
t("bpf", 321, 0, 0, 0)
t("userfaultfd", 323, 0)
t("ptrace_traceme_fake", 101, 0xffff, 0, 0, 0)
t("perf_event_open", 298, 0, 0, -1, -1, 0)
t("io_uring_setup", 425, 0, 0)
t("personality_query", 135, 0xffffffff)
t("personality_addr_no_rand", 135, 0x0040000)
t("personality_read_implies_exec", 135, 0x0400000)
t("clone3_bad", 435, 0, 0)
t("setns", 308, -1, 0)
t("pivot_root", 155, 0, 0)
t("chroot", 161, 0)
t("umount2", 166, 0, 0)
t("swapon", 167, 0, 0)
t("reboot", 169, 0, 0, 0, 0)
t("init_module", 175, 0, 0, 0)
t("kexec_load", 246, 0, 0, 0, 0)
t("open_by_handle_at", 304, -1, 0, 0)
t("name_to_handle_at", 303, -1, 0, 0, 0, 0)
t("fsopen", 430, 0, 0)
t("open_tree", 428, -1, 0, 0)
t("move_mount", 429, -1, 0, -1, 0, 0)
t("mount_setattr", 442, -1, 0, 0, 0, 0)
t("lookup_dcookie", 212, 0, 0, 0)
t("quotactl", 179, 0, 0, 0, 0)
t("acct", 163, 0)
t("settimeofday", 164, 0, 0)
t("clock_settime", 227, 0, 0)
t("syslog", 103, 3, 0, 0)
t("vhangup", 153)
t("iopl", 172, 3)
t("ioperm", 173, 0, 1, 1)
t("process_vm_readv", 310, 1, 0, 0, 0, 0, 0)
t("kcmp", 312, 1, 1, 0, 0, 0)
t("fanotify_init", 300, 0, 0)
t("pidfd_getfd", 438, -1, 0, 0)
t("landlock_create_ruleset", 444, 0, 0, 1)
t("memfd_secret", 447, 0)
t("futex_waitv", 449, 0, 0, 0, 0, 0)
t("set_mempolicy_home_node", 450, 0, 0, 0, 0)
t("cachestat", 451, -1, 0, 0, 0)
t("mbind", 237, 0, 0, 0, 0, 0, 0)
t("move_pages", 279, 0, 0, 0, 0, 0, 0)
t("socket_alg", 41, 38, 5, 0)
t("socket_vsock", 41, 40, 1, 0)
t("socket_packet", 41, 17, 3, 0)
t("socket_netlink_audit", 41, 16, 3, 9)
# A compat ABI (x32) system call kills the caller: the filter admits only the native one.
pid = os.fork()
if pid == 0:
    sc(ctypes.c_long(0x40000000 + 39))
    os._exit(0)
print("x32_getpid", "killed by", os.waitpid(pid, 0)[1] & 0x7f)
`

// TestSeccompRefusals runs, as the default unprivileged user, system calls
// the default profile refuses without capabilities (namespaces, mounts,
// keyrings, bpf, userfaultfd, perf, io_uring, personality flags, module
// and kexec loading, clock setting, raw sockets...) and a few it admits:
// each must fare the same on every runtime.
func TestSeccompRefusals(t *testing.T) {
	testutil.RequiresRoot(t)
	if goruntime.GOARCH != "amd64" {
		t.Skip("system call numbers are x86_64's")
	}
	r := runSession(t, policy("python3", "-u", "-c", seccompProbe))
	want := `sys unshare_user=EPERM
sys unshare_ns=EPERM
sys unshare_net=EPERM
sys mount=EPERM
sys keyctl=EPERM
sys add_key=EPERM
sys request_key=EPERM
sys bpf=EPERM
sys userfaultfd=EPERM
sys ptrace_traceme_fake=ESRCH
sys perf_event_open=EPERM
sys io_uring_setup=EPERM
sys personality_query=ok
sys personality_addr_no_rand=EPERM
sys personality_read_implies_exec=EPERM
sys clone3_bad=ENOSYS
sys setns=EPERM
sys pivot_root=EPERM
sys chroot=EPERM
sys umount2=EPERM
sys swapon=EPERM
sys reboot=EPERM
sys init_module=EPERM
sys kexec_load=EPERM
sys open_by_handle_at=EPERM
sys name_to_handle_at=EFAULT
sys fsopen=EPERM
sys open_tree=EPERM
sys move_mount=EPERM
sys mount_setattr=EPERM
sys lookup_dcookie=EPERM
sys quotactl=EPERM
sys acct=EPERM
sys settimeofday=EPERM
sys clock_settime=EPERM
sys syslog=EPERM
sys vhangup=EPERM
sys iopl=EPERM
sys ioperm=EPERM
sys process_vm_readv=ok
sys kcmp=EPERM
sys fanotify_init=EPERM
sys pidfd_getfd=EPERM
sys landlock_create_ruleset=ok
sys memfd_secret=ok
sys futex_waitv=EINVAL
sys set_mempolicy_home_node=EPERM
sys cachestat=EBADF
sys mbind=EPERM
sys move_pages=EPERM
sys socket_alg=EPERM
sys socket_vsock=EPERM
sys socket_packet=EPERM
sys socket_netlink_audit=ok
x32_getpid killed by 31
`
	if r.exit != 0 || r.stdout != want {
		t.Errorf("on %s: exit %d, stderr %q, system calls:\n%s\nwant:\n%s", h.Env.Runtime, r.exit, r.stderr, r.stdout, want)
	}
}

// TestProcessAttributes: the session's process has the policy's user and
// no other group, umask 022, containerd's RLIMIT_NOFILE of 1024, and an
// oom_score_adj no lower than the daemon's (the shim's, one above
// containerd's): the kernel's OOM killer takes a session before the daemon.
func TestProcessAttributes(t *testing.T) {
	testutil.RequiresRoot(t)
	r := runSession(t, policy("sh", "-c", `id; umask; grep -E '^(Groups|Umask):' /proc/self/status; grep 'Max open files' /proc/self/limits | tr -s ' '; cat /proc/self/oom_score_adj`))
	want := "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)\n0022\nUmask:\t0022\nGroups:\t \nMax open files 1024 1024 files \n"
	if r.exit != 0 || !strings.HasPrefix(r.stdout, want) {
		t.Errorf("on %s: exit %d, stderr %q:\n%q\nwant prefix:\n%q", h.Env.Runtime, r.exit, r.stderr, r.stdout, want)
	}
	self, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	got, err1 := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(r.stdout, want)))
	daemon, err2 := strconv.Atoi(strings.TrimSpace(string(self)))
	if err1 != nil || err2 != nil || got < daemon {
		t.Errorf("on %s: oom_score_adj %q, the daemon's %q", h.Env.Runtime, r.stdout, self)
	}
}

// TestImageDeviceNodesCannotBeOpened: an image whose own files hold device
// nodes, readable and writable by anyone, is refused at import, naming them,
// and nothing of it stays; put into containerd around airlock (its own
// import), it is refused when a session would use it. A session's devices
// are the runtime's: crun's devices cgroup always admits /dev/console (5:1),
// the host's console, and without the checks a session on crun opened an
// image's 5:1 node.
//
// Behind the checks, the session's root (the image's snapshot) is mounted
// nodev: with the image's snapshot labelled as checked (as only someone
// with containerd's own tools could), its nodes are refused on runc, which
// keeps the flag when it remounts the root read-only; crun's remount drops
// it.
func TestImageDeviceNodesCannotBeOpened(t *testing.T) {
	testutil.RequiresRoot(t)
	nodes := []struct {
		name         string
		typ          byte
		major, minor int64
	}{
		{"console", tar.TypeChar, 5, 1}, {"null", tar.TypeChar, 1, 3}, {"mem", tar.TypeChar, 1, 1},
		{"tty0", tar.TypeChar, 4, 0}, {"sda", tar.TypeBlock, 8, 0},
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "probe/", Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := tw.WriteHeader(&tar.Header{Typeflag: n.typ, Name: "probe/" + n.name, Mode: 0o666, Devmajor: n.major, Devminor: n.minor}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	base, err := os.Open(h.Env.AgentImage)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	const ref = "airlock/devnodes:test"
	var archive bytes.Buffer
	if _, err := ocipack.Append(&archive, base, &layer, ocipack.AppendConfig{Ref: ref, TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}

	rt := h.Daemon.Runtime()
	imgs, err := rt.ImportImage(t.Context(), bytes.NewReader(archive.Bytes()), "")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), "/probe/console (char 5:1)") || !strings.Contains(fmt.Sprint(err), "/probe/sda (block 8:0)") {
		t.Fatalf("import of an image holding device nodes: %+v, %v; want invalid argument naming them", imgs, err)
	}
	t.Logf("refused: %v", err)
	stored, err := rt.Images(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range stored {
		if strings.Contains(img.Name, "devnodes") {
			t.Errorf("refused image %s is in the store", img.Name)
		}
	}
	c := rt.Client()
	nctx := namespaces.WithNamespace(t.Context(), rt.Namespace())
	if err := c.SnapshotService(rt.Snapshotter()).Walk(nctx, func(_ context.Context, info snapshots.Info) error {
		if info.Kind != snapshots.KindCommitted {
			t.Errorf("snapshot %s (%v) left by the check", info.Name, info.Kind)
		}
		return nil
	}, `name~="ocipack-devices"`); err != nil {
		t.Fatal(err)
	}

	// Around the import's check: containerd's own import.
	bypass, err := c.Import(nctx, bytes.NewReader(archive.Bytes()))
	if err != nil || len(bypass) != 1 {
		t.Fatalf("containerd import: %+v, %v", bypass, err)
	}
	t.Cleanup(func() { _ = c.ImageService().Delete(context.WithoutCancel(nctx), bypass[0].Name) })
	img := containerd.NewImage(c, bypass[0])
	if err := img.Unpack(nctx, rt.Snapshotter()); err != nil {
		t.Fatal(err)
	}
	probe := policy("true")
	probe.Image = bypass[0].Name
	if s, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: probe, Start: true}); !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), "/probe/console (char 5:1)") {
		if s != nil {
			_ = h.Daemon.Remove(context.WithoutCancel(t.Context()), s.ID, true)
		}
		t.Fatalf("a session of an image containerd imported around the check: %+v, %v; want invalid argument naming its nodes", s, err)
	}
	assertNoSessionOf(t, bypass[0].Name)

	// Labelled as checked: the nodev mount is what is left.
	diffIDs, err := img.RootFS(nctx)
	if err != nil {
		t.Fatal(err)
	}
	sn := c.SnapshotService(rt.Snapshotter())
	info, err := sn.Stat(nctx, identity.ChainID(diffIDs).String())
	if err != nil {
		t.Fatal(err)
	}
	info.Labels = map[string]string{ocipack.LabelNoDevices: "true"}
	if _, err := sn.Update(nctx, info, "labels."+ocipack.LabelNoDevices); err != nil {
		t.Fatal(err)
	}
	p := policy("python3", "-c", `
import os, errno, stat
for name in sorted(os.listdir("/probe")):
    p = "/probe/" + name
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY))
        print(name, "open ok")
    except OSError as e:
        print(name, "open", errno.errorcode[e.errno])
for line in open("/proc/self/mountinfo"):
    f = line.split()
    if f[4] == "/":
        print("root", f[5])
`)
	p.Image = bypass[0].Name
	r := runSession(t, p)
	if r.exit != 0 {
		t.Fatalf("exit %d, stderr %q", r.exit, r.stderr)
	}
	t.Logf("an image's device nodes, on %s:\n%s", h.Env.Runtime, r.stdout)
	if h.Env.Runtime == "crun" {
		return // its read-only remount of the root drops nodev: the import check above is what holds
	}
	want := `console open EACCES
mem open EACCES
null open EACCES
sda open EACCES
tty0 open EACCES
root ro,nodev,relatime
`
	if r.stdout != want {
		t.Errorf("on %s, an image's device nodes:\n%s\nwant (the root mounted nodev):\n%s", h.Env.Runtime, r.stdout, want)
	}
}

// assertNoSessionOf fails the test if a session of image is listed.
func assertNoSessionOf(t *testing.T, image string) {
	t.Helper()
	for _, s := range h.Daemon.List(t.Context()) {
		if s.Image == image {
			t.Errorf("session %s of %s is listed", s.ID, image)
		}
	}
}

// TestImageWithoutLayersIsImported: the device-node check passes an image
// with no layer (nothing to walk), at import and when a session is created
// of it, as before the check.
func TestImageWithoutLayersIsImported(t *testing.T) {
	testutil.RequiresRoot(t)
	blob := func(v any) ([]byte, ocispec.Descriptor) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b, ocispec.Descriptor{Digest: digest.FromBytes(b), Size: int64(len(b))}
	}
	cfg, cfgDesc := blob(ocispec.Image{Platform: ocispec.Platform{OS: "linux", Architecture: goruntime.GOARCH}, RootFS: ocispec.RootFS{Type: "layers"}})
	cfgDesc.MediaType = ocispec.MediaTypeImageConfig
	man, manDesc := blob(ocispec.Manifest{Versioned: specsVersioned, MediaType: ocispec.MediaTypeImageManifest, Config: cfgDesc, Layers: []ocispec.Descriptor{}})
	manDesc.MediaType = ocispec.MediaTypeImageManifest
	manDesc.Annotations = map[string]string{ocispec.AnnotationRefName: "docker.io/airlock/nolayers:test"}
	idx, _ := blob(ocispec.Index{Versioned: specsVersioned, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{manDesc}})
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{ocispec.ImageLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{ocispec.ImageIndexFile, idx},
		{"blobs/sha256/" + cfgDesc.Digest.Encoded(), cfg},
		{"blobs/sha256/" + manDesc.Digest.Encoded(), man},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	imgs, err := h.Daemon.Runtime().ImportImage(t.Context(), &archive, "")
	if err != nil || len(imgs) != 1 {
		t.Fatalf("import of an image without layers: %+v, %v", imgs, err)
	}
	p := policy("true")
	p.Image = imgs[0].Name
	s, err := h.Daemon.Create(t.Context(), api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatalf("create a session of an image without layers: %v", err)
	}
	if err := h.Daemon.Remove(context.WithoutCancel(t.Context()), s.ID, true); err != nil {
		t.Fatal(err)
	}
}

var specsVersioned = specs.Versioned{SchemaVersion: 2}
