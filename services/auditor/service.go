package auditor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Service is one auditor instance.
type Service struct {
	cfg  Config
	nc   *nats.Conn
	js   jetstream.JetStream
	log  *slog.Logger
	tel  *telemetry.Providers
	rend *renderer
	sig  *signers
	key  *recsign.Key // signs the log's checkpoints

	mu      sync.Mutex
	written uint64
	// published is the seq of the last checkpoint line put into sbx_audit
	// (Run's goroutine only).
	published uint64
}

// New builds an auditor; it does no I/O on the bus until Run.
func New(cfg Config, nc *nats.Conn) (*Service, error) {
	if nc == nil {
		return nil, errors.New("auditor: nil NATS connection")
	}
	if cfg.InstanceID == "" {
		cfg.InstanceID = events.NewID()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("auditor: jetstream: %w", err)
	}
	log := cfg.Logger.With("service", "auditor", "instance", cfg.InstanceID)
	// New takes no context; Setup builds exporters and dials nothing.
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{
		ServiceName: cfg.ServiceName, ServiceInstanceID: cfg.InstanceID,
		SpanExporter: cfg.SpanExporter, Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("auditor: %w", err)
	}
	rend, err := newRenderer(tel, cfg.OpenSpanMaxAge, cfg.MaxOpenSpans)
	if err != nil {
		// New takes no context: nothing was exported yet, nothing waits.
		_ = tel.Shutdown(context.Background())
		return nil, fmt.Errorf("auditor: %w", err)
	}
	key, err := recsign.NewKey(cfg.SigningSeed)
	if err != nil {
		// New takes no context: nothing was exported yet, nothing waits.
		_ = tel.Shutdown(context.Background())
		return nil, fmt.Errorf("auditor: SigningSeed: %w", err)
	}
	return &Service{cfg: cfg, nc: nc, js: js, log: log, tel: tel, rend: rend, sig: newSigners(cfg.TrustedSigners, js), key: key}, nil
}

// MetricsHandler serves this instance's Prometheus metrics (also served on
// Config.MetricsAddr when set).
func (s *Service) MetricsHandler() http.Handler { return s.tel.MetricsHandler() }

// CheckpointKey is the public key (U…) this instance signs its log's
// checkpoints with: give it to `audit verify --auditor-key`.
func (s *Service) CheckpointKey() string { return s.key.Public() }

// Written is the number of lines this instance appended since it started.
func (s *Service) Written() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written
}

// ConsumerConfig is the durable consumer the auditor creates on SBX_OPS.
func (c Config) ConsumerConfig() jetstream.ConsumerConfig {
	c = c.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   "sandboxio auditor: audit log, spans, metrics",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxAckPending: c.MaxAckPending,
		FilterSubject: events.SubjectOpsAll,
	}
}

// Run consumes SBX_OPS until ctx ends, then returns nil after the last
// batch is written and acknowledged. It fails if the audit log cannot be
// opened (a broken chain refuses appends) or written.
func (s *Service) Run(ctx context.Context) error {
	defer func() {
		// Flushing telemetry is teardown: Run's values, not its cancellation.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.tel.Shutdown(sctx); err != nil {
			s.log.Warn("telemetry shutdown", slog.Any("err", err))
		}
	}()
	if err := bus.WaitReady(ctx, s.js); err != nil {
		return nil // cancelled before the bus was ready
	}
	l, err := openLogWith(s.cfg.LogPath, logOptions{indexSize: s.cfg.IndexSize, key: s.key, every: s.cfg.CheckpointEvery,
		newKey: len(s.cfg.SigningSeed) == 0})
	if err != nil {
		return err
	}
	defer func() {
		if err := l.Close(); err != nil { // seals the log with a checkpoint
			s.log.Error("close audit log", slog.Any("err", err))
		}
		// Publishing the sealed head is teardown: Run's values, not its cancellation.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		s.publish(pctx, l)
	}()
	s.log.Info("audit log open", "path", s.cfg.LogPath, "lines", l.Len(), "head", l.Head(), "checked", l.Verified(),
		"checkpoint_key", s.key.Public())

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Add(1)
	go func() { defer wg.Done(); s.rend.watchRegistry(ctx, s.js, s.log) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.sig.watch(ctx, s.js, s.log) }()
	// Verdicts of the first records need the leases that exist now.
	s.sig.waitReady(ctx, 5*time.Second)
	errc := make(chan error, 1)
	if s.cfg.MetricsAddr != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := telemetry.ServeMetrics(ctx, s.cfg.MetricsAddr, s.MetricsHandler(), s.log); err != nil {
				errc <- err
				cancel()
			}
		}()
	}
	err = s.consume(ctx, l)
	select {
	case e := <-errc:
		err = errors.Join(err, e)
	default:
	}
	return err
}

func (s *Service) consume(ctx context.Context, l *Log) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		cons, err := s.js.CreateOrUpdateConsumer(ctx, events.StreamOps, s.cfg.ConsumerConfig())
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.log.Warn("create consumer", slog.Any("err", err))
			if !sleepCtx(ctx, backoff) {
				break
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		it, err := cons.Messages(jetstream.PullMaxMessages(s.cfg.Batch))
		if err != nil {
			s.log.Warn("consume", slog.Any("err", err))
			if !sleepCtx(ctx, time.Second) {
				break
			}
			continue
		}
		err = s.loop(ctx, it, l)
		it.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// loop takes batches from the iterator until ctx ends (nil), the iterator
// fails (nil: the caller re-creates it) or the log cannot be written.
func (s *Service) loop(ctx context.Context, it jetstream.MessagesContext, l *Log) error {
	for {
		// Wait for a record at most until the lines after the last
		// checkpoint are due for one (sealtimer.go).
		wctx, wcancel := context.WithTimeout(ctx, l.sealWait(time.Now(), s.cfg.CheckpointInterval))
		first, err := it.Next(jetstream.NextContext(wctx))
		idle := wctx.Err() != nil
		wcancel()
		if err != nil {
			if ctx.Err() != nil {
				return s.drain(it, l)
			}
			if idle {
				if err := s.seal(l); err != nil {
					return err
				}
				continue
			}
			s.log.Warn("next record", slog.Any("err", err))
			sleepCtx(ctx, 200*time.Millisecond)
			return nil
		}
		batch := []jetstream.Msg{first}
		for len(batch) < s.cfg.Batch {
			m, err := it.Next(jetstream.NextMaxWait(time.Millisecond))
			if err != nil {
				break
			}
			batch = append(batch, m)
		}
		if err := s.handle(batch, l); err != nil {
			return err
		}
		if err := s.seal(l); err != nil {
			return err
		}
	}
}

// drain stops pulling and writes what the client already holds, so that a
// clean stop leaves nothing waiting for AckWait before redelivery.
func (s *Service) drain(it jetstream.MessagesContext, l *Log) error {
	it.Drain()
	var batch []jetstream.Msg
	for {
		m, err := it.Next(jetstream.NextMaxWait(2 * time.Second))
		if err != nil {
			break
		}
		batch = append(batch, m)
	}
	if len(batch) == 0 {
		return nil
	}
	return s.handle(batch, l)
}

type pendingRecord struct {
	entry  Entry
	rec    events.OpRecord
	tp, ts string
}

// handle writes a batch, fsyncs, acks, then renders what was new.
func (s *Service) handle(batch []jetstream.Msg, l *Log) error {
	var (
		entries []Entry
		pend    = make(map[string]pendingRecord, len(batch))
		ack     []jetstream.Msg
	)
	decoded := s.decodeBatch(batch)
	for i, m := range batch {
		p, err := decoded[i].p, decoded[i].err
		if err != nil {
			s.log.Warn("invalid operation record", "subject", m.Subject(), slog.Any("err", err))
			s.rend.countRecord("invalid")
			_ = m.TermWithReason("invalid operation record")
			continue
		}
		if p.entry.Sig != SigOK {
			// Written all the same, flagged: audit verify reports the line.
			s.log.Warn("operation record not signed by a trusted worker", "subject", m.Subject(), "id", p.entry.ID,
				"sig", p.entry.Sig, "signer", p.entry.Signer)
			s.rend.countRecord("sig_" + p.entry.Sig)
		}
		entries = append(entries, p.entry)
		pend[p.entry.ID] = p
		ack = append(ack, m)
	}
	written, err := l.appendCanonical(entries) // decodeRecord made each record canonical
	if err != nil {
		for _, m := range ack {
			_ = m.Nak()
		}
		return err
	}
	for _, m := range ack {
		if err := m.Ack(); err != nil {
			// The record is redelivered after AckWait. If it comes back to
			// this instance while its id is in the log's index, it is
			// skipped; if it goes to another instance, that instance writes
			// it to its own file (one record in two files, once in each).
			s.log.Debug("ack", slog.Any("err", err))
		}
	}
	s.mu.Lock()
	s.written += uint64(len(written))
	s.mu.Unlock()
	// Also while draining, after Run's context ended: bounded here.
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.publish(pctx, l)
	cancel()
	for range len(entries) - len(written) {
		s.rend.countRecord("duplicate")
	}
	for _, e := range written {
		p := pend[e.ID]
		s.rend.countRecord("written")
		s.rend.render(p.rec, e, p.tp, p.ts)
	}
	return nil
}

// publish puts the log's latest checkpoint into sbx_audit when it is newer
// than the one published. A failure is logged, and retried with the next
// checkpoint: the file holds every checkpoint whatever the bus has.
func (s *Service) publish(ctx context.Context, l *Log) {
	line, ok := l.lastCheckpointLine()
	if !ok || line.Seq <= s.published {
		return
	}
	if err := publishCheckpoint(ctx, s.js, l.LogID(), line); err != nil {
		s.log.Warn("publish checkpoint", slog.Any("err", err))
		return
	}
	s.published = line.Seq
}

// decoded is one record of a batch, decoded and its signature judged.
type decoded struct {
	p      pendingRecord
	err    error
	signer string // what recsign.Verify made of the signature
	verr   error
}

// decodeBatch decodes every record of a batch and verifies its signature
// on up to GOMAXPROCS goroutines (an Ed25519 verification is most of a
// record's cost), then judges the signers one record at a time, in the
// batch's order (which alone decides the order of the log). Each goroutine
// takes a contiguous run of the batch: records a worker signed together
// arrive together, and their batch's signature is verified once (recsign
// remembers it) rather than once on each goroutine.
func (s *Service) decodeBatch(batch []jetstream.Msg) []decoded {
	out := make([]decoded, len(batch))
	one := func(i int) {
		m := batch[i]
		d := &out[i]
		if d.p, d.err = decodeRecord(m); d.err == nil {
			d.signer, d.verr = recsign.Verify(m.Subject(), m.Headers(), m.Data())
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(batch))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w * len(batch) / workers; i < (w+1)*len(batch)/workers; i++ {
				one(i)
			}
		}()
	}
	wg.Wait()
	for i := range out {
		if d := &out[i]; d.err == nil {
			// Also while draining, after Run's context ended: a lease lookup bounds itself.
			d.p.entry.Sig, d.p.entry.Signer = s.sig.judge(context.Background(), d.signer, d.verr, d.p.rec)
		}
	}
	return out
}

func decodeRecord(m jetstream.Msg) (pendingRecord, error) {
	env, err := cemsg.Decode(m.Headers(), m.Data())
	if err != nil {
		return pendingRecord{}, err
	}
	if env.Type != events.TypeOpOpened && env.Type != events.TypeOpClosed {
		return pendingRecord{}, fmt.Errorf("unexpected type %q", env.Type)
	}
	var rec events.OpRecord
	if err := unmarshalRecord(env.Data, &rec); err != nil {
		return pendingRecord{}, fmt.Errorf("record: %w", err)
	}
	raw, err := canonicalOfValid(env.Data) // Unmarshal checked the whole of it
	if err != nil {
		return pendingRecord{}, fmt.Errorf("record: %w", err)
	}
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	t := env.Time
	if t.IsZero() {
		t = time.Now().UTC()
	}
	h := m.Headers()
	e := Entry{ID: env.ID, Type: env.Type, Source: env.Source, Time: t.UTC(), Subject: m.Subject(), StreamSeq: seq,
		Signature: h.Get(events.HeaderSignature), SigBatch: h.Get(events.HeaderSignatureBatch), NotAfter: h.Get(events.HeaderNotAfter)}
	keepRecord(&e, env.Data, raw) // the signature stays checkable offline
	return pendingRecord{entry: e, rec: rec, tp: env.Traceparent, ts: env.Tracestate}, nil
}

// canonicalOfValid is canonicalValue(b) for b that json.Unmarshal took,
// which checks that the whole input is valid JSON first: b is not scanned
// again for it.
func canonicalOfValid(b []byte) (json.RawMessage, error) {
	if out, ok := fastCanonical(b); ok {
		return out, nil
	}
	return canonicalSlow(b)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
