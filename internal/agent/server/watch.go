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

// Watch waits up to timeout for changes in the directory p and returns them
// (at most max; truncated when more came); gone says p itself was removed or
// moved. It returns early when cancel is closed.
func (f *Files) Watch(p string, timeout time.Duration, max int, cancel <-chan struct{}) (events []proto.WatchEvent, truncated, gone bool, e *proto.Error) {
	if e := checkAsked(p); e != nil {
		return nil, false, false, e
	}
	if watches.Add(1) > maxWatches {
		watches.Add(-1)
		return nil, false, false, opErr(proto.ErrBusy, "%d watches are in flight in this sandbox", maxWatches)
	}
	defer watches.Add(-1)
	dfd, err := f.r.open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0, true)
	if err != nil {
		return nil, false, false, errnoErr("open "+p, err)
	}
	defer unix.Close(dfd)
	if e := checkFD(dfd); e != nil {
		return nil, false, false, e
	}
	ifd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, false, false, errnoErr("inotify", err)
	}
	in := os.NewFile(uintptr(ifd), "inotify")
	defer in.Close()
	if _, err := unix.InotifyAddWatch(ifd, "/proc/self/fd/"+strconv.Itoa(dfd), watchMask); err != nil {
		return nil, false, false, errnoErr("watch "+p, err)
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
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 64<<10)
	var lastWrite string
	for {
		_ = in.SetReadDeadline(deadline)
		n, err := in.Read(buf)
		if err != nil {
			return events, truncated, gone, nil // the deadline, a cancel
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameLen := int(ev.Len)
			end := off + unix.SizeofInotifyEvent + nameLen
			if end > n {
				break
			}
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:end], "\x00"))
			off = end
			if ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0 {
				gone = true
				continue
			}
			if name == "" {
				continue
			}
			var typ string
			switch {
			case ev.Mask&unix.IN_CREATE != 0, ev.Mask&unix.IN_MOVED_TO != 0:
				typ = proto.WatchCreate
			case ev.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
				typ = proto.WatchWrite
			case ev.Mask&unix.IN_DELETE != 0:
				typ = proto.WatchRemove
			case ev.Mask&unix.IN_MOVED_FROM != 0:
				typ = proto.WatchRename
			default:
				continue
			}
			full := path.Join(p, name)
			if typ == proto.WatchWrite && lastWrite == full {
				continue // one write event for a run of writes to one file
			}
			lastWrite = ""
			if typ == proto.WatchWrite {
				lastWrite = full
			}
			if len(events) >= max {
				truncated = true
				continue
			}
			events = append(events, proto.WatchEvent{Type: typ, Path: full, IsDir: ev.Mask&unix.IN_ISDIR != 0})
		}
		if gone || truncated {
			return events, truncated, gone, nil
		}
		if len(events) > 0 {
			// Settle: collect what follows closely, then answer.
			if d := time.Now().Add(watchSettle); d.Before(deadline) {
				deadline = d
			}
		}
	}
}
