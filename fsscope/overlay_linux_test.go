package fsscope

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestOverlayRoundTrip edits, deletes, renames, re-links and chmods files
// as the sandbox user, checks the host is untouched meanwhile, that diff
// reports exactly that, and that commit reproduces it on the host.
func TestOverlayRoundTrip(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"a.txt":        "alpha\n",
		"b.txt":        "bravo\n",
		"c.txt":        "charlie\n",
		"del.txt":      "delete me\n",
		"dir/x.txt":    "x\n",
		"script.sh":    "#!/bin/sh\n",
		"keep.txt":     "keep\n",
		"link":         "->a.txt",
		"olddir/z.txt": "z\n",
		"bin.dat":      "\x00\x01\x02",
		"same.txt":     "same\n",
	})
	before := digest(t, host)
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	if got := s.Workspaces()[0]; !got.Idmapped || got.Owner != hostOwner {
		t.Fatalf("workspace info = %+v, want idmapped, owned by %v", got, hostOwner)
	}
	res := mustProbe(t, s, sandboxer,
		probeAction{Op: "stat", Path: "/workspace/a.txt"},
		probeAction{Op: "write", Path: "/workspace/a.txt", Arg: "alpha\nALPHA\n"},
		probeAction{Op: "remove", Path: "/workspace/del.txt"},
		probeAction{Op: "rename", Path: "/workspace/b.txt", Arg: "/workspace/dir/b-moved.txt"},
		probeAction{Op: "chmod", Path: "/workspace/script.sh", Arg: "755"},
		probeAction{Op: "symlink", Path: "/workspace/newlink", Arg: "dir/x.txt"},
		probeAction{Op: "remove", Path: "/workspace/link"},
		probeAction{Op: "symlink", Path: "/workspace/link", Arg: "c.txt"},
		probeAction{Op: "mkdir", Path: "/workspace/newdir"},
		probeAction{Op: "write", Path: "/workspace/newdir/n.txt", Arg: "new\n"},
		probeAction{Op: "removeall", Path: "/workspace/olddir"},
		probeAction{Op: "write", Path: "/workspace/bin.dat", Arg: "\x00changed"},
		probeAction{Op: "chmod", Path: "/workspace/keep.txt", Arg: "4755"},
		probeAction{Op: "write", Path: "/workspace/same.txt", Arg: "same\n"},
		probeAction{Op: "statfs", Path: "/workspace"},
	)
	if !strings.Contains(res[0].Data, "uid=2000 gid=2000") {
		t.Errorf("the sandbox user does not see the workspace owner's file as its own: %s", res[0].Data)
	}
	flags, err := strconv.ParseInt(strings.TrimPrefix(res[len(res)-1].Data, "flags="), 0, 64)
	if err != nil || flags&unix.ST_NOSUID == 0 || flags&unix.ST_NODEV == 0 {
		t.Errorf("workspace mount flags %s lack nosuid or nodev", res[len(res)-1].Data)
	}
	if after := digest(t, host); after != before {
		t.Fatalf("host workspace changed while the session ran:\n%s\n---\n%s", before, after)
	}

	cs, err := s.Diff(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a.txt modified",
		"bin.dat modified",
		"del.txt deleted",
		"dir/b-moved.txt renamed b.txt",
		"keep.txt mode",
		"link symlink",
		"newdir added",
		"newdir/n.txt added",
		"newlink added",
		"olddir deleted",
		"olddir/z.txt deleted",
		"script.sh mode",
	}
	if got := changeKinds(cs); !slices.Equal(got, want) {
		t.Fatalf("Diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, c := range cs.Workspaces[0].Changes {
		switch c.Path {
		case "bin.dat":
			if !c.Binary {
				t.Error("bin.dat not reported binary")
			}
		case "link":
			if c.OldLink != "a.txt" || c.LinkTarget != "c.txt" {
				t.Errorf("link change = %+v", c)
			}
		case "keep.txt":
			if c.Mode != 0o4755 || c.OldMode != 0o644 {
				t.Errorf("keep.txt modes = %o -> %o", c.OldMode, c.Mode)
			}
		}
	}
	var ud bytes.Buffer
	if err := s.UnifiedDiff(t.Context(), &ud); err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		"--- a/workspace/a.txt\n+++ b/workspace/a.txt\n@@ -1 +1,2 @@\n alpha\n+ALPHA\n",
		"Binary files a/workspace/bin.dat and b/workspace/bin.dat differ",
		"rename from /workspace/b.txt\nrename to /workspace/dir/b-moved.txt",
		"old mode 100644\nnew mode 100755",
		"--- /dev/null\n+++ b/workspace/newdir/n.txt\n@@ -0,0 +1 @@\n+new\n",
		"deleted file mode 100644\n--- a/workspace/olddir/z.txt\n+++ /dev/null\n",
		"-a.txt\n\\ No newline at end of file\n+c.txt\n",
	} {
		if !strings.Contains(ud.String(), frag) {
			t.Errorf("unified diff lacks %q:\n%s", frag, ud.String())
		}
	}

	if _, err := s.Commit(t.Context(), CommitOptions{}); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Commit while the sandbox is live = %v, want failed precondition", err)
	}
	stop(t, s)
	var events []Event
	cr, err := s.Commit(t.Context(), CommitOptions{Audit: func(e Event) { events = append(events, e) }})
	if err != nil {
		t.Fatalf("Commit: %v (%+v)", err, cr)
	}
	if len(cr.Applied) != len(want) || len(cr.Rejected) != 0 || len(cr.Conflicts) != 0 || len(events) != len(want) {
		t.Fatalf("Commit result %+v, %d events", cr, len(events))
	}
	check := func(rel, content string, mode uint32) {
		t.Helper()
		p := filepath.Join(host, rel)
		if got := readFile(t, p); got != content {
			t.Errorf("%s = %q, want %q", rel, got, content)
		}
		st := lstat(t, p)
		if st.Mode&0o7777 != mode || st.Uid != hostOwner.UID || st.Gid != hostOwner.GID {
			t.Errorf("%s: mode %o owner %d:%d, want %o %v", rel, st.Mode&0o7777, st.Uid, st.Gid, mode, hostOwner)
		}
	}
	check("a.txt", "alpha\nALPHA\n", 0o644)
	check("bin.dat", "\x00changed", 0o644)
	check("dir/b-moved.txt", "bravo\n", 0o644)
	check("script.sh", "#!/bin/sh\n", 0o755)
	check("keep.txt", "keep\n", 0o755) // setuid stripped
	check("newdir/n.txt", "new\n", 0o644)
	check("same.txt", "same\n", 0o644)
	for _, gone := range []string{"del.txt", "b.txt", "olddir"} {
		if exists(filepath.Join(host, gone)) {
			t.Errorf("%s still exists", gone)
		}
	}
	for rel, target := range map[string]string{"link": "c.txt", "newlink": "dir/x.txt"} {
		got, err := os.Readlink(filepath.Join(host, rel))
		if err != nil || got != target {
			t.Errorf("readlink %s = %q, %v; want %q", rel, got, err, target)
		}
		if st := lstat(t, filepath.Join(host, rel)); st.Uid != hostOwner.UID {
			t.Errorf("%s owned by %d", rel, st.Uid)
		}
	}
	if st := lstat(t, filepath.Join(host, "newdir")); st.Mode&0o7777 != 0o755 || st.Uid != hostOwner.UID {
		t.Errorf("newdir mode %o owner %d", st.Mode&0o7777, st.Uid)
	}
	entries, _ := os.ReadDir(host)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			t.Errorf("staging directory %s left in the workspace", e.Name())
		}
	}
	if exists(s.journalFile(0)) {
		t.Error("commit journal left behind")
	}
	cs, err = s.Diff(t.Context())
	if err != nil || cs.Len() != 0 {
		t.Errorf("Diff after commit = %v, %v; want no changes", changeKinds(cs), err)
	}
	// A second commit has nothing to do and finds no conflict with itself.
	if cr, err := s.Commit(t.Context(), CommitOptions{}); err != nil || len(cr.Applied) != 0 {
		t.Errorf("second Commit = %+v, %v", cr, err)
	}
}

// TestOverlayWithoutIdmap runs the session as the workspace owner.
func TestOverlayWithoutIdmap(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"a.txt": "a\n"})
	p := policyWith(overlayWS(host))
	owner, err := WorkspaceOwner(p)
	if err != nil || owner != hostOwner {
		t.Fatalf("WorkspaceOwner = %v, %v", owner, err)
	}
	s := setup(t, p, owner)
	if s.Workspaces()[0].Idmapped {
		t.Error("workspace idmapped although the sandbox user owns it")
	}
	mustProbe(t, s, owner,
		probeAction{Op: "write", Path: "/workspace/a.txt", Arg: "b\n"},
		probeAction{Op: "write", Path: "/workspace/new.txt", Arg: "n\n"},
	)
	mtime := lstat(t, filepath.Join(merged(s, 0), "new.txt")).Mtim
	stop(t, s)
	if _, err := s.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(host, "a.txt")); got != "b\n" {
		t.Errorf("a.txt = %q", got)
	}
	if st := lstat(t, filepath.Join(host, "new.txt")); st.Uid != hostOwner.UID || st.Mtim != mtime {
		t.Errorf("new.txt owned by %d, mtime %v, want %v", st.Uid, st.Mtim, mtime)
	}
}

// TestDiscard drops the changes and leaves the host alone.
func TestDiscard(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"a.txt": "a\n"})
	before := digest(t, host)
	s := setup(t, policyWith(overlayWS(host)), hostOwner)
	mustProbe(t, s, hostOwner, probeAction{Op: "write", Path: "/workspace/a.txt", Arg: "changed\n"})
	if err := s.Discard(t.Context()); !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("Discard while live = %v", err)
	}
	stop(t, s)
	if err := s.Discard(t.Context()); err != nil {
		t.Fatal(err)
	}
	cs, err := s.Diff(t.Context())
	if err != nil || cs.Len() != 0 {
		t.Fatalf("Diff after discard = %v, %v", changeKinds(cs), err)
	}
	if digest(t, host) != before {
		t.Error("discard changed the host")
	}
}

// TestFinish applies on_exit per workspace.
func TestFinish(t *testing.T) {
	hosts := map[string]string{}
	var ws []policies.Workspace
	for _, onExit := range []string{policies.OnExitCommit, policies.OnExitDiscard, policies.OnExitReview} {
		h := hostTree(t, hostOwner, map[string]string{"f": "old\n"})
		hosts[onExit] = h
		w := overlayWS(h)
		w.Target, w.OnExit = "/"+onExit, onExit
		ws = append(ws, w)
	}
	s := setup(t, policyWith(ws...), hostOwner)
	mustProbe(t, s, hostOwner,
		probeAction{Op: "write", Path: "/commit/f", Arg: "new\n"},
		probeAction{Op: "write", Path: "/discard/f", Arg: "new\n"},
		probeAction{Op: "write", Path: "/review/f", Arg: "new\n"},
	)
	stop(t, s)
	res, review, err := s.Finish(t.Context(), nil)
	if err != nil || !review || res == nil || !slices.Equal(res.Applied, []string{"/commit/f"}) {
		t.Fatalf("Finish = %+v, review %v, %v", res, review, err)
	}
	for onExit, want := range map[string]string{policies.OnExitCommit: "new\n", policies.OnExitDiscard: "old\n", policies.OnExitReview: "old\n"} {
		if got := readFile(t, filepath.Join(hosts[onExit], "f")); got != want {
			t.Errorf("%s: f = %q, want %q", onExit, got, want)
		}
	}
	cs, err := s.Diff(t.Context())
	if err != nil || !slices.Equal(changeKinds(cs), []string{"f modified"}) {
		t.Errorf("left for review: %v, %v", changeKinds(cs), err)
	}
}

// TestIdmapUsernsShared checks that the user namespaces behind idmapped
// mounts are made once per mapping and shared, and that two mappings get
// two namespaces.
func TestIdmapUsernsShared(t *testing.T) {
	a, b := Owner{UID: 4101, GID: 4101}, Owner{UID: 4102, GID: 4102}
	to := Owner{UID: 65534, GID: 65534}
	ns1, err := idmapUserns(a, to, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns2, err := idmapUserns(a, to, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns3, err := idmapUserns(b, to, 0)
	if err != nil {
		t.Fatal(err)
	}
	ino := func(f *os.File) uint64 {
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	if ns1 != ns2 {
		t.Error("the same mapping made a second user namespace")
	}
	if ino(ns1) == ino(ns3) {
		t.Errorf("mappings %v and %v share user namespace %d", a, b, ino(ns1))
	}
}
