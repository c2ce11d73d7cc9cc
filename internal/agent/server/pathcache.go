package server

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// pathCache remembers where the PATH search found a command, for as long as
// nothing it searched has changed (ADR 26). Every directory searched has an
// inotify watch on the agent's one instance (hub), and so has its parent. A
// directory that does not exist is watched through its nearest ancestor
// that does. Each use first reads the instance's events without blocking,
// and any event empties the cache. The kernel queues an event before the
// system call that caused it returns, so a change that finished before an
// exec was asked for is always seen by its lookup.
//
// Each failed lookup of the search is a FUSE round trip on fuse-overlayfs
// (five for `true` in a busybox image). They cost 15–30 % of the execs/s
// of 8 clients (docs/benchmarks.md, "The fifth session"). Where inotify is
// not to be had (no instance left for the uid), there is no cache, and
// every lookup searches.
//
// Its fields are guarded by the hub's lock.
type pathCache struct {
	watched map[string]bool // paths with a watch, since the last event
	hits    map[pathKey]string
	gen     uint64 // counts the times the cache was emptied
}

type pathKey struct{ path, dir, name string }

// maxPathHits bounds the cache; a full cache is emptied.
const maxPathHits = 1024

// pathWatchMask is every change that can alter what a search finds: an
// entry created, removed, renamed or given other permissions, and the
// directory itself removed or moved. IN_MASK_ADD keeps what another watch
// of the same directory asked for.
const pathWatchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_MASK_ADD

// emptyLocked forgets every answer and every watch (a removed directory's
// watch is gone; the next miss watches again).
func (c *pathCache) emptyLocked() {
	c.hits, c.watched = nil, nil
	c.gen++
}

// pathGet is the cached answer for k, if nothing changed since it was found.
func (h *hub) pathGet(k pathKey) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.opened || h.fd < 0 {
		return "", false
	}
	h.drainLocked()
	p, ok := h.cache.hits[k]
	return p, ok
}

// pathOff reports that the cache is not to be had: no inotify instance.
func (h *hub) pathOff() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opened && h.fd < 0
}

// pathWatch puts a watch on every path in ws. It returns the generation to
// give pathPut, and false when a watch could not be made (nothing is cached
// then).
func (h *hub) pathWatch(ws []string) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.openLocked() {
		return 0, false
	}
	h.drainLocked()
	c := &h.cache
	for _, w := range ws {
		if c.watched[w] {
			continue
		}
		if _, err := unix.InotifyAddWatch(h.fd, w, pathWatchMask); err != nil {
			return 0, false
		}
		if c.watched == nil {
			c.watched = make(map[string]bool)
		}
		c.watched[w] = true
	}
	return c.gen, true
}

// pathPut caches p for k unless something changed since pathWatch returned
// gen.
func (h *hub) pathPut(k pathKey, p string, gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.opened || h.fd < 0 {
		return
	}
	h.drainLocked()
	c := &h.cache
	if c.gen != gen {
		return
	}
	if c.hits == nil || len(c.hits) >= maxPathHits {
		c.hits = make(map[pathKey]string)
	}
	c.hits[k] = p
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
