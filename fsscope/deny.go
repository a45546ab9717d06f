package fsscope

import (
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

// DefaultDenyRead returns the patterns every workspace masks unless its
// manifest sets default_deny_read = false: credential files only. It never
// names .git/config, which git needs; credentials inside a git config are
// stripped from the copy the sandbox reads instead (see SanitizeGitConfig).
//
// SSH keys are matched by their conventional names (id_rsa*, id_ed25519*,
// ...) rather than "id_*", which would also hide source files such as
// id_generator.go.
func DefaultDenyRead() []string {
	return []string{
		// Environment files and private keys.
		".env*",
		"*.pem",
		"*.key",
		"*.p12",
		"*.pfx",
		"*.jks",
		"*.keystore",
		"id_rsa*",
		"id_dsa*",
		"id_ecdsa*",
		"id_ed25519*",
		"id_xmss*",
		".ssh/",
		".gnupg/",
		// Network, git and package-registry credentials.
		".netrc",
		"_netrc",
		".git-credentials",
		"**/.config/gh/hosts.yml",
		"**/.config/hub",
		".pgpass",
		".vault-token",
		".npmrc",
		".yarnrc",
		".yarnrc.yml",
		".pypirc",
		"**/.cargo/credentials*",
		"**/.m2/settings.xml",
		"**/.m2/settings-security.xml",
		"**/.gem/credentials",
		"**/.composer/auth.json",
		// Container, cluster and infrastructure tools.
		"**/.docker/config.json",
		".dockercfg",
		"**/.kube/config",
		"**/.terraform.d/credentials.tfrc.json",
		".terraformrc",
		// Cloud and storage credentials.
		".s3cfg",
		".boto",
		"**/.config/rclone/rclone.conf",
		".aws/",
		".azure/",
		"**/.config/gcloud/",
		"application_default_credentials.json",
	}
}

// denyPatterns returns the effective deny_read patterns of a workspace.
func denyPatterns(own []string, defaults bool) []string {
	out := slices.Clone(own)
	if defaults {
		out = append(out, DefaultDenyRead()...)
	}
	return out
}

// Mask kinds.
const (
	maskFile = "file" // an empty, unreadable file bound over the path
	maskDir  = "dir"  // an empty, unreadable directory bound over the path
	maskCopy = "copy" // a sanitized copy bound read-only over the path
)

// mask hides one path of a workspace from the sandbox.
type mask struct {
	Path string `json:"path"` // relative to the workspace root
	Kind string `json:"kind"`
	// Source is the replacement content for maskCopy, relative to the
	// session's state directory.
	Source string `json:"source,omitempty"`
	// Rule says why: the deny_read pattern, or how the path relates to one.
	Rule string `json:"rule"`
	// InView says the mask is the frozen view's own entry, not a bind
	// mount (a file mask of an overlay workspace): an empty file owned by
	// the workspace's MaskOwner, mode 0444 when a ReadAudit refuses its opens and 0 when
	// the kernel does. Nothing of the host's file is behind it, and the
	// sandbox, not its owner, can neither read, write, chmod, touch nor
	// hard-link it; but it can remove or rename it like any other name
	// in a directory it may change (git clean, rm: a mount could not be
	// removed), a change the commit judges like any other.
	InView bool `json:"in_view,omitempty"`
}

// planMasks decides which paths of a workspace to mask, given its entries
// in walk order (parents before children). A matching directory is masked
// as a whole; a matching file or special file is masked; a symlink is not
// masked, since what it reaches is masked (or not) under its own path.
// Every other name of a masked file (a hard link anywhere in the
// workspace, including inside a masked directory) is masked too.
func planMasks(entries []entry, deny *glob.Set) []mask {
	var (
		masks      []mask
		maskedDirs []string // prefixes "dir/" of masked directories
		denied     = map[uint64]string{}
		links      []int // indexes of uncovered files with more than one link
	)
	covered := func(p string) bool {
		for _, d := range maskedDirs {
			if strings.HasPrefix(p, d) {
				return true
			}
		}
		return false
	}
	for i := range entries {
		e := &entries[i]
		if e.Path == "" {
			continue
		}
		if covered(e.Path) {
			if e.isRegular() {
				if _, ok := denied[e.Ino]; !ok {
					denied[e.Ino] = e.Path
				}
			}
			continue
		}
		if e.isSymlink() {
			continue
		}
		pat, ok := deny.Match(e.Path, e.isDir())
		if !ok {
			if e.isRegular() && e.Nlink > 1 {
				links = append(links, i)
			}
			continue
		}
		if e.isDir() {
			masks = append(masks, mask{Path: e.Path, Kind: maskDir, Rule: pat})
			maskedDirs = append(maskedDirs, e.Path+"/")
			continue
		}
		masks = append(masks, mask{Path: e.Path, Kind: maskFile, Rule: pat})
		if e.isRegular() {
			if _, ok := denied[e.Ino]; !ok {
				denied[e.Ino] = e.Path
			}
		}
	}
	for _, i := range links {
		e := &entries[i]
		if first, ok := denied[e.Ino]; ok && !covered(e.Path) {
			masks = append(masks, mask{Path: e.Path, Kind: maskFile, Rule: "hard link to " + first})
		}
	}
	slices.SortFunc(masks, func(a, b mask) int { return strings.Compare(a.Path, b.Path) })
	return masks
}

// mountPointMasks masks every mount point in a live (rw) view of a
// workspace or mount: the scan does not enter them, and the sandbox's
// non-recursive bind shows the directory (or file) the host mount covers,
// which was never scanned. Paths already under a mask are left alone.
func mountPointMasks(entries []entry, masks []mask) []mask {
	var out []mask
	for i := range entries {
		e := &entries[i]
		if !e.Mount || e.Path == "" || maskedBy(masks, e.Path) {
			continue
		}
		kind := maskFile
		if e.isDir() {
			kind = maskDir
		}
		out = append(out, mask{Path: e.Path, Kind: kind, Rule: "mount point (not scanned)"})
	}
	return out
}

// hiddenPaths returns whether a workspace path's host content is one the
// sandbox was never shown: a path a mask covers, or one a deny_read
// pattern of the workspace matches (or a parent of which it matches: a
// file the host created there after Setup was not masked, but is no less
// secret). Diffs never print such content and rename detection never
// compares it.
func (ws *wsState) hiddenPaths() func(rel string) bool {
	deny, err := glob.NewSet(ws.DenyRead, true)
	if err != nil {
		deny = nil // checked at Setup; masks alone then
	}
	return func(rel string) bool {
		if maskedBy(ws.Masks, rel) {
			return true
		}
		_, ok := deny.Covers(rel, false)
		return ok
	}
}
