package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/runtime"
)

// cgroupParentFile records, under the root, the cgroup parents
// (Config.CgroupParent) airlockd made: it removes them, once empty, when it
// stops its containerd, and never one the operator made (and may have set
// limits on). Each session's own cgroup is in its record (record.Cgroup),
// so a parent may change between starts.
const cgroupParentFile = "cgroup-parents.json"

type cgroupParents struct {
	Made []string `json:"made"`
}

func readCgroupParents(root string) (cgroupParents, error) {
	var rec cgroupParents
	b, err := os.ReadFile(filepath.Join(root, cgroupParentFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return rec, nil
	case err != nil:
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("%s: %w", filepath.Join(root, cgroupParentFile), err)
	}
	return rec, nil
}

func writeCgroupParents(root string, rec cgroupParents) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(root, cgroupParentFile, b, 0o600, -1, -1)
}

// noteCgroupParent records cfg.CgroupParent as made by airlockd when it
// does not exist yet (airlockd makes it with its containerd's or its first
// session's cgroup).
func noteCgroupParent(cfg Config, cg runtime.Cgroups) error {
	if cfg.CgroupParent == "" || cg.Exists(cfg.CgroupParent) {
		return nil
	}
	rec, err := readCgroupParents(cfg.Root)
	if err != nil {
		return err
	}
	if slices.Contains(rec.Made, cfg.CgroupParent) {
		return nil
	}
	rec.Made = append(rec.Made, cfg.CgroupParent)
	return writeCgroupParents(cfg.Root, rec)
}

// removeMadeParents removes the parents airlockd made, with the empty
// cgroups beneath them, and forgets those gone; it reports whether none is
// left.
func removeMadeParents(root string, cg runtime.Cgroups) bool {
	rec, err := readCgroupParents(root)
	if err != nil || len(rec.Made) == 0 {
		return err == nil
	}
	left := rec.Made[:0:0]
	for _, p := range rec.Made {
		// What airlockd left in it under an earlier parent too (a
		// killed daemon's containerd cgroup, its sessions' parent),
		// the empty cgroups only.
		cg.RemoveTree(p)
		if cg.Exists(p) {
			left = append(left, p)
		}
	}
	if len(left) != len(rec.Made) {
		_ = writeCgroupParents(root, cgroupParents{Made: left})
	}
	return len(left) == 0
}
