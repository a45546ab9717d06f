package fsscope

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// WithImageCache keeps one freshly formatted, never mounted quota image
// per size in dir and gives each session a sparse copy of it, instead of
// running mkfs.ext4 per session. dir must be private to the daemon (mode
// 0700, on a filesystem that supports SEEK_DATA/SEEK_HOLE).
func WithImageCache(dir string) Option {
	return func(c *config) { c.imageCache = dir }
}

// templateMu serialises building a template per process; concurrent
// daemons on one cache directory are kept apart by the atomic rename.
var templateMu sync.Mutex

// newImage creates the quota image img of size bytes: a copy of the
// cached template when cache is set, otherwise a fresh mkfs.
func newImage(ctx context.Context, cache, img string, size int64) error {
	if cache == "" {
		return createImage(ctx, img, size)
	}
	tmpl, err := imageTemplate(ctx, cache, size)
	if err != nil {
		return err
	}
	return copySparse(img, tmpl)
}

// imageTemplate returns the path of the template image of size bytes,
// formatting it first if it does not exist yet.
func imageTemplate(ctx context.Context, cache string, size int64) (string, error) {
	p := filepath.Join(cache, "ext4-"+strconv.FormatInt(size, 10)+".img")
	if st, err := os.Stat(p); err == nil && st.Size() == size {
		return p, nil
	}
	templateMu.Lock()
	defer templateMu.Unlock()
	if st, err := os.Stat(p); err == nil && st.Size() == size {
		return p, nil
	}
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return "", err
	}
	tmp := p + ".tmp-" + strconv.Itoa(os.Getpid())
	_ = os.Remove(tmp)
	if err := createImage(ctx, tmp, size); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return "", err
	}
	return p, nil
}

// RemoveStaleTemplates removes from cache the templates a process that
// is gone left half-made (killed while it formatted one): they are named
// after its pid, and nothing else would remove them.
func RemoveStaleTemplates(cache string) error {
	tmps, err := filepath.Glob(filepath.Join(cache, "ext4-*.img.tmp-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, tmp := range tmps {
		pid, err := strconv.Atoi(tmp[strings.LastIndex(tmp, "-")+1:])
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
			continue // still running: maybe formatting it now
		}
		if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// copySparse copies src to a new file dst, only the extents that hold
// data, leaving holes as holes.
func copySparse(dst, src string) (retErr error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err := out.Close(); retErr == nil {
			retErr = err
		}
		if retErr != nil {
			_ = os.Remove(dst)
		}
	}()
	size := st.Size()
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("size quota image: %w", err)
	}
	ifd, ofd := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("copy quota image: seek data: %w", err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("copy quota image: seek hole: %w", err)
		}
		for pos := data; pos < hole; {
			roff, woff := pos, pos
			n, err := unix.CopyFileRange(ifd, &roff, ofd, &woff, int(hole-pos), 0)
			if err != nil {
				return fmt.Errorf("copy quota image: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("copy quota image: short copy at %d", pos)
			}
			pos += int64(n)
		}
		off = hole
	}
	return nil
}
