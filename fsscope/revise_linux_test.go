package fsscope

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestReviseRules revises a live session's protect rules: the sandbox's
// change to a path protected only after the revision is refused by the
// next commit, a path the revision no longer protects is committed, and
// a session loaded again (a restarted daemon) commits under the revised
// rules. Bad patterns refuse the revision and change nothing.
func TestReviseRules(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"deploy/prod.yaml": "prod\n",
		"docs/guide.md":    "guide\n",
	})
	w := overlayWS(host)
	w.Protect = []string{"docs/**"}
	p := policyWith(w)
	s := setup(t, p, sandboxer)
	mustProbe(t, s, sandboxer,
		probeAction{Op: "write", Path: "/workspace/deploy/prod.yaml", Arg: "hacked\n"},
		probeAction{Op: "write", Path: "/workspace/docs/guide.md", Arg: "guide 2\n"},
	)

	bad := p.Clone().Workspaces
	bad[0].Protect = []string{"deploy/[", "deploy/**"}
	if _, _, err := s.Revise(t.Context(), bad); err == nil {
		t.Fatal("a pattern that does not compile was taken")
	}
	revised := p.Clone().Workspaces
	revised[0].Protect = []string{"deploy/**"}
	rev, _, err := s.Revise(t.Context(), revised)
	if err != nil || !slices.Equal(rev.Rules, []string{"/workspace"}) || len(rev.Masked) > 0 {
		t.Fatalf("Revise = %+v, %v", rev, err)
	}
	if rev, _, err := s.Revise(t.Context(), revised); err != nil || rev.Changed() {
		t.Errorf("the same rules again: %+v, %v; want no change", rev, err)
	}

	stop(t, s)
	again, err := Load(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := again.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, []string{"/workspace/docs/guide.md"}) || len(res.Rejected) != 1 ||
		res.Rejected[0].Path != "/workspace/deploy/prod.yaml" || res.Rejected[0].Rule != RuleProtect {
		t.Errorf("commit after the revision: applied %v, rejected %+v; want docs committed, deploy refused", res.Applied, res.Rejected)
	}
	if got := readFile(t, filepath.Join(host, "deploy/prod.yaml")); got != "prod\n" {
		t.Errorf("deploy/prod.yaml = %q: the revised protect rule let the change through", got)
	}
	if got := readFile(t, filepath.Join(host, "docs/guide.md")); got != "guide 2\n" {
		t.Errorf("docs/guide.md = %q: the withdrawn protect rule still refused it", got)
	}
}

// TestReviseDenyReadLive adds deny_read patterns to a running sandbox's
// overlay workspace: every entry they match (a file, a directory and
// what is beneath it) can no longer be opened from the sandbox, also
// under a name it makes afterwards (a rename, a hard link), and each
// attempt is reported; other files stay readable. A commit may not write
// a covered path. Lifting a pattern is refused. A session loaded again
// (a restarted daemon) refuses the opens again, also of a masked file the
// sandbox renamed. Teardown removes the marks.
func TestReviseDenyReadLive(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"config/prod.yaml":  "PRODSECRET",
		"config/dev.yaml":   "dev",
		"keys/deploy.txt":   "DEPLOYKEY",
		"keys/nested/a.txt": "NESTEDKEY",
		"README.md":         "readme",
	})
	ra := newReadAudit(t)
	w := overlayWS(host)
	p := policyWith(w)
	s := setup(t, p, sandboxer, WithReadAudit(ra.ReadAudit, "s1"))
	// Before the revision the sandbox reads them (what it read stays
	// read: a revision cannot take that back).
	mustProbe(t, s, sandboxer, probeAction{Op: "read", Path: "/workspace/config/prod.yaml"})

	revised := p.Clone().Workspaces
	revised[0].DenyRead = []string{"config/prod.yaml", "keys/"}
	rev, _, err := s.Revise(t.Context(), revised)
	if err != nil {
		t.Fatal(err)
	}
	var masked []string
	for _, m := range rev.Masked {
		masked = append(masked, m.Path+" "+m.Rule)
	}
	want := []string{"/workspace/config/prod.yaml config/prod.yaml", "/workspace/keys keys/", "/workspace/keys/deploy.txt keys/",
		"/workspace/keys/nested keys/", "/workspace/keys/nested/a.txt keys/"}
	if !slices.Equal(masked, want) || !slices.Equal(rev.DenyRead["/workspace"], []string{"config/prod.yaml", "keys/"}) {
		t.Errorf("masked %q (deny_read %v), want %q", masked, rev.DenyRead, want)
	}

	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "read", Path: "/workspace/config/prod.yaml"},
		probeAction{Op: "read", Path: "/workspace/keys/deploy.txt"},
		probeAction{Op: "read", Path: "/workspace/keys/nested/a.txt"},
		probeAction{Op: "readdir", Path: "/workspace/keys"},
		probeAction{Op: "link", Path: "/workspace/copy.yaml", Arg: "/workspace/config/prod.yaml"},
		probeAction{Op: "read", Path: "/workspace/copy.yaml"},
		probeAction{Op: "rename", Path: "/workspace/keys/deploy.txt", Arg: "/workspace/moved.txt"},
		probeAction{Op: "read", Path: "/workspace/moved.txt"},
		probeAction{Op: "read", Path: "/workspace/config/dev.yaml"},
		probeAction{Op: "read", Path: "/workspace/README.md"},
	)
	for _, i := range []int{0, 1, 2, 3} {
		if r := res[i]; r.ok() || r.Errno != int(unix.EPERM) {
			t.Errorf("%v, want EPERM", r)
		}
	}
	// A hard link or a rename of a file the overlay has not copied up
	// needs a copy-up, which reads the host's file: refused. Had it
	// worked, the new name would be refused too.
	for _, i := range []int{4, 6} {
		if r := res[i]; r.ok() {
			if next := res[i+1]; next.ok() || next.Errno != int(unix.EPERM) {
				t.Errorf("%v, then %v: want the new name refused", r, next)
			}
		} else if r.Errno != int(unix.EPERM) {
			t.Errorf("%v: want EPERM", r)
		}
	}
	for _, i := range []int{8, 9} {
		if r := res[i]; !r.ok() {
			t.Errorf("%v: want it to work", r)
		}
	}
	// The host's own programs still read the file.
	if got := readFile(t, filepath.Join(host, "config/prod.yaml")); got != "PRODSECRET" {
		t.Errorf("the host reads %q", got)
	}
	out, err := exec.Command("cat", filepath.Join(host, "keys/deploy.txt")).Output()
	if err != nil || string(out) != "DEPLOYKEY" {
		t.Errorf("cat on the host: %q %v", out, err)
	}
	for _, r := range res {
		for _, secret := range []string{"PRODSECRET", "DEPLOYKEY", "NESTEDKEY"} {
			if strings.Contains(r.Data, secret) {
				t.Errorf("%v: the sandbox read %s after the revision", r, secret)
			}
		}
	}
	if n := len(ra.got()); n < 6 {
		t.Errorf("%d refused opens reported, want at least 6", n)
	}

	// Lifting a pattern is refused, and nothing changes.
	if _, _, err := s.Revise(t.Context(), p.Clone().Workspaces); err == nil || !strings.Contains(err.Error(), policies.ReasonDenyReadLifted) {
		t.Errorf("lifting deny_read: %v", err)
	}

	// The sandbox writes the masked path anew: a commit refuses it.
	mustProbe(t, s, sandboxer, probeAction{Op: "write", Path: "/workspace/keys/new.txt", Arg: "mine"})

	// A restarted daemon: the old audit is gone, a new one loads the
	// session and refuses the opens again, the renamed file too.
	ra.Close()
	ra2 := newReadAudit(t)
	again, err := Load(s.Dir(), WithReadAudit(ra2.ReadAudit, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	res = runProbe(t, again.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "read", Path: "/workspace/config/prod.yaml"},
		probeAction{Op: "read", Path: "/workspace/keys/nested/a.txt"},
		probeAction{Op: "read", Path: "/workspace/README.md"},
	)
	if res[0].ok() || res[1].ok() || !res[2].ok() {
		t.Errorf("after a restart: %v", res)
	}

	stop(t, again)
	cr, err := again.Commit(t.Context(), CommitOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{}
	for _, r := range cr.Rejected {
		rejected[r.Path] = r.Rule
	}
	if rejected["/workspace/keys/new.txt"] != RuleDenyRead {
		t.Errorf("commit: rejected %v, want keys/new.txt refused by deny_read", rejected)
	}
	if got := ra2.marked(); got != 0 {
		t.Errorf("%d marks left after Teardown", got)
	}
}
