package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/runtime"
)

// cgroupParentFile records, under the root, the cgroup parents
// (Config.CgroupParent) this root's airlockd has used, whose cgroups of its
// own may still be left (a session's cgroup is in its record, so the parent
// may change between starts), and those of them it made. When it stops its
// containerd, airlockd removes its own empty cgroups under every parent it
// used, and a parent it made once it is empty: never another cgroup (an
// operator's, another airlockd's), nor a parent that existed before.
const cgroupParentFile = "cgroup-parents.json"

type cgroupParents struct {
	// Used are the parents used ("" is the hierarchies' root).
	Used []string `json:"used"`
	// Made are the parents airlockd made.
	Made []string `json:"made,omitempty"`
}

func readCgroupParents(root string) (cgroupParents, bool, error) {
	var rec cgroupParents
	b, err := os.ReadFile(filepath.Join(root, cgroupParentFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return rec, false, nil
	case err != nil:
		return rec, false, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, false, fmt.Errorf("%s: %w", filepath.Join(root, cgroupParentFile), err)
	}
	// Only cgroup paths as airlockd writes them: a parent it removes is
	// joined to the hierarchies' directory.
	for _, p := range append(slices.Clone(rec.Used), rec.Made...) {
		if p != "" && (p == "/" || !path.IsAbs(p) || path.Clean(p) != p) {
			return rec, false, fmt.Errorf("%s: cgroup parent %q is not a clean absolute path", filepath.Join(root, cgroupParentFile), p)
		}
	}
	return rec, true, nil
}

func writeCgroupParents(root string, rec cgroupParents) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(root, cgroupParentFile, b, 0o600, -1, -1)
}

// noteCgroupParent records cfg.CgroupParent as used, and as made by
// airlockd when it does not exist yet (airlockd makes it with its
// containerd's or its first session's cgroup). A root without a record was
// used without a parent until now.
func noteCgroupParent(cfg Config, cg runtime.Cgroups) error {
	rec, found, err := readCgroupParents(cfg.Root)
	if err != nil {
		return err
	}
	if !found {
		rec.Used = []string{""}
	}
	changed := !found
	if !slices.Contains(rec.Used, cfg.CgroupParent) {
		rec.Used, changed = append(rec.Used, cfg.CgroupParent), true
	}
	if cfg.CgroupParent != "" && !cg.Exists(cfg.CgroupParent) && !slices.Contains(rec.Made, cfg.CgroupParent) {
		rec.Made, changed = append(rec.Made, cfg.CgroupParent), true
	}
	if !changed {
		return nil
	}
	return writeCgroupParents(cfg.Root, rec)
}

// ownCgroups are the cgroups a daemon of prefix makes under parent: its
// sessions' parent (a tree), the shim anchor's and containerd's.
func ownCgroups(parent, prefix string) (tree string, single []string) {
	return path.Join("/", parent, "airlock-"+prefix),
		[]string{anchorOptions(Config{CgroupParent: parent}, prefix).CgroupPath, path.Join("/", parent, "airlock-"+prefix+"-containerd")}
}

// tidyCgroups removes the empty cgroups of a daemon of prefix under every
// parent its root used and the current one, and the parents it made once
// empty; it forgets the parents, other than the current, that have nothing
// of it left, and reports whether nothing of it is left.
func tidyCgroups(root, prefix, current string, cg runtime.Cgroups) bool {
	rec, _, err := readCgroupParents(root)
	if err != nil {
		return false
	}
	parents := rec.Used
	if !slices.Contains(parents, current) {
		parents = append(slices.Clone(parents), current)
	}
	all := true
	var used []string
	for _, p := range parents {
		tree, single := ownCgroups(p, prefix)
		cg.RemoveTree(tree)
		left := cg.Exists(tree)
		for _, c := range single {
			cg.Remove(c)
			left = left || cg.Exists(c)
		}
		all = all && !left
		if left || p == current {
			used = append(used, p)
		}
	}
	var made []string
	for _, p := range rec.Made {
		cg.Remove(p)
		if cg.Exists(p) {
			made = append(made, p)
			all = false
		}
	}
	if next := (cgroupParents{Used: used, Made: made}); !slices.Equal(next.Used, rec.Used) || !slices.Equal(next.Made, rec.Made) {
		_ = writeCgroupParents(root, next)
	}
	return all
}
