package fsscope

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
	"golang.org/x/sys/unix"
)

// TestMaskedFileRemovable: in an overlay workspace a masked file is the
// view's own entry, not a mount, so the sandbox can remove it (git clean,
// rm: a mount would fail with EBUSY) but still neither read nor write
// it; the removal is a change like any other, committed unless a rule
// protects the file, and no diff shows the host's content. A file the
// sandbox writes under the same name afterwards is its own and readable.
// Run idmapped and not, with and without a ReadAudit.
func TestMaskedFileRemovable(t *testing.T) {
	for _, sandbox := range []Owner{sandboxer, hostOwner} {
		for _, audited := range []bool{false, true} {
			name := map[bool]string{true: "idmapped", false: "owner"}[sandbox != hostOwner]
			if audited {
				name += "/audited"
			}
			t.Run(name, func(t *testing.T) { testMaskedFileRemovable(t, sandbox, audited) })
		}
	}
}

func testMaskedFileRemovable(t *testing.T, sandbox Owner, audited bool) {
	host := hostTree(t, hostOwner, map[string]string{
		".env": "REMOVABLE_SECRET", ".env.local": "KEPT_SECRET", ".env.prod": "MOVED_SECRET", "sub/.env.test": "SUB_SECRET", "README.md": "readme",
	})
	var opts []Option
	var ra *readAuditRec
	if audited {
		ra = newReadAudit(t)
		opts = append(opts, WithReadAudit(ra.ReadAudit, "s1"))
	}
	ws := overlayWS(host)
	ws.OnExit = policies.OnExitCommit
	s := setup(t, policyWith(ws), sandbox, opts...)
	res := runProbe(t, s.Mounts(), sandbox.UID, sandbox.GID,
		probeAction{Op: "read", Path: "/workspace/.env"},
		probeAction{Op: "remove", Path: "/workspace/.env"},
		probeAction{Op: "remove", Path: "/workspace/sub/.env.test"},
		probeAction{Op: "write", Path: "/workspace/.env", Arg: "MINE"},
		probeAction{Op: "read", Path: "/workspace/.env"},
		probeAction{Op: "read", Path: "/workspace/.env.local"},
		probeAction{Op: "write", Path: "/workspace/.env.local", Arg: "overwritten"},
		probeAction{Op: "append", Path: "/workspace/.env.local", Arg: "more"},
		probeAction{Op: "chmod", Path: "/workspace/.env.local", Arg: "644"},
		probeAction{Op: "link", Path: "/workspace/hl", Arg: "/workspace/.env.local"},
		probeAction{Op: "touch", Path: "/workspace/.env.local"},
		probeAction{Op: "rename", Path: "/workspace/.env.prod", Arg: "/workspace/moved"},
		probeAction{Op: "read", Path: "/workspace/moved"},
		probeAction{Op: "read", Path: "/workspace/.env.prod"},
		// A right guess of a removed masked file's content must not show
		// as a rename in the change set.
		probeAction{Op: "write", Path: "/workspace/guess.txt", Arg: "SUB_SECRET"},
	)
	noSecret(t, res, "REMOVABLE_SECRET", "KEPT_SECRET", "MOVED_SECRET", "SUB_SECRET")
	refused := unix.EACCES
	if audited {
		refused = unix.EPERM
	}
	if res[0].ok() || res[0].Errno != int(refused) {
		t.Errorf("%v, want %v", res[0], refused)
	}
	for _, r := range res[1:3] {
		if !r.ok() {
			t.Errorf("removing a masked file: %v", r)
		}
	}
	if !res[3].ok() || !res[4].ok() || res[4].Data != "MINE" {
		t.Errorf("the sandbox's own .env after the removal: %v %v", res[3], res[4])
	}
	if res[5].ok() || res[5].Errno != int(refused) {
		t.Errorf("%v, want %v", res[5], refused)
	}
	for _, r := range res[6:11] {
		if r.ok() {
			t.Errorf("%s of a masked file succeeded: %v", r.Op, r)
		}
	}
	// A rename is a removal and a new name: nothing of the host's file
	// goes with it.
	if !res[11].ok() {
		t.Errorf("renaming a masked file: %v", res[11])
	}
	for _, r := range res[12:14] {
		if r.ok() && r.Data != "" {
			t.Errorf("%v", r)
		}
	}
	if audited {
		var reported []string
		for _, m := range ra.got() {
			reported = append(reported, m.Path)
		}
		if !slices.Contains(reported, "/workspace/.env") || !slices.Contains(reported, "/workspace/.env.local") || slices.Index(reported, "/workspace/.env") != 0 {
			t.Errorf("reported %q", reported)
		}
	}
	stop(t, s)
	if ra != nil && ra.marked() != 0 {
		t.Errorf("%d marks left after Teardown", ra.marked())
	}

	// The diff shows the sandbox's side of a masked path, never the host's.
	var ud bytes.Buffer
	if err := s.UnifiedDiff(t.Context(), &ud); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a/workspace/sub/.env.test", "the host's content of a/workspace/.env is not shown", "+MINE"} {
		if !strings.Contains(ud.String(), want) {
			t.Errorf("unified diff lacks %q:\n%s", want, ud.String())
		}
	}
	for _, secret := range []string{"REMOVABLE_SECRET", "KEPT_SECRET", "MOVED_SECRET", "-SUB_SECRET"} {
		if strings.Contains(ud.String(), secret) {
			t.Errorf("unified diff shows %q:\n%s", secret, ud.String())
		}
	}
	cs, err := s.Diff(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kinds := changeKinds(cs)
	if !slices.Equal(kinds, []string{".env modified", ".env.prod deleted", "guess.txt added", "moved added", "sub/.env.test deleted"}) {
		t.Errorf("changes %q", kinds)
	}
	// Removals commit; the sandbox's own file in a masked path's place
	// does not.
	before := digest(t, host)
	res2, err := s.Commit(t.Context(), CommitOptions{})
	if err == nil || len(res2.Rejected) != 1 || res2.Rejected[0].Path != "/workspace/.env" || res2.Rejected[0].Rule != RuleDenyRead {
		t.Fatalf("Commit = %+v, %v; want .env rejected by %s", res2, err, RuleDenyRead)
	}
	if digest(t, host) != before {
		t.Fatal("a refused commit changed the host")
	}
	if _, err := s.Commit(t.Context(), CommitOptions{Partial: true}); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(host, "sub/.env.test")) || exists(filepath.Join(host, ".env.prod")) || readFile(t, filepath.Join(host, ".env")) != "REMOVABLE_SECRET" || readFile(t, filepath.Join(host, ".env.local")) != "KEPT_SECRET" {
		t.Errorf("host after the commit: sub/.env.test %v, .env.prod %v, .env %q, .env.local %q", exists(filepath.Join(host, "sub/.env.test")),
			exists(filepath.Join(host, ".env.prod")), readFile(t, filepath.Join(host, ".env")), readFile(t, filepath.Join(host, ".env.local")))
	}
}

// TestDiffHidesLaterDenied: a file the host creates after Setup under a
// deny_read name was never masked (the sandbox does not see it); when the
// sandbox writes its own file there, the diff shows the sandbox's side
// only, not the host's secret.
func TestDiffHidesLaterDenied(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"README.md": "readme"})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	writeFiles(t, host, map[string]string{".env.later": "LATER_SECRET"})
	chownTree(t, host, hostOwner)
	mustProbe(t, s, sandboxer, probeAction{Op: "write", Path: "/workspace/.env.later", Arg: "MINE"})
	stop(t, s)
	var ud bytes.Buffer
	if err := s.UnifiedDiff(t.Context(), &ud); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ud.String(), "LATER_SECRET") || !strings.Contains(ud.String(), "+MINE") {
		t.Errorf("unified diff:\n%s", ud.String())
	}
}

// TestMaskOwnerUnused: the masks' owner is an ID no file of the workspace
// has, so mapping it in the idmapping changes nothing for the host's own
// files: a file owned by nobody (65534) stays unchangeable, and the masks
// get 65533.
func TestMaskOwnerUnused(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "E", "nobody.txt": "N"})
	if err := unix.Chown(filepath.Join(host, "nobody.txt"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := unix.Chmod(filepath.Join(host, "nobody.txt"), 0o666); err != nil {
		t.Fatal(err)
	}
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	if got := s.st.Workspaces[0].MaskOwner; got != 65533 {
		t.Errorf("MaskOwner = %d, want 65533", got)
	}
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "append", Path: "/workspace/nobody.txt", Arg: "x"},
		probeAction{Op: "rename", Path: "/workspace/nobody.txt", Arg: "/workspace/moved"},
		probeAction{Op: "stat", Path: "/workspace/.env"},
		probeAction{Op: "remove", Path: "/workspace/.env"},
	)
	if res[0].ok() || res[1].ok() {
		t.Errorf("a file of another user changed: %v %v", res[0], res[1])
	}
	if !res[2].ok() || !strings.Contains(res[2].Data, "uid=65533") || !res[3].ok() {
		t.Errorf("the mask: %v %v", res[2], res[3])
	}
}

// TestMaskedFileRemovalProtected: a protect rule keeps a masked file as
// it keeps any other: its removal is rejected at commit, and the host
// file stays.
func TestMaskedFileRemovalProtected(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "PROTECTED_SECRET", "build/out": "o"})
	ws := overlayWS(host)
	ws.Protect = []string{"/.env"}
	s := setup(t, policyWith(ws), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "remove", Path: "/workspace/.env"},
		probeAction{Op: "removeall", Path: "/workspace/build"},
	)
	stop(t, s)
	res, err := s.Commit(t.Context(), CommitOptions{})
	if err == nil || len(res.Rejected) != 1 || res.Rejected[0].Path != "/workspace/.env" {
		t.Fatalf("Commit = %+v, %v; want .env rejected", res, err)
	}
	if readFile(t, filepath.Join(host, ".env")) != "PROTECTED_SECRET" || !exists(filepath.Join(host, "build/out")) {
		t.Error("a refused commit changed the host")
	}
}

// TestMaskedFileParentReplaced: a masked file's directory replaced by a
// symlink to a directory of the sandbox's (which holds its own file of
// the masked name) would put that file at the masked path on the host:
// the commit rejects the symlink, and the host keeps its file.
func TestMaskedFileParentReplaced(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"sub/.env.test": "SUBSECRET", "sub/keep.txt": "k"})
	s := setup(t, policyWith(overlayWS(host)), sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "mkdir", Path: "/workspace/sub2"},
		probeAction{Op: "write", Path: "/workspace/sub2/.env.test", Arg: "EVIL"},
		probeAction{Op: "removeall", Path: "/workspace/sub"},
		probeAction{Op: "symlink", Path: "/workspace/sub", Arg: "sub2"},
	)
	stop(t, s)
	before := digest(t, host)
	res, err := s.Commit(t.Context(), CommitOptions{})
	if err == nil || !slices.ContainsFunc(res.Rejected, func(r Rejection) bool { return r.Path == "/workspace/sub" && r.Rule == RuleDenyRead }) {
		t.Fatalf("Commit = %+v, %v; want sub rejected by %s", res, err, RuleDenyRead)
	}
	if digest(t, host) != before || readFile(t, filepath.Join(host, "sub/.env.test")) != "SUBSECRET" {
		t.Error("a refused commit changed the host")
	}
}
