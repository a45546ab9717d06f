package fsscope

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
	"golang.org/x/sys/unix"
)

// TestCommitConflict: a path changed on the host since the session started
// makes the commit refuse, per path, with nothing applied; --partial
// applies the rest.
func TestCommitConflict(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", "d.txt": "d\n"})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/a.txt", Arg: "sandbox a\n"},
		probeAction{Op: "write", Path: "/workspace/b.txt", Arg: "sandbox b\n"},
		probeAction{Op: "write", Path: "/workspace/new.txt", Arg: "sandbox new\n"},
		probeAction{Op: "remove", Path: "/workspace/c.txt"},
		probeAction{Op: "write", Path: "/workspace/d.txt", Arg: "sandbox d\n"},
	)
	stop(t, s)
	// Meanwhile on the host: a.txt edited, new.txt created, c.txt
	// replaced by a file of the same content (new inode), d.txt deleted.
	writeFiles(t, host, map[string]string{"a.txt": "host a\n", "new.txt": "host new\n"})
	if err := os.Rename(filepath.Join(host, "c.txt"), filepath.Join(host, "c.old")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, host, map[string]string{"c.txt": "c\n"})
	if err := os.Remove(filepath.Join(host, "d.txt")); err != nil {
		t.Fatal(err)
	}
	before := digest(t, host)
	var events []Event
	res, err := s.Commit(t.Context(), CommitOptions{Audit: func(e Event) { events = append(events, e) }})
	if !errdefs.IsConflict(err) {
		t.Fatalf("Commit = %v, want a conflict", err)
	}
	var paths []string
	for _, c := range res.Conflicts {
		paths = append(paths, c.Path)
	}
	if want := []string{"/workspace/a.txt", "/workspace/c.txt", "/workspace/d.txt", "/workspace/new.txt"}; !slices.Equal(paths, want) {
		t.Errorf("conflicts = %v, want %v (%+v)", paths, want, res.Conflicts)
	}
	if len(res.Applied) != 0 || len(events) != 4 || events[0].Type != EventConflict {
		t.Errorf("applied %v, events %+v", res.Applied, events)
	}
	if after := digest(t, host); after != before {
		t.Fatalf("a refused commit changed the host:\n%s\n---\n%s", before, after)
	}
	res, err = s.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil || !slices.Equal(res.Applied, []string{"/workspace/b.txt"}) || len(res.Conflicts) != 4 {
		t.Fatalf("partial Commit = %+v, %v", res, err)
	}
	if got := readFile(t, filepath.Join(host, "a.txt")); got != "host a\n" {
		t.Errorf("a.txt = %q", got)
	}
	if got := readFile(t, filepath.Join(host, "b.txt")); got != "sandbox b\n" {
		t.Errorf("b.txt = %q", got)
	}
}

// TestCommitProtect: a change to a protected path is rejected and
// reported (with an audit event); without --partial nothing is applied.
func TestCommitProtect(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"config/prod/db.yaml": "prod\n",
		"config/dev/db.yaml":  "dev\n",
		"src/main.go":         "package main\n",
		"Makefile":            "all:\n",
	})
	w := overlayWS(host)
	w.Protect = []string{"config/prod/**", ".github", "/makefile"}
	s := setup(t, policyWith(w), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/config/prod/db.yaml", Arg: "hacked\n"},
		probeAction{Op: "write", Path: "/workspace/config/dev/db.yaml", Arg: "dev2\n"},
		probeAction{Op: "mkdir", Path: "/workspace/.github/workflows"},
		probeAction{Op: "write", Path: "/workspace/.github/workflows/ci.yml", Arg: "on: push\n"},
		probeAction{Op: "write", Path: "/workspace/src/main.go", Arg: "package main // edited\n"},
		probeAction{Op: "rename", Path: "/workspace/Makefile", Arg: "/workspace/build.mk"},
	)
	stop(t, s)
	before := digest(t, host)
	var events []Event
	res, err := s.Commit(t.Context(), CommitOptions{Audit: func(e Event) { events = append(events, e) }})
	if !errdefs.IsPermissionDenied(err) || len(res.Applied) != 0 {
		t.Fatalf("Commit = %+v, %v; want permission denied, nothing applied", res, err)
	}
	if digest(t, host) != before {
		t.Fatal("a rejected commit changed the host")
	}
	got := map[string]string{}
	for _, r := range res.Rejected {
		got[r.Path] = r.Rule
	}
	want := map[string]string{
		"/workspace/.github":                  RuleProtect,
		"/workspace/.github/workflows":        RuleProtect,
		"/workspace/.github/workflows/ci.yml": RuleProtect,
		"/workspace/build.mk":                 RuleProtect, // renamed from the protected Makefile
		"/workspace/config/prod/db.yaml":      RuleProtect,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rejections = %v, want %v", got, want)
	}
	if len(events) != len(want) {
		t.Errorf("%d audit events for %d rejections", len(events), len(want))
	}
	for _, e := range events {
		if e.Type != EventRejected || e.Rule != RuleProtect || e.Path == "" || !strings.HasPrefix(e.HostPath, host) || e.Reason == "" {
			t.Errorf("audit event %+v", e)
		}
	}
	events = nil
	res, err = s.Commit(t.Context(), CommitOptions{Partial: true, Audit: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/workspace/config/dev/db.yaml", "/workspace/src/main.go"}; !slices.Equal(res.Applied, want) {
		t.Errorf("applied %v, want %v", res.Applied, want)
	}
	if got := readFile(t, filepath.Join(host, "config/prod/db.yaml")); got != "prod\n" {
		t.Errorf("protected file = %q", got)
	}
	if !exists(filepath.Join(host, "Makefile")) || exists(filepath.Join(host, ".github")) {
		t.Error("a protected path was changed")
	}
	if got := readFile(t, filepath.Join(host, "src/main.go")); got != "package main // edited\n" {
		t.Errorf("main.go = %q", got)
	}
}

// TestCommitSymlinkEscapes: symlinks the sandbox makes are never followed
// by the sandbox or the commit; a link whose target leaves the workspace
// (absolute, relative, or through other links) is rejected with a reason;
// links that stay inside commit; a host directory swapped for a symlink
// is never written through.
func TestCommitSymlinkEscapes(t *testing.T) {
	outside := hostTree(t, hostOwner, map[string]string{"secret": "outside\n"})
	outsideBefore := digest(t, outside)
	shadowBefore, _ := os.ReadFile("/etc/shadow")
	host := hostTree(t, hostOwner, map[string]string{"sub/f.txt": "f\n", "keep": "k\n", "deep/er/x": "x\n", "hostlink": "->" + outside})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "symlink", Path: "/workspace/shadow", Arg: "/etc/shadow"},
		probeAction{Op: "read", Path: "/workspace/shadow"},
		probeAction{Op: "symlink", Path: "/workspace/out", Arg: outside},
		probeAction{Op: "read", Path: "/workspace/out/secret"},
		probeAction{Op: "symlink", Path: "/workspace/up", Arg: "../../../../../.."},
		probeAction{Op: "read", Path: "/workspace/up" + outside + "/secret"},
		probeAction{Op: "write", Path: "/workspace/up" + outside + "/secret", Arg: "pwned"},
		probeAction{Op: "symlink", Path: "/workspace/sub/passwd", Arg: "../../../etc/passwd"},
		probeAction{Op: "symlink", Path: "/workspace/root", Arg: "/"},
		// Read lexically, z is deep/er; through the links it is the
		// workspace's parent: deep/er/x -> .. is deep, deep/er/y -> x/..
		// is the root, and z -> deep/er/y/.. leaves it.
		probeAction{Op: "remove", Path: "/workspace/deep/er/x"},
		probeAction{Op: "symlink", Path: "/workspace/deep/er/x", Arg: ".."},
		probeAction{Op: "symlink", Path: "/workspace/deep/er/y", Arg: "x/.."},
		probeAction{Op: "symlink", Path: "/workspace/z", Arg: "deep/er/y/.."},
		// Through a link the host already had.
		probeAction{Op: "symlink", Path: "/workspace/via", Arg: "hostlink/secret"},
		probeAction{Op: "symlink", Path: "/workspace/loop", Arg: "loop"},
		// Inside: kept.
		probeAction{Op: "symlink", Path: "/workspace/sub/k", Arg: "../keep"},
		probeAction{Op: "symlink", Path: "/workspace/k2", Arg: "sub/../deep/./er"},
		probeAction{Op: "symlink", Path: "/workspace/dangling", Arg: "not/yet/there"},
		probeAction{Op: "write", Path: "/workspace/sub/f.txt", Arg: "new f\n"},
		probeAction{Op: "write", Path: "/workspace/sub/g.txt", Arg: "g\n"},
	)
	for _, r := range res {
		if r.Op == "read" && r.ok() {
			t.Errorf("the sandbox read a host file outside its workspace: %v", r)
		}
	}
	stop(t, s)

	// A host directory swapped for a symlink to outside right before the
	// commit writes into it.
	swapped := false
	testHookBeforeOp = func(o op) error {
		if o.Path == "sub/f.txt" && !swapped {
			swapped = true
			if err := os.Rename(filepath.Join(host, "sub"), filepath.Join(host, "sub.orig")); err != nil {
				return err
			}
			return os.Symlink(outside, filepath.Join(host, "sub"))
		}
		return nil
	}
	t.Cleanup(func() { testHookBeforeOp = nil })
	_, err := s.Commit(t.Context(), CommitOptions{Partial: true})
	if err == nil || !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Fatalf("Commit through a swapped directory = %v, want ELOOP or ENOTDIR", err)
	}
	if !swapped {
		t.Fatal("the race never ran")
	}
	testHookBeforeOp = nil
	if digest(t, outside) != outsideBefore {
		t.Fatal("the commit wrote outside the workspace")
	}
	if got := readFile(t, filepath.Join(host, "sub.orig/f.txt")); got != "f\n" {
		t.Errorf("sub/f.txt = %q after a failed commit", got)
	}
	for _, name := range []string{"k2", "dangling", "sub.orig/k"} {
		if exists(filepath.Join(host, name)) {
			t.Errorf("%s applied by a failed commit", name)
		}
	}
	if entries, _ := os.ReadDir(host); slices.ContainsFunc(entries, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), stagingPrefix) }) {
		t.Error("staging directory left behind")
	}
	cs, err := s.Diff(t.Context())
	if err != nil || cs.Len() == 0 {
		t.Fatalf("the overlay lost its changes: %v, %v", changeKinds(cs), err)
	}

	// Put the directory back: the links that leave the workspace are
	// rejected, each with a reason; the rest lands, links as links.
	if err := os.Remove(filepath.Join(host, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(host, "sub.orig"), filepath.Join(host, "sub")); err != nil {
		t.Fatal(err)
	}
	var events []Event
	cr, err := s.Commit(t.Context(), CommitOptions{Partial: true, Audit: func(e Event) {
		if e.Type == EventRejected {
			events = append(events, e)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{}
	for _, r := range cr.Rejected {
		if r.Rule != RuleSymlinkEscape || r.Reason == "" {
			t.Errorf("rejection %+v", r)
		}
		rejected[strings.TrimPrefix(r.Path, "/workspace/")] = r.Reason
	}
	for _, name := range []string{"shadow", "out", "up", "sub/passwd", "root", "z", "via", "loop"} {
		if _, ok := rejected[name]; !ok {
			t.Errorf("%s was not rejected", name)
		}
		if exists(filepath.Join(host, name)) {
			t.Errorf("%s committed", name)
		}
	}
	if len(events) != len(cr.Rejected) {
		t.Errorf("%d audit events for %d rejections", len(events), len(cr.Rejected))
	}
	for name, target := range map[string]string{"sub/k": "../keep", "k2": "sub/../deep/./er", "dangling": "not/yet/there", "deep/er/x": "..", "deep/er/y": "x/.."} {
		if got, err := os.Readlink(filepath.Join(host, name)); err != nil || got != target {
			t.Errorf("%s -> %q, %v; want -> %q", name, got, err, target)
		}
	}
	if digest(t, outside) != outsideBefore {
		t.Error("outside tree changed")
	}
	if b, _ := os.ReadFile("/etc/shadow"); string(b) != string(shadowBefore) {
		t.Error("/etc/shadow changed")
	}
}

// TestCommitHardLinkOutside: a workspace file hard-linked to a file
// outside is replaced, never written through, so the outside file keeps
// its content.
func TestCommitHardLinkOutside(t *testing.T) {
	outside := hostTree(t, hostOwner, map[string]string{"target": "outside\n"})
	host := hostTree(t, hostOwner, map[string]string{"a": "a\n"})
	if err := os.Link(filepath.Join(outside, "target"), filepath.Join(host, "hl")); err != nil {
		t.Fatal(err)
	}
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "append", Path: "/workspace/hl", Arg: "appended\n"},
		probeAction{Op: "link", Path: "/workspace/a2", Arg: "/workspace/a"},
	)
	stop(t, s)
	if _, err := s.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(outside, "target")); got != "outside\n" {
		t.Errorf("outside file = %q", got)
	}
	if got := readFile(t, filepath.Join(host, "hl")); got != "outside\nappended\n" {
		t.Errorf("hl = %q", got)
	}
	if st := lstat(t, filepath.Join(outside, "target")); st.Nlink != 1 {
		t.Errorf("outside file has %d links", st.Nlink)
	}
	a, a2 := lstat(t, filepath.Join(host, "a")), lstat(t, filepath.Join(host, "a2"))
	if a.Ino == a2.Ino {
		t.Error("commit made a hard link")
	}
}

// TestCommitSpecialFiles: the sandbox cannot make device nodes; FIFOs it
// can make, and a device node root made in the sandbox, are rejected.
func TestCommitSpecialFiles(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"a": "a\n"})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "mknod-chr", Path: "/workspace/null"},
		probeAction{Op: "mkfifo", Path: "/workspace/fifo"},
		probeAction{Op: "chmod", Path: "/workspace/a", Arg: "6755"},
	)
	if res[0].ok() || res[0].Errno != int(syscall.EPERM) {
		t.Errorf("mknod as the sandbox user: %v", res[0])
	}
	if !res[1].ok() || !res[2].ok() {
		t.Fatalf("sandbox actions: %v", res)
	}
	// Root in the sandbox (with CAP_MKNOD) gets a device node into the
	// upper directory; nodev keeps it useless there.
	res = runProbe(t, s.Mounts(), 0, 0,
		probeAction{Op: "mknod-chr", Path: "/workspace/mem"},
		probeAction{Op: "read", Path: "/workspace/mem"},
	)
	if !res[0].ok() || res[1].ok() {
		t.Fatalf("root's device node: %v", res)
	}
	stop(t, s)
	cr, err := s.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]string{}
	for _, r := range cr.Rejected {
		rules[r.Path] = r.Rule
	}
	if rules["/workspace/fifo"] != RuleSpecialFile || rules["/workspace/mem"] != RuleSpecialFile {
		t.Errorf("rejections %+v", cr.Rejected)
	}
	for _, n := range []string{"fifo", "mem", "null"} {
		if exists(filepath.Join(host, n)) {
			t.Errorf("%s committed", n)
		}
	}
	if st := lstat(t, filepath.Join(host, "a")); st.Mode&0o7777 != 0o755 {
		t.Errorf("a has mode %o, want 0755 (setuid and setgid stripped)", st.Mode&0o7777)
	}
}

// TestCommitCrashRecovery: a commit that dies halfway is undone when the
// session is loaded again, and the retry completes.
func TestCommitCrashRecovery(t *testing.T) {
	files := map[string]string{}
	for i := range 30 {
		files[fmt.Sprintf("f%02d.txt", i)] = fmt.Sprintf("old %d\n", i)
	}
	files["gone/x"] = "x\n"
	host := hostTree(t, hostOwner, files)
	before := digest(t, host)
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	var actions []probeAction
	for i := range 30 {
		actions = append(actions, probeAction{Op: "write", Path: fmt.Sprintf("/workspace/f%02d.txt", i), Arg: fmt.Sprintf("new %d\n", i)})
	}
	actions = append(actions,
		probeAction{Op: "removeall", Path: "/workspace/gone"},
		probeAction{Op: "mkdir", Path: "/workspace/made/deep"},
		probeAction{Op: "write", Path: "/workspace/made/deep/n", Arg: "n\n"},
		probeAction{Op: "chmod", Path: "/workspace/f00.txt", Arg: "600"},
	)
	mustProbe(t, s, sandboxer, actions...)
	stop(t, s)

	// Die (panic out of Commit, as a crash would stop it) after 20 ops.
	n := 0
	testHookBeforeOp = func(o op) error {
		if n++; n == 20 {
			panic("crash")
		}
		return nil
	}
	t.Cleanup(func() { testHookBeforeOp = nil })
	func() {
		defer func() {
			if r := recover(); r != "crash" {
				t.Fatalf("recovered %v", r)
			}
		}()
		s.Commit(t.Context(), CommitOptions{})
	}()
	testHookBeforeOp = nil
	if digest(t, host) == before {
		t.Fatal("the interrupted commit applied nothing; the test is not testing recovery")
	}
	if !exists(s.journalFile(0)) {
		t.Fatal("no journal after the crash")
	}

	// The daemon restarts.
	s2, err := Load(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if after := digest(t, host); after != before {
		t.Fatalf("after recovery the host tree is not the one the session saw:\n%s\n---\n%s", before, after)
	}
	res, err := s2.Commit(t.Context(), CommitOptions{})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if len(res.Applied) != 35 {
		t.Errorf("retry applied %d changes: %v", len(res.Applied), res.Applied)
	}
	for i := range 30 {
		if got := readFile(t, filepath.Join(host, fmt.Sprintf("f%02d.txt", i))); got != fmt.Sprintf("new %d\n", i) {
			t.Errorf("f%02d.txt = %q", i, got)
		}
	}
	if exists(filepath.Join(host, "gone")) || readFile(t, filepath.Join(host, "made/deep/n")) != "n\n" {
		t.Error("directory changes not applied")
	}
	if st := lstat(t, filepath.Join(host, "f00.txt")); st.Mode&0o777 != 0o600 {
		t.Errorf("f00.txt mode %o", st.Mode&0o777)
	}
}

// TestCommitDiskFull: when the host filesystem fills up while staging,
// the host tree is unchanged, the overlay keeps the changes, and a retry
// with room completes.
func TestCommitDiskFull(t *testing.T) {
	dir := tempDir(t)
	mnt := filepath.Join(dir, "small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	writeFiles(t, mnt, map[string]string{"a.txt": "a\n", "b.txt": "b\n"})
	chownTree(t, mnt, hostOwner)
	before := digest(t, mnt)
	s := setup(t, policyWith(overlayWS(mnt)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/a.txt", Arg: "a2\n"},
		probeAction{Op: "write", Path: "/workspace/big", Arg: strings.Repeat("x", 3<<20)},
	)
	stop(t, s)
	_, err := s.Commit(t.Context(), CommitOptions{})
	if !errdefs.IsResourceExhausted(err) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Commit on a full disk = %v", err)
	}
	if after := digest(t, mnt); after != before {
		t.Fatalf("host changed by a failed commit:\n%s\n---\n%s", before, after)
	}
	if cs, err := s.Diff(t.Context()); err != nil || cs.Len() != 2 {
		t.Fatalf("overlay after a failed commit: %v, %v", changeKinds(cs), err)
	}
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT, "size=8m"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if st := lstat(t, filepath.Join(mnt, "big")); st.Size != 3<<20 {
		t.Errorf("big has %d bytes", st.Size)
	}
}

// TestCommitNormalisesModes: a commit never carries setuid, setgid, sticky
// or world-write bits the host did not have: on new files and
// directories, on rewritten files, and on mode changes.
func TestCommitNormalisesModes(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"plain": "p\n", "suid-host": "s\n", "rewritten": "r\n", "dir/": ""})
	if err := unix.Chmod(filepath.Join(host, "suid-host"), 0o4755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(host, "rewritten"), 0o4755); err != nil {
		t.Fatal(err)
	}
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/new", Arg: "#!/bin/sh\n"},
		probeAction{Op: "chmod", Path: "/workspace/new", Arg: "6777"},
		probeAction{Op: "mkdir", Path: "/workspace/newdir"},
		probeAction{Op: "chmod", Path: "/workspace/newdir", Arg: "3777"},
		probeAction{Op: "chmod", Path: "/workspace/plain", Arg: "4777"},
		probeAction{Op: "chmod", Path: "/workspace/dir", Arg: "2777"},
		probeAction{Op: "chmod", Path: "/workspace/suid-host", Arg: "4700"},
		probeAction{Op: "write", Path: "/workspace/rewritten", Arg: "sandbox's code\n"},
		probeAction{Op: "chmod", Path: "/workspace/rewritten", Arg: "4755"},
	)
	stop(t, s)
	if _, err := s.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		"new":       0o775,
		"newdir":    0o775,
		"plain":     0o775,
		"dir":       0o775,
		"rewritten": 0o755, // new content never runs setuid
	} {
		if got := lstat(t, filepath.Join(host, name)).Mode & 0o7777; got != want {
			t.Errorf("%s: mode %o, want %o", name, got, want)
		}
	}
	// A mode change keeps the special bits the host had, and no others.
	if got := lstat(t, filepath.Join(host, "suid-host")).Mode & 0o7777; got != 0o4700 {
		t.Errorf("suid-host: mode %o, want 4700", got)
	}
}

// TestRWWorkspaceNormalisesModes: an rw workspace writes to the host
// directly, but what the sandbox leaves setuid, setgid or world-writable
// loses those bits when the session ends (audited); the host's own
// entries keep theirs.
func TestRWWorkspaceNormalisesModes(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"hostsuid": "h\n", "d/": ""})
	if err := unix.Chmod(filepath.Join(host, "hostsuid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	w := overlayWS(host)
	w.Mode, w.OnExit = policies.ModeRW, ""
	s := setup(t, policyWith(w), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/evil", Arg: "#!/bin/sh\n"},
		probeAction{Op: "chmod", Path: "/workspace/evil", Arg: "6777"},
		probeAction{Op: "mkdir", Path: "/workspace/open"},
		probeAction{Op: "chmod", Path: "/workspace/open", Arg: "0777"},
		probeAction{Op: "chmod", Path: "/workspace/d", Arg: "2775"},
	)
	var events []Event
	if _, _, err := s.Exit(t.Context(), func(e Event) { events = append(events, e) }); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"evil": 0o775, "open": 0o775, "d": 0o775, "hostsuid": 0o4755} {
		if got := lstat(t, filepath.Join(host, name)).Mode & 0o7777; got != want {
			t.Errorf("%s: mode %o, want %o", name, got, want)
		}
	}
	if len(events) != 3 {
		t.Errorf("audit events %+v, want 3 %s", events, EventModeNormalised)
	}
	for _, e := range events {
		if e.Type != EventModeNormalised || e.Reason == "" || !strings.HasPrefix(e.HostPath, host) {
			t.Errorf("event %+v", e)
		}
	}
}

// TestSetupRefusesSymlinkedHostPaths: Setup is given host paths the daemon
// resolved and admitted; one that goes through a symlink now (a component
// swapped between admission and Setup) is refused, for workspaces and
// mounts, with nothing mounted.
func TestSetupRefusesSymlinkedHostPaths(t *testing.T) {
	admitted := hostTree(t, hostOwner, map[string]string{"sub/a.txt": "a\n", "f": "f\n"})
	elsewhere := hostTree(t, hostOwner, map[string]string{"sub/secret": "s\n", "f": "other\n"})
	parent := tempDir(t)
	swapped := filepath.Join(parent, "ws")
	if err := os.Symlink(elsewhere, swapped); err != nil {
		t.Fatal(err)
	}
	mountOf := func(p string) *policies.Policy {
		pol := policyWith()
		pol.Mounts = []policies.Mount{{HostPath: p, Target: "/m", ReadOnly: true, DefaultDenyRead: true}}
		return pol
	}
	for name, p := range map[string]*policies.Policy{
		"workspace":           policyWith(overlayWS(swapped)),
		"workspace component": policyWith(overlayWS(filepath.Join(swapped, "sub"))),
		"directory mount":     mountOf(filepath.Join(swapped, "sub")),
		"file mount":          mountOf(filepath.Join(swapped, "f")),
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fs")
			_, err := Setup(t.Context(), dir, p, sandboxer)
			if err == nil || !strings.Contains(err.Error(), "goes through a symlink") {
				t.Fatalf("Setup = %v, want a refusal naming the symlink", err)
			}
			if m, _ := mountsUnder(dir); len(m) > 0 {
				t.Errorf("mounts left under %s: %v", dir, m)
			}
		})
	}
	// The same paths without the symlink are fine.
	s := setup(t, policyWith(overlayWS(admitted)), sandboxer)
	stop(t, s)
}

// TestCommitSymlinkRedirectsHostLink: a link the sandbox makes may stay
// inside the workspace and still send a host link the sandbox never
// touched out of it (cur -> lib/../keep, with lib -> . , is ../keep):
// the change that does it is rejected.
func TestCommitSymlinkRedirectsHostLink(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"keep": "k\n", "lib/x": "x\n", "cur": "->lib/../keep", "deep/a/f": "f\n", "deep/cur2": "->a/../../keep"})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "removeall", Path: "/workspace/lib"},
		probeAction{Op: "symlink", Path: "/workspace/lib", Arg: "."},
		probeAction{Op: "removeall", Path: "/workspace/deep/a"},
		probeAction{Op: "mkdir", Path: "/workspace/deep/b/c"},
		probeAction{Op: "symlink", Path: "/workspace/deep/a", Arg: "b/c/../.."},
		probeAction{Op: "write", Path: "/workspace/keep", Arg: "k2\n"},
	)
	stop(t, s)
	cr, err := s.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{}
	for _, r := range cr.Rejected {
		rejected[strings.TrimPrefix(r.Path, "/workspace/")] = r.Rule + ": " + r.Reason
	}
	for _, p := range []string{"lib", "deep/a"} {
		if !strings.HasPrefix(rejected[p], RuleSymlinkEscape) {
			t.Errorf("%s: %q, want a %s rejection (all: %v)", p, rejected[p], RuleSymlinkEscape, rejected)
		}
	}
	for _, l := range []string{"cur", "deep/cur2"} {
		if got, err := filepath.EvalSymlinks(filepath.Join(host, l)); err != nil || !strings.HasPrefix(got, host+"/") {
			t.Errorf("%s resolves to %q (%v), out of the workspace", l, got, err)
		}
	}
	if got := readFile(t, filepath.Join(host, "keep")); got != "k2\n" {
		t.Errorf("keep = %q", got)
	}
}

// TestRWWorkspaceNormalisesPastDeepTree: a session cannot keep a setuid
// file in an rw workspace by leaving, ahead of it in the walk, a directory
// nested deeper than a path can name (mkdirat from the directory it just
// made needs no long path). The walk used to stop there with
// ENAMETOOLONG, leaving the file setuid on the host and failing Exit.
func TestRWWorkspaceNormalisesPastDeepTree(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{})
	w := overlayWS(host)
	w.Mode, w.OnExit = policies.ModeRW, ""
	s := setup(t, policyWith(w), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/z", Arg: "#!/bin/sh\n"},
		probeAction{Op: "chmod", Path: "/workspace/z", Arg: "4777"},
	)
	// What the sandbox does with mkdirat/openat one level at a time; the
	// rw workspace is the host directory, so do it there.
	fd, err := unix.Open(host, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 3000 {
		if err := unix.Mkdirat(fd, "a", 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, "a", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	unix.Close(fd)
	if _, _, err := s.Exit(t.Context(), nil); err != nil {
		t.Errorf("Exit: %v", err)
	}
	if got := lstat(t, filepath.Join(host, "z")).Mode & 0o7777; got != 0o775 {
		t.Errorf("z: mode %o, want 775 (the sandbox kept a setuid file on the host)", got)
	}
}
