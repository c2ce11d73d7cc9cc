package bus

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Ballast timing: a ballast message is published every BallastEvery and
// expires after BallastTTL, so a few are always stored and the newest is in
// SBX_CMD's last message block within BallastEvery of that block's start.
const (
	BallastEvery = 250 * time.Millisecond
	BallastTTL   = time.Second
)

// RunBallast keeps SBX_CMD's last message block from emptying until ctx
// ends. The file store removes a message block as soon as its last message
// is removed and, when that block was the last one, opens a new block file
// and writes a tombstone: on a work queue that every command empties, that
// is a file created, written and unlinked per command (≈70 µs a command
// here, a quarter of the CPU of an 8-client exec benchmark). A short-lived
// message on events.SubjectCmdBallast, which no consumer's filter matches,
// keeps the block occupied; the messages expire by their own TTL (the
// stream allows per-message TTLs), so nothing deletes them.
//
// Every router runs it; two routers' ballasts only add messages that
// expire. Publish failures (a stream an operator created without
// AllowMsgTTL, a leader change) back off to 30 s and are logged at debug:
// the ballast is an optimisation, never a dependency.
func RunBallast(ctx context.Context, js jetstream.JetStream, log *slog.Logger) {
	every := BallastEvery
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := js.Publish(pctx, events.SubjectCmdBallast, nil, jetstream.WithMsgTTL(BallastTTL))
		cancel()
		switch {
		case err == nil:
			every = BallastEvery
		case ctx.Err() != nil:
			return
		default:
			every = min(2*every, 30*time.Second)
			log.Debug("bus: ballast not stored", "err", err, "retry_in", every)
		}
		t.Reset(every)
	}
}
