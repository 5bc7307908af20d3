package tune

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// dirWatcher wakes the tuner's loop when a file in a watched directory is
// written or replaced (Linux inotify), so that a process trial's report is
// read the moment it lands instead of at the next poll. Writes by other
// machines to shared storage (NFS) raise no event: polling stays as the
// fallback.
type dirWatcher struct {
	f    *os.File      // the inotify descriptor, non-blocking, so Close ends Read
	kick chan struct{} // capacity 1: "something changed"
	done chan struct{}

	mu  sync.Mutex     // guards wds
	wds map[string]int // directory -> watch descriptor
}

// newDirWatcher returns nil when inotify is not available.
func newDirWatcher() *dirWatcher {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	w := &dirWatcher{f: os.NewFile(uintptr(fd), "inotify"), kick: make(chan struct{}, 1),
		done: make(chan struct{}), wds: map[string]int{}}
	go w.run()
	return w
}

func (w *dirWatcher) run() {
	defer close(w.done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		if _, err := w.f.Read(buf); err != nil {
			return // closed
		}
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// add watches dir; errors leave it to polling.
func (w *dirWatcher) add(dir string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.wds[dir]; ok {
		return
	}
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, unix.IN_MODIFY|unix.IN_MOVED_TO|unix.IN_CREATE)
	if err == nil {
		w.wds[dir] = wd
	}
}

// remove stops watching dir.
func (w *dirWatcher) remove(dir string) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if wd, ok := w.wds[dir]; ok {
		_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(wd))
		delete(w.wds, dir)
	}
}

// changed is the channel kicked on changes (nil, never ready, without a
// watcher).
func (w *dirWatcher) changed() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.kick
}

func (w *dirWatcher) close() {
	if w == nil {
		return
	}
	w.f.Close()
	<-w.done
}
