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
// operator's on-demand sweep acts at once.
func (s *Service) sweep(ctx context.Context, dryRun, withGrace bool) (Report, error) {
	rep := Report{DryRun: dryRun, At: time.Now().UTC()}
	reg, err := s.registry(ctx)
	if err != nil {
		return rep, err
	}
	wkv, err := s.workers(ctx)
	if err != nil {
		return rep, err
	}
	leases := map[string]bool{}
	keys, err := wkv.ListKeys(ctx)
	if err != nil {
		return rep, fmt.Errorf("reaper: list leases: %w", err)
	}
	for k := range keys.Keys() {
		leases[k] = true
	}
	rep.LiveWorkers = len(leases)

	var sandboxes []events.Sandbox
	lister, err := reg.ListKeys(ctx)
	if err != nil {
		return rep, fmt.Errorf("reaper: list registry: %w", err)
	}
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
	rep.Sandboxes = len(sandboxes)
	sort.Slice(sandboxes, func(i, j int) bool { return sandboxes[i].SandboxID < sandboxes[j].SandboxID })

	s.at(hookSweepListed, "")

	now := time.Now()
	lostWorkers := map[string][2]string{}
	// Leases missing from the listing are looked up again, once per worker
	// per sweep, before anything is marked lost: a worker may have come back
	// since the listing.
	back := map[string]bool{}
	leaseBack := func(backend, worker string) (bool, error) {
		k := events.WorkerKey(backend, worker)
		if v, ok := back[k]; ok {
			return v, nil
		}
		alive, err := s.leaseAlive(ctx, backend, worker)
		if err != nil {
			return false, err
		}
		back[k] = alive
		return alive, nil
	}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
		// A few kills at a time; each waits for its worker's reply.
		sem = make(chan struct{}, 16)
	)
	add := func(f Finding) {
		mu.Lock()
		rep.Findings = append(rep.Findings, f)
		mu.Unlock()
	}
	for _, sb := range sandboxes {
		alive := leases[events.WorkerKey(sb.Backend, sb.Worker)]
		expired := !sb.Deadline.IsZero() && !now.Before(sb.Deadline)
		young := now.Sub(sb.CreatedAt) < s.cfg.CreationGrace
		f := Finding{SandboxID: sb.SandboxID, Backend: sb.Backend, Worker: sb.Worker}
		if !alive && (!young || expired) {
			var err error
			if alive, err = leaseBack(sb.Backend, sb.Worker); err != nil {
				f.Kind, f.Action, f.Err = FindingLost, "skipped: cannot check lease", err.Error()
				add(f)
				continue
			}
		}
		if withGrace && !alive && (!young || expired) && s.missingFor(events.WorkerKey(sb.Backend, sb.Worker), now) < s.cfg.LostGrace {
			f.Kind, f.Action = FindingLost, "skipped: lease gone for less than the lost grace"
			add(f)
			continue
		}
		if alive {
			s.seen(events.WorkerKey(sb.Backend, sb.Worker))
		}
		switch {
		case !alive && (!young || expired):
			f.Kind, f.Action = FindingLost, "mark lost"
			if expired {
				f.Deadline = sb.Deadline
			}
			lostWorkers[events.WorkerKey(sb.Backend, sb.Worker)] = [2]string{sb.Backend, sb.Worker}
			if !dryRun {
				changed, err := s.markLost(ctx, sb.SandboxID, sb.Worker)
				f.Action = "marked lost"
				if !changed && err == nil {
					f.Action = "skipped: no longer live on this worker"
				}
				if err != nil {
					f.Err = err.Error()
				}
			}
			add(f)
		case expired:
			f.Kind, f.Deadline, f.Action = FindingExpired, sb.Deadline, "kill"
			if dryRun {
				add(f)
				continue
			}
			if !s.begin(sb.SandboxID) {
				f.Action = "skipped: already being reaped"
				add(f)
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func(sb events.Sandbox, f Finding) {
				defer wg.Done()
				defer func() { <-sem }()
				defer s.end(sb.SandboxID)
				// Act on the record as it is now, not as listed: set_timeout
				// may have moved the deadline, or the sandbox ended.
				f.Action = "kill"
				action, err := s.reapDue(ctx, sb.SandboxID)
				if err != nil {
					f.Err = err.Error()
				} else {
					f.Action = action
				}
				add(f)
			}(sb, f)
		}
	}
	wg.Wait()

	// Per-worker consumers of workers without a lease.
	st, err := s.js.Stream(ctx, events.StreamCommands)
	if err != nil {
		return rep, fmt.Errorf("reaper: %s: %w", events.StreamCommands, err)
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
		if leases[events.WorkerKey(b, w)] || back[events.WorkerKey(b, w)] {
			s.seen(events.WorkerKey(b, w))
			continue
		}
		if withGrace && s.missingFor(events.WorkerKey(b, w), now) < s.cfg.LostGrace {
			continue // a restarting worker's consumer and queued commands stay
		}
		lostWorkers[events.WorkerKey(b, w)] = [2]string{b, w}
	}
	if err := lst.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return rep, fmt.Errorf("reaper: list consumers: %w", err)
	}
	wkeys := make([]string, 0, len(lostWorkers))
	for k := range lostWorkers {
		wkeys = append(wkeys, k)
	}
	sort.Strings(wkeys)
	for _, k := range wkeys {
		bw := lostWorkers[k]
		f := Finding{Kind: FindingLostWorker, Backend: bw[0], Worker: bw[1], Action: "purge commands, delete consumer"}
		if !dryRun {
			f.Action = "purged commands, deleted consumer"
			if alive, err := s.leaseAlive(ctx, bw[0], bw[1]); err != nil {
				f.Err = err.Error()
			} else if alive {
				f.Action = "skipped: lease is back"
			} else if err := s.cleanupWorker(ctx, bw[0], bw[1]); err != nil {
				f.Err = err.Error()
			}
		}
		rep.Findings = append(rep.Findings, f)
	}
	return rep, nil
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
