package fsscope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The probe is a stand-in for the sandbox: the test binary re-executed in
// a new mount namespace, which builds a root from a tmpfs and the
// session's runtime-spec mounts (as runc does: bind, then remount with
// the flags), pivots into it, drops to the sandbox user and performs
// actions, reporting each result.

// selfExe is how the probe re-executes itself.
var selfExe = "/proc/self/exe"

const (
	probeEnv       = "FSSCOPE_PROBE"
	probeStage2Env = "FSSCOPE_PROBE_USERNS"
)

type probeReq struct {
	Root    string        `json:"root"`
	Mounts  []specs.Mount `json:"mounts"`
	UID     uint32        `json:"uid"`
	GID     uint32        `json:"gid"`
	Actions []probeAction `json:"actions"`
	// Caps are capabilities (numbers) the sandbox user keeps, as a
	// session whose manifest grants them (policies.SafeCapabilities).
	Caps []int `json:"caps,omitempty"`
}

type probeAction struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Arg  string `json:"arg,omitempty"`
}

type probeResult struct {
	probeAction
	Err   string `json:"err,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Data  string `json:"data,omitempty"`
}

func (r probeResult) ok() bool { return r.Err == "" }

func (r probeResult) String() string {
	if r.Err != "" {
		return fmt.Sprintf("%s %s: %s", r.Op, r.Path, r.Err)
	}
	return fmt.Sprintf("%s %s: ok %q", r.Op, r.Path, r.Data)
}

// runProbe runs actions in a sandbox-like view of mounts as uid:gid.
func runProbe(t *testing.T, mounts []specs.Mount, uid, gid uint32, actions ...probeAction) []probeResult {
	t.Helper()
	return runProbeCaps(t, mounts, uid, gid, nil, actions...)
}

// runProbeCaps is runProbe for a sandbox user that holds caps.
func runProbeCaps(t *testing.T, mounts []specs.Mount, uid, gid uint32, caps []int, actions ...probeAction) []probeResult {
	t.Helper()
	return runProbeIn(t, mounts, uid, gid, caps, nil, actions...)
}

// runProbeIn is runProbeCaps that calls started with the probe's pid (in
// its own mount namespace already) before the probe acts.
func runProbeIn(t *testing.T, mounts []specs.Mount, uid, gid uint32, caps []int, started func(pid int), actions ...probeAction) []probeResult {
	t.Helper()
	root := t.TempDir()
	req := probeReq{Root: root, Mounts: mounts, UID: uid, GID: gid, Actions: actions, Caps: caps}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if started != nil {
		started(cmd.Process.Pid)
	}
	go func() {
		stdin.Write(in)
		stdin.Close()
	}()
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("probe timed out")
	}
	if err != nil {
		t.Fatalf("probe: %v\nstderr: %s", err, stderr.String())
	}
	var res []probeResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("probe output: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return res
}

// probeMain is the probe's side; it runs instead of the tests.
func probeMain() {
	if os.Getenv(probeStage2Env) != "" {
		userNSMain()
		return
	}
	var req probeReq
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fatalf("decode request: %v", err)
	}

	if err := buildRoot(req); err != nil {
		fatalf("build root: %v", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		fatalf("setgroups: %v", err)
	}
	if err := syscall.Setgid(int(req.GID)); err != nil {
		fatalf("setgid: %v", err)
	}
	if len(req.Caps) > 0 {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			fatalf("keepcaps: %v", err)
		}
	}
	if err := syscall.Setuid(int(req.UID)); err != nil {
		fatalf("setuid: %v", err)
	}
	if len(req.Caps) > 0 {
		var data [2]unix.CapUserData
		for _, c := range req.Caps {
			data[c/32].Effective |= 1 << (uint(c) % 32)
			data[c/32].Permitted |= 1 << (uint(c) % 32)
		}
		if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
			fatalf("capset: %v", err)
		}
	}
	// Changing credentials made /proc/self root's; a sandbox process's is its own.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0); err != nil {
		fatalf("prctl: %v", err)
	}
	out := make([]probeResult, 0, len(req.Actions))
	for _, a := range req.Actions {
		out = append(out, doAction(a, req))
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(3)
}

// buildRoot makes req.Root a tmpfs holding the mounts and /proc, and
// pivots into it.
func buildRoot(req probeReq) error {
	if err := unix.Mount("tmpfs", req.Root, "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	// A copy of the binary the sandbox user can run (its directory may be
	// closed to that user).
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(req.Root, "probe"), self, 0o755); err != nil {
		return err
	}
	selfExe = "/probe"
	// The host's /usr stands in for the image (the binary needs its
	// dynamic loader and libc).
	if err := os.Mkdir(filepath.Join(req.Root, "usr"), 0o755); err != nil {
		return err
	}
	if err := unix.Mount("/usr", filepath.Join(req.Root, "usr"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	if err := unix.Mount("", filepath.Join(req.Root, "usr"), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return err
	}
	for _, l := range []string{"lib", "lib64", "bin"} {
		target, err := os.Readlink("/" + l)
		if err != nil {
			return fmt.Errorf("this probe expects a merged /usr: %w", err)
		}
		if err := os.Symlink(target, filepath.Join(req.Root, l)); err != nil {
			return err
		}
	}
	for _, m := range req.Mounts {
		if err := applyMount(req.Root, m); err != nil {
			return fmt.Errorf("mount %s: %w", m.Destination, err)
		}
	}
	if err := os.MkdirAll(filepath.Join(req.Root, "proc"), 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(req.Root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := os.Chdir(req.Root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return err
	}
	return os.Chdir("/")
}

func applyMount(root string, m specs.Mount) error {
	dest := filepath.Join(root, m.Destination)
	var flags uintptr
	bind, rec := false, false
	var data []string
	for _, o := range m.Options {
		switch o {
		case "bind":
			bind = true
		case "rbind":
			bind, rec = true, true
		case "ro":
			flags |= unix.MS_RDONLY
		case "rw":
		case "nosuid":
			flags |= unix.MS_NOSUID
		case "nodev":
			flags |= unix.MS_NODEV
		case "noexec":
			flags |= unix.MS_NOEXEC
		default:
			data = append(data, o)
		}
	}
	if m.Type == "bind" || bind {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(dest); errors.Is(err, os.ErrNotExist) {
			if fi.IsDir() {
				err = os.MkdirAll(dest, 0o755)
			} else {
				if err = os.MkdirAll(filepath.Dir(dest), 0o755); err == nil {
					err = os.WriteFile(dest, nil, 0o644)
				}
			}
			if err != nil {
				return err
			}
		}
		bflags := uintptr(unix.MS_BIND)
		if rec {
			bflags |= unix.MS_REC
		}
		if err := unix.Mount(m.Source, dest, "", bflags, ""); err != nil {
			return err
		}
		if flags != 0 {
			return unix.Mount("", dest, "", flags|unix.MS_BIND|unix.MS_REMOUNT, "")
		}
		return nil
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	return unix.Mount(m.Source, dest, m.Type, flags, strings.Join(data, ","))
}

func errResult(r probeResult, err error) probeResult {
	r.Err = err.Error()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = int(errno)
	}
	return r
}

func doAction(a probeAction, req probeReq) probeResult {
	r := probeResult{probeAction: a}
	var err error
	switch a.Op {
	case "read":
		var b []byte
		if b, err = os.ReadFile(a.Path); err == nil {
			r.Data = string(b)
		}
	case "write":
		err = os.WriteFile(a.Path, []byte(a.Arg), 0o644)
	case "append":
		var f *os.File
		if f, err = os.OpenFile(a.Path, os.O_WRONLY|os.O_APPEND, 0); err == nil {
			_, err = f.WriteString(a.Arg)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	case "readdir":
		var names []string
		var f *os.File
		if f, err = os.Open(a.Path); err == nil {
			names, err = f.Readdirnames(-1)
			f.Close()
			slices.Sort(names)
			r.Data = strings.Join(names, ",")
		}
	case "stat":
		var st unix.Stat_t
		if err = unix.Stat(a.Path, &st); err == nil {
			r.Data = fmt.Sprintf("mode=%o uid=%d gid=%d size=%d", st.Mode, st.Uid, st.Gid, st.Size)
		}
	case "statfs":
		var st unix.Statfs_t
		if err = unix.Statfs(a.Path, &st); err == nil {
			r.Data = fmt.Sprintf("flags=%#x", st.Flags)
		}
	case "symlink":
		err = os.Symlink(a.Arg, a.Path)
	case "link":
		err = os.Link(a.Arg, a.Path)
	case "rename":
		err = os.Rename(a.Path, a.Arg)
	case "remove":
		err = os.Remove(a.Path)
	case "touch": // as touch(1) does on an existing file: times set to now
		err = unix.UtimesNanoAt(unix.AT_FDCWD, a.Path, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, 0)
	case "removeall":
		err = os.RemoveAll(a.Path)
	case "mkdir":
		err = os.MkdirAll(a.Path, 0o755)
	case "chmod":
		var mode uint64
		if mode, err = strconv.ParseUint(a.Arg, 8, 32); err == nil {
			err = unix.Chmod(a.Path, uint32(mode))
		}
	case "mknod-chr":
		err = unix.Mknod(a.Path, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3)))
	case "mkfifo":
		err = unix.Mkfifo(a.Path, 0o644)
	case "mount":
		err = unix.Mount(a.Arg, a.Path, "", unix.MS_BIND, "")
	case "umount":
		err = unix.Unmount(a.Path, unix.MNT_DETACH)
	case "chroot":
		if err = unix.Chroot(a.Path); err == nil {
			err = os.Chdir("/")
		}
	case "fill":
		// Write 1 MiB blocks until an error; report how many fit.
		var f *os.File
		if f, err = os.Create(a.Path); err == nil {
			block := bytes.Repeat([]byte{'x'}, 1<<20)
			n := 0
			for ; n < 1<<14; n++ {
				if _, err = f.Write(block); err != nil {
					break
				}
			}
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			r.Data = strconv.Itoa(n)
		}
	case "userns-umount-read":
		// From a new user and mount namespace (where this user is root),
		// try to take the mount at Path off and read what is below.
		cmd := exec.Command(selfExe, "-test.run=^$")
		cmd.Env = append(os.Environ(), probeStage2Env+"="+a.Path)
		cmd.Stdin = strings.NewReader("") // there is no /dev/null in the probe's root
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(req.UID), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(req.GID), Size: 1}},
		}
		var out []byte
		out, err = cmd.CombinedOutput()
		r.Data = strings.TrimSpace(string(out))
	default:
		err = fmt.Errorf("unknown op %q", a.Op)
	}
	if err != nil {
		return errResult(r, err)
	}
	return r
}

// userNSMain is the second stage of userns-umount-read.
func userNSMain() {
	p := os.Getenv(probeStage2Env)
	uerr := unix.Unmount(p, unix.MNT_DETACH)
	b, rerr := os.ReadFile(p)
	fmt.Printf("umount: %v; read: %v %q\n", uerr, rerr, b)
}
