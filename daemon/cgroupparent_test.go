package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/runtime"
)

// TestTidyCgroups: the cgroups of its own a daemon left under every parent
// its root used are removed once empty, the parents it made too; nothing
// else: not an operator's parent, not a cgroup an operator or another
// daemon made under a parent this one made.
func TestTidyCgroups(t *testing.T) {
	root := t.TempDir()
	const prefix = "alx"
	// One fake v1 hierarchy, memory, under the fake cgroup root.
	cg := runtime.Cgroups{Root: t.TempDir()}
	h := filepath.Join(cg.Root, "memory")
	mk := func(p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(h, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busy := func(p string) {
		t.Helper()
		// A cgroup that holds a process cannot be removed: a file in
		// the fake one does the same.
		mk(p)
		if err := os.WriteFile(filepath.Join(h, p, "busy"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(h, p))
		return err == nil
	}
	record := func() cgroupParents {
		t.Helper()
		rec, _, err := readCgroupParents(root)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// Before any parent: the root's own cgroups (a root without a record
	// was used without one).
	mk("airlock-alx/s1")
	mk("airlock-alx-shim-anchor")
	// The operator's parent, then one airlockd makes.
	mk("operators")
	note := func(parent string) {
		t.Helper()
		if err := noteCgroupParent(Config{Root: root, CgroupParent: parent}, cg); err != nil {
			t.Fatal(err)
		}
	}
	note("/operators")
	mk("operators/airlock-alx-containerd")
	note("/made")
	note("/made")
	if rec := record(); !slices.Equal(rec.Used, []string{"", "/operators", "/made"}) || !slices.Equal(rec.Made, []string{"/made"}) {
		t.Fatalf("record %+v: want used the root, /operators and /made, made /made", rec)
	}
	mk("made/airlock-alx/s2")
	busy("made/airlock-alx/s3")    // a running session's
	mk("made/operators-own-child") // made later by someone else
	busy("made/airlock-aly/s9")    // another daemon's (another root)
	mk("airlock-aly")              // another daemon's, at the root

	if tidyCgroups(root, prefix, "/made", cg) {
		t.Error("tidyCgroups reported nothing left while a session's cgroup is busy")
	}
	for _, gone := range []string{"airlock-alx", "airlock-alx-shim-anchor", "operators/airlock-alx-containerd", "made/airlock-alx/s2"} {
		if exists(gone) {
			t.Errorf("%s left: an empty cgroup of the daemon's own", gone)
		}
	}
	for _, kept := range []string{"operators", "made/airlock-alx/s3", "made/operators-own-child", "made/airlock-aly/s9", "airlock-aly", "made"} {
		if !exists(kept) {
			t.Errorf("%s removed: not the daemon's to remove (or not empty)", kept)
		}
	}
	if rec := record(); !slices.Equal(rec.Used, []string{"/made"}) || !slices.Equal(rec.Made, []string{"/made"}) {
		t.Errorf("record %+v: want only /made used (the others have nothing left) and made", rec)
	}
	// Once the session and the others' cgroups are gone, so is the
	// parent airlockd made.
	for _, p := range []string{"made/airlock-alx/s3", "made/operators-own-child", "made/airlock-aly"} {
		if err := os.RemoveAll(filepath.Join(h, p)); err != nil {
			t.Fatal(err)
		}
	}
	if !tidyCgroups(root, prefix, "/made", cg) || exists("made") {
		t.Errorf("after the last cgroup went: made left %v, record %+v", exists("made"), record())
	}
	// A record naming a path out of the hierarchies is refused, and
	// nothing is removed by it.
	outside := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(outside, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, cgroupParentFile), []byte(`{"used":[""],"made":["/../../..`+outside+`"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if tidyCgroups(root, prefix, "", cg) {
		t.Error("tidyCgroups took a record naming a path out of the hierarchies")
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a record's parent out of the hierarchies removed %s: %v", outside, err)
	}
	// A record that is not JSON is an error, not a silent reset.
	if err := os.WriteFile(filepath.Join(root, cgroupParentFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := noteCgroupParent(Config{Root: root, CgroupParent: "/third"}, cg); err == nil {
		t.Error("a corrupt record accepted")
	}
}
