package hostcheck

import "strings"

// parseVersion returns the first word of out's first line that looks like
// a version (1.2.3 or v1.2.3), with a leading "v": "containerd
// github.com/containerd/containerd/v2 v2.4.2" gives v2.4.2, "runc version
// 1.5.3" gives v1.5.3. Empty if there is none.
func parseVersion(out string) string {
	for _, w := range strings.Fields(firstLine(out)) {
		v := strings.TrimPrefix(w, "v")
		if v == "" || v[0] < '0' || v[0] > '9' || !strings.Contains(v, ".") {
			continue
		}
		return "v" + v
	}
	return ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}
