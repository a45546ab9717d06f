package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
)

// MaxPrefixLen bounds a prefix so that every name derived from it fits an
// interface name (15 bytes): the longest is the uplink peer, prefix + "-up".
const MaxPrefixLen = 10

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// ValidatePrefix checks a kernel-object prefix: a lower-case letter, then
// lower-case letters and digits, at most MaxPrefixLen bytes.
func ValidatePrefix(p string) error {
	if len(p) == 0 || len(p) > MaxPrefixLen || !prefixRE.MatchString(p) {
		return fmt.Errorf("prefix %q: want [a-z][a-z0-9]{0,%d}: %w", p, MaxPrefixLen-1, errdefs.ErrInvalidArgument)
	}
	return nil
}

// PrefixFor derives the kernel-object prefix of a daemon from its root
// directory: "al" and four hex digits of the root's hash, so daemons with
// different roots never share a namespace, interface or table name.
func PrefixFor(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return "al" + hex.EncodeToString(sum[:2])
}

const (
	maxIDLen = 76
	// sessionIfacePrefix starts each session's interface name in the
	// gateway namespace. Names there need no daemon prefix: the namespace
	// is the daemon's own.
	sessionIfacePrefix = "s-"
	// uplinkIface is the gateway side of the uplink.
	uplinkIface = "uplink"
	// sessionIface is the session side of its veth, in the session's
	// namespace.
	sessionIface = "eth0"
	keyLen       = 10 // hex digits of the session key
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// ValidateID checks a session id as containerd's identifiers.Validate does:
// alphanumerics separated by single '.', '_' or '-', at most 76 bytes.
func ValidateID(id string) error {
	if len(id) == 0 || len(id) > maxIDLen || !idRE.MatchString(id) {
		return fmt.Errorf("session id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// sessionKey is the hash of a session id that names its kernel objects.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:keyLen]
}

// sessionIfaceName is the gateway side of the session's veth; it also names
// the session's nftables chains and sets.
func sessionIfaceName(key string) string { return sessionIfacePrefix + key }

func keyFromIface(name string) (string, bool) {
	k, ok := strings.CutPrefix(name, sessionIfacePrefix)
	if !ok || len(k) != keyLen || strings.Trim(k, "0123456789abcdef") != "" {
		return "", false
	}
	return k, true
}

// gatewayNetnsName names the gateway namespace.
func gatewayNetnsName(prefix string) string { return prefix + "-gw" }

// sessionNetnsName names a session's namespace.
func sessionNetnsName(prefix, key string) string { return prefix + "-s-" + key }

func keyFromNetnsName(prefix, name string) (string, bool) {
	k, ok := strings.CutPrefix(name, prefix+"-s-")
	if !ok || len(k) != keyLen || strings.Trim(k, "0123456789abcdef") != "" {
		return "", false
	}
	return k, true
}

// uplinkPeerName is the uplink's far end, in the uplink namespace or the
// host; it carries the prefix because those namespaces are shared.
func uplinkPeerName(prefix string) string { return prefix + "-up" }

// hostTableName is the nftables table in the host namespace (host uplink).
func hostTableName(prefix string) string { return prefix + "-host" }
