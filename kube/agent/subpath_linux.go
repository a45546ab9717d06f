package agent

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// beneath is how a subPath is resolved from its volume's directory: never
// above it, through no symlink (its last name included), no magic link
// and no other mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// subPathDir returns the directory sub names beneath root, a volume's
// resolved directory: root joined with sub, once sub is checked
// (v1alpha1.CheckSubPath) and resolved there with openat2 as an existing
// directory, through no symlink and no mount crossing. Admission checks
// the directory as it checks the volume's, and takes it only by that
// path, resolved: a symlink put there after this check (by a Session that
// writes the volume) is refused then, and one put there after the daemon
// opened it changes nothing (it holds the directory, not the path). An
// error wrapping errdefs.ErrInvalidArgument says sub is not such a
// directory.
func subPathDir(root, sub string) (string, error) {
	what := fmt.Sprintf("subPath %q", sub)
	if r := v1alpha1.CheckSubPath(sub); r != "" {
		return "", fmt.Errorf("%s: %s: %w", what, r, errdefs.ErrInvalidArgument)
	}
	rfd, err := openat2(unix.AT_FDCWD, root, unix.RESOLVE_NO_SYMLINKS|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return "", fmt.Errorf("%s: the volume's directory %s: %w: %w", what, root, err, errdefs.ErrInvalidArgument)
		}
		return "", fmt.Errorf("%s: open the volume's directory %s: %w", what, root, err)
	}
	defer unix.Close(rfd)
	fd, err := openat2(rfd, sub, beneath)
	switch {
	case errors.Is(err, unix.ENOENT):
		return "", fmt.Errorf("%s does not exist in the volume's directory %s: %w", what, root, errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.ENOTDIR):
		return "", fmt.Errorf("%s in the volume's directory %s is not a directory: %w", what, root, errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.ELOOP):
		return "", fmt.Errorf("%s in the volume's directory %s goes through a symbolic link: a subPath is resolved through none: %w", what, root, errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.EXDEV):
		return "", fmt.Errorf("%s in the volume's directory %s crosses a mount point or leaves the directory: %w", what, root, errdefs.ErrInvalidArgument)
	case err != nil:
		return "", fmt.Errorf("%s in the volume's directory %s: %w", what, root, err)
	}
	unix.Close(fd)
	return filepath.Join(root, sub), nil
}

// openat2 opens path from dirfd as a directory (O_PATH), resolved as
// resolve says, trying again when the kernel asks to.
func openat2(dirfd int, path string, resolve uint64) (int, error) {
	how := &unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC), Resolve: resolve}
	for {
		fd, err := unix.Openat2(dirfd, path, how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err
	}
}
