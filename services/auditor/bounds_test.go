package auditor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestOpenSpansBounded: opening more operations than MaxOpenSpans never holds
// more than MaxOpenSpans open spans; evicted spans are not exported; a closed
// record still yields a complete span, whether its opened span was evicted or
// is still held.
func TestOpenSpansBounded(t *testing.T) {
	tests := []struct {
		name  string
		cap   int
		opens int
	}{
		{"cap 1", 1, 10},
		{"cap 5", 5, 40},
		{"under cap", 50, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t)
			exp := tracetest.NewInMemoryExporter()
			s, err := New(Config{LogPath: filepath.Join(e.dir, "a.jsonl"), SpanExporter: exp, MaxOpenSpans: tt.cap}, e.nc)
			if err != nil {
				t.Fatal(err)
			}
			stop := runService(t, s)
			for i := range tt.opens {
				publish(t, e.js, record(opID(i), events.OpExec, events.EventOpened), "")
			}
			held := min(tt.cap, tt.opens)
			// Spans are rendered after a batch is written: wait for both.
			eventually(t, 10*time.Second, "opened records written and rendered", func() bool {
				if n := s.rend.openSpans(); n > tt.cap {
					t.Fatalf("%d open spans, cap %d", n, tt.cap)
				}
				return s.Written() == uint64(tt.opens) && s.rend.openSpans() == held
			})
			if n := s.rend.openSpans(); n != held {
				t.Fatalf("%d open spans, want %d", n, held)
			}

			// op 0 is evicted unless under the cap; the last op is held.
			first, last := opID(0), opID(tt.opens-1)
			publish(t, e.js, record(first, events.OpExec, events.EventClosed), "")
			publish(t, e.js, record(last, events.OpExec, events.EventClosed), "")
			var spans tracetest.SpanStubs
			eventually(t, 10*time.Second, "two spans exported", func() bool {
				_ = s.tel.Tracer.ForceFlush(context.Background())
				spans = exp.GetSpans()
				return len(spans) >= 2
			})
			_ = s.tel.Tracer.ForceFlush(context.Background())
			spans = exp.GetSpans() // before stop: shutting down clears the exporter
			stop()
			if len(spans) != 2 {
				t.Fatalf("%d spans exported, want 2 (evicted spans are dropped)", len(spans))
			}
			start := record(first, events.OpExec, events.EventClosed).StartedAt
			for _, sp := range spans {
				id := ""
				for _, a := range sp.Attributes {
					if a.Key == "sandboxio.op_id" {
						id = a.Value.AsString()
					}
				}
				if id != first && id != last {
					t.Errorf("span for %q exported", id)
				}
				if sp.SpanContext.SpanID() != telemetry.OpSpanID(id) {
					t.Errorf("span %s: id is not OpSpanID", id)
				}
				if !sp.StartTime.Equal(start) || sp.EndTime.Sub(sp.StartTime) != 1500*time.Millisecond {
					t.Errorf("span %s: %v..%v, want the record's StartedAt..EndedAt", id, sp.StartTime, sp.EndTime)
				}
			}
			wantOpen := held - 1 // the last op closed
			if tt.opens <= tt.cap {
				wantOpen-- // and op 0, which was held too
			}
			if n := s.rend.openSpans(); n != wantOpen {
				t.Errorf("%d open spans after closing, want %d", n, wantOpen)
			}

			// Directly: the map never exceeds the cap, whatever the order.
			for i := range 3 * tt.cap {
				s.rend.render(record(fmt.Sprintf("direct%05d", i), events.OpExec, events.EventOpened), Entry{Seq: uint64(i + 1)}, "", "")
				if n := s.rend.openSpans(); n > tt.cap {
					t.Fatalf("after %d opens: %d open spans, cap %d", i+1, n, tt.cap)
				}
			}
		})
	}
}

// TestOpenSpansMaxAge: a span open longer than OpenSpanMaxAge is dropped on
// the next record, and the default is an hour.
func TestOpenSpansMaxAge(t *testing.T) {
	if got := (Config{}).withDefaults(); got.OpenSpanMaxAge != time.Hour || got.MaxOpenSpans != 10000 || got.IndexSize != DefaultIndexSize {
		t.Fatalf("defaults: OpenSpanMaxAge %v, MaxOpenSpans %d, IndexSize %d", got.OpenSpanMaxAge, got.MaxOpenSpans, got.IndexSize)
	}
	e := startEnv(t)
	s, err := New(Config{LogPath: filepath.Join(e.dir, "a.jsonl"), OpenSpanMaxAge: time.Nanosecond}, e.nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.tel.Shutdown(context.Background()) })
	s.rend.render(record("aged", events.OpExec, events.EventOpened), Entry{Seq: 1}, "", "")
	i := 0
	eventually(t, 5*time.Second, "the aged span dropped", func() bool {
		i++
		s.rend.render(record(fmt.Sprintf("later%05d", i), events.OpExec, events.EventOpened), Entry{Seq: uint64(i + 1)}, "", "")
		s.rend.mu.Lock()
		defer s.rend.mu.Unlock()
		_, held := s.rend.open["aged"]
		return !held
	})
}

// TestLogIndexBounded: the log remembers only its last IndexSize ids, after
// appends and after reopening, and skips the ones it remembers.
func TestLogIndexBounded(t *testing.T) {
	const n = 10
	ids := make([]string, n)
	for i := range ids {
		ids[i] = opID(i) + "-closed"
	}
	tests := []struct {
		name string
		size int
	}{
		{"one", 1},
		{"three", 3},
		{"larger than the log", 2 * n},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a.jsonl")
			l, err := openLog(path, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if _, err := l.Append([]Entry{{ID: id, Record: json.RawMessage(`{}`)}}); err != nil {
					t.Fatal(err)
				}
				if l.index.len() > tt.size || len(l.index.fifo) > tt.size {
					t.Fatalf("index holds %d ids (%d in fifo), size %d", l.index.len(), len(l.index.fifo), tt.size)
				}
			}
			check := func(l *Log) {
				t.Helper()
				kept := min(tt.size, n)
				if l.index.len() != kept {
					t.Fatalf("index holds %d ids, want %d", l.index.len(), kept)
				}
				for i, id := range ids {
					if want := i >= n-kept; l.Has(id) != want {
						t.Errorf("Has(%s) = %v, want %v", id, !want, want)
					}
				}
				// A remembered id is skipped.
				w, err := l.Append([]Entry{{ID: ids[n-1], Record: json.RawMessage(`{}`)}})
				if err != nil || len(w) != 0 {
					t.Fatalf("re-append of the last id wrote %d (%v)", len(w), err)
				}
			}
			check(l)
			l.Close()
			l, err = openLog(path, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			check(l)
			if rep := verifyFile(t, path); rep.Records != n {
				t.Fatalf("%d records, want %d", rep.Records, n)
			}
		})
	}
}

// publishFlood publishes records on sandbox sbx1 as fast as it can until
// stop is closed; started is closed after the first one is stored.
func publishFlood(js jetstream.JetStream, prefix string, stop <-chan struct{}, started chan<- struct{}) error {
	for i := 0; ; i++ {
		select {
		case <-stop:
			<-js.PublishAsyncComplete()
			return nil
		default:
		}
		rec := record(fmt.Sprintf("%s%06d", prefix, i), events.OpExec, events.EventClosed)
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
			ID: rec.OpID + "-" + rec.Phase, Type: events.TypeOpClosed, Source: "test", Subject: rec.SandboxID, Data: data})
		if err != nil {
			return err
		}
		if i == 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = js.PublishMsg(ctx, m)
			cancel()
			if err != nil {
				return err
			}
			close(started)
			continue
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
			<-js.PublishAsyncComplete()
		}
	}
}

// tailLines parses Tail's JSON output.
func tailLines(t *testing.T, b []byte) []TailLine {
	t.Helper()
	var out []TailLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<22)
	for sc.Scan() {
		var l TailLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestTailSnapshot: without Follow, Tail prints what was stored when it
// started and returns, also while records keep being published; on an empty
// stream it returns at once. With Follow it prints the stored records while
// records keep being published.
func TestTailSnapshot(t *testing.T) {
	const pre = 50
	tests := []struct {
		name      string
		opts      TailOptions
		pre       int
		flood     bool
		wantLines int // exact when > 0; 0: at least pre, contiguous from seq 1
	}{
		{"empty stream", TailOptions{}, 0, false, -1},
		{"empty stream, sandbox", TailOptions{SandboxID: "sbx1"}, 0, false, -1},
		{"all while publishing", TailOptions{}, pre, true, 0},
		{"sandbox while publishing", TailOptions{SandboxID: "sbx1"}, pre, true, 0},
		{"last 5 while publishing", TailOptions{Last: 5}, pre, true, 5},
		{"sandbox last 5 while publishing", TailOptions{SandboxID: "sbx1", Last: 5}, pre, true, 5},
		{"all, quiet", TailOptions{}, pre, false, pre},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t)
			for i := range tt.pre {
				publish(t, e.js, record(opID(i), events.OpExec, events.EventClosed), "")
			}
			if tt.flood {
				stop, started, perr := make(chan struct{}), make(chan struct{}), make(chan error, 1)
				go func() { perr <- publishFlood(e.js, "flood", stop, started) }()
				t.Cleanup(func() {
					close(stop)
					if err := <-perr; err != nil {
						t.Errorf("publisher: %v", err)
					}
				})
				select {
				case <-started:
				case err := <-perr:
					t.Fatalf("publisher: %v", err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var buf bytes.Buffer
			opts := tt.opts
			opts.JSON = true
			if err := Tail(ctx, e.nc, &buf, opts); err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatal("Tail returned only when its context ended")
			}
			lines := tailLines(t, buf.Bytes())
			switch {
			case tt.wantLines < 0:
				if len(lines) != 0 {
					t.Fatalf("%d lines from an empty stream", len(lines))
				}
				return
			case tt.wantLines > 0:
				if len(lines) != tt.wantLines {
					t.Fatalf("%d lines, want %d", len(lines), tt.wantLines)
				}
			default:
				if len(lines) < tt.pre || lines[0].StreamSeq != 1 {
					t.Fatalf("%d lines from seq %d, want at least %d from 1", len(lines), lines[0].StreamSeq, tt.pre)
				}
			}
			for i := 1; i < len(lines); i++ {
				if lines[i].StreamSeq != lines[i-1].StreamSeq+1 {
					t.Fatalf("line %d: seq %d after %d", i, lines[i].StreamSeq, lines[i-1].StreamSeq)
				}
			}
		})
	}
}

// TestTailFollowWhilePublishing: with Follow, the stored records are printed
// while records keep being published (the catch-up does not wait for nothing
// to be pending), the last n ones with Last n.
func TestTailFollowWhilePublishing(t *testing.T) {
	const pre = 30
	tests := []struct {
		name        string
		opts        TailOptions
		minFirstSeq uint64
		maxFirstSeq uint64
	}{
		{"all", TailOptions{Follow: true, JSON: true}, 1, 1},
		// the publisher has stored some more by the time Tail starts
		{"last 3", TailOptions{Follow: true, Last: 3, JSON: true}, pre - 2, 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnv(t)
			for i := range pre {
				publish(t, e.js, record(opID(i), events.OpExec, events.EventClosed), "")
			}
			stop, started, perr := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() { perr <- publishFlood(e.js, "flood", stop, started) }()
			var stopOnce sync.Once
			stopPub := func() {
				stopOnce.Do(func() {
					close(stop)
					if err := <-perr; err != nil {
						t.Errorf("publisher: %v", err)
					}
				})
			}
			t.Cleanup(stopPub)
			<-started

			ctx, cancel := context.WithCancel(context.Background())
			pr, pw := io.Pipe()
			done := make(chan error, 1)
			go func() { done <- Tail(ctx, e.nc, pw, tt.opts); pw.Close() }()
			lines := make(chan string)
			go func() {
				br := bufio.NewReader(pr)
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						close(lines)
						return
					}
					lines <- l
				}
			}()
			deadline := time.After(10 * time.Second)
			var want uint64
			for n := 0; n < pre+10; n++ { // past the stored records, into the published ones
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("Tail stopped")
					}
					got := tailLines(t, []byte(l))
					if len(got) != 1 {
						t.Fatalf("line %q", l)
					}
					seq := got[0].StreamSeq
					if n == 0 && (seq < tt.minFirstSeq || seq > tt.maxFirstSeq) {
						t.Fatalf("first line seq %d, want %d..%d", seq, tt.minFirstSeq, tt.maxFirstSeq)
					}
					if n > 0 && seq != want {
						t.Fatalf("line %q, want seq %d", strings.TrimSpace(l), want)
					}
					want = seq + 1
				case <-deadline:
					t.Fatalf("timed out waiting for seq %d", want)
				}
			}
			cancel()
			go func() {
				for range lines {
				}
			}()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			stopPub()
		})
	}
}

// TestTailWriter: what is printed after each message, and when the records
// stored at start are all seen.
func TestTailWriter(t *testing.T) {
	type msg struct {
		seq, pending uint64
		unreadable   bool
	}
	tests := []struct {
		name     string
		follow   bool
		last     int
		snapshot uint64
		msgs     []msg
		printed  []int // lines printed in total after each message
		done     int   // index of the message that reports done, -1 never
	}{
		{"all: printed as they come", false, 0, 3, []msg{{1, 5, false}, {2, 4, false}, {3, 3, false}}, []int{1, 2, 3}, 2},
		{"all: stops at the snapshot", false, 0, 2, []msg{{1, 9, false}, {2, 9, false}}, []int{1, 2}, 1},
		{"all: stops when nothing pending", false, 0, 9, []msg{{1, 1, false}, {4, 0, false}}, []int{1, 2}, 1},
		{"all: past the snapshot, not printed", false, 0, 5, []msg{{1, 9, false}, {7, 9, false}}, []int{1, 1}, 1},
		{"all, follow: past the snapshot, printed", true, 0, 5, []msg{{1, 9, false}, {7, 9, false}, {8, 9, false}}, []int{1, 2, 3}, 1},
		{"unreadable last record", false, 0, 2, []msg{{1, 1, false}, {2, 0, true}}, []int{1, 1}, 1},
		{"last 2: printed on catching up", false, 2, 4, []msg{{1, 3, false}, {2, 2, false}, {3, 1, false}, {4, 0, false}}, []int{0, 0, 0, 2}, 3},
		{"last 2, follow: past the snapshot", true, 2, 3, []msg{{1, 9, false}, {2, 9, false}, {5, 9, false}}, []int{0, 0, 3}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := &tailWriter{w: &buf, json: true, follow: tt.follow, last: tt.last, snapshot: tt.snapshot}
			for i, m := range tt.msgs {
				var l *TailLine
				if !m.unreadable {
					l = &TailLine{StreamSeq: m.seq, ID: fmt.Sprint(m.seq), Record: json.RawMessage(`{}`)}
				}
				done, err := tw.add(m.seq, m.pending, l)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Count(buf.String(), "\n"); got != tt.printed[i] {
					t.Fatalf("after message %d: %d lines printed, want %d", i, got, tt.printed[i])
				}
				if want := tt.done >= 0 && i >= tt.done; done != want {
					t.Fatalf("after message %d: done = %v, want %v", i, done, want)
				}
				if done && !tt.follow {
					return
				}
			}
		})
	}
}
