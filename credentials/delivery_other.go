//go:build !linux

package credentials

import (
	"fmt"

	"github.com/containerd/errdefs"
)

func mountTmpfs(string, uint32, uint32) error {
	return fmt.Errorf("credential tmpfs: %w on this system", errdefs.ErrNotImplemented)
}

func unmountTmpfs(string) error { return nil }
