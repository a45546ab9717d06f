package fsscope

import (
	"fmt"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/policies"
)

// unsafeBits are the mode bits an rw workspace may not keep from a
// session: a setuid or setgid file runs the sandbox's code as its owner
// for whoever executes it on the host, and a world-writable one lets any
// host user change what the operator runs next.
const unsafeBits = unix.S_ISUID | unix.S_ISGID | 0o002

// normaliseRW removes setuid, setgid and world-write bits from the
// regular files and directories of rw workspaces that changed since the
// session started (by ctime, so the host's own entries keep theirs), one
// audit event each. It runs when the sandbox is gone; while it runs, an rw
// workspace is the host directory itself and such bits are visible on the
// host (the sandbox's mount is nosuid, so they have no effect inside it).
func (s *Session) normaliseRW(audit func(Event)) error {
	for _, w := range s.st.Workspaces {
		if w.Mode != policies.ModeRW {
			continue
		}
		t, err := openTree(w.HostPath)
		if err != nil {
			return err
		}
		err = t.walk("", func(rel string, st *unix.Stat_t) (bool, error) {
			typ := st.Mode & unix.S_IFMT
			bad := st.Mode & unsafeBits
			if typ != unix.S_IFREG && typ != unix.S_IFDIR || bad == 0 || st.Ctim.Nano() < s.st.Started {
				return true, nil
			}
			flags := unix.O_RDONLY | unix.O_NONBLOCK
			if typ == unix.S_IFDIR {
				flags |= unix.O_DIRECTORY
			}
			fd, err := t.open(rel, flags, 0)
			if err != nil {
				return false, err
			}
			defer unix.Close(fd)
			mode := st.Mode & 0o7777
			if err := unix.Fchmod(fd, mode&^bad); err != nil {
				return false, fmt.Errorf("%s: %w", t.errPath(rel), err)
			}
			if audit != nil {
				audit(Event{Time: time.Now(), Type: EventModeNormalised, Path: path.Join(w.Target, rel), HostPath: path.Join(w.HostPath, rel),
					Reason: fmt.Sprintf("the sandbox left mode %04o; now %04o (no setuid, setgid or world-write in an rw workspace)", mode, mode&^bad)})
			}
			return true, nil
		})
		t.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
