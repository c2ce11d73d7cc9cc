package worker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// A create retried with the same sandbox id and spec (ADR 37). The router
// puts a hash of the create's spec into the command (CreateCommand.SpecHash)
// and the claim keeps it; a create of another op whose id is claimed with
// the same tenant and hash repeats that create, and gets what it made: the
// running sandbox, a wait for one still being created, or the claim of one
// that never started. A claim is taken over only with its revision (two
// racing retries cannot both win) and only by a later op: the command a
// retry repeats, delivered late, never takes the id back.

// retryAction is what a retried create does about the claim it repeats.
type retryAction int

const (
	retryRefuse   retryAction = iota // SBX_E1202, as for another create
	retryAnswer                      // answer the running sandbox
	retryWait                        // wait for the record to change
	retryTakeOver                    // claim the id with the record's revision
	retryEnded                       // SBX_E1204: it ran and has ended
)

// sameCreate reports whether the record was claimed by a create of cmd's
// tenant and spec. A record or command without a hash is never the same.
func sameCreate(sb events.Sandbox, cmd events.CreateCommand) bool {
	return sb.SpecHash != "" && sb.SpecHash == cmd.SpecHash && tenantToken(sb.Tenant) == tenantToken(cmd.Tenant)
}

func tenantToken(t string) string {
	if t == "" {
		return events.TenantOpen
	}
	return t
}

// retryAction decides for a create of op whose id existing claims with the
// same spec.
func (w *Worker) retryAction(ctx context.Context, existing events.Sandbox, op string) retryAction {
	switch {
	case existing.State == events.StateRunning:
		return retryAnswer
	case existing.State == events.StateCreating && !w.claimOrphaned(ctx, existing):
		return retryWait
	case existing.StartedAt != nil:
		return retryEnded
	case !laterOp(op, existing.CreateOp):
		return retryRefuse
	default:
		// Creating with its worker gone, or ended before it ran: nothing
		// of it lives, and the later create may have the id.
		return retryTakeOver
	}
}

// laterOp reports whether op was minted after prev. Op ids are ULIDs,
// which sort by time; an equal or earlier id (or one minted by a clock
// behind) is not later, and gets the conservative answer.
func laterOp(op, prev string) bool {
	return op > prev
}

// waitRecordChange waits until the registry record of existing is no
// longer at revision (or is gone), or its claim is orphaned (its worker's
// lease ended: the record would not change until the reaper's sweep),
// keeping msg from redelivery meanwhile; false when ctx ended first.
func (w *Worker) waitRecordChange(ctx context.Context, msg jetstream.Msg, existing events.Sandbox, revision uint64) bool {
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	lastProgress, lastLease := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-w.stopping:
			return false
		case <-poll.C:
		}
		if time.Since(lastProgress) >= 10*time.Second {
			_ = msg.InProgress()
			lastProgress = time.Now()
		}
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		entry, err := w.registry.Get(gctx, existing.SandboxID)
		if errors.Is(err, jetstream.ErrKeyNotFound) || err == nil && entry.Revision() != revision {
			cancel()
			return true
		}
		orphaned := false
		if time.Since(lastLease) >= time.Second {
			lastLease = time.Now()
			orphaned = w.claimOrphaned(gctx, existing)
		}
		cancel()
		if orphaned {
			return true
		}
	}
}

// beginClaim marks a create of id as between its claim and its track;
// endClaim ends that.
func (w *Worker) beginClaim(id string) {
	w.mu.Lock()
	w.claiming[id]++
	w.mu.Unlock()
}

func (w *Worker) endClaim(id string) {
	w.mu.Lock()
	if w.claiming[id]--; w.claiming[id] <= 0 {
		delete(w.claiming, id)
	}
	w.mu.Unlock()
}

// isClaiming reports whether a create of id in this process is between
// its claim and its track: its claim is not orphaned.
func (w *Worker) isClaiming(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.claiming[id] > 0
}

// sameClaim reports whether the registry value is still the claim of rec's
// create: a retry that took the id over wrote another create op.
func sameClaim(value []byte, rec events.Sandbox) bool {
	var cur events.Sandbox
	if json.Unmarshal(value, &cur) != nil {
		return true // unreadable: as before, the record is ours to end
	}
	return cur.CreateOp == rec.CreateOp
}
