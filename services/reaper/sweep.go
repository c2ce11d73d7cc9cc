package reaper

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Finding kinds.
const (
	FindingExpired    = "expired"     // a live sandbox past its deadline
	FindingLost       = "lost"        // a live sandbox whose worker's lease is gone
	FindingLostWorker = "lost_worker" // a worker with no lease but a consumer or lost sandboxes
	// FindingStuckCreate: a sandbox still creating StuckCreate after it was
	// claimed, on a live worker (its create's reply was lost, or its claim
	// was stored although the worker saw it fail): it is killed.
	FindingStuckCreate = "stuck_create"
)

// Finding is one thing a sweep found, and what it did about it.
type Finding struct {
	Kind      string    `json:"kind"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Backend   string    `json:"backend"`
	Worker    string    `json:"worker"`
	Deadline  time.Time `json:"deadline,omitzero"`
	// Action is what was done ("killed", "marked lost", "purged commands,
	// deleted consumer", "skipped: ...") or, in a dry run, what would be.
	Action string `json:"action"`
	Err    string `json:"error,omitempty"`
}

// Report is the result of a sweep.
type Report struct {
	DryRun      bool      `json:"dry_run"`
	At          time.Time `json:"at"`
	Sandboxes   int       `json:"sandboxes"`    // live sandboxes seen in the registry
	LiveWorkers int       `json:"live_workers"` // leases present
	Findings    []Finding `json:"findings"`
}

// Errors counts the findings whose action failed.
func (r Report) Errors() int {
	n := 0
	for _, f := range r.Findings {
		if f.Err != "" {
			n++
		}
	}
	return n
}

// WriteText prints the report for people (sandboxio reap).
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing changed)"
	}
	fmt.Fprintf(&b, "sweep at %s%s: %d live sandboxes, %d live workers, %d findings\n",
		r.At.Format(time.RFC3339), mode, r.Sandboxes, r.LiveWorkers, len(r.Findings))
	for _, f := range r.Findings {
		what := f.SandboxID
		if what == "" {
			what = "-"
		}
		fmt.Fprintf(&b, "  %-11s %-28s %s/%s", f.Kind, what, f.Backend, f.Worker)
		if !f.Deadline.IsZero() {
			fmt.Fprintf(&b, " deadline=%s", f.Deadline.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(&b, " -> %s", f.Action)
		if f.Err != "" {
			fmt.Fprintf(&b, " FAILED: %s", f.Err)
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Sweep looks at every live sandbox in the registry, every lease and every
// per-worker consumer once, and (unless dryRun) kills what is past its
// deadline, marks lost what lost its worker and cleans up lost workers. It
// does not need the active role: `sandboxio reap` calls it directly. A dry
// run writes nothing to the bus.
func (s *Service) Sweep(ctx context.Context, dryRun bool) (Report, error) {
	return s.sweep(ctx, dryRun, false)
}

// sweep is Sweep; the active reaper's periodic sweeps set withGrace, so that
// they mark nothing lost before its worker's lease has been missing for
// LostGrace (a worker restarting with the same id keeps its sandboxes). An
// operator's on-demand sweep acts at once. Its steps, in order: list the
// leases and the live sandboxes, handle each sandbox (lost, expired, stuck
// in creating), find the consumers of workers without a lease, and clean up
// every lost worker.
func (s *Service) sweep(ctx context.Context, dryRun, withGrace bool) (Report, error) {
	sw := &sweepRun{s: s, dryRun: dryRun, withGrace: withGrace, now: time.Now(),
		rep: Report{DryRun: dryRun, At: time.Now().UTC()}, lostWorkers: map[string][2]string{}, back: map[string]bool{}}
	if err := sw.listLeases(ctx); err != nil {
		return sw.rep, err
	}
	sandboxes, err := sw.listSandboxes(ctx)
	if err != nil {
		return sw.rep, err
	}
	s.at(hookSweepListed, "")
	sw.now = time.Now()
	sw.handleSandboxes(ctx, sandboxes)
	sw.sweepSnapshots(ctx, sandboxes)
	if err := sw.findLostConsumers(ctx); err != nil {
		return sw.rep, err
	}
	sw.cleanupLostWorkers(ctx)
	return sw.rep, nil
}

// sweepRun is the state of one sweep.
type sweepRun struct {
	s         *Service
	dryRun    bool
	withGrace bool
	now       time.Time

	mu  sync.Mutex // guards rep.Findings while kills run
	rep Report

	leases      map[string]bool      // worker keys with a lease at listing time
	back        map[string]bool      // leases looked up again, per worker key
	lostWorkers map[string][2]string // worker key -> {backend, worker}
}

func (sw *sweepRun) add(f Finding) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.rep.Findings = append(sw.rep.Findings, f)
}

// listLeases lists the worker leases present.
func (sw *sweepRun) listLeases(ctx context.Context) error {
	wkv, err := sw.s.workers(ctx)
	if err != nil {
		return err
	}
	keys, err := wkv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("reaper: list leases: %w", err)
	}
	sw.leases = map[string]bool{}
	for k := range keys.Keys() {
		sw.leases[k] = true
	}
	sw.rep.LiveWorkers = len(sw.leases)
	return nil
}

// listSandboxes reads every live sandbox record, in id order.
func (sw *sweepRun) listSandboxes(ctx context.Context) ([]events.Sandbox, error) {
	reg, err := sw.s.registry(ctx)
	if err != nil {
		return nil, err
	}
	lister, err := reg.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("reaper: list registry: %w", err)
	}
	var sandboxes []events.Sandbox
	for k := range lister.Keys() {
		e, err := reg.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		var sb events.Sandbox
		if json.Unmarshal(e.Value(), &sb) != nil || sb.State.Ended() || sb.State == "" {
			continue
		}
		sandboxes = append(sandboxes, sb)
	}
	sw.rep.Sandboxes = len(sandboxes)
	sort.Slice(sandboxes, func(i, j int) bool { return sandboxes[i].SandboxID < sandboxes[j].SandboxID })
	return sandboxes, nil
}

// leaseBack looks a lease missing from the listing up again, once per
// worker per sweep, before anything is marked lost: a worker may have come
// back since the listing.
func (sw *sweepRun) leaseBack(ctx context.Context, backend, worker string) (bool, error) {
	k := events.WorkerKey(backend, worker)
	if v, ok := sw.back[k]; ok {
		return v, nil
	}
	alive, err := sw.s.leaseAlive(ctx, backend, worker)
	if err != nil {
		return false, err
	}
	sw.back[k] = alive
	return alive, nil
}

// handleSandboxes marks lost the sandboxes whose worker is gone and kills
// (a few at a time, each waiting for its worker's reply) those past their
// deadline or stuck in creating.
func (sw *sweepRun) handleSandboxes(ctx context.Context, sandboxes []events.Sandbox) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, sb := range sandboxes {
		f, kill := sw.classify(ctx, sb)
		if !kill {
			continue
		}
		if !sw.s.begin(sb.SandboxID) {
			f.Action = "skipped: already being reaped"
			sw.add(f)
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(f Finding) {
			defer wg.Done()
			defer func() { <-sem }()
			defer sw.s.end(f.SandboxID)
			sw.reap(ctx, f)
		}(f)
	}
	wg.Wait()
}

// classify decides what one sandbox needs. It records the finding itself
// unless the sandbox is to be killed (kill: the caller runs reap).
func (sw *sweepRun) classify(ctx context.Context, sb events.Sandbox) (f Finding, kill bool) {
	if sb.State == events.StatePaused {
		sw.classifyPaused(ctx, sb) // no worker holds it (durable.go)
		return f, false
	}
	key := events.WorkerKey(sb.Backend, sb.Worker)
	alive := sw.leases[key]
	expired := !sb.Deadline.IsZero() && !sw.now.Before(sb.Deadline)
	young := sw.now.Sub(sb.CreatedAt) < sw.s.cfg.CreationGrace
	f = Finding{SandboxID: sb.SandboxID, Backend: sb.Backend, Worker: sb.Worker}
	if !alive && (!young || expired) {
		var err error
		if alive, err = sw.leaseBack(ctx, sb.Backend, sb.Worker); err != nil {
			f.Kind, f.Action, f.Err = FindingLost, "skipped: cannot check lease", err.Error()
			sw.add(f)
			return f, false
		}
	}
	if sw.withGrace && !alive && (!young || expired) && sw.s.missingFor(key, sw.now) < sw.s.cfg.LostGrace {
		f.Kind, f.Action = FindingLost, "skipped: lease gone for less than the lost grace"
		sw.add(f)
		return f, false
	}
	if alive {
		sw.s.seen(key)
	}
	switch {
	case !alive && (!young || expired):
		sw.markLost(ctx, sb, f, expired)
		return f, false
	case expired:
		f.Kind, f.Deadline, f.Action = FindingExpired, sb.Deadline, "kill"
	case sb.State == events.StateCreating && sw.now.Sub(sb.CreatedAt) >= sw.s.cfg.StuckCreate:
		f.Kind, f.Deadline, f.Action = FindingStuckCreate, sb.Deadline, "kill"
	default:
		return f, false
	}
	if sw.dryRun {
		sw.add(f)
		return f, false
	}
	return f, true
}

// markLost marks a sandbox of a lost worker lost, and remembers the worker.
func (sw *sweepRun) markLost(ctx context.Context, sb events.Sandbox, f Finding, expired bool) {
	f.Kind, f.Action = FindingLost, "mark lost"
	if expired {
		f.Deadline = sb.Deadline
	}
	sw.lostWorkers[events.WorkerKey(sb.Backend, sb.Worker)] = [2]string{sb.Backend, sb.Worker}
	if !sw.dryRun {
		changed, err := sw.s.markLost(ctx, sb.SandboxID, sb.Worker)
		f.Action = "marked lost"
		if !changed && err == nil {
			f.Action = "skipped: no longer live on this worker"
		}
		if err != nil {
			f.Err = err.Error()
		}
	}
	sw.add(f)
}

// reap kills an expired or stuck sandbox, acting on the record as it is
// now, not as listed: set_timeout may have moved the deadline, a create
// may have finished, or the sandbox ended.
func (sw *sweepRun) reap(ctx context.Context, f Finding) {
	var action string
	var err error
	if f.Kind == FindingStuckCreate {
		action, err = sw.s.reapStuck(ctx, f.SandboxID)
	} else {
		action, err = sw.s.reapDue(ctx, f.SandboxID)
	}
	if err != nil {
		f.Err = err.Error()
	} else {
		f.Action = action
	}
	sw.add(f)
}

// findLostConsumers adds the workers that have a per-worker consumer but
// no lease (past the grace, for periodic sweeps).
func (sw *sweepRun) findLostConsumers(ctx context.Context) error {
	st, err := sw.s.js.Stream(ctx, events.StreamCommands)
	if err != nil {
		return fmt.Errorf("reaper: %s: %w", events.StreamCommands, err)
	}
	lst := st.ListConsumers(ctx)
	for ci := range lst.Info() {
		f := ci.Config.FilterSubject
		if f == "" && len(ci.Config.FilterSubjects) == 1 {
			f = ci.Config.FilterSubjects[0]
		}
		b, w, ok := parseNodeFilter(f)
		if !ok {
			continue
		}
		key := events.WorkerKey(b, w)
		if sw.leases[key] || sw.back[key] {
			sw.s.seen(key)
			continue
		}
		if sw.withGrace && sw.s.missingFor(key, sw.now) < sw.s.cfg.LostGrace {
			continue // a restarting worker's consumer and queued commands stay
		}
		sw.lostWorkers[key] = [2]string{b, w}
	}
	if err := lst.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return fmt.Errorf("reaper: list consumers: %w", err)
	}
	return nil
}

// cleanupLostWorkers purges the queued commands and deletes the consumer of
// every lost worker whose lease is still gone, in key order.
func (sw *sweepRun) cleanupLostWorkers(ctx context.Context) {
	wkeys := make([]string, 0, len(sw.lostWorkers))
	for k := range sw.lostWorkers {
		wkeys = append(wkeys, k)
	}
	sort.Strings(wkeys)
	for _, k := range wkeys {
		bw := sw.lostWorkers[k]
		f := Finding{Kind: FindingLostWorker, Backend: bw[0], Worker: bw[1], Action: "purge commands, delete consumer"}
		if !sw.dryRun {
			f.Action = "purged commands, deleted consumer"
			if alive, err := sw.s.leaseAlive(ctx, bw[0], bw[1]); err != nil {
				f.Err = err.Error()
			} else if alive {
				f.Action = "skipped: lease is back"
			} else if err := sw.s.cleanupWorker(ctx, bw[0], bw[1]); err != nil {
				f.Err = err.Error()
			}
		}
		sw.add(f)
	}
}

// missingFor reports how long a sweep has seen key's lease gone, starting
// the clock at now the first time.
func (s *Service) missingFor(key string, now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.missing == nil {
		s.missing = map[string]time.Time{}
	}
	since, ok := s.missing[key]
	if !ok {
		s.missing[key] = now
		return 0
	}
	return now.Sub(since)
}

// seen forgets that key's lease was missing.
func (s *Service) seen(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.missing, key)
}
