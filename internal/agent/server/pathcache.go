package server

import (
	"errors"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// pathCache remembers where the PATH search found a command, for as long as
// nothing it searched has changed. Every directory searched has an inotify
// watch, and so has its parent. A directory that does not exist is watched
// through its nearest ancestor that does. Each use first reads the watches'
// events without blocking, and any event empties the cache. The kernel
// queues an event before the system call that caused it returns, so a
// change that finished before an exec was asked for is always seen by its
// lookup.
//
// Each failed lookup of the search is a FUSE round trip on fuse-overlayfs
// (five for `true` in a busybox image). They cost 15–30 % of the execs/s
// of 8 clients (docs/benchmarks.md, "The fifth session"). Where inotify is
// not to be had (no instance left for the uid), there is no cache, and
// every lookup searches.
type pathCache struct {
	mu      sync.Mutex
	opened  bool            // the instance was asked for
	fd      int             // the inotify instance; -1 when not to be had
	watched map[string]bool // paths with a watch, since the last event
	hits    map[pathKey]string
	gen     uint64 // counts the times the cache was emptied
	buf     []byte
}

type pathKey struct{ path, dir, name string }

// maxPathHits bounds the cache; a full cache is emptied.
const maxPathHits = 1024

// pathWatchMask is every change that can alter what a search finds: an
// entry created, removed, renamed or given other permissions, and the
// directory itself removed or moved.
const pathWatchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

var paths = &pathCache{}

// get is the cached answer for k, if nothing changed since it was found.
func (c *pathCache) get(k pathKey) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened || c.fd < 0 {
		return "", false
	}
	c.drainLocked()
	p, ok := c.hits[k]
	return p, ok
}

// off reports that the cache is not to be had: no inotify instance.
func (c *pathCache) off() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opened && c.fd < 0
}

// watch puts a watch on every path in ws. It returns the generation to
// give put, and false when a watch could not be made (nothing is cached
// then).
func (c *pathCache) watch(ws []string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened {
		c.opened = true
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			fd = -1
		}
		c.fd, c.buf = fd, make([]byte, 16<<10)
	}
	if c.fd < 0 {
		return 0, false
	}
	c.drainLocked()
	for _, w := range ws {
		if c.watched[w] {
			continue
		}
		if _, err := unix.InotifyAddWatch(c.fd, w, pathWatchMask); err != nil {
			return 0, false
		}
		if c.watched == nil {
			c.watched = make(map[string]bool)
		}
		c.watched[w] = true
	}
	return c.gen, true
}

// put caches p for k unless something changed since watch returned gen.
func (c *pathCache) put(k pathKey, p string, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.opened || c.fd < 0 {
		return
	}
	c.drainLocked()
	if c.gen != gen {
		return
	}
	if c.hits == nil || len(c.hits) >= maxPathHits {
		c.hits = make(map[pathKey]string)
	}
	c.hits[k] = p
}

// drainLocked reads every queued event. Any event (or an error: an
// overflowed queue among them) empties the cache and forgets the watches:
// a removed directory's watch is gone, and the next miss watches again.
func (c *pathCache) drainLocked() {
	changed := false
	for {
		n, err := unix.Read(c.fd, c.buf)
		if n > 0 {
			changed = true
			continue
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) {
			changed = true
		}
		break
	}
	if changed {
		c.hits, c.watched = nil, nil
		c.gen++
	}
}

// watchesFor lists what to watch for a search of dirs: each directory and
// its parent, or for one that does not exist its nearest ancestor that does.
func watchesFor(dirs []string) []string {
	seen := make(map[string]bool, 2*len(dirs))
	var ws []string
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			ws = append(ws, p)
		}
	}
	for _, d := range dirs {
		d = filepath.Clean(d)
		e := d
		for {
			if fi, err := os.Stat(e); err == nil && fi.IsDir() {
				break
			}
			up := filepath.Dir(e)
			if up == e {
				break
			}
			e = up
		}
		add(e)
		add(filepath.Dir(e))
	}
	return ws
}
