package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/services/auditor"
	"github.com/sandboxio/sandboxio/services/reaper"
)

// logCapture is an slog handler target that keeps every line of every
// service (JSON, debug level and up).
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.buf.Bytes())
}

func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// testLogger discards unless SBX_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("SBX_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// spanSink is an in-memory span exporter that keeps its spans across
// Shutdown (the auditor shuts its provider down when it stops, and
// tracetest.InMemoryExporter forgets everything then).
type spanSink struct {
	mu    sync.Mutex
	spans tracetest.SpanStubs
}

var _ sdktrace.SpanExporter = (*spanSink)(nil)

func (s *spanSink) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, tracetest.SpanStubsFromReadOnlySpans(spans)...)
	return nil
}

func (s *spanSink) Shutdown(context.Context) error { return nil }

func (s *spanSink) Spans() tracetest.SpanStubs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append(tracetest.SpanStubs(nil), s.spans...)
}

// service is a service running on its own context.
type service struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// stop cancels the service and waits for Run to return.
func (s *service) stop(t testing.TB) {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("service did not stop within 30s")
	}
	if s.err != nil {
		t.Errorf("service failed: %v", s.err)
	}
}

func runService(t testing.TB, run func(context.Context) error) *service {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &service{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

func startAuditor(t testing.TB, nc *nats.Conn, cfg auditor.Config) (*auditor.Service, *service) {
	t.Helper()
	a, err := auditor.New(cfg, nc)
	if err != nil {
		t.Fatalf("auditor: %v", err)
	}
	return a, runService(t, a.Run)
}

func startReaper(t testing.TB, nc *nats.Conn, cfg reaper.Config) (*reaper.Service, *service) {
	t.Helper()
	r, err := reaper.New(cfg, nc)
	if err != nil {
		t.Fatalf("reaper: %v", err)
	}
	return r, runService(t, r.Run)
}

// rawCall sends one API request (for operations the Go client has no method
// for) and decodes the reply or its SBX error.
func rawCall(ctx context.Context, nc *nats.Conn, op string, req, out any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(events.APISubject(op))
	msg.Data = data
	resp, err := nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if code := resp.Header.Get(events.HeaderServiceErrorCode); code != "" {
		if e := events.DecodeError(resp.Data); e != nil {
			return e
		}
		n, _ := strconv.Atoi(code)
		return events.Errorf(events.CodeFromNumber(n), "%s", resp.Header.Get(events.HeaderServiceError))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(resp.Data, out)
}

// readAudit parses an audit log's record lines (the auditor's checkpoint
// lines are skipped: they carry no record).
func readAudit(t testing.TB, path string) []auditor.Entry {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []auditor.Entry
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e auditor.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("audit line %d: %v", i+1, err)
		}
		if e.Type == auditor.TypeCheckpoint { // the auditor's own seal, no record
			continue
		}
		out = append(out, e)
	}
	return out
}

// records decodes the OpRecords of audit entries.
func records(t testing.TB, entries []auditor.Entry) []events.OpRecord {
	t.Helper()
	out := make([]events.OpRecord, 0, len(entries))
	for _, e := range entries {
		var r events.OpRecord
		if err := json.Unmarshal(e.Record, &r); err != nil {
			t.Fatalf("audit entry %s: %v", e.ID, err)
		}
		out = append(out, r)
	}
	return out
}

func streamMsgs(t testing.TB, js jetstream.JetStream, name string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(events.SubjectCmdBallast))
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	// The router's ballast (pkg/bus.RunBallast) is not a command.
	return info.State.Msgs - info.State.Subjects[events.SubjectCmdBallast]
}

// waitAudited polls until env's workers have every record they handed over
// acknowledged (or given up on: a record still waiting for a retry after a
// disconnection is not in SBX_OPS yet), and the audit log holds as many
// lines as SBX_OPS holds records (and the count held still across two
// looks).
func waitAudited(t testing.TB, env *sbxtest.Env, js jetstream.JetStream, path string, within time.Duration) []auditor.Entry {
	t.Helper()
	var entries []auditor.Entry
	var last uint64
	sbxtest.Eventually(t, within, func() bool {
		if env.RecordsUnsettled() != 0 {
			return false
		}
		n := streamMsgs(t, js, events.StreamOps)
		entries = readAudit(t, path)
		ok := n > 0 && uint64(len(entries)) == n && n == last
		last = n
		return ok
	}, "audit log never caught up with SBX_OPS (%d lines, %d records)", len(entries), last)
	return entries
}

// scanStreams reads every message of every stream (KV buckets and object
// stores included) and returns where needle occurs, in a subject, a header or
// the data.
func scanStreams(t testing.TB, js jetstream.JetStream, needle []byte) (found []string, scanned int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("stream %s seq %d: %v", name, seq, err)
			}
			scanned++
			var hdr strings.Builder
			for k, vs := range m.Header {
				hdr.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
			}
			if bytes.Contains([]byte(m.Subject), needle) || strings.Contains(hdr.String(), string(needle)) || bytes.Contains(m.Data, needle) {
				found = append(found, fmt.Sprintf("stream %s seq %d subject %s", name, seq, m.Subject))
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatalf("stream names: %v", err)
	}
	return found, scanned
}

// lines returns the lines of b that contain needle.
func linesWith(b, needle []byte) []string {
	var out []string
	for _, l := range bytes.Split(b, []byte("\n")) {
		if bytes.Contains(l, needle) {
			out = append(out, string(l))
		}
	}
	return out
}

func readAll(t testing.TB, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
