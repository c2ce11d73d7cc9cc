package server

import (
	"bytes"
	"os"
	"path"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
)

// Watching a directory (files.watch) with the sandbox user's rights: the
// directory is opened through the resolver (no symlink escape, no /proc,
// /sys or /dev) and inotify watches the open directory by its fd's
// /proc/self/fd path, so that a symlink swapped in after the check is not
// followed.

// maxWatches bounds the watches in flight in one sandbox (each holds an
// inotify instance, of which a user has 128 by default).
const maxWatches = 8

// watchSettle is how long a watch waits for more events after one came.
const watchSettle = 100 * time.Millisecond

var watches atomic.Int32

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// WatchResult is what a watch saw.
type WatchResult struct {
	Events    []proto.WatchEvent
	Truncated bool // more events came than max
	Gone      bool // the directory itself was removed or moved
	// Dropped counts events left out because their path is over
	// proto.MaxPath: the API cannot carry them.
	Dropped int
}

// Count is the result's proto.Result.Count bits.
func (w WatchResult) Count() int64 {
	var n int64
	if w.Truncated || w.Dropped > 0 {
		n |= proto.WatchTruncated
	}
	if w.Gone {
		n |= proto.WatchGone
	}
	if w.Dropped > 0 {
		n |= proto.WatchDropped
	}
	return n
}

// Watch waits up to timeout for changes in the directory p and returns them
// (at most max). It returns early when cancel is closed.
func (f *Files) Watch(p string, timeout time.Duration, max int, cancel <-chan struct{}) (WatchResult, *proto.Error) {
	if e := checkAsked(p); e != nil {
		return WatchResult{}, e
	}
	if watches.Add(1) > maxWatches {
		watches.Add(-1)
		return WatchResult{}, opErr(proto.ErrBusy, "%d watches are in flight in this sandbox", maxWatches)
	}
	defer watches.Add(-1)
	dfd, err := f.r.open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0, true)
	if err != nil {
		return WatchResult{}, errnoErr("open "+p, err)
	}
	defer unix.Close(dfd)
	if e := checkFD(dfd); e != nil {
		return WatchResult{}, e
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return WatchResult{}, errnoErr("inotify", err)
	}
	in := os.NewFile(uintptr(ifd), "inotify")
	defer in.Close()
	if _, err := unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(dfd), watchMask); err != nil {
		return WatchResult{}, errnoErr("watch "+p, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-cancel:
			_ = in.SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	w := watcher{dir: p, max: max}
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 64<<10)
	for {
		_ = in.SetReadDeadline(deadline)
		n, err := in.Read(buf)
		if err != nil {
			return w.res, nil // the deadline, a cancel
		}
		w.add(buf[:n])
		if w.res.Gone || w.res.Truncated {
			return w.res, nil
		}
		if len(w.res.Events) > 0 || w.res.Dropped > 0 {
			// Settle: collect what follows closely, then answer.
			if d := time.Now().Add(watchSettle); d.Before(deadline) {
				deadline = d
			}
		}
	}
}

// watcher collects one watch's events.
type watcher struct {
	dir       string
	max       int
	lastWrite string
	res       WatchResult
}

// add takes the inotify events in b.
func (w *watcher) add(b []byte) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(b); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[off]))
		end := off + unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return
		}
		name := string(bytes.TrimRight(b[off+unix.SizeofInotifyEvent:end], "\x00"))
		off = end
		if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
			w.res.Gone = true
			continue
		}
		if typ := eventType(ev.Mask); typ != "" && name != "" {
			w.event(typ, name, ev.Mask&unix.IN_ISDIR != 0)
		}
	}
}

func (w *watcher) event(typ, name string, isDir bool) {
	full := path.Join(w.dir, name)
	if typ == proto.WatchWrite && w.lastWrite == full {
		return // one write event for a run of writes to one file
	}
	w.lastWrite = ""
	if typ == proto.WatchWrite {
		w.lastWrite = full
	}
	if len(full) > proto.MaxPath {
		// Legal in the sandbox (a long name in a directory near the
		// bound), but the API cannot carry it: counted, not sent.
		w.res.Dropped++
		return
	}
	if len(w.res.Events) >= w.max {
		w.res.Truncated = true
		return
	}
	w.res.Events = append(w.res.Events, proto.WatchEvent{Type: typ, Path: full, IsDir: isDir})
}

// eventType is the watch event type of an inotify mask; "" for none.
func eventType(mask uint32) string {
	switch {
	case mask&unix.IN_CREATE != 0, mask&unix.IN_MOVED_TO != 0:
		return proto.WatchCreate
	case mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
		return proto.WatchWrite
	case mask&unix.IN_DELETE != 0:
		return proto.WatchRemove
	case mask&unix.IN_MOVED_FROM != 0:
		return proto.WatchRename
	}
	return ""
}
