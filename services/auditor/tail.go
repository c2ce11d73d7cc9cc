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
// an ordered (ephemeral) consumer; with Follow it keeps printing new ones
// until ctx ends (then it returns nil). It is what `sandboxio audit tail`
// runs; it reads the bus, not an auditor's log file.
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
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if opts.SandboxID != "" {
		cfg.FilterSubjects = []string{"sbx.ops.*." + opts.SandboxID + ".*"}
	} else if opts.Last > 0 {
		info, err := st.Info(ctx)
		if err != nil {
			return fmt.Errorf("auditor: tail: %w", err)
		}
		if last := info.State.LastSeq; last >= uint64(opts.Last) {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = max(info.State.FirstSeq, last-uint64(opts.Last)+1)
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
	caughtUp := info.NumPending == 0
	var ring []TailLine
	flush := func() error {
		for _, l := range ring {
			if err := printTail(w, l, opts.JSON); err != nil {
				return err
			}
		}
		ring = nil
		return nil
	}
	if caughtUp && !opts.Follow {
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
				if !caughtUp {
					_ = flush()
				}
				return nil
			}
			return fmt.Errorf("auditor: tail: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		env, err := cemsg.Decode(m.Headers(), m.Data())
		if err != nil {
			continue
		}
		l := TailLine{StreamSeq: md.Sequence.Stream, ID: env.ID, Type: env.Type, Source: env.Source, Time: env.Time, Record: m.Data()}
		if caughtUp {
			if err := printTail(w, l, opts.JSON); err != nil {
				return err
			}
			continue
		}
		ring = append(ring, l)
		if opts.Last > 0 && len(ring) > opts.Last {
			ring = ring[len(ring)-opts.Last:]
		}
		if md.NumPending == 0 {
			caughtUp = true
			if err := flush(); err != nil {
				return err
			}
			if !opts.Follow {
				return nil
			}
		}
	}
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
