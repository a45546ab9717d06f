package fsscope

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// copyFile copies the rest of src to dst from their offsets: in the kernel
// where it can (copy_file_range, within one filesystem), otherwise through
// a pooled buffer. os.File's own ReadFrom does the same but falls back with
// a fresh 32 KiB buffer each time, which a commit between two filesystems
// pays per file; its safeguards are kept: a first call that copies
// nothing (a filesystem that answers 0 for what it cannot copy) and EIO
// also fall back.
func copyFile(dst, src *os.File) (int64, error) {
	var n int64
	for {
		m, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 1<<30, 0)
		switch {
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP),
			errors.Is(err, unix.EINVAL), errors.Is(err, unix.EPERM), errors.Is(err, unix.EBADF), errors.Is(err, unix.EIO),
			err == nil && m == 0 && n == 0:
			// Not between these two files: the offsets are where the
			// kernel left them, the rest goes through user space.
			r, err := copyPooled(dst, src)
			return n + r, err
		case err != nil:
			return n, &os.PathError{Op: "copy_file_range", Path: src.Name(), Err: err}
		case m == 0:
			return n, nil
		}
		n += int64(m)
	}
}
