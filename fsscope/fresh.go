package fsscope

import (
	"path"
	"strings"
)

// walkCompare orders relative paths as a walk visits them (tree.walk, and
// so snapshot): the root ("") first, a directory right before what it
// holds, and the names in a directory in byte order. It returns -1, 0 or
// +1, like strings.Compare; "a/b" sorts before "a.txt" here, unlike with
// strings.Compare.
func walkCompare(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == "":
		return -1
	case b == "":
		return 1
	}
	for {
		ha, ra, moreA := strings.Cut(a, "/")
		hb, rb, moreB := strings.Cut(b, "/")
		if c := strings.Compare(ha, hb); c != 0 {
			return c
		}
		switch {
		case !moreA && !moreB:
			return 0
		case !moreA:
			return -1 // a is a directory holding b
		case !moreB:
			return 1
		}
		a, b = ra, rb
	}
}

// entryDiff names the first field in which two entries of the same path
// differ ("" when they are the same). The content hash is left out: it is
// compared only once everything else is the same.
func entryDiff(was, now *entry) string {
	switch {
	case was.Mode&sIFMT != now.Mode&sIFMT:
		return "type"
	case was.Mount != now.Mount:
		return "mount"
	case was.Mode != now.Mode:
		return "mode"
	case was.UID != now.UID || was.GID != now.GID:
		return "owner"
	case was.Ino != now.Ino:
		return "inode"
	case was.Nlink != now.Nlink:
		return "link count"
	case was.Size != now.Size:
		return "size"
	case was.Mtime != now.Mtime:
		return "mtime"
	case was.Ctime != now.Ctime:
		return "ctime"
	case was.Link != now.Link:
		return "symlink target"
	}
	// Whatever else an entry comes to record is compared too.
	a, b := *was, *now
	a.Hash, b.Hash = "", ""
	if a != b {
		return "metadata"
	}
	return ""
}

// staleReason describes the first difference between the entries Setup
// scanned (was) and a walk of the tree now, for the workspace at host:
// the entry the walk found at the position of was[k] (now, nil when the
// walk ended before it), or the entry past the end of was.
func staleReason(host string, was []entry, k int, now *entry) string {
	abs := func(rel string) string { return path.Join(host, rel) }
	switch {
	case k >= len(was):
		return "path " + abs(now.Path) + " added"
	case now == nil:
		return "path " + abs(was[k].Path) + " removed"
	case walkCompare(now.Path, was[k].Path) < 0:
		return "path " + abs(now.Path) + " added"
	case walkCompare(now.Path, was[k].Path) > 0:
		return "path " + abs(was[k].Path) + " removed"
	}
	d := entryDiff(&was[k], now)
	if d == "" {
		d = "content"
	}
	return "path " + abs(now.Path) + " changed (" + d + ")"
}
