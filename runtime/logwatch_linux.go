package runtime

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A follower of a session's output used to look at its log directory
// every few milliseconds: a wake-up, two stats and two reads each time,
// for every follower, whether or not anything was written (100 followers:
// 20,000 wake-ups a second), and up to a poll's interval between a write
// and its reader. Followers now wait on inotify(7) events of the
// directory instead.
//
// One inotify instance serves the whole process: instances are few
// (fs.inotify.max_user_instances is 128 by default, for every process of
// the user), watches are many. Each watched directory has one watch and
// the followers subscribed to it; the last to leave removes the watch.

// logWatchMask is what wakes a follower: a file written, created (the
// end-of-file markers) or renamed into the directory, and the directory
// itself gone.
const logWatchMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_CLOSE_WRITE |
	unix.IN_DELETE_SELF | unix.IN_ONLYDIR

type logWatcher struct {
	f *os.File

	mu   sync.Mutex
	subs map[int32]map[chan struct{}]bool // +checklocks:mu
	dead bool                             // +checklocks:mu: the reader failed; every subscribe fails
}

var (
	sharedMu      sync.Mutex
	sharedWatcher *logWatcher // +checklocks:sharedMu
	// sharedFailed is when the watcher last could not be made, or failed:
	// another is tried watcherRetry later, followers poll meanwhile.
	sharedFailed time.Time // +checklocks:sharedMu
)

// watcherRetry is how long after a failure another watcher is tried (a
// shortage of inotify instances or descriptors may pass).
var watcherRetry = 10 * time.Second

// watchLogDir subscribes to changes in dir: a value arrives on the
// returned channel (buffered, coalescing) after any change, and the
// channel is closed when the watch ends (the directory removed, or the
// watcher failed). stop unsubscribes. An error means the caller polls.
func watchLogDir(dir string) (<-chan struct{}, func(), error) {
	w, err := currentWatcher()
	if err != nil {
		return nil, nil, err
	}
	return w.subscribe(dir)
}

// currentWatcher is the process's watcher, made anew when there is none
// or it failed, at most every watcherRetry.
func currentWatcher() (*logWatcher, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if w := sharedWatcher; w != nil && !w.failed() {
		return w, nil
	}
	if !sharedFailed.IsZero() && time.Since(sharedFailed) < watcherRetry {
		return nil, errors.New("inotify watcher failed a moment ago")
	}
	w, err := newLogWatcher()
	if err != nil {
		sharedWatcher, sharedFailed = nil, time.Now()
		return nil, err
	}
	sharedWatcher, sharedFailed = w, time.Time{}
	return w, nil
}

func (w *logWatcher) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

func newLogWatcher() (*logWatcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking, so that reads wait in Go's poller, not in a thread.
	w := &logWatcher{f: os.NewFile(uintptr(fd), "inotify"), subs: map[int32]map[chan struct{}]bool{}}
	go w.read()
	return w, nil
}

func (w *logWatcher) subscribe(dir string) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dead {
		return nil, nil, errors.New("inotify reader failed")
	}
	var wd int
	err := w.rawFD(func(fd int) error {
		var err error
		// The same directory gives the same descriptor, and the same
		// mask leaves its watch as it was.
		wd, err = unix.InotifyAddWatch(fd, dir, logWatchMask)
		return err
	})
	if err != nil {
		return nil, nil, &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err}
	}
	ch := make(chan struct{}, 1)
	set := w.subs[int32(wd)]
	if set == nil {
		set = map[chan struct{}]bool{}
		w.subs[int32(wd)] = set
	}
	set[ch] = true
	var once sync.Once
	stop := func() { once.Do(func() { w.unsubscribe(int32(wd), ch) }) }
	return ch, stop, nil
}

func (w *logWatcher) unsubscribe(wd int32, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	set := w.subs[wd]
	if !set[ch] {
		return // the watch ended and closed it
	}
	delete(set, ch)
	if len(set) > 0 {
		return
	}
	delete(w.subs, wd)
	_ = w.rawFD(func(fd int) error {
		_, err := unix.InotifyRmWatch(fd, uint32(wd))
		return err
	})
}

// rawFD runs f on the inotify descriptor.
func (w *logWatcher) rawFD(f func(fd int) error) error {
	rc, err := w.f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// read dispatches events to the subscribers of their watches until the
// descriptor fails; then every subscriber's channel is closed and
// followers go back to polling.
func (w *logWatcher) read() {
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			sharedMu.Lock()
			if sharedWatcher == w {
				sharedFailed = time.Now()
			}
			sharedMu.Unlock()
			w.f.Close()
			w.mu.Lock()
			w.dead = true
			for wd, set := range w.subs {
				for ch := range set {
					close(ch)
				}
				delete(w.subs, wd)
			}
			w.mu.Unlock()
			return
		}
		w.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			nameLen := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent + nameLen
			if mask&unix.IN_Q_OVERFLOW != 0 {
				// Events were lost: everyone looks.
				for _, set := range w.subs {
					notifyAll(set)
				}
				continue
			}
			set := w.subs[wd]
			if mask&unix.IN_IGNORED != 0 {
				// The watch is gone (the directory removed, or
				// rm_watch): its followers are told and left.
				for ch := range set {
					close(ch)
				}
				delete(w.subs, wd)
				continue
			}
			notifyAll(set)
		}
		w.mu.Unlock()
	}
}

func notifyAll(set map[chan struct{}]bool) {
	for ch := range set {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
