package fsscope

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// copyFile copies the rest of src to dst from their offsets: in the kernel
// where it can (copy_file_range, within one filesystem), otherwise through
// a pooled buffer, which is what os.File's own ReadFrom would do with a
// buffer of its own each time.
func copyFile(dst, src *os.File) (int64, error) {
	var n int64
	for {
		m, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), nil, 1<<30, 0)
		switch {
		case errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP),
			errors.Is(err, unix.EINVAL), errors.Is(err, unix.EPERM), errors.Is(err, unix.EBADF):
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
