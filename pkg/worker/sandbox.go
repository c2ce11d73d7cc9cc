package worker

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// sandbox is a sandbox this worker owns.
type sandbox struct {
	id      string
	tenant  string // subject token of the sandbox's tenant; set at create or re-adoption
	secrets []string

	// regMu orders the sandbox's registry writes (running, set_timeout,
	// gone), which are made without mu: lock order regMu → mu.
	regMu sync.Mutex

	mu       sync.Mutex
	record   events.Sandbox
	revision uint64
	ready    bool // Create returned and the record says running
	timer    *time.Timer
	procs    map[string]*process
	usedPIDs pidSet
	// killRetries counts failed deadline kills, for their back-off.
	killRetries int
	// secretsUnknown is set on a sandbox re-adopted after a restart: its
	// secret values are gone with the old worker, so records of it leave
	// out what could hold one.
	secretsUnknown bool
	// cancelCreate aborts a create still in progress when a kill arrives;
	// createDone is closed when the create path has finished either way.
	cancelCreate context.CancelFunc
	createDone   chan struct{}
	// gone is set once the backend confirmed removal. killWait is non-nil
	// while a kill runs; concurrent kills wait for it and read killErr.
	gone     bool
	killWait chan struct{}
	killErr  *events.Error
	// usage is what the sandbox used of the worker's containment limits.
	usage usage
	// createCmd is the create it was made with (secrets sealed), which a
	// pause keeps; nil on a sandbox adopted after a restart. resumeFrom is
	// the paused record a resume replaced, put back if the resume fails.
	createCmd  *events.CreateCommand
	resumeFrom *events.Sandbox
}

func (sb *sandbox) redaction() redaction {
	return redaction{secrets: sb.secrets, withhold: sb.secretsUnknown}
}

func (w *Worker) lookup(id string) *sandbox {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sandboxes[id]
}

// track adds sb to the worker's sandboxes.
func (w *Worker) track(sb *sandbox) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.sandboxes[sb.id]
	if old == sb {
		return
	}
	if old != nil {
		w.out.leave(&old.usage, "") // sb counts what old wrote
	}
	w.sandboxes[sb.id] = sb
	w.out.join(&sb.usage, sb.tenantToken())
}

func (w *Worker) forget(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sb := w.sandboxes[id]; sb != nil {
		w.out.leave(&sb.usage, departedFilter(sb))
	}
	delete(w.sandboxes, id)
}

// putRecord claims (revision 0) or updates the registry record.
func (w *Worker) putRecord(ctx context.Context, r events.Sandbox, revision uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if revision == 0 {
		return w.registry.Create(ctx, r.SandboxID, b)
	}
	return w.registry.Update(ctx, r.SandboxID, b, revision)
}

// tenantToken is the tenant token of the sandbox's subjects: the record's
// tenant, or TenantOpen for sandboxes created without one.
func (sb *sandbox) tenantToken() string {
	if sb.tenant != "" {
		return sb.tenant
	}
	return events.TenantOpen
}

// maxRememberedPIDs bounds the process ids a sandbox remembers to refuse
// their reuse: a sandbox that lives for days and runs millions of processes
// must not grow without bound. Generated ids are random; only a client that
// reuses its own id within the last maxRememberedPIDs processes is refused.
const maxRememberedPIDs = 4096

// pidSet remembers the last maxRememberedPIDs process ids; the zero value
// is ready. It is guarded by the sandbox's mu.
type pidSet struct {
	ids  map[string]struct{}
	ring []string // in insertion order, at most maxRememberedPIDs
	next int      // the oldest entry once ring is full
}

func (s *pidSet) seen(id string) bool {
	_, ok := s.ids[id]
	return ok
}

func (s *pidSet) add(id string) {
	// The id may be a substring of a command's header block or payload;
	// a copy keeps only itself alive for as long as it is remembered.
	id = strings.Clone(id)
	if s.ids == nil {
		s.ids = make(map[string]struct{})
	}
	if len(s.ring) < maxRememberedPIDs {
		s.ring = append(s.ring, id)
	} else {
		delete(s.ids, s.ring[s.next])
		s.ring[s.next] = id
		s.next = (s.next + 1) % maxRememberedPIDs
	}
	s.ids[id] = struct{}{}
}
