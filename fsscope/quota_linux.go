package fsscope

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// mkfsTimeout bounds formatting an image.
const mkfsTimeout = 60 * time.Second

// createImage creates a sparse file of size bytes and formats it as ext4
// with no reserved blocks and lazy initialisation (a few milliseconds for
// any size).
func createImage(ctx context.Context, img string, size int64) error {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return fmt.Errorf("disk quota image needs mkfs.ext4 (e2fsprogs): %w", err)
	}
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("size quota image: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, mkfsTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0", "-i", "8192",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", img)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("format quota image: %w: %s", err, out)
	}
	return nil
}

// imageAttached reports whether a loop device still holds img: its
// filesystem is mounted somewhere (in a sandbox's mount namespace, say),
// and mounting it a second time through another device would corrupt it.
func imageAttached(img string) (bool, error) {
	paths, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return false, err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == img {
			return true, nil
		}
	}
	return false, nil
}

// detachWait bounds how long mountImage waits for a loop device whose
// filesystem was just unmounted: the kernel clears an autoclear loop device
// asynchronously, a moment after the last unmount (over 3 seconds once, on
// a loaded machine).
const detachWait = 10 * time.Second

// waitDetached polls until no loop device holds img or wait has passed; it
// reports whether one still does.
func waitDetached(img string, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		busy, err := imageAttached(img)
		if err != nil || !busy || time.Now().After(deadline) {
			return busy, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountImage attaches img to a free loop device (released automatically
// when the filesystem is unmounted) and mounts it on target.
func mountImage(img, target string, readOnly bool) error {
	if busy, err := waitDetached(img, detachWait); err != nil {
		return err
	} else if busy {
		return fmt.Errorf("quota image %s is still in use (is the sandbox still running?): %w", img, errdefs.ErrFailedPrecondition)
	}
	imgFlags := os.O_RDWR
	if readOnly {
		imgFlags = os.O_RDONLY
	}
	f, err := os.OpenFile(img, imgFlags|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	var lastErr error
	for range 16 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := os.OpenFile(dev, imgFlags|unix.O_CLOEXEC, 0)
		if err != nil {
			lastErr = err
			continue
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if readOnly {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		if err := unix.IoctlLoopConfigure(int(loop.Fd()), &cfg); err != nil {
			loop.Close()
			if errors.Is(err, unix.EBUSY) {
				lastErr = err
				continue // taken by someone else meanwhile
			}
			return fmt.Errorf("configure %s: %w", dev, err)
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if readOnly {
			flags |= unix.MS_RDONLY
		}
		// noinit_itable: the image is sparse, so its never-written inode
		// tables already read as zeros; the kernel's background zeroing
		// of them (ext4lazyinit) would be work for nothing.
		err = unix.Mount(dev, target, "ext4", flags, "errors=remount-ro,noinit_itable")
		// With autoclear, closing the last reference other than the mount
		// detaches the device, so a failed mount leaves nothing behind.
		loop.Close()
		if err != nil {
			return fmt.Errorf("mount quota image %s on %s: %w", img, target, err)
		}
		return nil
	}
	return fmt.Errorf("no free loop device: %w", lastErr)
}

// mountTmpfs mounts a tmpfs of size bytes on target.
func mountTmpfs(target string, size int64) error {
	data := "size=" + strconv.FormatInt(size, 10) + ",mode=0700"
	if err := unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, data); err != nil {
		return fmt.Errorf("mount quota tmpfs on %s: %w", target, err)
	}
	return nil
}
