package hostcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestIdmapFails checks that the idmap check fails, with a fix, where
// there can be no idmapped mount: a missing path and procfs.
func TestIdmapFails(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tc := range []struct {
		path, detail string
	}{
		{filepath.Join(t.TempDir(), "missing"), "open_tree: no such file or directory"},
		{"/proc", "(proc): idmapped mount: invalid argument"},
	} {
		r := checkIdmap(tc.path)
		if r.Status != StatusFail || !strings.Contains(r.Detail, tc.detail) || r.Fix == "" {
			t.Errorf("checkIdmap(%q) = %+v, want a fail with %q and a fix", tc.path, r, tc.detail)
		}
	}
}

// TestCgroupFails gives the cgroup check roots that are not cgroup
// filesystems.
func TestCgroupFails(t *testing.T) {
	empty := t.TempDir()
	// A v2-looking directory on the wrong filesystem is not taken for one.
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{empty, fake, filepath.Join(empty, "missing")} {
		r := checkCgroup(root)
		if r.Status != StatusFail || !strings.Contains(r.Detail, root) || !strings.Contains(r.Fix, "cgroup v2") {
			t.Errorf("checkCgroup(%q) = %+v, want a fail naming the root, with a fix", root, r)
		}
	}
	// Through Run, as `airlock doctor` sees it.
	rs := run(t.Context(), Config{}, host{cgroupRoot: empty, euid: 0})
	if rs[1].Name != "cgroup" || rs[1].Status != StatusFail || !Failed(rs) {
		t.Errorf("run with cgroup root %s: %+v, want the cgroup check failed", empty, rs[1])
	}
}

// TestNotRoot checks that without root the checks that need it are
// warnings saying so, not failures.
func TestNotRoot(t *testing.T) {
	rs := run(t.Context(), Config{Paths: []string{"/"}}, host{cgroupRoot: "/sys/fs/cgroup", euid: 1000})
	needRoot := map[string]bool{"overlayfs": true, "tmpfs-xattr": true, "idmap": true, "netns": true,
		"nftables": true, "fanotify": true, "loop": true}
	for _, r := range rs {
		if needRoot[r.Name] {
			if r.Status != StatusWarn || r.Detail != NeedsRoot || r.Fix == "" {
				t.Errorf("%s without root = %+v, want warn %q", r.Name, r, NeedsRoot)
			}
			delete(needRoot, r.Name)
		} else if r.Detail == NeedsRoot {
			t.Errorf("%s says %q but does not need root", r.Name, NeedsRoot)
		}
	}
	if len(needRoot) > 0 {
		t.Errorf("checks missing: %v", needRoot)
	}
}

// TestBinaryVersions runs stand-ins for containerd: a missing one fails,
// another version than the pinned one is a warning.
func TestBinaryVersions(t *testing.T) {
	dir := t.TempDir()
	script := func(name, out string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, status, detail string
	}{
		{"missing", filepath.Join(dir, "containerd"), StatusFail, "no such file or directory"},
		{"pinned", script("pinned", "containerd github.com/containerd/containerd/v2 "+ContainerdVersion+" "), StatusOK, "containerd " + ContainerdVersion},
		{"other", script("other", "containerd github.com/containerd/containerd/v2 v2.0.0"), StatusWarn, "containerd v2.0.0 at"},
		{"garbled", script("garbled", "hello"), StatusWarn, "printed no version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkBinary(t.Context(), "containerd", tc.path, ContainerdVersion)
			if r.Status != tc.status || !strings.Contains(r.Detail, tc.detail) || (r.Status != StatusOK) != (r.Fix != "") {
				t.Errorf("checkBinary(%s) = %+v, want %s with %q", tc.path, r, tc.status, tc.detail)
			}
		})
	}
}

// TestCrunCgroup: crun's refusal of a hybrid host with a controller on
// its v2 hierarchy is a failure naming the controller and the mount that
// moves it; every other layout passes.
func TestCrunCgroup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hybrid bool
		ctl    []string
		fail   bool
	}{
		{"v2 or v1 alone", false, []string{"cpu", "memory"}, false},
		{"hybrid, v2 empty", true, nil, false},
		{"hybrid, hugetlb on v2", true, []string{"hugetlb"}, true},
		{"hybrid, two on v2", true, []string{"hugetlb", "misc"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := crunCgroupResult("/sys/fs/cgroup", tc.hybrid, tc.ctl)
			if got := r.Status == StatusFail; got != tc.fail {
				t.Fatalf("crunCgroupResult = %+v, want fail %v", r, tc.fail)
			}
			if !tc.fail {
				return
			}
			for _, c := range tc.ctl {
				if !strings.Contains(r.Detail, c) || !strings.Contains(r.Fix, "mount -t cgroup -o "+c+" cgroup /sys/fs/cgroup/"+c) {
					t.Errorf("result %+v does not name %s and the mount that moves it", r, c)
				}
			}
		})
	}
	// Through Run: the check is there only for crun.
	for _, rt := range []string{"", "runc", "crun"} {
		rs := run(t.Context(), Config{Runtime: rt}, host{cgroupRoot: "/sys/fs/cgroup", euid: os.Geteuid()})
		found := slices.ContainsFunc(rs, func(r Result) bool { return r.Name == "crun-cgroup" })
		if found != (rt == "crun") {
			t.Errorf("Run with runtime %q: crun-cgroup check present %v", rt, found)
		}
	}
}
