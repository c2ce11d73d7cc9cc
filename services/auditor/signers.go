package auditor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

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
	leaseLookupTimeout = 2 * time.Second
)

// signers decides whom a record's signature may come from: a configured
// list of keys (Config.TrustedSigners), or else the key the record's worker
// advertised in its lease (KV sbx_workers). Keys seen in leases are
// remembered, boundedly, so that records of a worker whose lease has
// expired still verify.
type signers struct {
	trusted map[string]bool // nil: trust leases

	mu   sync.Mutex
	kv   jetstream.KeyValue
	seen map[string][]string // <backend>.<worker> -> keys, most recent last
	// looked is when each worker's lease was last read on a miss, so that
	// a flood of records signed by unknown keys costs one read a second.
	looked map[string]time.Time
	order  []string      // worker keys by first sight, for eviction
	ready  chan struct{} // closed once the leases existing at start are in
	once   sync.Once
}

func newSigners(trusted []string) *signers {
	s := &signers{seen: make(map[string][]string), looked: make(map[string]time.Time), ready: make(chan struct{})}
	if len(trusted) > 0 {
		s.trusted = make(map[string]bool, len(trusted))
		for _, k := range trusted {
			s.trusted[k] = true
		}
		s.markReady()
	}
	return s
}

func (s *signers) markReady() { s.once.Do(func() { close(s.ready) }) }

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
	signer = h.Get(events.HeaderSigner)
	sigB64 := h.Get(events.HeaderSignature)
	if signer == "" && sigB64 == "" {
		return SigMissing, ""
	}
	if len(signer) > 64 {
		signer = signer[:64]
	}
	kp, err := nkeys.FromPublicKey(signer)
	if err != nil || !nkeys.IsValidPublicUserKey(signer) {
		return SigInvalid, signer
	}
	raw, err := base64.StdEncoding.DecodeString(sigB64)
	if err != nil {
		return SigInvalid, signer
	}
	if err := kp.Verify(events.SignedRecordPayload(subject, h.Get(events.HeaderCEID), data), raw); err != nil {
		return SigInvalid, signer
	}
	if s.trusted != nil {
		if s.trusted[signer] {
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

// watch follows sbx_workers until ctx ends (nothing to do with a trusted list).
func (s *signers) watch(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	if s.trusted != nil {
		return
	}
	for ctx.Err() == nil {
		kv, err := js.KeyValue(ctx, events.BucketWorkers)
		if err == nil {
			s.mu.Lock()
			s.kv = kv
			s.mu.Unlock()
			err = s.watchOnce(ctx, kv)
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Debug("lease watch", slog.Any("err", err))
		}
		sleepCtx(ctx, 2*time.Second)
	}
}

func (s *signers) watchOnce(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil {
				s.markReady()
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				s.rememberLease(e.Key(), e.Value())
			}
		}
	}
}

// waitReady waits, at most d, for the leases that exist at start.
func (s *signers) waitReady(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ready:
	case <-t.C:
	case <-ctx.Done():
	}
}
