package fsscope

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAttackReviseMasksOtherSessions: a revision of session s1 adds a
// deny_read pattern; the mark lands on the host's inode, shared by every
// other view of the host directory. Session s2, over the same host
// directory, whose policy never denied the file, can no longer read it
// (and the refusal is reported as s1's), and neither can a host program
// that runs in a mount namespace of its own (a systemd service with
// PrivateTmp=, a container bind-mounting the directory). An API caller
// with rights over s1 only takes reads away from everyone else.
func TestAttackReviseMasksOtherSessions(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"config/prod.yaml": "PRODSECRET",
		"README.md":        "readme",
	})
	ra := newReadAudit(t)
	p1 := policyWith(overlayWS(host))
	s1 := setup(t, p1, sandboxer, WithReadAudit(ra.ReadAudit, "s1"))
	p2 := policyWith(overlayWS(host))
	s2 := setup(t, p2, sandboxer, WithReadAudit(ra.ReadAudit, "s2"))

	revised := p1.Clone().Workspaces
	revised[0].DenyRead = []string{"config/prod.yaml"}
	if _, _, err := s1.Revise(t.Context(), revised); err != nil {
		t.Fatal(err)
	}
	res := runProbe(t, s2.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "read", Path: "/workspace/config/prod.yaml"})
	if !res[0].ok() {
		t.Errorf("session s2 (no deny_read on it): %v: s1's revision took the read away from another session", res[0])
	}
	for _, m := range ra.got() {
		t.Logf("reported: owner %s path %s rule %s pid %d", m.Owner, m.Path, m.Rule, m.Pid)
	}
	cmd := exec.Command("cat", filepath.Join(host, "config/prod.yaml"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "PRODSECRET" {
		t.Errorf("a host program (root) in a mount namespace of its own: cat %s: %q %v: a revision made the host's own file unreadable to it", filepath.Join(host, "config/prod.yaml"), out, err)
	}
}

// TestAttackReviseMaskFlood: the sandbox writes more than
// MaxRevisedMasks files of its own into a directory a revision will
// likely mask (here secrets/, beside the host's key). The revision that
// adds deny_read "secrets/" counts the sandbox's own files and is
// refused, so the host's key stays readable: the sandbox decides whether
// a deny_read revision can be made.
func TestAttackReviseMaskFlood(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"secrets/key.txt": "HOSTKEY",
		"README.md":       "readme",
	})
	ra := newReadAudit(t)
	p := policyWith(overlayWS(host))
	p.Resources.Disk = 512 << 20
	s := setup(t, p, sandboxer, WithReadAudit(ra.ReadAudit, "s1"))
	var acts []probeAction
	for i := 0; i <= MaxRevisedMasks; i++ {
		acts = append(acts, probeAction{Op: "write", Path: fmt.Sprintf("/workspace/secrets/f%05d", i), Arg: ""})
	}
	mustProbe(t, s, sandboxer, acts...)

	revised := p.Clone().Workspaces
	revised[0].DenyRead = []string{"secrets/"}
	_, _, err := s.Revise(t.Context(), revised)
	if err != nil {
		res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
			probeAction{Op: "read", Path: "/workspace/secrets/key.txt"})
		t.Errorf("deny_read \"secrets/\" refused because of the sandbox's own %d files: %v; the sandbox still reads the host's key: %v",
			MaxRevisedMasks+1, err, res[0])
		if res[0].ok() && !strings.Contains(res[0].Data, "HOSTKEY") {
			t.Errorf("unexpected data %q", res[0].Data)
		}
	}
}
