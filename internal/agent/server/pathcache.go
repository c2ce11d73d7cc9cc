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
	covered map[string]bool // PATH directories watched as watchesFor says, since the last event
	hits    map[pathKey]string
	gen     uint64 // counts the times the cache was emptied
}

type pathKey struct{ path, dir, name string }

// afterWatchesFor, when a test sets it, runs between watchesFor's stats
// and the watches they decided (TestPathCacheDirCreatedMidLookup).
var afterWatchesFor func()

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
	c.hits, c.covered = nil, nil
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

// pathWatch makes sure a search of dirs is watched, as watchesFor says. It
// returns the generation to give pathPut, and false when that could not be
// done (nothing is cached then). It stats only directories not watched
// since the last event, and not under the lock. A directory found missing
// is looked at again once its ancestor is watched: created in between, it
// would otherwise go unwatched.
func (h *hub) pathWatch(dirs []string) (uint64, bool) {
	h.mu.Lock()
	if !h.openLocked() {
		h.mu.Unlock()
		return 0, false
	}
	h.drainLocked()
	gen := h.cache.gen
	var todo []string
	for _, d := range dirs {
		if !h.cache.covered[d] {
			todo = append(todo, d)
		}
	}
	h.mu.Unlock()
	if len(todo) == 0 {
		return gen, true
	}
	ws, missing := watchesFor(todo)
	if afterWatchesFor != nil {
		afterWatchesFor()
	}
	h.mu.Lock()
	h.drainLocked()
	ok := h.cache.gen == gen
	for _, w := range ws {
		if !ok {
			break
		}
		_, err := unix.InotifyAddWatch(h.fd, w, pathWatchMask)
		ok = err == nil
	}
	if ok {
		if h.cache.covered == nil {
			h.cache.covered = make(map[string]bool)
		}
		for _, d := range todo {
			h.cache.covered[d] = true
		}
	}
	h.mu.Unlock()
	if !ok {
		return 0, false
	}
	for _, d := range missing {
		if _, err := os.Stat(d); err == nil {
			h.mu.Lock()
			h.cache.emptyLocked()
			h.mu.Unlock()
			return 0, false
		}
	}
	return gen, true
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
// its parent, or for one that does not exist its nearest ancestor that does
// and that ancestor's parent. missing lists the directories that did not
// exist.
func watchesFor(dirs []string) (ws, missing []string) {
	seen := make(map[string]bool, 2*len(dirs))
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
		if e != d {
			missing = append(missing, d)
		}
		add(e)
		add(filepath.Dir(e))
	}
	return ws, missing
}
