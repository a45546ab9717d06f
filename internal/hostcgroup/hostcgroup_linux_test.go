package hostcgroup

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// helperEnv runs the test binary as one of the helpers below: a process
// whose namespaces the test changes, which the test process's must never
// be.
const helperEnv = "HOSTCGROUP_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "unshare":
		helperUnshare()
	case "enter":
		helperEnter()
	case "mount":
		helperMount()
	case "refuse":
		// In its parent's mount namespace, where the partial mounts
		// are: MountFullView must not mount over them.
		err := MountFullView(os.Getppid())
		fmt.Printf("refused=%v\n", err != nil && strings.Contains(err.Error(), "not mounted over"))
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "unknown helper", os.Getenv(helperEnv))
	os.Exit(2)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// helperUnshare moves itself into HOSTCGROUP_TEST_CGROUP, makes a cgroup
// namespace rooted there (as a cgroup v2 container's private one is) and
// re-executes itself in it as the enter helper.
func helperUnshare() {
	if err := Move("", os.Getpid(), os.Getenv("HOSTCGROUP_TEST_CGROUP")); err != nil {
		fail("move: %v", err)
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		fail("unshare: %v", err)
	}
	os.Setenv(helperEnv, "enter")
	exe, _ := os.Executable()
	fail("exec: %v", syscall.Exec(exe, os.Args, os.Environ()))
}

// helperEnter prints its cgroup, calls EnterNamespaceOf its parent (the
// test, which re-executes it once) and prints its cgroup again.
func helperEnter() {
	own, err := Own(0)
	if err != nil {
		fail("own: %v", err)
	}
	fmt.Printf("before=%s\n", own)
	if err := EnterNamespaceOf(os.Getppid()); err != nil {
		fail("enter: %v", err)
	}
	own, err = Own(0)
	if err != nil {
		fail("own: %v", err)
	}
	fmt.Printf("after=%s\n", own)
	os.Exit(0)
}

// helperMount, in a mount namespace of its own, shows only the cgroup
// HOSTCGROUP_TEST_CGROUP at /sys/fs/cgroup's hierarchies (as runc's bind
// mounts in a v1 container do), then calls MountFullView and reports what
// is mounted.
func helperMount() {
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		fail("private /: %v", err)
	}
	// /sys shared, as in a container whose rootfs is rshared (CRI makes
	// it so for Bidirectional volumes): MountFullView must stop what it
	// does from propagating along it.
	if err := unix.Mount("", "/sys", "", unix.MS_SHARED, ""); err != nil {
		fail("shared /sys: %v", err)
	}
	cg := os.Getenv("HOSTCGROUP_TEST_CGROUP")
	// As runc makes a v1 container's: a tmpfs at /sys/fs/cgroup, and in
	// it each hierarchy's directory with the container's cgroup bound
	// there. The cgroups are bound to a staging tmpfs first, since the
	// tmpfs hides their sources.
	stage := os.Getenv("HOSTCGROUP_TEST_STAGE")
	if err := unix.Mount("tmpfs", stage, "tmpfs", 0, ""); err != nil {
		fail("stage tmpfs: %v", err)
	}
	// runc mounts no v2 hierarchy in a v1 container on a hybrid host.
	hs := slices.DeleteFunc(Hierarchies(Root), func(h string) bool { return filepath.Base(h) == "unified" })
	for _, h := range hs {
		d := filepath.Join(stage, filepath.Base(h))
		if err := os.Mkdir(d, 0o755); err != nil {
			fail("%v", err)
		}
		if err := unix.Mount(filepath.Join(h, cg), d, "", unix.MS_BIND, ""); err != nil {
			fail("bind %s: %v", h, err)
		}
	}
	if err := unix.Mount("tmpfs", Root, "tmpfs", 0, "mode=755"); err != nil {
		fail("tmpfs over %s: %v", Root, err)
	}
	for _, h := range hs {
		if err := os.Mkdir(h, 0o755); err != nil {
			fail("%v", err)
		}
		if err := unix.Mount(filepath.Join(stage, filepath.Base(h)), h, "", unix.MS_BIND, ""); err != nil {
			fail("bind %s: %v", h, err)
		}
	}
	partial, err := Partial()
	if err != nil {
		fail("partial: %v", err)
	}
	fmt.Printf("partial=%d\n", len(partial))
	refuse := exec.Command(os.Args[0], "-test.run=^$")
	refuse.Env = append(os.Environ(), helperEnv+"=refuse")
	refuse.Stdout, refuse.Stderr = os.Stdout, os.Stderr
	if err := refuse.Run(); err != nil {
		fail("refuse helper: %v", err)
	}
	if err := MountFullView(os.Getppid()); err != nil {
		fail("MountFullView: %v", err)
	}
	partial, err = Partial()
	if err != nil {
		fail("partial: %v", err)
	}
	fmt.Printf("partial=%d\n", len(partial))
	all, err := readMounts("/proc/self/mountinfo")
	if err != nil {
		fail("%v", err)
	}
	if h, ok := holder(all, "/sys/fs"); !ok || h.point != "/sys" || h.shared {
		fail("after MountFullView, the mount that holds /sys/fs: %+v %v; want /sys, no longer shared", h, ok)
	}
	// The test's cgroup is seen at its full path again, in every
	// hierarchy the machine has (the v2 one of a hybrid host too).
	if got, want := len(Hierarchies(Root)), len(strings.Split(strings.TrimSpace(os.Getenv("HOSTCGROUP_TEST_HIERARCHIES")), " ")); got != want {
		b, _ := os.ReadFile("/proc/self/mountinfo")
		fail("after MountFullView: %d hierarchies, want the machine's %d\n%s", got, want, b)
	}
	for _, h := range Hierarchies(Root) {
		if _, err := os.Stat(filepath.Join(h, cg, "cgroup.procs")); err != nil {
			fail("after MountFullView: %v", err)
		}
	}
	os.Exit(0)
}

// testCgroup returns a cgroup path of the test's own, removed (with what
// is beneath it) when the test ends.
func testCgroup(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	cg := "/airlock-hostcgroup-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, h := range Hierarchies(Root) {
			dirs, _ := filepath.Glob(filepath.Join(h, cg, "*"))
			for _, d := range dirs {
				if fi, err := os.Stat(d); err == nil && fi.IsDir() {
					os.Remove(d)
				}
			}
		}
		Remove("", cg)
		for _, h := range Hierarchies(Root) {
			if _, err := os.Stat(filepath.Join(h, cg)); err == nil {
				t.Errorf("cgroup %s left", filepath.Join(h, cg))
			}
		}
	})
	return cg
}

// run runs the test binary as helper with the test cgroup cg in its
// environment.
func run(t *testing.T, helper, cg string, attr *syscall.SysProcAttr) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+helper, "HOSTCGROUP_TEST_CGROUP="+cg, "HOSTCGROUP_TEST_STAGE="+t.TempDir(),
		"HOSTCGROUP_TEST_HIERARCHIES="+strings.Join(Hierarchies(Root), " "))
	cmd.SysProcAttr = attr
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("helper %s: %v\n%s%s", helper, err, out, stderr)
	}
	return string(out)
}

func TestEnterNamespaceOf(t *testing.T) {
	testutil.RequiresRoot(t)
	cg := testCgroup(t)
	out := run(t, "unshare", cg, nil)
	lines := strings.Fields(out)
	// In the namespace rooted at the test's cgroup it is at "/"; after
	// EnterNamespaceOf's re-execution it sees its full path.
	if len(lines) != 3 || lines[0] != "before=/" || lines[1] != "before="+cg || lines[2] != "after="+cg {
		t.Fatalf("helper printed %q; want before=/, then before=%s and after=%s in PID 1's cgroup namespace", lines, cg, cg)
	}
}

func TestEnterNamespaceOfNothingToDo(t *testing.T) {
	testutil.RequiresRoot(t)
	// The test runs in its parent's cgroup namespace: no re-execution.
	if err := EnterNamespaceOf(os.Getppid()); err != nil {
		t.Fatal(err)
	}
	if err := EnterNamespaceOf(0); err == nil || !strings.Contains(err.Error(), "hostPID") {
		t.Errorf("EnterNamespaceOf(0) = %v, want an error naming hostPID", err)
	}
}

func TestMountFullView(t *testing.T) {
	testutil.RequiresRoot(t)
	cg := testCgroup(t)
	// The cgroup to bind over each hierarchy, as runc's container cgroup.
	for _, h := range Hierarchies(Root) {
		if err := mkdirCgroup(h, filepath.Join(h, cg)); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	out := run(t, "mount", cg, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS})
	if lines := strings.Fields(out); len(lines) != 3 || lines[0] == "partial=0" || lines[1] != "refused=true" || lines[2] != "partial=0" {
		t.Fatalf("helper printed %q: want partial mounts before MountFullView, its refusal in the namespace it shares with its parent, none after", lines)
	}
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	// Under /sys (other tests mount and unmount elsewhere meanwhile).
	underSys := func(table []byte) string {
		var out []string
		for _, l := range strings.Split(string(table), "\n") {
			if f := strings.Fields(l); len(f) > 4 && (f[4] == "/sys" || strings.HasPrefix(f[4], "/sys/")) {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if underSys(before) != underSys(after) {
		t.Errorf("the machine's mounts under /sys changed:\nbefore:\n%s\nafter:\n%s", underSys(before), underSys(after))
	}
}

func TestMountFullViewNothingToDo(t *testing.T) {
	testutil.RequiresRoot(t)
	// The test's own mount namespace is the machine's: nothing partial,
	// nothing mounted.
	if err := MountFullView(os.Getppid()); err != nil {
		t.Fatal(err)
	}
	if p, err := Partial(); err != nil || len(p) > 0 {
		t.Fatalf("partial cgroup mounts in the machine's namespace: %v %v", p, err)
	}
}

func TestMoveAndRemove(t *testing.T) {
	testutil.RequiresRoot(t)
	cg := testCgroup(t)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	inner := cg + "/a/b"
	if err := Move("", cmd.Process.Pid, inner); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[2] != inner {
			t.Errorf("process in %q, want %s in every hierarchy", line, inner)
		}
	}
	Remove("", inner)
	if _, err := os.Stat(filepath.Join(Hierarchies(Root)[0], inner)); err != nil {
		t.Errorf("Remove removed the cgroup %s that holds a process: %v", inner, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, p := range []string{inner, cg + "/a"} {
		Remove("", p)
		for _, h := range Hierarchies(Root) {
			if _, err := os.Stat(filepath.Join(h, p)); err == nil {
				t.Errorf("cgroup %s not removed", filepath.Join(h, p))
			}
		}
	}
	if err := Move("", 1, "relative/path"); err == nil {
		t.Error("Move took a relative path")
	}
}

func TestResolve(t *testing.T) {
	for _, c := range []struct{ parent, own, want, err string }{
		{"/airlock", "/kubepods/besteffort/pod1/c1", "/airlock", ""},
		{"/a/../b/", "/", "/b", ""},
		{"airlock", "/kubepods/besteffort/podU/cid", "/airlock", ""},
		{"airlock", "/node-x/kubepods/burstable/podU/cid", "/node-x/airlock", ""},
		{"airlock/sub", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podU.slice/cri-containerd-c.scope", "/airlock/sub", ""},
		{"airlock", "/system.slice/airlockd.service", "", "under no kubepods"},
		{"../escape", "/kubepods/x", "", "beneath the kubelet's"},
		{".", "/kubepods/x", "", "beneath the kubelet's"},
		{"", "/kubepods/x", "", "no cgroup parent"},
	} {
		got, err := Resolve(c.parent, c.own)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Resolve(%q, %q) = %q, %v; want an error with %q", c.parent, c.own, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Resolve(%q, %q) = %q, %v; want %q", c.parent, c.own, got, err, c.want)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	m, ok := parseMountInfo(`1234 1200 0:30 /kubepods/besteffort/pod1/c1 /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:11 - cgroup cgroup rw,memory`)
	if !ok || m.root != "/kubepods/besteffort/pod1/c1" || m.point != "/sys/fs/cgroup/memory" || m.fstype != "cgroup" || strings.Join(m.options, ",") != "rw,memory" {
		t.Errorf("parsed %+v, %v", m, ok)
	}
	m, ok = parseMountInfo(`30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot`)
	if !ok || m.root != "/" || m.fstype != "cgroup2" || m.point != "/sys/fs/cgroup" {
		t.Errorf("parsed %+v, %v", m, ok)
	}
	if m, ok := parseMountInfo(`24 1 0:22 / /sys rw,nosuid shared:7 master:1 - sysfs sysfs rw`); !ok || !m.shared || m.point != "/sys" {
		t.Errorf("parsed %+v, %v: want shared", m, ok)
	}
	if m, ok := parseMountInfo(`24 1 0:22 / /sys rw,nosuid master:1 - sysfs sysfs rw`); !ok || m.shared {
		t.Errorf("parsed %+v, %v: want not shared", m, ok)
	}
	all := []mount{{point: "/"}, {point: "/sys"}, {point: "/sys/fs/cgroup"}, {point: "/sysfoo"}}
	if h, ok := holder(all, "/sys/fs"); !ok || h.point != "/sys" {
		t.Errorf("holder of /sys/fs: %+v", h)
	}
	if h, ok := holder(all[:1], "/sys/fs"); !ok || h.point != "/" {
		t.Errorf("holder of /sys/fs with only /: %+v", h)
	}
	if got := superOptions(mount{options: []string{"rw", "nsdelegate", "memory_recursiveprot"}}); strings.Join(got, ",") != "nsdelegate,memory_recursiveprot" {
		t.Errorf("superOptions: %v", got)
	}
	if _, ok := parseMountInfo("garbage"); ok {
		t.Error("parsed a line that is not mountinfo")
	}
}
