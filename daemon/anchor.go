package daemon

import (
	"path"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/launch"
	"github.com/airlock-sandbox/airlock/runtime"
)

// shimGroup is the runc shim group every session joins unless
// Config.ShimPerSession is set.
const shimGroup = "airlock-sessions"

// anchorOptions places the anchor's root under the daemon's root and its
// cgroup beside (not under) the sessions' parent cgroup.
func anchorOptions(cfg Config, prefix string) runtime.AnchorOptions {
	return runtime.AnchorOptions{
		Dir:        filepath.Join(cfg.Root, "shim-anchor"),
		InitBinary: filepath.Join(cfg.BinDir, launch.Binary),
		CgroupPath: path.Join("/", cfg.CgroupParent, "airlock-"+prefix+"-"+runtime.AnchorID),
	}
}
