package auditor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TailOptions selects what Tail prints.
type TailOptions struct {
	// Follow keeps printing new records until ctx ends.
	Follow bool
	// Last prints only the last n records before following; 0 prints all.
	Last int
	// SandboxID limits the output to one sandbox's records.
	SandboxID string
	// JSON prints one JSON object per line ({"stream_seq","id","type","record"})
	// instead of the human format.
	JSON bool
}

// TailLine is the JSON form of one record printed by Tail.
type TailLine struct {
	StreamSeq uint64          `json:"stream_seq"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Source    string          `json:"source"`
	Time      time.Time       `json:"time"`
	Record    json.RawMessage `json:"record"`
}

// Tail prints the operation records held in SBX_OPS, oldest first, through
// an ordered (ephemeral) consumer. Without Follow it prints the records
// stored when it started (up to the stream's last sequence then) and
// returns, even while records keep being published; with Follow it keeps
// printing new ones until ctx ends (then it returns nil). It is what
// `sandboxio audit tail` runs; it reads the bus, not an auditor's log file.
func Tail(ctx context.Context, nc *nats.Conn, w io.Writer, opts TailOptions) error {
	if opts.SandboxID != "" && !events.ValidID(opts.SandboxID) {
		return events.Errorf(events.CodeInvalidID, "sandbox id %q", opts.SandboxID)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	st, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	sinfo, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	if sinfo.State.Msgs == 0 && !opts.Follow {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if opts.SandboxID != "" {
		cfg.FilterSubjects = []string{"sbx.ops.*." + opts.SandboxID + ".*"}
	} else if opts.Last > 0 {
		if last := sinfo.State.LastSeq; last >= uint64(opts.Last) {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = max(sinfo.State.FirstSeq, last-uint64(opts.Last)+1)
		}
	}
	cons, err := st.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	tw := &tailWriter{w: w, json: opts.JSON, follow: opts.Follow, last: opts.Last, snapshot: sinfo.State.LastSeq,
		caughtUp: info.NumPending == 0}
	if tw.caughtUp && !opts.Follow {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("auditor: tail: %w", err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				_ = tw.flush()
				return nil
			}
			return fmt.Errorf("auditor: tail: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		var l *TailLine
		if env, err := cemsg.Decode(m.Headers(), m.Data()); err == nil {
			l = &TailLine{StreamSeq: md.Sequence.Stream, ID: env.ID, Type: env.Type, Source: env.Source, Time: env.Time, Record: m.Data()}
		}
		done, err := tw.add(md.Sequence.Stream, md.NumPending, l)
		if err != nil {
			return fmt.Errorf("auditor: tail: %w", err)
		}
		if done && !opts.Follow {
			return nil
		}
	}
}

// tailWriter decides what Tail prints. Until it has caught up with the
// records stored when Tail started (the stream's last sequence then, or no
// record left pending for the consumer), it prints each record as it comes,
// or, with last > 0, keeps the last ones in a ring and prints them on
// catching up. Afterwards it prints every record when following.
type tailWriter struct {
	w        io.Writer
	json     bool
	follow   bool
	last     int
	snapshot uint64 // the stream's last sequence when Tail started
	caughtUp bool
	ring     []TailLine
}

// add takes the message at stream sequence seq (l is nil when it is not a
// readable record) with pending messages left for the consumer after it. done
// reports that the records stored at start have all been seen: without
// follow, Tail then returns.
func (t *tailWriter) add(seq, pending uint64, l *TailLine) (done bool, err error) {
	switch {
	case t.caughtUp:
		return true, t.print(l)
	case seq > t.snapshot: // published after Tail started
		t.caughtUp = true
		if err := t.flush(); err != nil || !t.follow {
			return true, err
		}
		return true, t.print(l)
	case t.last > 0:
		if l != nil {
			t.ring = append(t.ring, *l)
			if len(t.ring) > t.last {
				t.ring = t.ring[len(t.ring)-t.last:]
			}
		}
	default:
		if err := t.print(l); err != nil {
			return false, err
		}
	}
	if seq >= t.snapshot || pending == 0 {
		t.caughtUp = true
		return true, t.flush()
	}
	return false, nil
}

func (t *tailWriter) print(l *TailLine) error {
	if l == nil {
		return nil
	}
	return printTail(t.w, *l, t.json)
}

// flush prints the ring.
func (t *tailWriter) flush() error {
	for _, l := range t.ring {
		if err := printTail(t.w, l, t.json); err != nil {
			return err
		}
	}
	t.ring = nil
	return nil
}

func printTail(w io.Writer, l TailLine, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var r events.OpRecord
	if err := json.Unmarshal(l.Record, &r); err != nil {
		_, err = fmt.Fprintf(w, "%d %s %s (unreadable record)\n", l.StreamSeq, l.ID, l.Type)
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-6s %-11s %s %s/%s op=%s", l.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Phase, r.Kind,
		r.SandboxID, r.Backend, r.Worker, r.OpID)
	if r.Phase == events.EventClosed {
		fmt.Fprintf(&b, " outcome=%s duration_ms=%d", r.Outcome, r.DurationMS)
		if r.ErrorCode != "" {
			fmt.Fprintf(&b, " error=%s", r.ErrorCode)
		}
		if r.ExitCode != nil {
			fmt.Fprintf(&b, " exit=%d", *r.ExitCode)
		}
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
