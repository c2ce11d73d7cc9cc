package worker

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Containment limits: what one sandbox may move through the worker. Each
// has its own SBX code (docs/errors.md) and a default below; Config holds
// the operator's values.
const (
	// DefaultMaxFileReadBytes bounds one files.read (SBX_E1702), by the
	// file's size (st_size: a sparse file counts in full).
	DefaultMaxFileReadBytes = 256 << 20
	// DefaultMaxFileWriteBytes bounds one files.write (SBX_E1703).
	DefaultMaxFileWriteBytes = 256 << 20
	// DefaultMaxSandboxObjectBytes bounds what one sandbox's files.read
	// replies put into sbx_files within the bucket's TTL (SBX_E1704).
	DefaultMaxSandboxObjectBytes = 1 << 30
	// DefaultMaxOutputLimit is the largest exec output_limit (SBX_E1705).
	DefaultMaxOutputLimit = events.DefaultStreamOutputCap
	// DefaultMaxSandboxOutputBytes is one sandbox's share of SBX_OUT: the
	// output of all its streamed processes together (SBX_E1706); past it,
	// output is dropped and truncated set, so that one sandbox's flood
	// cannot evict the others' (SBX_OUT's default is 8 GiB).
	DefaultMaxSandboxOutputBytes = 1 << 30
	// objectWindow is how long a stored object counts: the bucket's TTL.
	objectWindow = 24 * time.Hour
)

// limits are the resolved containment limits of a worker.
type limits struct {
	fileRead, fileWrite, objects, outputLimit, sandboxOutput int64
}

func (c Config) limits() limits {
	pick := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	return limits{
		fileRead:      pick(c.MaxFileReadBytes, DefaultMaxFileReadBytes),
		fileWrite:     pick(c.MaxFileWriteBytes, DefaultMaxFileWriteBytes),
		objects:       pick(c.MaxSandboxObjectBytes, DefaultMaxSandboxObjectBytes),
		outputLimit:   pick(c.MaxOutputLimit, DefaultMaxOutputLimit),
		sandboxOutput: pick(c.MaxSandboxOutputBytes, DefaultMaxSandboxOutputBytes),
	}
}

// usage is what one sandbox has used of the limits shared by its
// operations. The zero value is ready.
type usage struct {
	output atomic.Int64 // bytes accepted for SBX_OUT, all processes
	shared atomic.Bool  // the share ran out at least once

	mu      sync.Mutex
	objects []objectUse // files.read objects stored within objectWindow
}

type objectUse struct {
	at   time.Time
	size int64
}

// takeOutput grants up to n bytes of the sandbox's output share.
func (u *usage) takeOutput(n, limit int64) int64 {
	for {
		used := u.output.Load()
		grant := min(n, max(limit-used, 0))
		if grant < n {
			u.shared.Store(true)
		}
		if grant == 0 || u.output.CompareAndSwap(used, used+grant) {
			return grant
		}
	}
}

// objectRoom is how many bytes the sandbox may still store.
func (u *usage) objectRoom(limit int64, now time.Time) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	var used int64
	kept := u.objects[:0]
	for _, o := range u.objects {
		if now.Sub(o.at) < objectWindow {
			kept = append(kept, o)
			used += o.size
		}
	}
	u.objects = kept
	return max(limit-used, 0)
}

func (u *usage) addObject(size int64, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.objects = append(u.objects, objectUse{at: now, size: size})
}

type readLimitKey struct{}

// ReadLimit is the largest file the files.read running on ctx may return
// (0: none). A FileSystem should refuse a larger file by its size (st_size,
// so that a sparse file counts in full) before it reads a byte, with
// FileTooLarge; the worker also stops the copy at the limit.
func ReadLimit(ctx context.Context) int64 {
	n, _ := ctx.Value(readLimitKey{}).(int64)
	return n
}

// WithReadLimit sets the ReadLimit of ctx (the worker does, for each
// files.read; backends' tests may).
func WithReadLimit(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, readLimitKey{}, n)
}

// FileTooLarge is the error for a files.read of a file of size bytes when
// ReadLimit is limit.
func FileTooLarge(path string, size, limit int64) *events.Error {
	return events.Errorf(events.CodeFileReadTooLarge, "%s is %d bytes, more than files.read returns (%d)", truncate(path), size, limit).
		With("size", size).With("limit", limit)
}

// capWriter passes at most limit bytes to w, then fails with err.
type capWriter struct {
	w     io.Writer
	limit int64
	n     int64
	err   *events.Error
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// capReader reads at most limit bytes from r, then fails with err.
type capReader struct {
	r     io.Reader
	limit int64
	n     int64
	err   *events.Error
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.limit {
		return 0, c.err
	}
	return n, err
}

// checkOutputLimit refuses an exec output_limit above the operator's
// maximum.
func (w *Worker) checkOutputLimit(n int64) *events.Error {
	if lim := w.cfg.limits().outputLimit; n > lim {
		return events.Errorf(events.CodeOutputLimitTooLarge, "output_limit %d is above this worker's maximum %d", n, lim).
			With("field", "output_limit").With("limit", lim)
	}
	return nil
}

// outputShare grants bytes of the sandbox's share of SBX_OUT.
func (w *Worker) outputShare(sb *sandbox) func(int64) int64 {
	lim := w.cfg.limits().sandboxOutput
	return func(n int64) int64 { return sb.usage.takeOutput(n, lim) }
}

func (w *Worker) shareExceeded(sb *sandbox) *events.Error {
	lim := w.cfg.limits().sandboxOutput
	return events.Errorf(events.CodeOutputShareExceeded, "sandbox %s has written its share of the output stream (%d bytes); later output was dropped", sb.id, lim).
		With("limit", lim)
}
