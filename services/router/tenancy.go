package router

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// caller is who the NATS server says sent a request.
type caller struct {
	// tenant is the caller's tenant token: the account of the
	// Nats-Request-Info header, or events.TenantOpen without one.
	tenant string
	// authed is true when the server named the caller's account: the caller
	// is a tenant, confined to its own sandboxes and quotas.
	authed bool
	info   events.RequestInfo
	// until is the caller's own deadline as this router sees it, less a
	// margin for the answer's way back (zero: none given).
	until time.Time
}

// maxCallerTimeoutMS is the longest caller timeout the router bounds by.
const maxCallerTimeoutMS = int64(24 * time.Hour / time.Millisecond)

// callerUntil reads the caller's timeout (events.HeaderCallerTimeout).
func callerUntil(h micro.Headers) time.Time {
	ms, err := strconv.ParseInt(headerValue(h, events.HeaderCallerTimeout), 10, 64)
	// Beyond a day it is no deadline a command could be cut to (and
	// would overflow a Duration): the request is served unbounded.
	if err != nil || ms <= 0 || ms > maxCallerTimeoutMS {
		return time.Time{}
	}
	d := time.Duration(ms) * time.Millisecond
	return time.Now().Add(d - min(max(d/10, 20*time.Millisecond), time.Second))
}

// bound is timeout cut to the caller's deadline; bounded says it was cut.
func (c caller) bound(timeout time.Duration) (d time.Duration, bounded bool) {
	if c.until.IsZero() {
		return timeout, false
	}
	if left := max(time.Until(c.until), time.Millisecond); left < timeout {
		return left, true
	}
	return timeout, false
}

// callerOf reads the caller from the Nats-Request-Info header that
// nats-server stamps on every request crossing a service import (it
// replaces one a client set itself). Requests without it come from inside
// the services account or from an open deployment: TenantOpen. The lookup
// is case-insensitive, and more than one value (a client adding a
// differently-cased copy next to the server's) is refused, never guessed.
func callerOf(h micro.Headers) (caller, *events.Error) {
	var values []string
	for k, v := range h {
		if strings.EqualFold(k, events.HeaderRequestInfo) {
			values = append(values, v...)
		}
	}
	if len(values) == 0 {
		return caller{tenant: events.TenantOpen}, nil
	}
	if len(values) > 1 {
		return caller{}, events.Errorf(events.CodeUnauthorized, "the request carries %d %s headers", len(values), events.HeaderRequestInfo)
	}
	ri, ok, err := events.ParseRequestInfo(values[0])
	if err != nil {
		return caller{}, events.Errorf(events.CodeUnauthorized, "the %s header is malformed", events.HeaderRequestInfo)
	}
	if !ok {
		return caller{tenant: events.TenantOpen}, nil
	}
	if ri.Account == events.TenantOpen {
		// An account named like the open token would share the open
		// sandboxes' subjects: never a tenant.
		return caller{}, events.Errorf(events.CodeUnauthorized, "account %q cannot be a tenant", ri.Account)
	}
	return caller{tenant: ri.Account, authed: true, info: ri}, nil
}

// tenantOf is a sandbox's tenant token (records from before tenancy have
// none: they are TenantOpen's).
func tenantOf(sb events.Sandbox) string {
	if sb.Tenant == "" {
		return events.TenantOpen
	}
	return sb.Tenant
}

// forbidden is the one answer a tenant gets for a sandbox that is not its
// own, whether or not it exists, so that existence is never revealed.
func forbidden(id string) *events.Error {
	return events.Errorf(events.CodeForbidden, "sandbox %s does not exist or belongs to another tenant", id).With("sandbox_id", id)
}

// may reports whether a caller may address a sandbox: tenants only their
// own; TenantOpen callers (operators, open deployments) every one.
func (c caller) may(sb events.Sandbox) bool {
	return !c.authed || tenantOf(sb) == c.tenant
}

// authorize finds the sandbox a caller addresses and checks that the caller
// may address it. It reads the registry cache and, when the cache does not
// have the sandbox, the bucket itself (a sandbox created a moment ago may
// not be in the cache yet).
func (s *Service) authorize(ctx context.Context, c caller, id string) (events.Sandbox, *events.Error) {
	sb, ok, err := s.lookupSandbox(ctx, id)
	if err != nil {
		return events.Sandbox{}, events.Errorf(events.CodeBackendUnavailable, "registry: %v", err)
	}
	return checkOwner(c, id, sb, ok)
}

func checkOwner(c caller, id string, sb events.Sandbox, found bool) (events.Sandbox, *events.Error) {
	switch {
	case c.authed && (!found || !c.may(sb)):
		return events.Sandbox{}, forbidden(id)
	case !found:
		return events.Sandbox{}, events.Errorf(events.CodeSandboxNotFound, "no sandbox %s", id).With("sandbox_id", id)
	}
	return sb, nil
}

// ---- tenant records ----

// openTenants opens the sbx_tenants bucket, creating it when it is missing
// (History 1, no TTL: a tenant lives until the operator removes it).
func (s *Service) openTenants(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, events.BucketTenants)
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	storage := jetstream.FileStorage
	if s.cfg.Bus.Memory {
		storage = jetstream.MemoryStorage
	}
	kv, err = s.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: events.BucketTenants,
		Description: "tenant quotas", History: 1, MaxBytes: s.cfg.Bus.Defaults().TenantsMaxBytes, Storage: storage, Replicas: s.cfg.Bus.Replicas})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return s.js.KeyValue(ctx, events.BucketTenants) // another service created it meanwhile
	}
	return kv, err
}

// applyTenant applies one entry of the tenants watch.
func (s *Service) applyTenant(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.tenants, e.Key())
		return
	}
	var rec events.TenantRecord
	if json.Unmarshal(e.Value(), &rec) == nil {
		s.tenants[e.Key()] = rec
	} else {
		s.log.Warn("tenant record is corrupt; the default limits apply", "tenant", e.Key())
		delete(s.tenants, e.Key())
	}
}

func closeOnce(ch chan<- struct{}) {
	if ch == nil {
		return
	}
	defer func() { _ = recover() }() // already closed: the watch was reset
	close(ch)
}

// limitsFor returns a tenant's effective limits: its record's, else the
// router's DefaultLimits, else events.DefaultTenantLimits, field by field;
// every negative value becomes -1 (unlimited). TenantOpen has no quota.
func (s *Service) limitsFor(tenant string) (events.TenantLimits, string) {
	d, c := events.DefaultTenantLimits, s.cfg.DefaultLimits
	if tenant == events.TenantOpen {
		// No quota, but one sandbox's storage is bounded all the same:
		// the bus's disk is shared.
		return events.TenantLimits{MaxSandboxes: -1, MaxExecs: -1, MaxLifetimeS: -1, MaxStorageBytes: -1,
			MaxSandboxStorageBytes: pickLimit(c.MaxSandboxStorageBytes, d.MaxSandboxStorageBytes), MaxOutputBytes: -1,
			MaxRequestsPerS: -1}, ""
	}
	s.mu.RLock()
	rec := s.tenants[tenant]
	s.mu.RUnlock()
	pick := pickLimit
	return events.TenantLimits{
		MaxSandboxes:           int(pick(int64(rec.Limits.MaxSandboxes), int64(c.MaxSandboxes), int64(d.MaxSandboxes))),
		MaxExecs:               int(pick(int64(rec.Limits.MaxExecs), int64(c.MaxExecs), int64(d.MaxExecs))),
		MaxLifetimeS:           pick(rec.Limits.MaxLifetimeS, c.MaxLifetimeS, d.MaxLifetimeS),
		MaxStorageBytes:        pick(rec.Limits.MaxStorageBytes, c.MaxStorageBytes, d.MaxStorageBytes),
		MaxSandboxStorageBytes: pick(rec.Limits.MaxSandboxStorageBytes, c.MaxSandboxStorageBytes, d.MaxSandboxStorageBytes),
		// Enforced by the workers (their MaxTenantOutputBytes is the
		// default there): shown here as the record sets it.
		MaxOutputBytes:  pick(rec.Limits.MaxOutputBytes, c.MaxOutputBytes, d.MaxOutputBytes),
		MaxRequestsPerS: pick(rec.Limits.MaxRequestsPerS, c.MaxRequestsPerS, d.MaxRequestsPerS),
	}, rec.Name
}

// pickLimit is the first value set: a negative one is -1 (unlimited), zero
// is unset; none set is unlimited.
func pickLimit(vals ...int64) int64 {
	for _, v := range vals {
		if v < 0 {
			return -1
		}
		if v > 0 {
			return v
		}
	}
	return -1
}

// ---- quotas ----
//
// Sandboxes and lifetimes are counted from the registry cache plus the
// creates this router has sent and not yet seen in the cache, under one
// mutex with the check, so that two creates at the limit cannot both pass
// here. Several routers share the registry but not their in-flight
// creates: two creates at the limit sent to two routers within the
// registry's propagation delay may both pass. Execs are counted per
// router: what this router forwarded and has not seen finish (a
// non-streamed exec until its reply, a streamed one until its exit marker
// on sbx.live.*.*.*.exit, its timeout or its sandbox's end). With several
// routers the exec quota therefore applies per router.

// quotaState is guarded by Service.qmu. Lock order: qmu, then mu.
type quotaState struct {
	creates map[string]*reservation // sandbox id -> a create in flight
	execs   map[string]int          // tenant -> execs counted now
	streams map[string]*streamExec  // <tenant>.<sandbox>.<process> -> a streamed exec
	exited  map[string]time.Time    // exit markers seen before the exec's reply
	extends map[string]*extension   // sandbox id -> a set_timeout in flight
}

// extension is the lifetime a set_timeout adds, counted from its check
// until the registry cache shows the new deadline, so that concurrent
// set_timeouts cannot each pass against the same usage.
type extension struct {
	tenant string
	more   int64     // seconds added to the tenant's lifetime sum
	life   int64     // the sandbox's lifetime once extended
	done   time.Time // when the set_timeout succeeded; zero while in flight
}

type reservation struct {
	tenant    string
	lifetimeS int64
	done      time.Time // when the create succeeded; zero while in flight
}

type streamExec struct {
	tenant, sandbox string
	until           time.Time // zero: until the sandbox ends
}

const (
	// reservationGrace keeps a successful create counted until the
	// registry cache shows its sandbox.
	reservationGrace = 30 * time.Second
	// maxExitedRemembered bounds the exits remembered for replies that
	// have not arrived yet.
	maxExitedRemembered = 10000
	exitedMemory        = 2 * time.Minute
)

func newQuotaState() quotaState {
	return quotaState{creates: map[string]*reservation{}, execs: map[string]int{},
		streams: map[string]*streamExec{}, exited: map[string]time.Time{}, extends: map[string]*extension{}}
}

// recordLifetime is the lifetime a record asked for, in seconds.
func recordLifetime(sb events.Sandbox) int64 {
	d := sb.Deadline.Sub(sb.CreatedAt)
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// liveUsage is what a tenant's live sandboxes in the registry cache use.
type liveUsage struct {
	sandboxes int
	lifetimeS int64
}

// setSandboxLocked updates the registry cache and the per-tenant sums of
// its live sandboxes (nil: the record is gone); the caller holds mu.
func (s *Service) setSandboxLocked(id string, rec *events.Sandbox) {
	if old, ok := s.sandboxes[id]; ok && holdsQuota(old.State) {
		if lu := s.live[tenantOf(old)]; lu != nil {
			lu.sandboxes--
			lu.lifetimeS -= recordLifetime(old)
			if lu.sandboxes <= 0 {
				delete(s.live, tenantOf(old))
			}
		}
	}
	if rec == nil {
		delete(s.sandboxes, id)
		return
	}
	s.sandboxes[id] = *rec
	if holdsQuota(rec.State) {
		lu := s.live[tenantOf(*rec)]
		if lu == nil {
			lu = &liveUsage{}
			s.live[tenantOf(*rec)] = lu
		}
		lu.sandboxes++
		lu.lifetimeS += recordLifetime(*rec)
	}
}

// usageLocked counts a tenant's usage; the caller holds qmu.
func (s *Service) usageLocked(tenant string) events.TenantUsage {
	var u events.TenantUsage
	s.mu.RLock()
	if lu := s.live[tenant]; lu != nil {
		u.Sandboxes, u.LifetimeS = lu.sandboxes, lu.lifetimeS
	}
	for id, r := range s.q.creates {
		if r.tenant != tenant {
			continue
		}
		if _, inCache := s.sandboxes[id]; inCache {
			continue // counted above while it lives
		}
		u.Sandboxes++
		u.LifetimeS += r.lifetimeS
	}
	for id, x := range s.q.extends {
		if x.tenant != tenant || extensionSeen(s.sandboxes[id], x) {
			continue
		}
		u.LifetimeS += x.more
	}
	s.mu.RUnlock()
	u.Execs = s.q.execs[tenant]
	u.StorageBytes = s.store.tenantBytes(tenant)
	return u
}

func (s *Service) usage(tenant string) events.TenantUsage {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	return s.usageLocked(tenant)
}

func quotaExceeded(what string, limit, usage, asked int64) *events.Error {
	return events.Errorf(events.CodeQuotaExceeded, "quota %s is %d; %d in use, %d more asked", what, limit, usage, asked).
		With("quota", what).With("limit", limit).With("usage", usage)
}

// reserveCreate checks a tenant's sandbox and lifetime quotas and, when
// they allow it, counts the create until it ends (dropCreate) or its
// sandbox is in the registry cache (createDone).
func (s *Service) reserveCreate(c caller, id string, lifetimeS int) *events.Error {
	if !c.authed {
		return nil
	}
	lim, _ := s.limitsFor(c.tenant)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	u := s.usageLocked(c.tenant)
	if lim.MaxSandboxes >= 0 && u.Sandboxes+1 > lim.MaxSandboxes {
		return quotaExceeded("max_sandboxes", int64(lim.MaxSandboxes), int64(u.Sandboxes), 1)
	}
	if lim.MaxLifetimeS >= 0 && u.LifetimeS+int64(lifetimeS) > lim.MaxLifetimeS {
		return quotaExceeded("max_lifetime_s", lim.MaxLifetimeS, u.LifetimeS, int64(lifetimeS))
	}
	s.q.creates[id] = &reservation{tenant: c.tenant, lifetimeS: int64(lifetimeS)}
	return nil
}

func (s *Service) dropCreate(id string) {
	s.qmu.Lock()
	delete(s.q.creates, id)
	s.qmu.Unlock()
}

func (s *Service) createDone(id string) {
	s.qmu.Lock()
	if r := s.q.creates[id]; r != nil {
		r.done = time.Now()
	}
	s.qmu.Unlock()
}

// checkExtend checks that a tenant's set_timeout keeps the sum of its
// lifetimes within its quota (the sandbox's lifetime becomes the time
// from its creation to the new deadline).
func (s *Service) checkExtend(c caller, sb events.Sandbox, timeoutS int) (bool, *events.Error) {
	if !c.authed {
		return false, nil
	}
	lim, _ := s.limitsFor(c.tenant)
	if lim.MaxLifetimeS < 0 {
		return false, nil
	}
	newLife := recordLifetime(events.Sandbox{CreatedAt: sb.CreatedAt, Deadline: time.Now().Add(time.Duration(timeoutS) * time.Second)})
	// Check and count under one lock: two set_timeouts must not both pass
	// against the same usage.
	s.qmu.Lock()
	defer s.qmu.Unlock()
	u := s.usageLocked(c.tenant)
	old := recordLifetime(sb)
	if sb.State.Ended() {
		old = 0
	}
	x := s.q.extends[sb.SandboxID]
	if x != nil && x.life > old {
		old = x.life // another set_timeout of this sandbox is counted already
	}
	more := newLife - old
	if more <= 0 {
		return false, nil
	}
	if u.LifetimeS+more > lim.MaxLifetimeS {
		return false, quotaExceeded("max_lifetime_s", lim.MaxLifetimeS, u.LifetimeS, more)
	}
	if x == nil {
		x = &extension{tenant: c.tenant}
		s.q.extends[sb.SandboxID] = x
	}
	x.more, x.life, x.done = x.more+more, newLife, time.Time{}
	return true, nil
}

// extensionSeen: the registry cache shows the extended deadline (or the
// sandbox's end), so the live sums count it.
func extensionSeen(sb events.Sandbox, x *extension) bool {
	return sb.SandboxID != "" && (sb.State.Ended() || recordLifetime(sb) >= x.life)
}

// extendDone settles a counted set_timeout: a failed one stops counting, a
// successful one counts until the registry cache shows it.
func (s *Service) extendDone(id string, ok bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	x := s.q.extends[id]
	switch {
	case x == nil:
	case ok:
		x.done = time.Now()
	default:
		delete(s.q.extends, id)
	}
}

// beginExec counts an exec or run_code of a tenant, or refuses it.
func (s *Service) beginExec(c caller) *events.Error {
	if !c.authed {
		return nil
	}
	lim, _ := s.limitsFor(c.tenant)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	n := s.q.execs[c.tenant]
	if lim.MaxExecs >= 0 && n+1 > lim.MaxExecs {
		return quotaExceeded("max_execs", int64(lim.MaxExecs), int64(n), 1)
	}
	s.q.execs[c.tenant] = n + 1
	return nil
}

func (s *Service) endExecLocked(tenant string) {
	if n := s.q.execs[tenant] - 1; n > 0 {
		s.q.execs[tenant] = n
	} else {
		delete(s.q.execs, tenant)
	}
}

func (s *Service) endExec(tenant string) {
	s.qmu.Lock()
	s.endExecLocked(tenant)
	s.qmu.Unlock()
}

func streamKey(tenant, sandbox, process string) string { return tenant + "." + sandbox + "." + process }

// execStreaming keeps a started streamed exec counted until its exit
// marker (or until, or its sandbox's end).
func (s *Service) execStreaming(tenant, sandbox, process string, until time.Time) {
	key := streamKey(tenant, sandbox, process)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if _, seen := s.q.exited[key]; seen || process == "" {
		delete(s.q.exited, key)
		s.endExecLocked(tenant)
		return
	}
	if old := s.q.streams[key]; old != nil {
		s.endExecLocked(old.tenant) // a process id used twice: count it once
	}
	s.q.streams[key] = &streamExec{tenant: tenant, sandbox: sandbox, until: until}
}

// onExit ends the count of a streamed exec whose exit marker arrived.
func (s *Service) onExit(subject string) {
	tenant, sandbox, process, stream, ok := events.ParseOutputSubject(subject)
	if !ok || stream != events.Exit || tenant == events.TenantOpen {
		return
	}
	key := streamKey(tenant, sandbox, process)
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if se := s.q.streams[key]; se != nil {
		delete(s.q.streams, key)
		s.endExecLocked(se.tenant)
		return
	}
	if len(s.q.exited) < maxExitedRemembered {
		s.q.exited[key] = time.Now()
	}
}

// sweepQuotas drops what can no longer be in use: streamed execs past
// their bound or of ended sandboxes, creates the cache has caught up with,
// and old remembered exits.
func (s *Service) sweepQuotas() {
	now := time.Now()
	s.qmu.Lock()
	defer s.qmu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	for key, se := range s.q.streams {
		sb, ok := s.sandboxes[se.sandbox]
		gone := !ok || sb.State.Ended() || now.After(sb.Deadline.Add(s.cfg.ReplyMargin))
		if gone || !se.until.IsZero() && now.After(se.until) {
			delete(s.q.streams, key)
			s.endExecLocked(se.tenant)
		}
	}
	for id, r := range s.q.creates {
		if r.done.IsZero() {
			continue
		}
		if _, inCache := s.sandboxes[id]; inCache || now.Sub(r.done) > reservationGrace {
			delete(s.q.creates, id)
		}
	}
	for id, x := range s.q.extends {
		if !x.done.IsZero() && (extensionSeen(s.sandboxes[id], x) || now.Sub(x.done) > reservationGrace) {
			delete(s.q.extends, id)
		}
	}
	for key, at := range s.q.exited {
		if now.Sub(at) > exitedMemory {
			delete(s.q.exited, key)
		}
	}
}

func (s *Service) quotaLoop(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweepQuotas()
		}
	}
}

// quota answers the quota op: who the caller is, its limits and its usage.
func (s *Service) quota(c caller) events.QuotaReply {
	lim, name := s.limitsFor(c.tenant)
	u := s.usage(c.tenant)
	u.OutputBytes = s.outputBytes(c.tenant)
	return events.QuotaReply{Tenant: c.tenant, Name: name, Limits: lim, Usage: u}
}

// outputBytes is the output the tenant's sandboxes in the registry cache
// (live, and ended ones not yet removed) put into SBX_OUT, as their
// workers last saved it in the records (usage.output_bytes: at least once
// a heartbeat while it changes). Output of ended sandboxes the stream no
// longer holds may still count until their records go.
func (s *Service) outputBytes(tenant string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for _, sb := range s.sandboxes {
		if sb.Usage != nil && tenantOf(sb) == tenant {
			n += sb.Usage.OutputBytes
		}
	}
	return n
}

// checkResources bounds a create's resources by Config.MaxResources.
func (s *Service) checkResources(r *events.CreateRequest) *events.Error {
	if r.Resources == nil {
		return nil
	}
	return r.Resources.Within(s.cfg.MaxResources.OrDefaults(events.DefaultMaxResources))
}
