package bus_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func start(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return startIn(t, t.TempDir())
}

// startIn starts an embedded server storing in dir and connects to it.
func startIn(t *testing.T, dir string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	srv, err := embednats.Start(embednats.Config{StoreDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect("", nats.InProcessServer(srv.Server))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// TestEnsureIsReadOnlyWhenConfigured: a second Ensure on a bus that already
// has the configuration sends no create or update request (service users
// may not update SBX_OPS), and the tenants bucket exists.
func TestEnsureIsReadOnlyWhenConfigured(t *testing.T) {
	nc, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := bus.Config{LeaseTTL: 3 * time.Second}
	if err := bus.Ensure(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	var last atomic.Value
	sub, err := nc.Subscribe("$JS.API.STREAM.>", func(m *nats.Msg) {
		if verb := m.Subject[len("$JS.API.STREAM."):]; len(verb) >= 6 && (verb[:6] == "CREATE" || verb[:6] == "UPDATE") {
			writes.Add(1)
			last.Store(m.Subject)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := bus.Ensure(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("Ensure on a configured bus sent %d create/update requests (last %v)", n, last.Load())
	}
	if _, err := js.KeyValue(ctx, events.BucketTenants); err != nil {
		t.Fatalf("tenants bucket: %v", err)
	}
	// A changed limit is applied by the owner (only: see
	// TestOnlyTheOwnerUpdates).
	cfg.OpsMaxAge = 7 * 24 * time.Hour
	cfg.Owner = true
	if err := bus.Ensure(ctx, js, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != cfg.OpsMaxAge {
		t.Fatalf("SBX_OPS MaxAge = %s after Ensure, want %s", got, cfg.OpsMaxAge)
	}
	if writes.Load() == 0 {
		t.Fatalf("changed configuration was not written")
	}
}

// TestOpsCannotBeRewritten: purge and message delete of SBX_OPS are refused
// even on an open server, where anyone may call the JetStream API.
func TestOpsCannotBeRewritten(t *testing.T) {
	nc, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, events.OpsSubject("fake", "sb1", events.EventOpened), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err == nil {
		t.Errorf("purge of SBX_OPS succeeded")
	}
	if err := s.DeleteMsg(ctx, ack.Sequence); err == nil {
		t.Errorf("message delete of SBX_OPS succeeded")
	}
	if err := s.SecureDeleteMsg(ctx, ack.Sequence); err == nil {
		t.Errorf("secure message delete of SBX_OPS succeeded")
	}
	// Clearing the flags is refused too.
	cfg := s.CachedInfo().Config
	cfg.DenyDelete, cfg.DenyPurge = false, false
	if _, err := js.UpdateStream(ctx, cfg); err == nil {
		t.Errorf("update clearing deny_delete/deny_purge succeeded")
	}
	if _, err := s.GetMsg(ctx, ack.Sequence); err != nil {
		t.Fatalf("record gone: %v", err)
	}
	_ = nc
	var apiErr *jetstream.APIError
	err = s.Purge(ctx)
	if !errors.As(err, &apiErr) {
		t.Fatalf("purge error %v is not an API error", err)
	}
	t.Logf("purge refused: %v", err)
}

// TestOnlyTheOwnerUpdates (issue 9 item 12): a process that is not the
// bus's owner (a worker, a router without an explicit --replicas) creates
// what is missing but never changes an existing stream or bucket, whatever
// its own configuration; the owner does.
func TestOnlyTheOwnerUpdates(t *testing.T) {
	_, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	owner := bus.Config{Owner: true, OpsMaxAge: 48 * time.Hour, LeaseTTL: 4 * time.Second}
	if err := bus.Ensure(ctx, js, owner); err != nil {
		t.Fatal(err)
	}
	other := bus.Config{OpsMaxAge: time.Hour, LeaseTTL: 9 * time.Second}
	if err := bus.Ensure(ctx, js, other); err != nil {
		t.Fatal(err)
	}
	maxAge := func(name string) time.Duration {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge
	}
	if got := maxAge(events.StreamOps); got != owner.OpsMaxAge {
		t.Fatalf("SBX_OPS MaxAge = %s after a non-owner's Ensure, want the owner's %s", got, owner.OpsMaxAge)
	}
	if got := maxAge("KV_" + events.BucketWorkers); got != owner.LeaseTTL {
		t.Fatalf("lease bucket TTL = %s after a non-owner's Ensure, want the owner's %s", got, owner.LeaseTTL)
	}
	other.Owner = true
	if err := bus.Ensure(ctx, js, other); err != nil {
		t.Fatal(err)
	}
	if got := maxAge(events.StreamOps); got != other.OpsMaxAge {
		t.Fatalf("SBX_OPS MaxAge = %s after the owner's Ensure, want %s", got, other.OpsMaxAge)
	}
}
