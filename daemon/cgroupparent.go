package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/runtime"
)

// cgroupParentFile records, under the root, the cgroup parent the root's
// sessions were made under (Config.CgroupParent), and whether airlockd
// made that parent.
const cgroupParentFile = "cgroup-parent.json"

type cgroupParentRecord struct {
	Parent string `json:"parent"`
	// Made is whether the parent did not exist when airlockd first used
	// it: StopContainerd removes it (empty) only then, never one the
	// operator made (and may have set limits on).
	Made bool `json:"made"`
}

// checkCgroupParent refuses a cgroup parent other than the one the root's
// sessions were made under, while there are sessions: a session's cgroup is
// found from the parent (for its OOM check, its kill, its removal), so
// they would be looked for in the wrong place. It records the parent in
// effect otherwise, and returns that record.
func checkCgroupParent(cfg Config, cg runtime.Cgroups) (cgroupParentRecord, error) {
	var rec cgroupParentRecord
	b, err := os.ReadFile(filepath.Join(cfg.Root, cgroupParentFile))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &rec); err != nil {
			return rec, fmt.Errorf("%s: %w", filepath.Join(cfg.Root, cgroupParentFile), err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return rec, err
	}
	if rec.Parent == cfg.CgroupParent {
		return rec, nil
	}
	entries, err := os.ReadDir(filepath.Join(cfg.Root, "sessions"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return rec, err
	}
	if len(entries) > 0 {
		return rec, fmt.Errorf("cgroup parent %q: the %d sessions under %s were made under cgroup parent %q: start airlockd with that one (--cgroup-parent), or remove them first: %w",
			cfg.CgroupParent, len(entries), cfg.Root, rec.Parent, errdefs.ErrFailedPrecondition)
	}
	rec = cgroupParentRecord{Parent: cfg.CgroupParent, Made: cfg.CgroupParent != "" && !cg.Exists(cfg.CgroupParent)}
	b, err = json.Marshal(rec)
	if err != nil {
		return rec, err
	}
	return rec, atomicfile.Write(cfg.Root, cgroupParentFile, b, 0o600, -1, -1)
}
