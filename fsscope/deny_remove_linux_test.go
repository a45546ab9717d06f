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
	for _, r := range res[12:] {
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

	var ud bytes.Buffer
	if err := s.UnifiedDiff(t.Context(), &ud); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ud.String(), "SECRET") || !strings.Contains(ud.String(), "a/workspace/sub/.env.test") || !strings.Contains(ud.String(), "deny_read masks the old content") {
		t.Errorf("unified diff:\n%s", ud.String())
	}
	cs, err := s.Diff(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	kinds := changeKinds(cs)
	if !slices.Equal(kinds, []string{".env modified", ".env.prod deleted", "moved added", "sub/.env.test deleted"}) {
		t.Errorf("changes %q", kinds)
	}
	if _, err := s.Commit(t.Context(), CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(host, "sub/.env.test")) || readFile(t, filepath.Join(host, ".env")) != "MINE" || readFile(t, filepath.Join(host, ".env.local")) != "KEPT_SECRET" {
		t.Errorf("host after the commit: sub/.env.test %v, .env %q, .env.local %q", exists(filepath.Join(host, "sub/.env.test")),
			readFile(t, filepath.Join(host, ".env")), readFile(t, filepath.Join(host, ".env.local")))
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
