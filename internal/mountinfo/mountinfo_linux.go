// Package mountinfo reads this process's mount table: which mount points
// lie under a directory, and detaching all of them.
package mountinfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Under returns the mount points at or beneath dir in this process's mount
// namespace, deepest first; mounts stacked on one path are listed once per
// layer.
//
// The table is scanned a line at a time from the file, and only the
// mount points kept are made strings: it is read several times for every
// session, with every other session's mounts in it, and what a call
// allocates must not grow with the mounts it skips.
func Under(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dir = filepath.Clean(dir)
	var out []string
	bp := lineBufs.Get().(*[]byte)
	defer lineBufs.Put(bp)
	sc := bufio.NewScanner(f)
	sc.Buffer(*bp, 1<<20)
	for sc.Scan() {
		mp, ok := mountPoint(sc.Bytes())
		if !ok {
			continue
		}
		if bytes.IndexByte(mp, '\\') >= 0 {
			// An escaped name (a space, a tab, a newline or a
			// backslash in it): compared unescaped.
			if u := Unescape(string(mp)); isUnder(u, dir) {
				out = append(out, u)
			}
		} else if isUnder(string(mp), dir) {
			out = append(out, string(mp))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out, nil
}

// lineBufs hold the scanners' buffers: a line of an overlay mount with
// many layers runs to kilobytes, and a buffer grown for it anew at every
// call would make what a call allocates depend on the other mounts.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// mountPoint is the fifth field of a mountinfo line, still escaped.
func mountPoint(line []byte) ([]byte, bool) {
	for range 4 {
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			return nil, false
		}
		line = line[i+1:]
	}
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		line = line[:i]
	}
	return line, len(line) > 0
}

// isUnder reports whether mount point mp is dir or beneath it.
func isUnder(mp, dir string) bool {
	if !strings.HasPrefix(mp, dir) {
		return false
	}
	return len(mp) == len(dir) || mp[len(dir)] == '/'
}

// UnmountAll detaches every mount at or beneath dir, deepest first. Mounts
// that are already gone are not an error.
func UnmountAll(dir string) error {
	mounts, err := Under(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// Unescape undoes the octal escapes (\040 for space, \011, \012, \134)
// mountinfo uses in paths.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
