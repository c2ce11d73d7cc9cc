package worker

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	// replies put into sbx_files within the bucket's TTL (SBX_E1704): the
	// default max_sandbox_storage_bytes (events.DefaultTenantLimits), an
	// eighth of sbx_files' default size. The router counts these objects
	// in the tenant's storage use (its files.put are refused past its
	// quota), but the worker does not check the tenant's max_storage_bytes:
	// a tenant with many sandboxes can still fill the bucket.
	DefaultMaxSandboxObjectBytes = 256 << 20
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
	// tenantCut is set when the tenant's share (not the sandbox's) ran out.
	tenantCut atomic.Bool
	// tenant is the sandbox's tenant token, set under the ledger's mu when
	// the sandbox joins.
	tenant string
	// released is set (under the worker's outputLedger.mu) once the
	// sandbox left the worker: its output no longer counts, and it may
	// publish no more.
	released bool
	// saved is the output count last written to the registry.
	saved atomic.Int64

	mu      sync.Mutex
	objects []objectUse // files.read objects stored within objectWindow
	dirty   bool        // objects changed since the registry write
}

type objectUse struct {
	at   time.Time
	size int64
}

// outputLedger is a worker's account of SBX_OUT, the stream every
// sandbox's output shares: DiscardOld evicts the oldest output of any
// sandbox once the stream holds MaxBytes. The output of the worker's live
// sandboxes together never exceeds budget, and each sandbox's share is at
// most budget divided by the live count, so that no flood of one sandbox,
// or of several together, can push the stream past its budget and evict
// another's output: past its share a sandbox's output is dropped
// (truncated, SBX_E1706).
//
// A sandbox that leaves gives its share back, but its output stays in the
// stream (late readers attach within MaxAge): the ledger goes on counting
// it as departed, and when a grant needs the room, the worker purges a
// departed sandbox's output itself (take returns it to purge), so that the
// stream never fills with departed output and DiscardOld never evicts a
// live sandbox's older output.
//
// The ledger also counts each tenant's output, live and departed, against
// the tenant's share (tenantoutput.go, ADR 44): past it the tenant's own
// oldest departed output is purged, or its new output dropped, never
// another tenant's. When the budget needs room, the departed output
// purged is that of the tenant storing the most, and only of a tenant
// storing at least as much as the one asking.
type outputLedger struct {
	mu     sync.Mutex
	budget int64 // 0: none (the stream has no byte limit)
	// full is the budget of a worker that has the whole stream (7/8 of its
	// MaxBytes; 0: no limit); a budget below it scales tenants' shares.
	full int64
	used int64 // the output of the live sandboxes, and of the departed ones
	live atomic.Int64
	// tenants are the tenants with live sandboxes or departed output here.
	tenants map[string]*tenantOutput
	// departed counts the departed outputs of all tenants.
	departed int
}

// departedOutput is a departed sandbox's output: its tenant, subjects and
// bytes.
type departedOutput struct {
	tenant string
	filter string
	bytes  int64
}

// maxDeparted bounds the departed sandboxes the ledger remembers; past it
// the oldest is forgotten (its bytes no longer counted).
const maxDeparted = 100000

// take grants up to n bytes of u's share, at most share, and within its
// tenant's share tenantCap (negative: none). When the tenant's share or
// the budget stands in the way and departed output may make the room, it
// grants nothing and returns departed output for the caller to purge
// (then purged, then take again): the tenant's own for its share; for the
// budget, that of victim.
func (l *outputLedger) take(u *usage, n, share, tenantCap int64) (int64, *departedOutput) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.released {
		return 0, nil
	}
	limit := share
	if l.budget > 0 {
		limit = min(limit, l.budget/max(l.live.Load(), 1))
	}
	grant := min(n, max(limit-u.output.Load(), 0))
	t := l.tenant(u.tenant)
	if room := max(tenantCap-t.used, 0); tenantCap >= 0 && room < grant {
		if d := l.popDeparted(t); d != nil {
			return 0, d
		}
		grant = room
		u.tenantCut.Store(true)
	}
	if room := max(l.budget-l.used, 0); l.budget > 0 && room < grant {
		if d := l.popDeparted(l.victim(t)); d != nil {
			return 0, d
		}
		grant = room
	}
	if grant < n {
		u.shared.Store(true)
	}
	u.output.Add(grant)
	l.used += grant
	t.used += grant
	return grant, nil
}

// charge counts n bytes that u stored whatever its share (an exit marker:
// readers wait for it, so it is never refused).
func (l *outputLedger) charge(u *usage, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.released {
		return
	}
	u.output.Add(n)
	l.used += n
	l.tenant(u.tenant).used += n
}

// purged stops counting departed output that was purged (or could not be:
// then DiscardOld evicts it, as before the ledger).
func (l *outputLedger) purged(d *departedOutput) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.used -= d.bytes
	l.tenantLess(d.tenant, d.bytes)
}

// join counts a sandbox of tenant that came to the worker, with what it
// used before (a re-adopted sandbox's restored usage).
func (l *outputLedger) join(u *usage, tenant string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u.tenant = tenant
	l.live.Add(1)
	out := u.output.Load()
	l.used += out
	t := l.tenant(tenant)
	t.live++
	t.used += out
}

// leave stops counting a sandbox that left the worker. Its output, under
// filter, stays counted as departed until purged; with filter "" (the
// sandbox's record moved to a successor that counts it) it is forgotten.
func (l *outputLedger) leave(u *usage, filter string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u.released {
		return
	}
	u.released = true
	l.live.Add(-1)
	t := l.tenant(u.tenant)
	t.live--
	out := u.output.Load()
	if filter == "" || out == 0 {
		l.used -= out
		l.tenantLess(u.tenant, out)
		return
	}
	if l.departed >= maxDeparted {
		if d := l.popDeparted(l.victim(nil)); d != nil {
			l.used -= d.bytes // forgotten: DiscardOld evicts it in time
			l.tenantLess(d.tenant, d.bytes)
		}
	}
	t.departed = append(t.departed, departedOutput{tenant: u.tenant, filter: filter, bytes: out})
	l.departed++
}

// outputBudgetShare is the part of SBX_OUT's MaxBytes a worker's ledger
// gives out by default: the rest is headroom for the messages' subjects
// and headers and for the exit markers, which the ledger does not count.
const outputBudgetShare = 7.0 / 8

// setOutputBudget sets the ledger's budget from the configuration or, by
// default, from SBX_OUT's byte limit.
func (w *Worker) setOutputBudget(ctx context.Context) {
	limit := w.cfg.Bus.Defaults().OutputMaxBytes
	if st, err := w.js.Stream(ctx, events.StreamOutput); err == nil {
		limit = st.CachedInfo().Config.MaxBytes
	}
	if limit > 0 {
		w.out.full = int64(float64(limit) * outputBudgetShare)
	}
	w.out.budget = w.out.full
	if b := w.cfg.OutputBudgetBytes; b != 0 {
		w.out.budget = max(b, 0)
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
	u.dirty = true
}

// snapshot is the usage as the registry keeps it: objects merged by the
// hour, each at its latest time (so that they count no shorter than they
// did), the expired ones left out.
func (u *usage) snapshot(now time.Time) *events.SandboxUsage {
	s := &events.SandboxUsage{OutputBytes: u.output.Load()}
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, o := range u.objects {
		if now.Sub(o.at) >= objectWindow {
			continue
		}
		hour := o.at.Truncate(time.Hour)
		if n := len(s.Objects); n > 0 && s.Objects[n-1].At.Truncate(time.Hour).Equal(hour) {
			s.Objects[n-1].Bytes += o.size
			s.Objects[n-1].At = o.at
			continue
		}
		s.Objects = append(s.Objects, events.ObjectUsage{At: o.at, Bytes: o.size})
	}
	if s.OutputBytes == 0 && len(s.Objects) == 0 {
		return nil
	}
	return s
}

// restore takes up the usage a predecessor saved (before the sandbox
// joins the output ledger).
func (u *usage) restore(s *events.SandboxUsage) {
	if s == nil {
		return
	}
	u.output.Store(max(s.OutputBytes, 0))
	u.saved.Store(u.output.Load())
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, o := range s.Objects {
		u.objects = append(u.objects, objectUse{at: o.At, size: max(o.Bytes, 0)})
	}
}

// usageSaveStep is how much new output makes the end of a stream save the
// usage at once; smaller changes wait for the next heartbeat, so that a
// stream of small execs costs no registry write each.
const usageSaveStep = 1 << 20

// saveUsage writes the sandbox's usage into its registry record when it
// changed since the last write, so that a same-id restart keeps counting
// (reconcile restores it). A failed write is left for the next one.
func (w *Worker) saveUsage(ctx context.Context, sb *sandbox) {
	out := sb.usage.output.Load()
	sb.usage.mu.Lock()
	dirty := sb.usage.dirty
	sb.usage.dirty = false
	sb.usage.mu.Unlock()
	if out == sb.usage.saved.Load() && !dirty {
		return
	}
	sb.regMu.Lock()
	defer sb.regMu.Unlock()
	sb.mu.Lock()
	if sb.gone || sb.killWait != nil || !sb.ready {
		sb.mu.Unlock()
		return
	}
	rec, rev := sb.record, sb.revision
	sb.mu.Unlock()
	rec.Usage = sb.usage.snapshot(time.Now())
	next, err := w.putRecord(ctx, rec, rev)
	if err != nil {
		sb.usage.mu.Lock()
		sb.usage.dirty = true
		sb.usage.mu.Unlock()
		w.log.Debug("usage not saved", "sandbox_id", sb.id, slog.Any("err", err))
		return
	}
	saved := int64(0)
	if rec.Usage != nil {
		saved = rec.Usage.OutputBytes
	}
	sb.usage.saved.Store(saved)
	sb.mu.Lock()
	sb.record.Usage, sb.revision = rec.Usage, next
	sb.mu.Unlock()
}

// saveUsages saves every sandbox's changed usage, one pass at a time.
func (w *Worker) saveUsages(ctx context.Context) {
	if !w.savingUsage.CompareAndSwap(false, true) {
		return
	}
	defer w.savingUsage.Store(false)
	w.mu.Lock()
	sbs := make([]*sandbox, 0, len(w.sandboxes))
	for _, sb := range w.sandboxes {
		sbs = append(sbs, sb)
	}
	w.mu.Unlock()
	for _, sb := range sbs {
		if ctx.Err() != nil {
			return
		}
		w.saveUsage(ctx, sb)
	}
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

// outputShare grants bytes of the sandbox's share of SBX_OUT, purging
// departed sandboxes' output first where the budget needs the room.
func (w *Worker) outputShare(sb *sandbox) func(int64) int64 {
	lim := w.cfg.limits().sandboxOutput
	tenant := sb.tenantToken()
	return func(n int64) int64 {
		for {
			g, d := w.out.take(&sb.usage, n, lim, w.tenantShare(tenant))
			if d == nil {
				return g
			}
			w.purgeDeparted(d)
		}
	}
}

// purgeTimeout bounds the purge of one departed sandbox's output.
const purgeTimeout = 5 * time.Second

// purgeDeparted removes a departed sandbox's output from SBX_OUT.
func (w *Worker) purgeDeparted(d *departedOutput) {
	defer w.out.purged(d)
	ctx, cancel := context.WithTimeout(detached(), purgeTimeout)
	defer cancel()
	st, err := w.js.Stream(ctx, events.StreamOutput)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(d.filter))
	}
	if err != nil {
		w.log.Warn("departed output not purged", "subjects", d.filter, "bytes", d.bytes, slog.Any("err", err))
	}
}

// departedFilter is what a departed sandbox's output is purged by.
func departedFilter(sb *sandbox) string {
	return "sbx.out." + sb.tenantToken() + "." + sb.id + ".>"
}

// markerSlack is how far past its share a sandbox's exit markers (charged,
// never refused) may take it before its streamed execs are refused: a
// loop of streamed execs without output stores a marker each.
const markerSlack = 64 << 10

// shareSpent reports whether the sandbox's exit markers took it past its
// share by markerSlack: a streamed exec would store nothing but one more.
func (w *Worker) shareSpent(sb *sandbox) bool {
	return sb.usage.output.Load() >= w.shareLimit()+markerSlack || w.tenantSpent(sb.tenantToken())
}

// shareLimit is a sandbox's share of SBX_OUT now.
func (w *Worker) shareLimit() int64 {
	lim := w.cfg.limits().sandboxOutput
	if w.out.budget > 0 {
		lim = min(lim, w.out.budget/max(w.out.live.Load(), 1))
	}
	return lim
}

func (w *Worker) shareExceeded(sb *sandbox) *events.Error {
	if sb.usage.tenantCut.Load() || w.tenantSpent(sb.tenantToken()) {
		return w.tenantShareExceeded(sb)
	}
	lim := w.shareLimit()
	return events.Errorf(events.CodeOutputShareExceeded, "sandbox %s has written its share of the output stream (%d bytes now, of %d for this worker's %d sandboxes); later output was dropped",
		sb.id, lim, w.out.budget, w.out.live.Load()).
		With("limit", lim).With("used", sb.usage.output.Load())
}
