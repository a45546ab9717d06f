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

	"golang.org/x/sys/unix"
)

// Under returns the mount points at or beneath dir in this process's mount
// namespace, deepest first; mounts stacked on one path are listed once per
// layer.
func Under(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := Unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out, nil
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
