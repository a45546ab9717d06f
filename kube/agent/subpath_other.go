//go:build !linux

package agent

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// subPathDir needs openat2: Linux only.
func subPathDir(root, sub string) (string, error) {
	return "", fmt.Errorf("subPath %q: resolved with openat2, which only Linux has: %w", sub, errdefs.ErrNotImplemented)
}
