package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/runtime"
)

func TestCheckCgroupParent(t *testing.T) {
	root := t.TempDir()
	// A fake hierarchy: the parent /made-by-operator exists, /new not.
	cg := runtime.Cgroups{Root: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(cg.Root, "made-by-operator"), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(parent string) (cgroupParentRecord, error) {
		return checkCgroupParent(Config{Root: root, CgroupParent: parent}, cg)
	}
	// No record, no parent: nothing recorded.
	if rec, err := check(""); err != nil || rec != (cgroupParentRecord{}) {
		t.Fatalf("no parent: %+v %v", rec, err)
	}
	if _, err := os.Stat(filepath.Join(root, cgroupParentFile)); err == nil {
		t.Error("a record written for no parent")
	}
	// A parent airlockd makes, then one the operator made.
	if rec, err := check("/new"); err != nil || rec != (cgroupParentRecord{Parent: "/new", Made: true}) {
		t.Fatalf("new parent: %+v %v", rec, err)
	}
	if rec, err := check("/new"); err != nil || !rec.Made {
		t.Fatalf("the same parent again: %+v %v; want it still made by airlockd", rec, err)
	}
	if rec, err := check("/made-by-operator"); err != nil || rec != (cgroupParentRecord{Parent: "/made-by-operator"}) {
		t.Fatalf("the operator's parent: %+v %v", rec, err)
	}
	// With a session kept under the root, the parent may not change.
	if err := os.MkdirAll(filepath.Join(root, "sessions", "0123456789ab"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"", "/other"} {
		_, err := check(p)
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `made under cgroup parent "/made-by-operator"`) {
			t.Errorf("parent %q with a session made under another: %v; want a refusal naming the one it was made under", p, err)
		}
	}
	if rec, err := check("/made-by-operator"); err != nil || rec.Parent != "/made-by-operator" {
		t.Errorf("the sessions' own parent: %+v %v", rec, err)
	}
	// A record that is not JSON is an error, not a silent reset.
	if err := os.WriteFile(filepath.Join(root, cgroupParentFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := check("/made-by-operator"); err == nil {
		t.Error("a corrupt record accepted")
	}
}
