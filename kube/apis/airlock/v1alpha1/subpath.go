package v1alpha1

import (
	"fmt"
	"strings"
)

// MaxSubPath is the longest VolumeSource.SubPath.
const MaxSubPath = 1024

// CheckSubPath says why sub cannot be a VolumeSource.SubPath ("" when it
// can): it must be relative, of names separated by single slashes, none
// of them "." or "..", no NUL, at most MaxSubPath bytes. The CRD's
// pattern refuses the same; the node checks it again, then resolves it
// beneath the volume's directory through no symlink.
func CheckSubPath(sub string) string {
	switch {
	case sub == "":
		return "empty"
	case len(sub) > MaxSubPath:
		return fmt.Sprintf("longer than %d bytes", MaxSubPath)
	case strings.HasPrefix(sub, "/"):
		return "an absolute path: want a path relative to the volume's directory"
	case strings.ContainsRune(sub, 0):
		return "holds a NUL byte"
	}
	for _, name := range strings.Split(sub, "/") {
		switch name {
		case "":
			return "an empty name (a doubled or trailing slash)"
		case ".", "..":
			return fmt.Sprintf("a %q name: want names of directories beneath the volume's directory", name)
		}
	}
	return ""
}
