package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// A worker restarted with the same id re-adopts its sandboxes but not their
// processes: the old process's pipes died with it. A client streaming one
// waits for an exit marker, and its lease check sees a live worker. So at
// re-adoption the worker reads the sandbox's operation records (SBX_OPS,
// sbx.ops.<backend>.<sandbox>.>), and for every exec or run_code opened
// and never closed it publishes the exit marker the old process never did
// (SBX_E1621 ProcessLost) and closes the record with the same error.

// Bounds of the scan of one sandbox's records.
const (
	lostScanTimeout = 10 * time.Second
	lostScanMax     = 100_000
)

// endLostProcesses ends the processes a sandbox lost with its worker.
func (w *Worker) endLostProcesses(ctx context.Context, sb *sandbox) {
	ctx, cancel := context.WithTimeout(ctx, lostScanTimeout)
	defer cancel()
	open, err := w.openProcessOps(ctx, sb.id)
	if err != nil {
		w.log.Warn("lost processes: records unreadable", "sandbox_id", sb.id, slog.Any("err", err))
		return
	}
	for _, rec := range open {
		w.endLostProcess(ctx, sb, rec)
	}
}

// openProcessOps returns the exec and run_code records of a sandbox that
// were opened by this worker id and never closed.
func (w *Worker) openProcessOps(ctx context.Context, sandboxID string) ([]events.OpRecord, error) {
	cons, err := w.js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.OpsSubject(w.info.Name, sandboxID, ">")},
	})
	if err != nil {
		return nil, err
	}
	open := map[string]events.OpRecord{}
	var order []string
	for read := 0; read < lostScanMax && ctx.Err() == nil; {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := cemsg.Decode(m.Headers(), m.Data())
			if err != nil {
				continue
			}
			var rec events.OpRecord
			if json.Unmarshal(env.Data, &rec) != nil || (rec.Kind != events.OpExec && rec.Kind != events.OpRunCode) {
				continue
			}
			if rec.ProcessID == "" {
				rec.ProcessID = rec.Summary["process_id"] // the opened record has it there
			}
			switch rec.Phase {
			case events.EventOpened:
				// Only the predecessor's: this run's own execs are live.
				if rec.Worker == w.cfg.WorkerID && events.ValidID(rec.ProcessID) && rec.StartedAt.Before(w.started) {
					if _, seen := open[rec.OpID]; !seen {
						order = append(order, rec.OpID)
					}
					open[rec.OpID] = rec
				}
			case events.EventClosed:
				delete(open, rec.OpID)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
		if n == 0 {
			break
		}
		read += n
	}
	out := make([]events.OpRecord, 0, len(open))
	for _, id := range order {
		if rec, ok := open[id]; ok {
			out = append(out, rec)
		}
	}
	return out, nil
}

// endLostProcess publishes the missing exit marker of one process (unless
// it is stored after all) and closes its record.
func (w *Worker) endLostProcess(ctx context.Context, sb *sandbox, rec events.OpRecord) {
	e := events.Errorf(events.CodeProcessLost, "process %s was lost when worker %s restarted; its exit status is unknown", rec.ProcessID, w.cfg.WorkerID)
	subject := events.OutputSubject(sb.tenantToken(), sb.id, rec.ProcessID, events.Exit)
	if st, err := w.js.Stream(ctx, events.StreamOutput); err == nil {
		if _, err := st.GetLastMsgForSubject(ctx, subject); err == nil {
			e = nil // the marker made it: only the record was not closed
		}
	}
	if e != nil {
		res := events.ExecResult{ProcessID: rec.ProcessID, ExitCode: -1, Streamed: true, Err: e}
		body, _ := json.Marshal(res)
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header[events.HeaderExitCode] = []string{"-1"}
		m.Header[events.HeaderServiceErrorCode] = []string{strconv.Itoa(e.Code.Number())}
		m.Header[events.HeaderServiceError] = []string{e.Name + ": " + e.Message}
		m.Header[events.HeaderMsgID] = []string{sb.id + "-" + rec.ProcessID + "-x"}
		m.Header[events.HeaderLastSeqStdout] = []string{strconv.FormatUint(w.lastSeq(ctx, sb, rec.ProcessID, events.Stdout), 10)}
		m.Header[events.HeaderLastSeqStderr] = []string{strconv.FormatUint(w.lastSeq(ctx, sb, rec.ProcessID, events.Stderr), 10)}
		if err := publishRetry(w.js, m, w.stopping); err != nil {
			w.log.Warn("lost process: exit marker not stored", "sandbox_id", sb.id, "process_id", rec.ProcessID, slog.Any("err", err))
			return
		}
		w.log.Info("process lost with the restart: stream ended", "sandbox_id", sb.id, "process_id", rec.ProcessID)
	}
	op := &opRecord{w: w, rec: rec, red: sb.redaction()}
	if e == nil {
		e = events.Errorf(events.CodeProcessLost, "the record of process %s was not closed before worker %s restarted", rec.ProcessID, w.cfg.WorkerID)
	}
	op.close(e)
}

// lastSeq is the last Sbx-Seq stored on one output stream of a process (0
// when none): the exit marker says where the output ended.
func (w *Worker) lastSeq(ctx context.Context, sb *sandbox, pid, stream string) uint64 {
	st, err := w.js.Stream(ctx, events.StreamOutput)
	if err != nil {
		return 0
	}
	m, err := st.GetLastMsgForSubject(ctx, events.OutputSubject(sb.tenantToken(), sb.id, pid, stream))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(m.Header.Get(events.HeaderSeq), 10, 64)
	return n
}
