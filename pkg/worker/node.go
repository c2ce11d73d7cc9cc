package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// onNodeCommand handles a command for a sandbox this worker owns. Node
// commands are acked on receipt: an exec must run at most once.
func (w *Worker) onNodeCommand(msg jetstream.Msg) {
	_ = msg.Ack()
	env, err := cemsg.Decode(msg.Headers(), msg.Data())
	if err != nil {
		w.log.Warn("malformed command dropped", slog.Any("err", err))
		return
	}
	// Acked already: a command not signed by a trusted commander never runs.
	if e := w.checkSigner(msg.Subject(), msg.Headers(), msg.Data()); e != nil {
		w.log.Warn("command refused", "op_id", truncate(env.ID), "type", truncate(env.Type), "code", e.Code)
		w.reply(env.ReplyTo, nil, e)
		return
	}
	op, e := nodeOp(msg.Subject(), env.Type)
	if e != nil {
		w.log.Warn("command refused", "op_id", truncate(env.ID), "type", truncate(env.Type), "code", e.Code)
		w.reply(env.ReplyTo, nil, e)
		return
	}
	req, _ := events.NewCommand(op)
	if e := events.Decode(env.Data, req); e != nil {
		w.reply(env.ReplyTo, nil, e)
		return
	}
	if e := req.Validate(); e != nil {
		w.reply(env.ReplyTo, nil, e)
		return
	}
	// Stdin and signals go to the sandbox's own lane (lanes.go): in order
	// for one sandbox, never behind another's.
	if op == events.OpStdin || op == events.OpSignal {
		id, _ := events.SandboxTarget(req)
		if e := w.enqueue(id, func() {
			v, e := w.dispatch(op, env, req)
			w.reply(env.ReplyTo, v, e)
		}); e != nil {
			w.reply(env.ReplyTo, nil, e)
		}
		return
	}
	// Kill and set_timeout must get through even when the worker is full;
	// the rest wait for a slot, off this goroutine, so that nothing queues
	// behind them.
	light := op == events.OpKill || op == events.OpSetTimeout || op == events.OpResize ||
		op == events.OpPortsExpose || op == events.OpPortsUnexpose || op == events.OpPortsToken
	w.goTracked(func() {
		if !light {
			if e := w.acquire(detached()); e != nil {
				w.reply(env.ReplyTo, nil, e)
				return
			}
			defer w.release()
		}
		v, e := w.dispatch(op, env, req)
		if v != nil || e != nil {
			w.reply(env.ReplyTo, v, e)
		}
	})
}

// nodeOp is the operation of a node command: the one its subject names
// (the signature covers the subject), which its ce-type must name too.
func nodeOp(subject, ceType string) (string, *events.Error) {
	op, ok := opFromSubject(subject)
	if !ok || op == events.OpCreate {
		return "", events.Errorf(events.CodeUnknownOp, "unknown command verb in subject %q", truncate(subject))
	}
	if typed, ok := events.OpFromCommandType(ceType); !ok || typed != op {
		return "", events.Errorf(events.CodeCommandMismatch, "the command's type %q is not its subject's operation %s", truncate(ceType), op).
			With("op", op)
	}
	return op, nil
}

func (w *Worker) dispatch(op string, env cemsg.Envelope, req events.Request) (any, *events.Error) {
	id, _ := events.SandboxTarget(req)
	sb := w.lookup(id)
	if op == events.OpKill {
		return w.handleKill(id, sb, env)
	}
	if sb == nil {
		return nil, w.missing(id)
	}
	sb.mu.Lock()
	ready := sb.ready
	sb.mu.Unlock()
	if !ready {
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s is not running", id)
	}
	if e := w.durableGate(id, op); e != nil {
		return nil, e
	}
	switch r := req.(type) {
	case *events.ExecRequest:
		return w.handleExec(sb, env, r)
	case *events.RunCodeRequest:
		return w.handleRunCode(sb, env, r)
	case *events.SignalRequest:
		return w.handleSignal(sb, r)
	case *events.StdinRequest:
		return w.handleStdin(sb, r)
	case *events.SetTimeoutRequest:
		return w.handleSetTimeout(sb, env, r)
	case *events.FilesWriteRequest:
		return w.handleFilesWrite(sb, env, r)
	case *events.FilesReadCommand:
		return w.handleFilesRead(sb, env, r)
	case *events.FilesListRequest:
		return w.handleFilesList(sb, env, r)
	case *events.ResizeRequest:
		return w.handleResize(sb, r)
	case *events.CodeContextRequest:
		return w.handleCodeContext(sb, env, r)
	case *events.FilesWatchRequest:
		return w.handleFilesWatch(sb, env, r)
	case *events.PortsExposeRequest:
		return w.handlePortsExpose(sb, env, r)
	case *events.PortsUnexposeRequest:
		return w.handlePortsUnexpose(sb, env, r)
	case *events.PortsTokenRequest:
		return w.handlePortsToken(sb, env, r)
	case *events.PauseRequest:
		return w.handlePause(sb, env)
	case *events.SnapshotRequest:
		return w.handleSnapshot(sb, env, r)
	}
	return nil, events.Errorf(events.CodeUnknownOp, "op %s", op)
}

// missing explains why a sandbox is not here: ended, or never known.
func (w *Worker) missing(id string) *events.Error {
	ctx, cancel := context.WithTimeout(detached(), 2*time.Second)
	defer cancel()
	entry, err := w.registry.Get(ctx, id)
	if err != nil {
		return events.Errorf(events.CodeSandboxNotFound, "no sandbox %s", id)
	}
	var rec events.Sandbox
	_ = json.Unmarshal(entry.Value(), &rec)
	if rec.State.Ended() {
		return events.Errorf(events.CodeSandboxGone, "sandbox %s is %s (%s)", id, rec.State, rec.EndReason)
	}
	if rec.State == events.StatePaused { // a router's cache that trails the pause
		return events.Errorf(events.CodeSandboxPaused, "sandbox %s is paused: resume it first", id).With("sandbox_id", id)
	}
	return events.Errorf(events.CodeSandboxGone, "sandbox %s is not held by worker %s", id, w.cfg.WorkerID)
}

func (w *Worker) putLease(ctx context.Context) error {
	lease := events.WorkerLease{
		Backend: w.info.Name, Worker: w.cfg.WorkerID, Host: w.cfg.Host, Isolation: w.info.Isolation,
		Capabilities: w.info.Capabilities, Runtimes: w.runtimes, Capacity: w.cfg.Capacity, Load: len(w.slots),
		Version: w.cfg.Version, ProtocolVersion: events.ProtocolVersion, HeartbeatAt: time.Now().UTC(),
		StartedAt: w.started, SealKey: w.keys.sealPub, SigningKey: w.keys.signPub,
	}
	_, lease.AnswersRestarted = w.backend.(Reattacher)
	if ep, ok := w.backend.(ExecPather); ok {
		lease.ExecPath = ep.ExecPath()
	}
	b, err := json.Marshal(lease)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = w.leases.Put(ctx, events.WorkerKey(w.info.Name, w.cfg.WorkerID), b)
	return err
}
