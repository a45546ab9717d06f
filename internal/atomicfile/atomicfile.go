// Package atomicfile replaces files so that readers see either the old or
// the new content, never a mix, and never a file with looser permissions.
package atomicfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// TempPrefix starts the names of temporary files; a reader of the
// directory should skip (or remove) names that start with it.
const TempPrefix = ".tmp-"

// CheckName reports an error unless name is a plain file name: not empty,
// not "." or "..", no "/" and no NUL, and not a temporary file name.
func CheckName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("invalid file name %q", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("invalid file name %q: contains '/' or NUL", name)
	case strings.HasPrefix(name, TempPrefix):
		return fmt.Errorf("invalid file name %q: reserved prefix %q", name, TempPrefix)
	}
	return nil
}

// Write replaces dir/name with data. The content goes to a new temporary
// file in dir, created with perm and, when uid or gid is not -1, chowned
// before any byte is written; the file is synced, renamed over name, and
// the directory synced. dir is opened with os.OpenRoot, so a symlink in dir
// cannot redirect the write elsewhere. On error nothing is left behind.
func Write(dir, name string, data []byte, perm fs.FileMode, uid, gid int) error {
	return WriteParts(dir, name, [][]byte{data}, perm, uid, gid)
}

// WriteParts is Write of the parts one after the other, without joining
// them into one slice first (a large part is not copied).
func WriteParts(dir, name string, parts [][]byte, perm fs.FileMode, uid, gid int) (retErr error) {
	if err := CheckName(name); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	tmp := TempPrefix + name + "-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			f.Close()
			root.Remove(tmp)
		}
	}()
	// OpenFile's mode is filtered by the umask; set it exactly.
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if uid != -1 || gid != -1 {
		if err := f.Chown(uid, gid); err != nil {
			return err
		}
	}
	for _, p := range parts {
		if _, err := f.Write(p); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
