package router

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Storage quotas. Every object in sbx_files is named under
// events.FileObjectPrefix(tenant, sandbox): files.put parts (the router's)
// and files.read objects (the workers'). The router watches the bucket's
// object infos and sums their sizes per sandbox and per tenant, plus the
// parts it is storing now; a files.put that would take a sandbox past
// max_sandbox_storage_bytes, or a tenant past max_storage_bytes, is
// SBX_E1406 (not retryable) and stores nothing; a files.read carries the
// room left and the worker refuses a larger file (readgrant.go). Several
// routers share the watch, not their puts and reads in flight: each may let one part per concurrent
// put through past a limit. A files.put waits (at most filesLoadWait) until
// the watch delivered the bucket's current objects, or the usage would
// read empty. When a sandbox ends, the router deletes its objects
// (sweepStorage), only once both the registry cache and the files watch
// have loaded: before, a live sandbox looks unknown. The bucket's TTL is
// the backstop.

// storedObject is one object of sbx_files as the watch saw it.
type storedObject struct {
	tenant, sandbox string
	size            int64
	at              time.Time
}

// storageUse sums the objects per sandbox and per tenant.
type storageUse struct {
	mu      sync.Mutex
	objects map[string]storedObject // object name -> object
	sandbox map[string]int64        // <tenant>/<sandbox> -> bytes stored and reserved
	tenant  map[string]int64        // tenant -> bytes stored and reserved
}

func newStorageUse() *storageUse {
	return &storageUse{objects: map[string]storedObject{}, sandbox: map[string]int64{}, tenant: map[string]int64{}}
}

// objectOwner parses <tenant>/<sandbox>/… from an object name.
func objectOwner(name string) (tenant, sandbox string, ok bool) {
	parts := strings.SplitN(name, "/", 3)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func (u *storageUse) addLocked(tenant, sandbox string, n int64) {
	key := tenant + "/" + sandbox
	u.sandbox[key] += n
	u.tenant[tenant] += n
	if u.sandbox[key] <= 0 {
		delete(u.sandbox, key)
	}
	if u.tenant[tenant] <= 0 {
		delete(u.tenant, tenant)
	}
}

// set records an object's size (replacing what it was); size < 0 removes it.
func (u *storageUse) set(name string, size int64, at time.Time) {
	tenant, sandbox, ok := objectOwner(name)
	if !ok {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if old, had := u.objects[name]; had {
		u.addLocked(old.tenant, old.sandbox, -old.size)
		delete(u.objects, name)
	}
	if size >= 0 {
		u.objects[name] = storedObject{tenant: tenant, sandbox: sandbox, size: size, at: at}
		u.addLocked(tenant, sandbox, size)
	}
}

// reserve counts n more bytes for an object of tenant's sandbox, stored
// under name (its current size is not counted twice), unless a limit
// refuses them (SBX_E1406). release gives them back.
func (u *storageUse) reserve(tenant, sandbox, name string, n int64, lim events.TenantLimits) *events.Error {
	u.mu.Lock()
	defer u.mu.Unlock()
	more := n - u.objects[name].size
	if more <= 0 {
		more = 0
	}
	used := u.sandbox[tenant+"/"+sandbox]
	if lim.MaxSandboxStorageBytes >= 0 && used+more > lim.MaxSandboxStorageBytes {
		return storageExceeded("max_sandbox_storage_bytes", lim.MaxSandboxStorageBytes, used, more)
	}
	if used = u.tenant[tenant]; lim.MaxStorageBytes >= 0 && used+more > lim.MaxStorageBytes {
		return storageExceeded("max_storage_bytes", lim.MaxStorageBytes, used, more)
	}
	u.addLocked(tenant, sandbox, n)
	return nil
}

func (u *storageUse) release(tenant, sandbox string, n int64) {
	u.mu.Lock()
	u.addLocked(tenant, sandbox, -n)
	u.mu.Unlock()
}

func storageExceeded(quota string, limit, usage, asked int64) *events.Error {
	return events.Errorf(events.CodeStorageQuota, "storage quota %s is %d bytes; %d stored, %d more asked", quota, limit, usage, asked).
		With("quota", quota).With("limit", limit).With("usage", usage)
}

func (u *storageUse) tenantBytes(tenant string) int64 {
	if u == nil {
		return 0 // a Service made without New (tests)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tenant[tenant]
}

// owners lists the <tenant>/<sandbox> keys that hold objects, with the
// time of each one's newest object.
func (u *storageUse) owners() map[[2]string]time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[[2]string]time.Time)
	for _, o := range u.objects {
		k := [2]string{o.tenant, o.sandbox}
		if o.at.After(out[k]) {
			out[k] = o.at
		}
	}
	return out
}

// namesOf lists a sandbox's objects.
func (u *storageUse) namesOf(tenant, sandbox string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var names []string
	for name, o := range u.objects {
		if o.tenant == tenant && o.sandbox == sandbox {
			names = append(names, name)
		}
	}
	return names
}

// storageWatch keeps s.store equal to sbx_files' object infos until ctx
// ends, re-watching after the watch ends (a reconnect), and sweeps the
// objects of ended sandboxes every storageSweepEvery once regReady (the
// registry cache's initial load) and s.filesLoaded are closed.
func (s *Service) storageWatch(ctx context.Context, regReady <-chan struct{}) {
	for ctx.Err() == nil {
		if err := s.watchObjects(ctx, regReady); err != nil && ctx.Err() == nil {
			s.log.Warn("files watch ended; restarting", slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second): // between two watches of the bucket
		}
	}
}

// storageSweepEvery paces the deletion of ended sandboxes' objects.
const storageSweepEvery = 2 * time.Second

// orphanObjectGrace is how old the objects of a sandbox the registry does
// not know must be before they are deleted (its record may trail them);
// filesLoadWait bounds a files.put's wait for the files watch's initial
// load. Variables for tests.
var (
	orphanObjectGrace = 10 * time.Minute
	filesLoadWait     = 5 * time.Second
)

// testHookFilesLoad, set by tests only, runs before the files watch
// applies an update of its initial load (to hold it).
var testHookFilesLoad func()

// testHookSweepTick, set by tests only, runs at each sweep tick with
// whether the sweep ran.
var testHookSweepTick func(swept bool)

func loaded(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// awaitFilesLoaded waits (bounded) until the files watch delivered the
// bucket's current objects: before, the storage usage reads empty.
func (s *Service) awaitFilesLoaded(ctx context.Context) *events.Error {
	t := time.NewTimer(filesLoadWait)
	defer t.Stop()
	select {
	case <-s.filesLoaded:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return events.Errorf(events.CodeBackendUnavailable, "object store usage still loading")
}

func (s *Service) watchObjects(ctx context.Context, regReady <-chan struct{}) error {
	w, err := s.files.Watch(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	t := time.NewTicker(storageSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case info, ok := <-w.Updates():
			if !ok {
				return errors.New("files watch closed")
			}
			if testHookFilesLoad != nil && !loaded(s.filesLoaded) {
				testHookFilesLoad()
			}
			if info == nil {
				closeOnce(s.filesLoaded) // the current objects are in: updates follow
				continue
			}
			size := int64(info.Size)
			if info.Deleted {
				size = -1
			}
			s.store.set(info.Name, size, info.ModTime)
		case <-t.C:
			ready := loaded(regReady) && loaded(s.filesLoaded)
			if ready {
				s.sweepStorage(ctx)
			}
			if testHookSweepTick != nil {
				testHookSweepTick(ready)
			}
		}
	}
}

// sweepStorage deletes the objects of sandboxes that ended, and of those
// the registry does not know whose newest object is older than
// orphanObjectGrace.
func (s *Service) sweepStorage(ctx context.Context) {
	for k, newest := range s.store.owners() {
		sb, known := s.cachedSandbox(k[1])
		if known && !sb.State.Ended() || !known && time.Since(newest) < orphanObjectGrace {
			continue
		}
		for _, name := range s.store.namesOf(k[0], k[1]) {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.files.Delete(dctx, name)
			cancel()
			if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				s.log.Warn("object of an ended sandbox not deleted", "sandbox_id", k[1], slog.Any("err", err))
				continue
			}
			s.store.set(name, -1, time.Time{})
		}
	}
}
