package auditor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func readEntries(t *testing.T, path string) []Entry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	var out []Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line being written
		}
		out = append(out, e)
	}
	return out
}

// countIDs counts each record id in the log.
func countIDs(t *testing.T, path string) map[string]int {
	n := map[string]int{}
	for _, e := range readEntries(t, path) {
		if e.Type == TypeCheckpoint {
			continue
		}
		n[e.ID]++
	}
	return n
}

func verifyFile(t *testing.T, path string) VerifyReport {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Verify(f)
	if err != nil {
		t.Fatalf("Verify: %v (%+v)", err, rep.Problems)
	}
	return rep
}

// TestExactlyOnce: records published twice (same ce-id, new Nats-Msg-Id),
// records already written before a crash (written, never acked), and a full
// redelivery (consumer deleted and re-created) are all written once.
func TestExactlyOnce(t *testing.T) {
	e := startEnv(t)
	path := filepath.Join(e.dir, "audit.jsonl")

	// A previous run wrote op00000's records but died before acking them.
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	pre := []Entry{
		{ID: opID(0) + "-opened", Type: events.TypeOpOpened, Record: json.RawMessage(`{"op_id":"op00000"}`)},
		{ID: opID(0) + "-closed", Type: events.TypeOpClosed, Record: json.RawMessage(`{"op_id":"op00000"}`)},
	}
	if _, err := l.Append(pre); err != nil {
		t.Fatal(err)
	}
	l.Close()

	const ops = 20
	for i := range ops {
		publish(t, e.js, record(opID(i), events.OpExec, events.EventOpened), "")
		publish(t, e.js, record(opID(i), events.OpExec, events.EventClosed), "")
		if i%3 == 0 { // published again after the dedup window
			publish(t, e.js, record(opID(i), events.OpExec, events.EventClosed), "again-"+opID(i))
		}
	}
	s, err := New(Config{LogPath: path, Batch: 8}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := runService(t, s)
	cons := func() uint64 {
		c, err := e.js.Consumer(context.Background(), events.StreamOps, "auditor")
		if err != nil {
			return 1
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return 1
		}
		return info.NumPending + uint64(info.NumAckPending)
	}
	// Written first: a consumer just created may report nothing pending
	// for a moment before it has delivered anything.
	eventually(t, 10*time.Second, "every new record written", func() bool { return s.Written() == 2*ops-2 })
	eventually(t, 10*time.Second, "all records consumed and acked", func() bool { return cons() == 0 })
	stop()

	// Redeliver everything: a new consumer starts from the first record.
	if err := e.js.DeleteConsumer(context.Background(), events.StreamOps, "auditor"); err != nil {
		t.Fatal(err)
	}
	s2, err := New(Config{LogPath: path}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop2 := runService(t, s2)
	eventually(t, 10*time.Second, "redelivery consumed", func() bool { return cons() == 0 })
	stop2()
	if s2.Written() != 0 {
		t.Errorf("redelivery wrote %d lines", s2.Written())
	}

	n := countIDs(t, path)
	if len(n) != 2*ops {
		t.Errorf("log has %d distinct records, want %d", len(n), 2*ops)
	}
	for id, c := range n {
		if c != 1 {
			t.Errorf("record %s written %d times", id, c)
		}
	}
	if rep := verifyFile(t, path); rep.Records != 2*ops {
		t.Errorf("Verify: %d records, want %d", rep.Records, 2*ops)
	}
}

// TestRestartMidLoad stops and restarts the auditor (and once the NATS
// connection's server) while records are being published: every record ends
// up in the log exactly once.
func TestRestartMidLoad(t *testing.T) {
	e := startEnv(t)
	path := filepath.Join(e.dir, "audit.jsonl")
	const ops = 300
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := range ops {
			publish(t, e.js, record(opID(i), events.OpRunCode, events.EventOpened), "")
			publish(t, e.js, record(opID(i), events.OpRunCode, events.EventClosed), "")
		}
	}()
	for round := 0; round < 4; round++ {
		s, err := New(Config{LogPath: path, Batch: 16}, e.nc)
		if err != nil {
			t.Fatal(err)
		}
		stop := runService(t, s)
		before := len(readEntries(t, path))
		eventually(t, 10*time.Second, "progress", func() bool {
			return len(readEntries(t, path)) > before || len(readEntries(t, path)) == 2*ops
		})
		stop()
	}
	<-pubDone
	s, err := New(Config{LogPath: path}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := runService(t, s)
	eventually(t, 20*time.Second, "every record", func() bool { return len(readEntries(t, path)) >= 2*ops })
	stop()
	n := countIDs(t, path)
	if len(n) != 2*ops {
		t.Fatalf("log has %d distinct records, want %d", len(n), 2*ops)
	}
	for id, c := range n {
		if c != 1 {
			t.Errorf("record %s written %d times", id, c)
		}
	}
	verifyFile(t, path)
}

func buildLog(t *testing.T, n int) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.jsonl")
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []Entry
	for i := range n {
		rec, _ := json.Marshal(record(opID(i), events.OpExec, events.EventClosed))
		es = append(es, Entry{ID: opID(i) + "-closed", Type: events.TypeOpClosed, Record: rec, Time: time.Unix(int64(i), 0).UTC()})
	}
	if _, err := l.Append(es); err != nil {
		t.Fatal(err)
	}
	l.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string // the records, without the checkpoint Close wrote
	for _, line := range strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n") {
		if !strings.Contains(line, TypeCheckpoint) {
			lines = append(lines, line)
		}
	}
	lines[len(lines)-1] = strings.TrimSuffix(lines[len(lines)-1], "\n")
	return lines
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name     string
		mutate   func([]string) []string
		wantLine int
		wantKind ProblemKind
	}{
		{"intact", func(l []string) []string { return l }, 0, ""},
		{"changed", func(l []string) []string {
			l[2] = strings.Replace(l[2], `"outcome":"ok"`, `"outcome":"error"`, 1)
			return l
		}, 3, ProblemChanged},
		{"changed seq", func(l []string) []string {
			l[3] = strings.Replace(l[3], `"seq":4`, `"seq":40`, 1)
			return l
		}, 4, ProblemChanged},
		{"removed", func(l []string) []string { return append(l[:2:2], l[3:]...) }, 3, ProblemLink},
		{"reordered", func(l []string) []string { l[1], l[2] = l[2], l[1]; return l }, 2, ProblemLink},
		{"inserted", func(l []string) []string {
			return append(append(append([]string{}, l[:2]...), l[1]), l[2:]...)
		}, 3, ProblemLink},
		{"malformed", func(l []string) []string { l[4] = "{not json\n"; return l }, 5, ProblemMalformed},
		{"whitespace only", func(l []string) []string {
			l[1] = strings.Replace(l[1], `,"type"`, `,  "type"`, 1)
			return l
		}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := tt.mutate(buildLog(t, 6))
			rep, err := Verify(strings.NewReader(strings.Join(lines, "")))
			if tt.wantLine == 0 {
				if err != nil || !rep.OK() {
					t.Fatalf("Verify: %v %+v", err, rep.Problems)
				}
				return
			}
			if !errors.Is(err, events.ErrAuditTampered) {
				t.Fatalf("err = %v, want ErrAuditTampered", err)
			}
			if got := rep.FirstBadLine(); got != tt.wantLine || rep.Problems[0].Kind != tt.wantKind {
				t.Fatalf("first problem %+v, want line %d kind %s (all: %+v)", rep.Problems[0], tt.wantLine, tt.wantKind, rep.Problems)
			}
		})
	}
}

func TestOpenLogTornTailAndTampered(t *testing.T) {
	lines := buildLog(t, 3)
	path := filepath.Join(t.TempDir(), "a.jsonl")
	torn := strings.Join(lines, "") + "\n" + lines[0][:20]
	if err := os.WriteFile(path, []byte(torn), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d", l.Len())
	}
	if _, err := l.Append([]Entry{{ID: "x-closed", Record: json.RawMessage(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if rep := verifyFile(t, path); rep.Records != 4 || rep.TornTail {
		t.Fatalf("after repair: %+v", rep)
	}

	lines[1] = strings.Replace(lines[1], "fake", "faux", 1)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenLog(path); !errors.Is(err, events.ErrAuditTampered) {
		t.Fatalf("OpenLog on a tampered log: %v", err)
	}
}

// TestSpansAndMetrics: one span per operation, in the caller's trace, with
// the deterministic span id and no free-form fields; metrics by label.
func TestSpansAndMetrics(t *testing.T) {
	e := startEnv(t)
	exp := tracetest.NewInMemoryExporter()
	s, err := New(Config{LogPath: filepath.Join(e.dir, "a.jsonl"), SpanExporter: exp}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	stop := runService(t, s)

	const canary = "CANARY-s3cr3t-value"
	parent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	op := record("opspan1", events.OpExec, events.EventOpened)
	op.Traceparent = parent
	op.Summary = map[string]string{"argv": canary}
	publish(t, e.js, op, "")
	cl := record("opspan1", events.OpExec, events.EventClosed)
	cl.Traceparent, cl.Summary, cl.Error, cl.ErrorCode, cl.Outcome = parent, map[string]string{"argv": canary}, canary, events.CodeExecFailed, events.OutcomeError
	publish(t, e.js, cl, "")
	orphan := record("opspan2", events.OpKill, events.EventClosed) // opened went elsewhere
	publish(t, e.js, orphan, "")

	eventually(t, 10*time.Second, "records written", func() bool { return s.Written() == 3 })
	var spans tracetest.SpanStubs
	eventually(t, 10*time.Second, "spans exported", func() bool {
		_ = s.tel.Tracer.ForceFlush(context.Background())
		spans = exp.GetSpans()
		return len(spans) == 2
	})
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range spans {
		byName[sp.Name] = sp
		for _, a := range sp.Attributes {
			if strings.Contains(a.Value.String(), canary) {
				t.Errorf("span %s attribute %s holds the canary", sp.Name, a.Key)
			}
		}
		if strings.Contains(sp.Status.Description, canary) {
			t.Errorf("span status holds the canary")
		}
	}
	ex := byName["sandboxio.exec"]
	if got := ex.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("exec span trace id %s, want the caller's", got)
	}
	if got := ex.Parent.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("exec span parent %s", got)
	}
	if ex.SpanContext.SpanID() != telemetry.OpSpanID("opspan1") {
		t.Errorf("exec span id is not OpSpanID")
	}
	if d := ex.EndTime.Sub(ex.StartTime); d != 1500*time.Millisecond {
		t.Errorf("exec span lasts %v", d)
	}
	kill := byName["sandboxio.kill"]
	if kill.SpanContext.TraceID() != telemetry.OpTraceID("opspan2") || kill.Parent.IsValid() {
		t.Errorf("root span ids: %v parent %v", kill.SpanContext, kill.Parent)
	}
	if s.rend.openSpans() != 0 {
		t.Errorf("%d spans left open", s.rend.openSpans())
	}

	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`sandboxio_operations_total{backend="fake",kind="exec",outcome="error"} 1`,
		`sandboxio_operations_total{backend="fake",kind="kill",outcome="ok"} 1`,
		`sandboxio_operation_duration_seconds_bucket{backend="fake",kind="exec",outcome="error",le="2.5"} 1`,
		`sandboxio_streamed_bytes_total{backend="fake",direction="out",kind="exec"} 200`,
		`sandboxio_audit_records_total{result="written"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, canary) {
		t.Error("metrics hold the canary")
	}

	// Live gauge from the registry.
	kv, err := e.js.KeyValue(context.Background(), events.BucketRegistry)
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := json.Marshal(events.Sandbox{SandboxID: "sbx1", Backend: "fake", Worker: "w1", State: events.StateRunning})
	if _, err := kv.Put(context.Background(), "sbx1", sb); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "live gauge", func() bool {
		rec := httptest.NewRecorder()
		s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return strings.Contains(rec.Body.String(), `sandboxio_sandboxes_live{backend="fake",state="running"} 1`)
	})
	stop()
	if b, _ := os.ReadFile(filepath.Join(e.dir, "a.jsonl")); !bytes.Contains(b, []byte(canary)) {
		// The auditor stores records as published; redaction is the worker's
		// job, so the canary planted here is expected in the log.
		t.Log("note: canary not in log")
	}
	var _ sdktrace.SpanExporter = exp
}

func TestTail(t *testing.T) {
	e := startEnv(t)
	for i := range 3 {
		publish(t, e.js, record(opID(i), events.OpExec, events.EventClosed), "")
	}
	other := record("opx", events.OpCreate, events.EventOpened)
	other.SandboxID = "sbx2"
	publish(t, e.js, other, "")
	tests := []struct {
		name string
		opts TailOptions
		want []string
	}{
		{"all", TailOptions{}, []string{"op00000", "op00001", "op00002", "opx"}},
		{"last 2", TailOptions{Last: 2}, []string{"op00002", "opx"}},
		{"sandbox", TailOptions{SandboxID: "sbx2"}, []string{"opx"}},
		{"sandbox last", TailOptions{SandboxID: "sbx1", Last: 1, JSON: true}, []string{"op00002"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var buf bytes.Buffer
			if err := Tail(ctx, e.nc, &buf, tt.opts); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("got %d lines:\n%s", len(lines), buf.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d %q lacks %s", i, lines[i], w)
				}
			}
		})
	}

	// Follow prints records published later.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Tail(ctx, e.nc, pw, TailOptions{Follow: true, Last: 1}); pw.Close() }()
	br := bufio.NewReader(pr)
	if l, _ := br.ReadString('\n'); !strings.Contains(l, "opx") {
		t.Fatalf("first followed line %q", l)
	}
	publish(t, e.js, record("oplater", events.OpKill, events.EventClosed), "")
	if l, _ := br.ReadString('\n'); !strings.Contains(l, "oplater") {
		t.Fatalf("followed line %q", l)
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = jetstream.DeliverAllPolicy
}
