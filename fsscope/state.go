package fsscope

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// stateVersion is the version of the persisted state format.
const stateVersion = 1

// Names inside a session's state directory.
const (
	stateFile  = "fsscope.json"
	lockFile   = "lock"
	imageFile  = "disk.img"
	upperDir   = "upper"  // mount point of the quota filesystem
	mntDir     = "mnt"    // sources of the sandbox's mounts
	layersDir  = "layers" // where sessions set up by older versions attached their lower layers
	masksDir   = "masks"
	emptyFile  = "masks/empty-file"
	emptyDir   = "masks/empty-dir"
	baselineFn = "baseline-%d.jsonl"
	journalFn  = "commit-%d.json"
)

// state is what Load needs to take a session over after a restart.
type state struct {
	Version int         `json:"version"`
	Sandbox Owner       `json:"sandbox"`
	Quota   *quotaState `json:"quota,omitempty"`
	// Live is true while the sandbox's mounts are in place (from Setup to
	// Teardown).
	Live bool `json:"live"`
	// Started is when Setup began (Unix nanoseconds): entries of an rw
	// workspace changed since then are the sandbox's (normaliseRW).
	Started    int64        `json:"started,omitempty"`
	Workspaces []wsState    `json:"workspaces"`
	Mounts     []mountState `json:"mounts,omitempty"`
	// SandboxNS is the sandbox's mount namespace as /proc/PID/ns/mnt
	// names it (SetSandbox): the opens revised deny_read masks refuse.
	SandboxNS string `json:"sandbox_ns,omitempty"`
}

type quotaState struct {
	Backend QuotaBackend `json:"backend"`
	Size    int64        `json:"size"`
}

// wsState is one workspace as Setup planned it.
type wsState struct {
	HostPath string `json:"host_path"` // symlinks resolved
	Target   string `json:"target"`
	Mode     string `json:"mode"`
	// Owner owns the workspace root; new files are committed as Owner.
	Owner Owner `json:"owner"`
	// Idmap: the sandbox sees Owner's files as its own through an
	// idmapped mount.
	Idmap    bool     `json:"idmap"`
	RootIno  uint64   `json:"root_ino"`
	RootDev  uint64   `json:"root_dev"`
	DenyRead []string `json:"deny_read,omitempty"`
	Masks    []mask   `json:"masks,omitempty"`
	// MaskOwner owns the masks InView (uid and gid): an ID that no
	// scanned entry, the owner nor the sandbox user has (see
	// pickMaskOwner); 0 when none are InView.
	MaskOwner uint32 `json:"mask_owner,omitempty"`
	// Tracked are masked paths git tracks (see TrackedDenied).
	Tracked           []string `json:"tracked,omitempty"`
	Protect           []string `json:"protect,omitempty"`
	PreserveUntracked bool     `json:"preserve_untracked,omitempty"`
	ProtectRefs       []string `json:"protect_refs,omitempty"`
	GitAllow          []string `json:"git_allow,omitempty"`
	OnExit            string   `json:"on_exit,omitempty"`
	// RevisedDenyRead are the deny_read patterns revisions added while the
	// sandbox ran (DenyRead has them too); RevisedMasks are the workspace
	// entries they matched then, refused by the read audit (see
	// Session.Revise).
	RevisedDenyRead []string   `json:"revised_deny_read,omitempty"`
	RevisedMasks    []liveMask `json:"revised_masks,omitempty"`
}

// liveMask is an entry of a live workspace that a revised deny_read
// pattern matched: its overlay inode is marked, so that every open of it
// from the sandbox, under any name, is refused.
type liveMask struct {
	Path string `json:"path"` // relative to the workspace root, when it was marked
	Rule string `json:"rule"`
	Dir  bool   `json:"dir,omitempty"`
	// Dev and Ino are its overlay inode's.
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// mountState is one extra mount.
type mountState struct {
	HostPath string   `json:"host_path"`
	Target   string   `json:"target"`
	ReadOnly bool     `json:"read_only"`
	Dir      bool     `json:"dir"`
	DenyRead []string `json:"deny_read,omitempty"`
	// Masked: the mount's own host path or target is a credential path;
	// the sandbox gets an empty, unreadable file or directory instead.
	Masked bool `json:"masked,omitempty"`
	// Masks are paths inside a directory mount, relative to it.
	Masks []mask `json:"masks,omitempty"`
}

func readState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("session state %s: %w", dir, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("session state %s: version %d, want %d", dir, st.Version, stateVersion)
	}
	return &st, nil
}
