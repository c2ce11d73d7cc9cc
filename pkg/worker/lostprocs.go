package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/recsign"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// A worker restarted with the same id re-adopts its sandboxes. At
// re-adoption it reads the sandbox's operation records (SBX_OPS,
// sbx.ops.<backend>.<sandbox>.>) for every exec or run_code its predecessor
// opened and never closed. A backend whose processes outlive their worker
// (a Reattacher: the Docker agent's process table, ADR 18) re-attaches to
// an exec from the byte offsets SBX_OUT holds (the last chunk's Sbx-Offset):
// a streamed exec's output continues on its subjects with the next Sbx-Seq,
// a buffered one's answer goes to the reply subject its record names. For
// every other process (gone, its output no longer kept, a run_code, a
// backend without the ability) the worker publishes the exit marker the old
// process never did (SBX_E1621 ProcessLost) and closes the record with the
// same error: a client streaming one waits for an exit marker, and its
// lease check sees a live worker.

// Bounds of the scan of one sandbox's records.
const (
	lostScanTimeout = 10 * time.Second
	lostScanMax     = 100_000
)

// ownRecord reports whether a record read back from SBX_OPS is one this
// worker id's runs signed, when that can be told: with a signing key of its
// own (Config.SigningSeed, the same across restarts), only a record it
// signed steers a restart (any services user may publish on sbx.ops.>: a
// forged closed record would hide a live exec, a forged opened one would
// have a process killed and a reply subject answered). Without one, each
// run's key is new and every record is taken, as every unsigned command is
// without trusted commanders.
func (w *Worker) ownRecord(m jetstream.Msg) bool {
	if !w.keys.stable {
		return true
	}
	signer, err := recsign.Verify(m.Subject(), m.Headers(), m.Data())
	return err == nil && signer == w.keys.signPub
}

// endLostProcesses ends the processes a sandbox lost with its worker.
func (w *Worker) endLostProcesses(ctx context.Context, sb *sandbox) {
	ctx, cancel := context.WithTimeout(ctx, lostScanTimeout)
	defer cancel()
	open, err := w.openProcessOps(ctx, sb.id)
	if err != nil {
		w.log.Warn("lost processes: records unreadable", "sandbox_id", sb.id, slog.Any("err", err))
		return
	}
	ra, _ := w.backend.(Reattacher)
	for _, rec := range open {
		if ra != nil && rec.Kind == events.OpExec && !w.exitStored(ctx, sb, rec.ProcessID) && w.reattach(ctx, sb, ra, rec) {
			continue
		}
		w.abandon(ctx, ra, sb, rec.ProcessID)
		w.endLostProcess(ctx, sb, rec)
		if to := rec.Summary["reply_to"]; ra != nil && to != "" {
			// The router left it to us (the lease's answers_restarted).
			w.reply(to, nil, lostError(rec.ProcessID, w.cfg.WorkerID))
		}
	}
}

func lostError(pid, workerID string) *events.Error {
	return events.Errorf(events.CodeProcessLost, "process %s was lost when worker %s restarted; its exit status is unknown", pid, workerID)
}

// abandon kills what may be left of a process ended as lost.
func (w *Worker) abandon(ctx context.Context, ra Reattacher, sb *sandbox, pid string) {
	if ra == nil {
		return
	}
	if err := ra.Abandon(ctx, sb.id, pid); err != nil {
		w.log.Warn("lost process: not killed", "sandbox_id", sb.id, "process_id", pid, slog.Any("err", err))
	}
}

// exitStored reports whether a process's exit marker is in SBX_OUT.
func (w *Worker) exitStored(ctx context.Context, sb *sandbox, pid string) bool {
	st, err := w.js.Stream(ctx, events.StreamOutput)
	if err != nil {
		return false
	}
	_, err = st.GetLastMsgForSubject(ctx, events.OutputSubject(sb.tenantToken(), sb.id, pid, events.Exit))
	return err == nil
}

// reattach starts re-attaching to one exec of the predecessor's. It is false
// (and nothing was done) when the exec cannot be picked up where its stored
// output ends; otherwise the exec runs on, and if the backend then finds it
// gone, it is ended as lost.
func (w *Worker) reattach(ctx context.Context, sb *sandbox, ra Reattacher, rec events.OpRecord) bool {
	pid := rec.ProcessID
	replyTo := rec.Summary["reply_to"] // a buffered exec: its answer is still awaited
	var outSeq, errSeq uint64
	var outFrom, errFrom int64
	if replyTo == "" {
		var ok bool
		if outSeq, outFrom, ok = w.lastChunk(ctx, sb, pid, events.Stdout); !ok {
			return false
		}
		if errSeq, errFrom, ok = w.lastChunk(ctx, sb, pid, events.Stderr); !ok {
			return false
		}
	}
	keepStdin := rec.Summary["stdin_open"] == "true"
	proc, pctx, done, e := w.startProcess(sb, pid, 0, keepStdin)
	if e != nil {
		return false
	}
	op := &opRecord{w: w, rec: rec, red: sb.redaction()}
	var stdout, stderr io.Writer
	var sout, serr *streamWriter
	var bout, berr *cappedBuffer
	limit := recordedOutputLimit(rec, replyTo == "")
	if replyTo == "" {
		subjects := events.StreamSubjectsFor(sb.tenantToken(), sb.id, pid)
		sout = newStreamWriter(w.js, subjects.Stdout, sb.id+"-"+pid+"-o", w.cfg.ChunkSize, w.cfg.FlushInterval, w.cfg.PublishWindow, limit)
		serr = newStreamWriter(w.js, subjects.Stderr, sb.id+"-"+pid+"-e", w.cfg.ChunkSize, w.cfg.FlushInterval, w.cfg.PublishWindow, limit)
		sout.resume(outSeq, outFrom)
		serr.resume(errSeq, errFrom)
		sout.share, serr.share = w.outputShare(sb), w.outputShare(sb)
		stdout, stderr = sout, serr
	} else {
		tail := rec.Summary["output_tail"] == "true"
		bout, berr = &cappedBuffer{limit: limit, keepTail: tail}, &cappedBuffer{limit: limit, keepTail: tail}
		stdout, stderr = bout, berr
	}
	w.log.Info("re-attaching to a process of the previous run", "sandbox_id", sb.id, "process_id", pid,
		"stdout_from", outFrom, "stderr_from", errFrom, "buffered", replyTo != "")
	w.goTracked(func() {
		var raw error
		res, e := w.runProcess(pctx, sb, Process{ID: pid}, func(ctx context.Context) (ExitStatus, error) {
			st, err := ra.Reattach(ctx, sb.id, ReattachProcess{ID: pid, StdoutFrom: outFrom, StderrFrom: errFrom, Stdout: stdout, Stderr: stderr,
				Stdin: w.stdinReader(pctx, proc, nil), TTY: rec.Summary["tty"] == "true"})
			raw = err
			return st, err
		})
		done()
		res.ProcessID = pid
		if errors.Is(raw, ErrNotReattachable) {
			w.log.Info("process not re-attachable", "sandbox_id", sb.id, "process_id", pid, slog.Any("err", raw))
			lctx, cancel := context.WithTimeout(detached(), lostScanTimeout)
			defer cancel()
			w.abandon(lctx, ra, sb, pid)
			w.endLostProcess(lctx, sb, rec)
			if replyTo != "" {
				w.reply(replyTo, nil, lostError(pid, w.cfg.WorkerID))
			}
			return
		}
		if replyTo == "" {
			w.finishStream(sb, pid, sout, serr, res, e, op)
			return
		}
		fillOutput(&res, bout, berr)
		op.rec.BytesOut = bout.total + berr.total
		op.rec.ExitCode = &res.ExitCode
		op.close(e)
		if e != nil && (e.Code == events.CodeExecutionTimeout || e.Code == events.CodeSandboxOOMKilled) {
			e = e.With("result", res)
		}
		if e != nil {
			w.reply(replyTo, nil, e)
			return
		}
		w.reply(replyTo, res, nil)
	})
	return true
}

// recordedOutputLimit is the output cap an exec's opened record names
// (summary.output_limit), within the bounds a request's could have; the
// default for a record without one (a worker before it was recorded).
func recordedOutputLimit(rec events.OpRecord, stream bool) int64 {
	n, err := strconv.ParseInt(rec.Summary["output_limit"], 10, 64)
	if err != nil || n <= 0 {
		n = 0
	}
	return effectiveOutputLimit(n, stream)
}

// lastChunk is the Sbx-Seq and Sbx-Offset of the last chunk stored on one
// output stream of a process (0, 0 when none). It is false when the chunk
// has no offset (written by a worker before offsets existed).
func (w *Worker) lastChunk(ctx context.Context, sb *sandbox, pid, stream string) (seq uint64, offset int64, ok bool) {
	st, err := w.js.Stream(ctx, events.StreamOutput)
	if err != nil {
		return 0, 0, false
	}
	m, err := st.GetLastMsgForSubject(ctx, events.OutputSubject(sb.tenantToken(), sb.id, pid, stream))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, true
	}
	if err != nil {
		return 0, 0, false
	}
	seq, err1 := strconv.ParseUint(m.Header.Get(events.HeaderSeq), 10, 64)
	offset, err2 := strconv.ParseInt(m.Header.Get(events.HeaderOffset), 10, 64)
	if err1 != nil || err2 != nil || offset < 0 {
		return 0, 0, false
	}
	return seq, offset, true
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
			if !w.ownRecord(m) {
				continue
			}
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
