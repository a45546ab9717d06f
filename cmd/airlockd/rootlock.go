package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// rootLockFile is the lock one airlockd holds on its root while it runs.
const rootLockFile = "airlockd.lock"

// lockRoot takes root's lock, waiting while another airlockd holds it
// (until ctx ends: a signal). The lock is an flock on a file under root,
// which the kernel lets go when its holder exits however it exits, and
// which no child inherits (the descriptor is close-on-exec). Close the
// file to let it go.
func lockRoot(ctx context.Context, root string) (*os.File, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	// Not through a symbolic link planted there.
	f, err := os.OpenFile(filepath.Join(root, rootLockFile), os.O_CREATE|os.O_RDWR|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	began, told := time.Now(), false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			if told {
				log.G(ctx).Info("root lock taken: the other airlockd has stopped", "root", root, "waited", time.Since(began).Round(time.Millisecond).String())
			}
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		if !told {
			log.G(ctx).Warn("another airlockd runs on this root; waiting for it to stop", "root", root, "lock", f.Name())
			told = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("another airlockd still runs on %s (it holds %s): %w", root, f.Name(), ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
