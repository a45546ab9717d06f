package fsscope

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAttackReviseDenyReadChroot: a revised deny_read mark refuses an
// open only when the opener's /proc/PID/mountinfo shows the session's
// workspace overlay mounted at the workspace target. mountinfo shows
// mount points relative to the process's root, so a sandbox granted
// CAP_SYS_CHROOT (one of policies.SafeCapabilities, which the built-in
// admission admits) chroots into its workspace: the overlay is then
// mounted at "/" as far as its mountinfo goes (or, chrooted beneath it,
// not at all), sandboxOf finds no session, and the open passes. Masks
// made at Setup are not affected (they refuse every opener).
func TestAttackReviseDenyReadChroot(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"config/prod.yaml": "PRODSECRET",
		"README.md":        "readme",
	})
	ra := newReadAudit(t)
	p := policyWith(overlayWS(host))
	p.Capabilities = []string{"CAP_SYS_CHROOT"}
	s := setup(t, p, sandboxer, WithReadAudit(ra.ReadAudit, "s1"))
	revised := p.Clone().Workspaces
	revised[0].DenyRead = []string{"config/prod.yaml"}
	if _, _, err := s.Revise(t.Context(), revised); err != nil {
		t.Fatal(err)
	}
	caps := []int{unix.CAP_SYS_CHROOT}
	// The daemon tells the session which mount namespace its sandbox
	// is (here each probe's own, as a container's is).
	sandbox := func(pid int) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SetSandbox(ns); err != nil {
			t.Fatal(err)
		}
	}
	// Control: without the chroot the revision holds.
	res := runProbeIn(t, s.Mounts(), sandboxer.UID, sandboxer.GID, caps, sandbox,
		probeAction{Op: "read", Path: "/workspace/config/prod.yaml"})
	if res[0].ok() {
		t.Fatalf("control: the revised mask does not hold at all: %v", res[0])
	}
	res = runProbeIn(t, s.Mounts(), sandboxer.UID, sandboxer.GID, caps, sandbox,
		probeAction{Op: "chroot", Path: "/workspace"},
		probeAction{Op: "read", Path: "/config/prod.yaml"})
	if !res[0].ok() {
		t.Fatalf("chroot: %v", res[0])
	}
	if res[1].ok() && strings.Contains(res[1].Data, "PRODSECRET") {
		t.Errorf("a sandbox with CAP_SYS_CHROOT chrooted into its workspace reads the file a revision masked: %v", res[1])
	}
	res = runProbeIn(t, s.Mounts(), sandboxer.UID, sandboxer.GID, caps, sandbox,
		probeAction{Op: "chroot", Path: "/workspace/config"},
		probeAction{Op: "read", Path: "/prod.yaml"})
	if res[1].ok() && strings.Contains(res[1].Data, "PRODSECRET") {
		t.Errorf("chrooted beneath the workspace (the overlay leaves its mountinfo): %v", res[1])
	}
}

// TestAttackReviseStaleLiveEntry: a revised mask's upper-layer copy the
// sandbox renames keeps its ReadAudit entry after teardown (unwatchLive
// finds another inode, or none, at its path), though the inode, and with
// it the kernel's mark, goes with the session's upper directory. The
// entry, keyed by device and inode number, outlives them: a later
// session's revised mask of an inode that reuses the number finds it, and
// watchLive, taking it for a live mark, adds no kernel mark: the later
// sandbox reads what its revision masked.
func TestAttackReviseStaleLiveEntry(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"config/prod.yaml": "PRODSECRET",
		"README.md":        "readme",
	})
	ra := newReadAudit(t)
	run := func(name string, rename bool) (leaked int, read probeResult) {
		p := policyWith(overlayWS(host))
		s := setup(t, p, sandboxer, WithReadAudit(ra.ReadAudit, name))
		// The sandbox changes the file: its copy is in the upper layer.
		mustProbe(t, s, sandboxer, probeAction{Op: "append", Path: "/workspace/config/prod.yaml", Arg: "-" + name})
		revised := p.Clone().Workspaces
		revised[0].DenyRead = []string{"config/prod.yaml"}
		if _, _, err := s.Revise(t.Context(), revised); err != nil {
			t.Fatal(err)
		}
		acts := []probeAction{{Op: "read", Path: "/workspace/config/prod.yaml"}}
		if rename {
			acts = append(acts, probeAction{Op: "rename", Path: "/workspace/config/prod.yaml", Arg: "/workspace/config/moved"})
		}
		res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, acts...)
		if err := s.Teardown(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		ra.mu.Lock()
		leaked = len(ra.marks)
		ra.mu.Unlock()
		return leaked, res[0]
	}
	leaked, r := run("s1", true)
	if r.ok() {
		t.Fatalf("control: s1 reads its revised mask: %v", r)
	}
	if leaked > 0 {
		t.Errorf("after the session's teardown the ReadAudit keeps %d entries of its revised marks", leaked)
	}
	for i := range 5 {
		_, r := run(fmt.Sprintf("s%d", i+2), false)
		if r.ok() {
			t.Errorf("a later session (s%d) reads the file its own revision masked: %v", i+2, r)
			break
		}
	}
}
