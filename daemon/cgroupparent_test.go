package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/runtime"
)

func TestCgroupParentsMade(t *testing.T) {
	root := t.TempDir()
	// A fake hierarchy: the operator made /operators; /first and
	// /second are airlockd's to make.
	cg := runtime.Cgroups{Root: t.TempDir()}
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(cg.Root, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("operators")
	made := func() []string {
		t.Helper()
		rec, err := readCgroupParents(root)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Made
	}
	for _, p := range []string{"", "/operators", "/first"} {
		if err := noteCgroupParent(Config{Root: root, CgroupParent: p}, cg); err != nil {
			t.Fatal(err)
		}
	}
	// A cgroup that holds a process cannot be removed: a file in the
	// fake one does the same.
	mk("first/airlock-x/sessionid")
	if err := os.WriteFile(filepath.Join(cg.Root, "first/airlock-x/sessionid/busy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Noted once, however often airlockd starts with it (it exists then).
	if err := noteCgroupParent(Config{Root: root, CgroupParent: "/first"}, cg); err != nil {
		t.Fatal(err)
	}
	if err := noteCgroupParent(Config{Root: root, CgroupParent: "/second"}, cg); err != nil {
		t.Fatal(err)
	}
	mk("second")
	if got := made(); !slices.Equal(got, []string{"/first", "/second"}) {
		t.Fatalf("made %v, want /first and /second (not the operator's, not the root)", got)
	}
	// /first still holds a cgroup: it stays, and is still to remove.
	if removeMadeParents(root, cg) {
		t.Error("removeMadeParents reported none left while /first holds a cgroup")
	}
	if got := made(); !slices.Equal(got, []string{"/first"}) {
		t.Errorf("after a removal: made %v, want /first left", got)
	}
	if err := os.RemoveAll(filepath.Join(cg.Root, "first", "airlock-x")); err != nil {
		t.Fatal(err)
	}
	if !removeMadeParents(root, cg) || len(made()) != 0 {
		t.Errorf("after its last cgroup went: made %v, want none", made())
	}
	for _, p := range []string{"first", "second"} {
		if _, err := os.Stat(filepath.Join(cg.Root, p)); err == nil {
			t.Errorf("the parent %s airlockd made is left", p)
		}
	}
	if _, err := os.Stat(filepath.Join(cg.Root, "operators")); err != nil {
		t.Errorf("the operator's parent was removed: %v", err)
	}
	// A record that is not JSON is an error, not a silent reset.
	if err := os.WriteFile(filepath.Join(root, cgroupParentFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := noteCgroupParent(Config{Root: root, CgroupParent: "/third"}, cg); err == nil {
		t.Error("a corrupt record accepted")
	}
}
