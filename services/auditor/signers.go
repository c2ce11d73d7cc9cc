package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Signature verdicts, written into each audit log line (Entry.Sig) where
// the hash chain covers them.
const (
	SigOK        = "ok"        // signed by a trusted key, and the signature verifies
	SigMissing   = "missing"   // no signature headers: not published by a worker
	SigInvalid   = "invalid"   // the signature does not verify: forged or altered
	SigUntrusted = "untrusted" // a valid signature by a key nobody vouches for
	// SigUnsigned is what Verify reports for a line written before records
	// were signed (no sig field).
	SigUnsigned = "unsigned"
)

// Bounds of the remembered lease keys.
const (
	maxSignerWorkers   = 10000
	maxKeysPerWorker   = 4
	maxReaperKeys      = 1000
	leaseLookupTimeout = 2 * time.Second
)

// signers decides whom a record's signature may come from: a configured
// list of keys (Config.TrustedSigners), or else the key the record's worker
// advertised in its lease (KV sbx_workers) and, for a record naming
// recsign.ReaperWorker, a key a reaper advertised in sbx_reaper. Keys seen
// are remembered, boundedly, so that records of a worker whose lease has
// expired (or of a reaper that stopped) still verify.
type signers struct {
	trusted map[string]bool // nil: trust leases and reaper adverts

	mu   sync.Mutex
	kv   jetstream.KeyValue
	seen map[string][]string // <backend>.<worker> -> keys, most recent last
	// looked is when each worker's lease (or each reaper key's advert) was
	// last read on a miss, so that a flood of records signed by unknown
	// keys costs one read a second.
	looked map[string]time.Time
	order  []string // worker keys by first sight, for eviction

	rkv    jetstream.KeyValue
	reaper map[string]bool // keys reapers advertised
	rorder []string        // reaper keys by first sight, for eviction

	js     jetstream.JetStream // to open sbx_reaper on a miss (nil in unit tests)
	ready  chan struct{}       // closed once the leases existing at start are in
	once   sync.Once
	rready chan struct{} // closed once the reaper adverts existing at start are in
	ronce  sync.Once
}

func newSigners(trusted []string, js jetstream.JetStream) *signers {
	s := &signers{js: js, seen: make(map[string][]string), looked: make(map[string]time.Time), reaper: make(map[string]bool),
		ready: make(chan struct{}), rready: make(chan struct{})}
	if len(trusted) > 0 {
		s.trusted = make(map[string]bool, len(trusted))
		for _, k := range trusted {
			s.trusted[k] = true
		}
		s.markReady()
		s.markReaperReady()
	}
	return s
}

func (s *signers) markReady()       { s.once.Do(func() { close(s.ready) }) }
func (s *signers) markReaperReady() { s.ronce.Do(func() { close(s.rready) }) }

// remember records that worker advertised key.
func (s *signers) remember(worker, key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, known := s.seen[worker]
	if slices.Contains(keys, key) {
		return
	}
	if !known {
		if len(s.order) >= maxSignerWorkers {
			delete(s.seen, s.order[0])
			s.order = s.order[1:]
		}
		s.order = append(s.order, worker)
	}
	keys = append(keys, key)
	if len(keys) > maxKeysPerWorker {
		keys = keys[len(keys)-maxKeysPerWorker:]
	}
	s.seen[worker] = keys
}

func (s *signers) knows(worker, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.seen[worker], key)
}

// verdict checks a record message's signature.
func (s *signers) verdict(ctx context.Context, subject string, h nats.Header, data []byte, rec events.OpRecord) (sig, signer string) {
	signer, err := recsign.Verify(subject, h, data)
	return s.judge(ctx, signer, err, rec)
}

// judge is the verdict on a record whose signature recsign.Verify checked
// (signer, err): whether the signer may vouch for it. It may look a lease
// up on the bus; records are judged one at a time, in order, so that the
// first record of a new worker looks its lease up for the ones after it.
func (s *signers) judge(ctx context.Context, signer string, err error, rec events.OpRecord) (string, string) {
	switch {
	case errors.Is(err, recsign.ErrUnsigned):
		return SigMissing, ""
	case err != nil:
		return SigInvalid, signer
	}
	if s.trusted != nil {
		if s.trusted[signer] {
			return SigOK, signer
		}
		return SigUntrusted, signer
	}
	if rec.Worker == recsign.ReaperWorker {
		// A reaper's record: only a key a reaper advertised vouches for
		// it, and such a key for no other record.
		if s.knowsReaper(signer) {
			return SigOK, signer
		}
		s.lookupReaper(ctx, signer)
		if s.knowsReaper(signer) {
			return SigOK, signer
		}
		return SigUntrusted, signer
	}
	if !events.ValidID(rec.Backend) || !events.ValidID(rec.Worker) {
		return SigUntrusted, signer
	}
	worker := events.WorkerKey(rec.Backend, rec.Worker)
	if s.knows(worker, signer) {
		return SigOK, signer
	}
	// The lease may be newer than what the watch delivered so far.
	s.lookup(ctx, worker)
	if s.knows(worker, signer) {
		return SigOK, signer
	}
	return SigUntrusted, signer
}

// rememberReaper records that a reaper advertised key.
func (s *signers) rememberReaper(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reaper[key] {
		return
	}
	if len(s.rorder) >= maxReaperKeys {
		delete(s.reaper, s.rorder[0])
		s.rorder = s.rorder[1:]
	}
	s.rorder = append(s.rorder, key)
	s.reaper[key] = true
}

func (s *signers) knowsReaper(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reaper[key]
}

// rememberAdvert remembers the key of a reaper's advert entry.
func (s *signers) rememberAdvert(key string, value []byte) {
	var a recsign.Advert
	if json.Unmarshal(value, &a) != nil || !recsign.ValidAdvert(key, a) {
		return // an advert must sit under its own key
	}
	s.rememberReaper(a.SigningKey)
}

// lookupReaper reads the advert of one key now (at most once a second per key).
func (s *signers) lookupReaper(ctx context.Context, key string) {
	s.mu.Lock()
	kv := s.rkv
	now := time.Now()
	id := recsign.SignerKey(key)
	recent := now.Sub(s.looked[id]) < time.Second
	if !recent {
		if len(s.looked) >= maxSignerWorkers {
			clear(s.looked)
		}
		s.looked[id] = now
	}
	s.mu.Unlock()
	if recent {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
	defer cancel()
	if kv == nil {
		// The bucket did not exist when the watch last looked.
		var err error
		if kv, err = s.reaperBucket(ctx); err != nil {
			return
		}
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		return
	}
	s.rememberAdvert(e.Key(), e.Value())
}

// lookup reads one worker's lease now.
func (s *signers) lookup(ctx context.Context, worker string) {
	s.mu.Lock()
	kv := s.kv
	now := time.Now()
	recent := now.Sub(s.looked[worker]) < time.Second
	if !recent {
		if len(s.looked) >= maxSignerWorkers {
			clear(s.looked)
		}
		s.looked[worker] = now
	}
	s.mu.Unlock()
	if kv == nil || recent {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leaseLookupTimeout)
	defer cancel()
	e, err := kv.Get(ctx, worker)
	if err != nil {
		return
	}
	s.rememberLease(e.Key(), e.Value())
}

func (s *signers) rememberLease(key string, value []byte) {
	var l events.WorkerLease
	if json.Unmarshal(value, &l) != nil {
		return
	}
	if key != events.WorkerKey(l.Backend, l.Worker) {
		return // a lease must sit under its own key
	}
	s.remember(key, l.SigningKey)
}

// watch follows sbx_workers and the reaper adverts in sbx_reaper until ctx
// ends (nothing to do with a trusted list).
func (s *signers) watch(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	if s.trusted != nil {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() { defer wg.Done(); s.watchReapers(ctx, log) }()
	open := func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := js.KeyValue(ctx, events.BucketWorkers)
		if err == nil {
			s.mu.Lock()
			s.kv = kv
			s.mu.Unlock()
		}
		return kv, err
	}
	keepWatching(ctx, log, "lease watch", open, func(ctx context.Context, kv jetstream.KeyValue) error {
		return followKV(ctx, kv, ">", s.markReady, func(e jetstream.KeyValueEntry) {
			if e.Operation() == jetstream.KeyValuePut {
				s.rememberLease(e.Key(), e.Value())
			}
		})
	})
}

// reaperBucket opens sbx_reaper (which the reaper creates).
func (s *signers) reaperBucket(ctx context.Context) (jetstream.KeyValue, error) {
	if s.js == nil {
		return nil, errors.New("no jetstream")
	}
	kv, err := s.js.KeyValue(ctx, recsign.ReaperBucket)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.rkv = kv
	s.mu.Unlock()
	return kv, nil
}

// watchReapers follows the reaper adverts until ctx ends.
func (s *signers) watchReapers(ctx context.Context, log *slog.Logger) {
	open := func(ctx context.Context) (jetstream.KeyValue, error) {
		kv, err := s.reaperBucket(ctx)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			s.markReaperReady() // no reaper yet: no adverts to wait for
		}
		return kv, err
	}
	keepWatching(ctx, log, "reaper advert watch", open, func(ctx context.Context, kv jetstream.KeyValue) error {
		return followKV(ctx, kv, recsign.SignerFilter, s.markReaperReady, func(e jetstream.KeyValueEntry) {
			if e.Operation() == jetstream.KeyValuePut {
				s.rememberAdvert(e.Key(), e.Value())
			}
		})
	})
}

// waitReady waits, at most d, for the leases and reaper adverts that exist
// at start.
func (s *signers) waitReady(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ready := range []chan struct{}{s.ready, s.rready} {
		select {
		case <-ready:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
