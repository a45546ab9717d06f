package fsscope

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaskRead is an attempt, inside a sandbox, to open a path deny_read
// masks.
type MaskRead struct {
	Time time.Time
	// Owner is what the session was registered under (WithReadAudit).
	Owner string
	// Path is the sandbox path of the mask; Rule the pattern behind it.
	Path string
	Rule string
	// Pid is the opening process, as the host sees it.
	Pid int32
	// Dropped counts the refused opens not reported before this one,
	// because reports came faster than they were taken.
	Dropped int
}

// reportQueue bounds the reports waiting to be taken; the refusals
// themselves never wait for a report.
const reportQueue = 1024

// ReadAudit refuses and reports every open of a deny_read mask. Each mask
// of a session set up WithReadAudit is bound from a source of its own (an
// empty, root-owned, read-only file or directory), and the ReadAudit holds
// a fanotify permission mark (FAN_OPEN_PERM) on exactly those inodes: an
// open of a mask waits for the ReadAudit's answer, which is "deny"
// (EPERM), and the attempt is reported. No other open anywhere is
// involved, so a sandbox pays for this only when it touches a mask.
//
// When the ReadAudit is gone (the daemon stopped or restarted) the kernel
// drops its marks and answers pending opens "allow": the open then
// succeeds on an empty file or directory, so nothing is read either way;
// only the report is missing until the session is loaded again
// WithReadAudit. The permission check on a mask is made as the opener:
// the masks are mode 0444 (directories 0555) so that the open reaches
// fanotify rather than failing earlier, unreported.
type ReadAudit struct {
	f         *os.File
	report    func(MaskRead)
	queue     chan MaskRead
	done      chan struct{} // closed when loop returns
	drained   chan struct{} // closed when every report is taken
	closeOnce sync.Once

	mu    sync.Mutex
	marks map[fileKey]markInfo // +checklocks:mu
}

type fileKey struct{ dev, ino uint64 }

type markInfo struct {
	owner, path, rule string
	// live are the sessions whose revised deny_read marked the inode
	// (watchLive), by the device of their workspace overlay: an open is
	// refused only when it comes from one of their sandboxes. The inode
	// may be the host's own (an overlay's lower layer), which the host's
	// programs and other sessions open too. Nil for a mask's own inode,
	// which only its sandbox reaches.
	live map[uint64]*liveOwner
}

// liveOwner is a session that marked an inode live, and how many times.
type liveOwner struct {
	owner, path, rule string
	// ns is its sandbox's mount namespace (/proc/PID/ns/mnt), which no
	// process in it can leave; empty when not known, and then target is
	// where its sandbox has the workspace overlay mounted.
	ns, target string
	refs       int
}

// NewReadAudit starts a ReadAudit that calls report for every refused
// open, from a goroutine of its own, in order. The refusal does not wait
// for report; when more than reportQueue reports wait, the next ones are
// counted in Dropped instead. It needs CAP_SYS_ADMIN.
func NewReadAudit(report func(MaskRead)) (*ReadAudit, error) {
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_LARGEFILE)
	if err != nil {
		return nil, fmt.Errorf("fanotify: %w", err)
	}
	a := &ReadAudit{
		f: os.NewFile(uintptr(fd), "fanotify"), report: report, queue: make(chan MaskRead, reportQueue),
		done: make(chan struct{}), drained: make(chan struct{}), marks: map[fileKey]markInfo{},
	}
	go a.loop()
	go func() {
		defer close(a.drained)
		for r := range a.queue {
			a.report(r)
		}
	}()
	return a, nil
}

// Close stops the ReadAudit once every report is taken; the kernel
// removes its marks. Closing again does nothing.
func (a *ReadAudit) Close() error {
	if a == nil {
		return nil
	}
	var err error
	a.closeOnce.Do(func() {
		err = a.f.Close()
		<-a.done
		close(a.queue)
		<-a.drained
	})
	return err
}

// watch marks the mask source file (a path in a session's state
// directory) for owner.
func (a *ReadAudit) watch(owner, file, path, rule string) error {
	var st unix.Stat_t
	if err := unix.Lstat(file, &st); err != nil {
		return &os.PathError{Op: "stat", Path: file, Err: err}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_INODE|unix.FAN_MARK_DONT_FOLLOW,
		unix.FAN_OPEN_PERM|unix.FAN_ONDIR, unix.AT_FDCWD, file); err != nil {
		return fmt.Errorf("fanotify mark %s: %w", file, err)
	}
	a.marks[fileKey{st.Dev, st.Ino}] = markInfo{owner: owner, path: path, rule: rule}
	return nil
}

// errNotInView says a mask InView is no longer the view's own entry: the
// sandbox removed it, or put a file of its own in its place.
var errNotInView = errors.New("not the view's mask entry")

// viewMark is the mark of a mask InView: root is the workspace overlay's
// mount on the host, rel the mask's path beneath it.
type viewMark struct {
	root, rel string
	owner     uint32 // the workspace's MaskOwner
	key       fileKey
	// sandbox is the device of the workspace overlay whose sandbox a
	// live mark (watchLive) refuses; host says the inode is the host's
	// own (it outlives the session).
	sandbox uint64
	host    bool
}

// openViewMask opens rel beneath root without following a symlink or
// crossing a mount (the sandbox may have changed the tree since Setup),
// and checks that it still looks like the view's entry: an empty regular
// file of mode 0444 or 0 owned by owner (the caller checks that the
// upper directory does not shadow it).
func openViewMask(root, rel string, owner uint32) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		return -1, st, errNotInView
	}
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: root + "/" + rel, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, &os.PathError{Op: "stat", Path: root + "/" + rel, Err: err}
	}
	perm := st.Mode & 0o7777
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 || (perm != 0o444 && perm != 0) || st.Uid != owner {
		unix.Close(fd)
		return -1, st, errNotInView
	}
	return fd, st, nil
}

// watchView marks a mask InView: the inode of the workspace overlay (on
// the host at root) at rel, which is the inode the sandbox opens through
// its bind of the same mount. It returns the key the mark is known by.
func (a *ReadAudit) watchView(owner, root, rel string, maskOwner uint32, path, rule string) (fileKey, error) {
	fd, st, err := openViewMask(root, rel, maskOwner)
	if err != nil {
		return fileKey{}, err
	}
	defer unix.Close(fd)
	a.mu.Lock()
	defer a.mu.Unlock()
	// fanotify_mark takes no O_PATH descriptor; its magic link names
	// exactly the inode opened.
	if err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_INODE, unix.FAN_OPEN_PERM, unix.AT_FDCWD, fdPath(fd)); err != nil {
		return fileKey{}, fmt.Errorf("fanotify mark %s/%s: %w", root, rel, err)
	}
	key := fileKey{st.Dev, st.Ino}
	a.marks[key] = markInfo{owner: owner, path: path, rule: rule}
	return key, nil
}

// unwatchView removes the marks of masks InView that are still in place.
// The mark of one the sandbox removed stays on its unlinked inode, which
// no open can reach, until the overlay is unmounted, which drops it.
func (a *ReadAudit) unwatchView(marks []viewMark) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, m := range marks {
		delete(a.marks, m.key)
		fd, st, err := openViewMask(m.root, m.rel, m.owner)
		if errors.Is(err, errNotInView) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if (fileKey{st.Dev, st.Ino}) == m.key {
			if err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_REMOVE|unix.FAN_MARK_INODE, unix.FAN_OPEN_PERM, unix.AT_FDCWD, fdPath(fd)); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("fanotify unmark %s/%s: %w", m.root, m.rel, err))
			}
		}
		unix.Close(fd)
	}
	return errors.Join(errs...)
}

// unwatch removes the marks of the mask source files.
func (a *ReadAudit) unwatch(files []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, file := range files {
		var st unix.Stat_t
		if err := unix.Lstat(file, &st); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, &os.PathError{Op: "stat", Path: file, Err: err})
			}
			continue
		}
		key := fileKey{st.Dev, st.Ino}
		if _, ok := a.marks[key]; !ok {
			continue
		}
		delete(a.marks, key)
		if err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_REMOVE|unix.FAN_MARK_INODE|unix.FAN_MARK_DONT_FOLLOW,
			unix.FAN_OPEN_PERM|unix.FAN_ONDIR, unix.AT_FDCWD, file); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("fanotify unmark %s: %w", file, err))
		}
	}
	return errors.Join(errs...)
}

// marked returns how many mask inodes are marked.
func (a *ReadAudit) marked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.marks)
}

func (a *ReadAudit) loop() {
	defer close(a.done)
	dropped := 0
	buf := make([]byte, 4096)
	self := int32(os.Getpid())
	const metaLen = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	for {
		n, err := a.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+metaLen <= n; {
			meta := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if meta.Event_len < uint32(metaLen) || off+int(meta.Event_len) > n || meta.Vers != unix.FANOTIFY_METADATA_VERSION {
				break
			}
			off += int(meta.Event_len)
			if meta.Fd < 0 {
				continue // a queue overflow: there is no open to answer
			}
			var info markInfo
			var ok bool
			var st unix.Stat_t
			if unix.Fstat(int(meta.Fd), &st) == nil {
				a.mu.Lock()
				info, ok = a.marks[fileKey{st.Dev, st.Ino}]
				a.mu.Unlock()
			}
			// Only masks are marked; the daemon's own opens (removing a
			// session's state) pass.
			resp := uint32(unix.FAN_DENY)
			switch {
			case meta.Pid == self:
				resp = unix.FAN_ALLOW
			case ok && info.live != nil:
				// Refused only to the sandboxes of the sessions that
				// marked it.
				resp = unix.FAN_ALLOW
				if lo := sandboxOf(meta.Pid, info.live); lo != nil {
					resp = unix.FAN_DENY
					info = markInfo{owner: lo.owner, path: lo.path, rule: lo.rule}
				} else {
					ok = false // nothing to report
				}
			}
			var out [8]byte
			binary.NativeEndian.PutUint32(out[0:], uint32(meta.Fd))
			binary.NativeEndian.PutUint32(out[4:], resp)
			a.f.Write(out[:])
			unix.Close(int(meta.Fd))
			if ok && resp == unix.FAN_DENY {
				r := MaskRead{Time: time.Now().UTC(), Owner: info.owner, Path: info.path, Rule: info.rule, Pid: meta.Pid, Dropped: dropped}
				select {
				case a.queue <- r:
					dropped = 0
				default:
					dropped++
				}
			}
		}
	}
}

// watchLive marks the inode at rel beneath root, whatever it is: an entry
// of a workspace that a revised deny_read pattern matches (see
// Session.Revise), as the overlay holds it: in its upper directory, or
// the host's own inode under it (its lower layer), or the overlay's own
// inode (a directory). Every open of it from the sandbox of the session
// whose workspace overlay has device sandbox is refused and reported as
// owner's, through any of its names (the sandbox is the mount namespace
// that has that overlay mounted at target, the workspace's path in the
// sandbox); opens from anywhere else (the host's programs, also in a
// mount namespace of their own, other sessions) pass. It returns the key the mark is known
// by.
func (a *ReadAudit) watchLive(owner string, sandbox uint64, ns, target, root, rel, path, rule string) (fileKey, error) {
	fd, st, err := openBeneath(root, rel)
	if err != nil {
		return fileKey{}, err
	}
	defer unix.Close(fd)
	mask := uint64(unix.FAN_OPEN_PERM)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		mask |= unix.FAN_ONDIR
	}
	key := fileKey{st.Dev, st.Ino}
	a.mu.Lock()
	defer a.mu.Unlock()
	info, ok := a.marks[key]
	if ok && info.live == nil {
		return fileKey{}, fmt.Errorf("fanotify mark %s/%s: the inode is a mask's own", root, rel)
	}
	// Marked again whatever the entry says: an entry no session holds
	// may name an inode gone since (its number reused by this one), and
	// adding a mark an inode has is harmless.
	if err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_ADD|unix.FAN_MARK_INODE, mask, unix.AT_FDCWD, fdPath(fd)); err != nil {
		return fileKey{}, fmt.Errorf("fanotify mark %s/%s: %w", root, rel, err)
	}
	if !ok {
		info = markInfo{live: map[uint64]*liveOwner{}}
		a.marks[key] = info
	}
	if lo := info.live[sandbox]; lo != nil {
		lo.refs++
		if ns != "" {
			lo.ns = ns
		}
	} else {
		info.live[sandbox] = &liveOwner{owner: owner, path: path, rule: rule, ns: ns, target: target, refs: 1}
	}
	return key, nil
}

// openBeneath opens rel beneath root (O_PATH), following no symlink and
// crossing no mount.
func openBeneath(root, rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(dir)
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath})
	if err != nil {
		return -1, st, &os.PathError{Op: "open", Path: root + "/" + rel, Err: err}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, &os.PathError{Op: "stat", Path: root + "/" + rel, Err: err}
	}
	return fd, st, nil
}

// unwatchLive removes the marks watchLive made, each for its sandbox; an
// inode no session marks any more is
// unmarked when it is still at its path. One moved away keeps its kernel
// mark until the overlay (or the ReadAudit) goes, and its entry with no
// session, so that every open of it passes.
func (a *ReadAudit) unwatchLive(marks []viewMark) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, m := range marks {
		info, ok := a.marks[m.key]
		if !ok || info.live == nil {
			continue
		}
		if lo := info.live[m.sandbox]; lo != nil {
			if lo.refs--; lo.refs <= 0 {
				delete(info.live, m.sandbox)
			}
		}
		if len(info.live) > 0 {
			continue
		}
		if fd, st, err := openBeneath(m.root, m.rel); err == nil {
			if (fileKey{st.Dev, st.Ino}) == m.key {
				err := unix.FanotifyMark(int(a.f.Fd()), unix.FAN_MARK_REMOVE|unix.FAN_MARK_INODE, unix.FAN_OPEN_PERM|unix.FAN_ONDIR, unix.AT_FDCWD, fdPath(fd))
				if err == nil || errors.Is(err, unix.ENOENT) {
					delete(a.marks, m.key)
				} else {
					errs = append(errs, fmt.Errorf("fanotify unmark %s/%s: %w", m.root, m.rel, err))
				}
			}
			unix.Close(fd)
		}
		// The host's inode moved away keeps its kernel mark while the
		// ReadAudit lives, and its entry, with no session: every open of
		// it passes, and watchLive marks an inode that reuses its number
		// again. An inode of the session's own layers goes with them.
		if info, ok := a.marks[m.key]; ok && len(info.live) == 0 && !m.host {
			delete(a.marks, m.key)
		}
	}
	return errors.Join(errs...)
}

// sandboxOf returns the session of live whose sandbox process pid is in:
// the one whose sandbox's mount namespace is pid's (a process of the
// sandbox cannot leave it: it may not unshare or setns), or, for a
// session whose namespace is not known, whose workspace overlay (by
// device) pid's mount namespace has mounted at the workspace's target.
// (That second test is weaker: mount points are seen from the process's
// root, which a sandbox allowed to chroot moves; the daemon always knows
// the namespace.) The host mounts every overlay in the session's state
// directory, and so does a host program's mount namespace of its own,
// copied from the host's. Nil when it is none of them; a process whose
// namespace cannot be read is taken for the first of them (refused).
func sandboxOf(pid int32, live map[uint64]*liveOwner) *liveOwner {
	if len(live) == 0 || sameMountNS(pid) {
		return nil
	}
	first := func() *liveOwner {
		for _, lo := range live {
			return lo
		}
		return nil
	}
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(int(pid)) + "/ns/mnt")
	if err != nil {
		return first()
	}
	unknown := false
	for _, lo := range live {
		if lo.ns == theirs {
			return lo
		}
		unknown = unknown || lo.ns == ""
	}
	if !unknown {
		return nil
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/mountinfo")
	if err != nil {
		return first()
	}
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJOR:MINOR ROOT MOUNTPOINT ...
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		maj, min, ok := strings.Cut(f[2], ":")
		if !ok {
			continue
		}
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		if lo := live[unix.Mkdev(uint32(ma), uint32(mi))]; lo != nil && lo.ns == "" && unescapeMountinfo(f[4]) == lo.target {
			return lo
		}
	}
	return nil
}

// sameMountNS reports whether process pid is in the daemon's mount
// namespace or in init's: a program of the host, not of a sandbox.
func sameMountNS(pid int32) bool {
	theirs, err := os.Readlink("/proc/" + strconv.Itoa(int(pid)) + "/ns/mnt")
	if err != nil {
		return false
	}
	for _, p := range []string{"/proc/self/ns/mnt", "/proc/1/ns/mnt"} {
		if ns, err := os.Readlink(p); err == nil && ns == theirs {
			return true
		}
	}
	return false
}

// unescapeMountinfo undoes the octal escapes (\040 for a space, ...)
// of a path in /proc/PID/mountinfo.
func unescapeMountinfo(p string) string {
	if !strings.Contains(p, "\\") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '\\' && i+3 < len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// setLiveNS records ns as the mount namespace of the sandbox whose
// workspace overlay has device sandbox, for the marks made already.
func (a *ReadAudit) setLiveNS(sandbox uint64, ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, info := range a.marks {
		if lo := info.live[sandbox]; lo != nil {
			lo.ns = ns
		}
	}
}
