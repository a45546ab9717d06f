package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
)

// Prefix derives from a daemon's root the short prefix of the names of the
// kernel objects and cgroups it makes (network namespaces, links, nftables
// tables, cgroups), so two daemons with different roots never collide and
// a tool that knows the root finds what the daemon left.
func Prefix(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return "al" + hex.EncodeToString(sum[:])[:4]
}
