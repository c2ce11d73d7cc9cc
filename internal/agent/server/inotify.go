package server

import (
	"encoding/binary"
	"errors"
	"sync"

	"golang.org/x/sys/unix"
)

// hub is the agent's one inotify instance, shared by the watch for a worker's
// socket (WatchDir, cmd/sbx-agent) and the PATH cache. The kernel counts
// instances per uid on the host (fs.inotify.max_user_instances, 128 by
// default), and every sandbox's agent runs as the same uid: one instance an
// agent, not two (ADR 26).
//
// Events are read under mu, without blocking, by whoever needs them first.
// A lookup reads them before it trusts the cache, and the reader goroutine
// reads them once the instance becomes readable. Every event empties the
// PATH cache. An event on a watch made with WatchDir also calls that
// watch's notify.
type hub struct {
	mu     sync.Mutex
	opened bool // the instance was asked for
	fd     int  // -1 when not to be had
	buf    []byte
	notify map[int32]func() // wd -> WatchDir's callback
	reader bool             // the goroutine that waits for events runs
	cache  pathCache
}

var inotify = &hub{}

// openLocked makes the instance on first use; false when there is none.
func (h *hub) openLocked() bool {
	if !h.opened {
		h.opened = true
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			fd = -1
		}
		h.fd, h.buf = fd, make([]byte, 16<<10)
	}
	return h.fd >= 0
}

// errNoInotify: the instance is not to be had.
var errNoInotify = errors.New("agent: no inotify instance")

// WatchDir calls notify whenever an entry of dir is created, changes its
// attributes or is moved in (mask), from the agent's one inotify instance.
// notify runs with the hub's lock held and must not block. It returns an
// error when inotify is not to be had; the caller then polls.
func WatchDir(dir string, mask uint32, notify func()) error {
	h := inotify
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.openLocked() {
		return errNoInotify
	}
	wd, err := unix.InotifyAddWatch(h.fd, dir, mask|unix.IN_MASK_ADD)
	if err != nil {
		return err
	}
	if h.notify == nil {
		h.notify = make(map[int32]func())
	}
	h.notify[int32(wd)] = notify
	if !h.reader {
		h.reader = true
		go h.read()
	}
	return nil
}

// read waits for the instance to become readable and drains it, for as long
// as the agent runs (WatchDir's callers wait for nothing else).
func (h *hub) read() {
	fds := []unix.PollFd{{Fd: int32(h.fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		h.mu.Lock()
		h.drainLocked()
		h.mu.Unlock()
	}
}

// drainLocked reads every queued event. Any event (or an error, an
// overflowed queue among them) empties the PATH cache; an event on a
// WatchDir watch, or an overflow, calls its notify.
func (h *hub) drainLocked() {
	changed := false
	for {
		n, err := unix.Read(h.fd, h.buf)
		if n > 0 {
			changed = true
			h.dispatchLocked(h.buf[:n])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			changed = true
			h.notifyAllLocked()
		}
		break
	}
	if changed {
		h.cache.emptyLocked()
	}
}

// dispatchLocked calls the notify of each event's watch (struct
// inotify_event: wd, mask, cookie, len, then len bytes of name).
func (h *hub) dispatchLocked(b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(b[12:16]))
		if mask&unix.IN_Q_OVERFLOW != 0 {
			h.notifyAllLocked()
		} else if f := h.notify[wd]; f != nil {
			f()
		}
		if size > len(b) {
			return
		}
		b = b[size:]
	}
}

func (h *hub) notifyAllLocked() {
	for _, f := range h.notify {
		f()
	}
}
