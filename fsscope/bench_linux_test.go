package fsscope

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// Benchmarks of the filesystem perimeter's costs (root; run with
// go test -run '^$' -bench . ./fsscope). The sandbox's work is run as the
// sandbox user on the host-side mounts the sandbox gets: the overlay
// (idmapped lower) against an idmapped bind of the same directory.

const benchFiles = 10000

// tree10k writes benchFiles small files in 100 directories under dir.
func tree10k(tb testing.TB, dir string) {
	tb.Helper()
	for i := range benchFiles {
		d := filepath.Join(dir, fmt.Sprintf("pkg%02d", i%100))
		if i < 100 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		content := strings.Repeat(fmt.Sprintf("line %d of file %d\n", i, i), 1+i%64)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d.go", i)), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// tarball makes a tar archive of a 10k-file tree once per benchmark.
func tarball(b *testing.B) string {
	b.Helper()
	src := filepath.Join(b.TempDir(), "src")
	tree10k(b, src)
	tgz := filepath.Join(tempDirB(b), "tree.tar")
	if out, err := exec.Command("tar", "-C", src, "-cf", tgz, ".").CombinedOutput(); err != nil {
		b.Fatalf("tar: %v %s", err, out)
	}
	return tgz
}

func tempDirB(b *testing.B) string {
	d := b.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	return d
}

// asSandbox runs a command as the sandbox user.
func asSandbox(b *testing.B, dir string, name string, args ...string) {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = gitEnv
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: sandboxer.UID, Gid: sandboxer.GID, Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

func benchSession(b *testing.B, host, mode string, opts ...Option) *Session {
	b.Helper()
	w := policies.Workspace{HostPath: host, Target: "/workspace", Mode: mode, DefaultDenyRead: true}
	p := &policies.Policy{Workspaces: []policies.Workspace{w}, Resources: policies.Resources{Disk: 2 << 30}}
	dir := filepath.Join(b.TempDir(), "fs")
	s, err := Setup(context.Background(), dir, p, sandboxer, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { Cleanup(context.Background(), dir) })
	return s
}

// sandboxView binds the workspace's mount source where the sandbox user
// can reach it (the state directory is closed to it), as runc's bind
// does; it returns the path and an undo.
func sandboxView(b *testing.B, s *Session) (string, func()) {
	b.Helper()
	dir := filepath.Join(tempDirB(b), "view")
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := syscall.Mount(s.wsMnt(0), dir, "", syscall.MS_BIND, ""); err != nil {
		b.Fatal(err)
	}
	undo := func() { syscall.Unmount(dir, syscall.MNT_DETACH) }
	b.Cleanup(undo)
	return dir, undo
}

func hostDirB(b *testing.B) string {
	d := filepath.Join(tempDirB(b), "ws")
	if err := os.Mkdir(d, 0o755); err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkSetup measures starting a session's filesystem: the quota
// filesystem (image: sparse file + mkfs.ext4 + loop mount; tmpfs: one
// mount), the scan, the frozen names layer, the overlay and idmapped
// mounts; and, for an ro workspace, the scan and the frozen view alone.
func BenchmarkSetup(b *testing.B) {
	testutil.RequiresRoot(b)
	for _, size := range []int{10, benchFiles} {
		for _, backend := range []QuotaBackend{QuotaImage, QuotaTmpfs, ""} {
			mode, name := policies.ModeOverlay, string(backend)
			if backend == "" {
				mode, name = policies.ModeRO, "ro"
			}
			b.Run(fmt.Sprintf("%s/%dfiles", name, size), func(b *testing.B) {
				host := hostDirB(b)
				if size == benchFiles {
					tree10k(b, host)
				} else {
					os.WriteFile(filepath.Join(host, "a"), []byte("a"), 0o644)
				}
				chownTreeB(b, host)
				var opts []Option
				if backend != "" {
					opts = append(opts, WithQuotaBackend(backend))
				}
				for b.Loop() {
					s := benchSession(b, host, mode, opts...)
					b.StopTimer()
					if err := s.Teardown(context.Background(), false); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkFrozenView10k measures the frozen names layer alone: a tmpfs
// populated with the 10k-file tree's names (metadata-only files) and the
// read-only overlay over the host directory; the scan is done once.
func BenchmarkFrozenView10k(b *testing.B) {
	testutil.RequiresRoot(b)
	host := hostDirB(b)
	tree10k(b, host)
	t, err := openTree(host)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	entries, err := snapshot(context.Background(), t)
	if err != nil {
		b.Fatal(err)
	}
	var slab int64
	for b.Loop() {
		before := meminfo(b, "Slab")
		view, err := frozenView(t.fd, entries, nil, viewMasks{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		slab += meminfo(b, "Slab") - before
		unix.Close(view)
		b.StartTimer()
	}
	// Kernel memory the names layer holds while the view is mounted
	// (inodes, dentries, xattrs), per file; other activity on the host
	// adds noise.
	b.ReportMetric(float64(slab)/float64(b.N)/benchFiles, "slab-B/file")
}

// BenchmarkScan10k measures the scan alone (the baseline Setup records),
// for comparison with BenchmarkFrozenView10k.
func BenchmarkScan10k(b *testing.B) {
	testutil.RequiresRoot(b)
	host := hostDirB(b)
	tree10k(b, host)
	t, err := openTree(host)
	if err != nil {
		b.Fatal(err)
	}
	defer t.Close()
	for b.Loop() {
		if _, err := snapshot(context.Background(), t); err != nil {
			b.Fatal(err)
		}
	}
}

// meminfo returns a /proc/meminfo field in bytes.
func meminfo(b *testing.B, field string) int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/meminfo", field)
	return 0
}

func chownTreeB(b *testing.B, root string) {
	b.Helper()
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error {
		return os.Lchown(p, int(hostOwner.UID), int(hostOwner.GID))
	})
}

// BenchmarkUntar10k extracts a 10k-file archive into the workspace as
// the sandbox user. "tmp" workspaces live on the host's /tmp; "ext4"
// ones on a fresh loop-mounted ext4, like the overlay's upper, so that the
// two modes write to the same kind of filesystem.
func BenchmarkUntar10k(b *testing.B) {
	testutil.RequiresRoot(b)
	tgz := tarball(b)
	for _, hostfs := range []string{"tmp", "ext4"} {
		for _, mode := range []string{policies.ModeRW, policies.ModeOverlay} {
			name := map[string]string{policies.ModeRW: "bind", policies.ModeOverlay: "overlay"}[mode]
			b.Run(hostfs+"/"+name, func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					host, release := benchHostDir(b, hostfs)
					s := benchSession(b, host, mode)
					view, undo := sandboxView(b, s)
					b.StartTimer()
					asSandbox(b, "/", "tar", "-C", view, "--no-same-owner", "-xf", tgz)
					b.StopTimer()
					undo()
					if err := s.Teardown(context.Background(), false); err != nil {
						b.Fatal(err)
					}
					release()
					b.StartTimer()
				}
			})
		}
	}
}

// benchHostDir returns an empty workspace owned by the workspace owner,
// on /tmp or on its own loop-mounted ext4.
func benchHostDir(b *testing.B, hostfs string) (string, func()) {
	b.Helper()
	host := hostDirB(b)
	release := func() { os.RemoveAll(host) }
	if hostfs == "ext4" {
		img := filepath.Join(b.TempDir(), "host.img")
		if err := createImage(context.Background(), img, 2<<30); err != nil {
			b.Fatal(err)
		}
		if err := mountImage(img, host, false); err != nil {
			b.Fatal(err)
		}
		release = func() { syscall.Unmount(host, syscall.MNT_DETACH); os.Remove(img) }
		b.Cleanup(release)
	}
	if err := os.Chown(host, int(hostOwner.UID), int(hostOwner.GID)); err != nil {
		b.Fatal(err)
	}
	return host, release
}

// BenchmarkGitStatus10k runs `git status` over a clean 10k-file checkout.
func BenchmarkGitStatus10k(b *testing.B) {
	testutil.RequiresRoot(b)
	host := hostDirB(b)
	tree10k(b, host)
	for _, args := range [][]string{{"init", "-q"}, {"add", "."}, {"-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "x"}} {
		cmd := exec.Command("git", append([]string{"-C", host}, args...)...)
		cmd.Env = gitEnv
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	chownTreeB(b, host)
	for _, mode := range []string{policies.ModeRW, policies.ModeOverlay} {
		name := map[string]string{policies.ModeRW: "bind", policies.ModeOverlay: "overlay"}[mode]
		b.Run(name, func(b *testing.B) {
			s := benchSession(b, host, mode)
			defer s.Teardown(context.Background(), false)
			view, undo := sandboxView(b, s)
			defer undo()
			asSandbox(b, view, "git", "status", "--porcelain") // warm the cache
			for b.Loop() {
				asSandbox(b, view, "git", "status", "--porcelain")
			}
		})
	}
}

// BenchmarkCommit10k commits 10k modified files, into a workspace on
// /tmp or on its own ext4 (see BenchmarkUntar10k).
func BenchmarkCommit10k(b *testing.B) {
	testutil.RequiresRoot(b)
	for _, hostfs := range []string{"tmp", "ext4"} {
		b.Run(hostfs, func(b *testing.B) {
			host, release := benchHostDir(b, hostfs)
			defer release()
			tree10k(b, host)
			chownTreeB(b, host)
			round := 0
			for b.Loop() {
				b.StopTimer()
				round++
				s := benchSession(b, host, policies.ModeOverlay)
				m := s.wsMnt(0)
				for i := range benchFiles {
					p := filepath.Join(m, fmt.Sprintf("pkg%02d", i%100), fmt.Sprintf("f%05d.go", i))
					if err := os.WriteFile(p, []byte(fmt.Sprintf("round %d changed %d\n", round, i)), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Teardown(context.Background(), true); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := s.Commit(context.Background(), CommitOptions{})
				b.StopTimer()
				if err != nil || len(res.Applied) != benchFiles {
					b.Fatalf("commit: %v (%d applied)", err, len(res.Applied))
				}
				if err := s.Teardown(context.Background(), false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkFresh10k measures Fresh over a workspace of benchFiles files
// that has not changed since Setup ("fresh"), against the scan that Setup
// does of the same tree ("scan").
func BenchmarkFresh10k(b *testing.B) {
	testutil.RequiresRoot(b)
	host := hostDirB(b)
	tree10k(b, host)
	chownTreeB(b, host)
	b.Run("fresh", func(b *testing.B) {
		s := benchSession(b, host, policies.ModeOverlay, WithQuotaBackend(QuotaTmpfs))
		for b.Loop() {
			fresh, reason, err := s.Fresh(context.Background())
			if err != nil || !fresh {
				b.Fatalf("Fresh = %v, %q, %v", fresh, reason, err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		t, err := openTree(host)
		if err != nil {
			b.Fatal(err)
		}
		defer t.Close()
		for b.Loop() {
			entries, err := snapshot(context.Background(), t)
			if err != nil || len(entries) != benchFiles+101 {
				b.Fatalf("snapshot: %d entries, %v", len(entries), err)
			}
		}
	})
}
