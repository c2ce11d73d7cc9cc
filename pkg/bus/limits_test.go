package bus_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// fillOps publishes records of size bytes on SBX_OPS until the stream
// refuses one (or n were stored) and returns the first record's sequence
// and how many were stored.
func fillOps(ctx context.Context, t *testing.T, js jetstream.JetStream, n, size int) (first uint64, stored int, refused error) {
	t.Helper()
	data := bytes.Repeat([]byte("r"), size)
	for i := range n {
		ack, err := js.Publish(ctx, events.OpsSubject("fake", "sb1", events.EventOpened), data)
		if err != nil {
			return first, stored, err
		}
		if i == 0 {
			first = ack.Sequence
		}
		stored++
	}
	return first, stored, nil
}

// TestFullOpsKeepsItsRecords (review #2): a full SBX_OPS refuses new
// records instead of dropping the oldest, so a publisher on sbx.ops.>
// cannot flush the records the auditor has not read out of the stream.
func TestFullOpsKeepsItsRecords(t *testing.T) {
	_, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{Owner: true, OpsMaxBytes: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	first, stored, err := fillOps(ctx, t, js, 200, 4<<10) // 800 KiB into 256 KiB
	if err == nil {
		t.Fatalf("SBX_OPS took %d records of 4 KiB with a 256 KiB limit: it dropped old ones to make room", stored)
	}
	t.Logf("full after %d records: %v", stored, err)
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMsg(ctx, first); err != nil {
		t.Fatalf("the first record is gone from a full SBX_OPS: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != first || info.State.Msgs != uint64(stored) {
		t.Fatalf("SBX_OPS holds %d records from %d, want the %d stored from %d", info.State.Msgs, info.State.FirstSeq, stored, first)
	}
	if !info.Config.DenyDelete || !info.Config.DenyPurge {
		t.Fatal("SBX_OPS allows delete or purge")
	}
}

// TestEnsureNeverShrinksBelowContents (review #7): the owner's Ensure with
// a byte limit below what a stream holds keeps the stream's limit (and
// says so) instead of truncating it: an SBX_OPS over the new limit keeps
// every record.
func TestEnsureNeverShrinksBelowContents(t *testing.T) {
	_, js := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{Owner: true, OpsMaxBytes: 4 << 20}); err != nil {
		t.Fatal(err)
	}
	first, stored, err := fillOps(ctx, t, js, 256, 4<<10) // 1 MiB
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	lower := bus.Config{Owner: true, OpsMaxBytes: 256 << 10, OpsMaxAge: 48 * time.Hour, Logger: testLogger(&logs)}
	if err := bus.Ensure(ctx, js, lower); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.StreamOps)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(stored) || info.State.FirstSeq != first {
		t.Fatalf("SBX_OPS holds %d records from %d after Ensure with a smaller limit, want all %d from %d", info.State.Msgs, info.State.FirstSeq, stored, first)
	}
	if info.Config.MaxBytes != 4<<20 {
		t.Errorf("SBX_OPS MaxBytes %d, want the one it had (%d)", info.Config.MaxBytes, 4<<20)
	}
	if info.Config.MaxAge != lower.OpsMaxAge {
		t.Errorf("SBX_OPS MaxAge %s: the rest of the configuration was not applied", info.Config.MaxAge)
	}
	if !strings.Contains(logs.String(), "SBX_OPS") {
		t.Errorf("nothing logged about the limit kept: %q", logs.String())
	}
	// A limit above the contents is applied.
	if err := bus.Ensure(ctx, js, bus.Config{Owner: true, OpsMaxBytes: 2 << 20, OpsMaxAge: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if info, err = s.Info(ctx); err != nil || info.Config.MaxBytes != 2<<20 {
		t.Fatalf("SBX_OPS MaxBytes after a limit above its contents: %v, %v", info.Config.MaxBytes, err)
	}
}

// TestEnsureFitsASmallStore (review #7): on a server whose JetStream store
// is smaller than the default limits (1 GiB here, a small disk), the
// default limits are scaled down to fit and every stream is created; an
// operator's own limit is kept.
func TestEnsureFitsASmallStore(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("jetstream { max_file_store: 1GB }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := embednats.Start(embednats.Config{StoreDir: filepath.Join(dir, "js"), DontListen: true, ConfigFile: conf})
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := srv.JetStreamConfig().MaxStore
	var logs bytes.Buffer
	cfg := bus.Config{Owner: true, StoreLimit: store, AuditMaxBytes: 2 << 20, Logger: testLogger(&logs)}
	for range 2 { // the second finds everything as the first made it
		if err := bus.Ensure(ctx, js, cfg); err != nil {
			t.Fatalf("Ensure on a %d-byte store: %v", store, err)
		}
	}
	var sum int64
	for info := range js.ListStreams(ctx).Info() {
		sum += info.Config.MaxBytes
		if info.Config.Name == "KV_"+events.BucketAudit && info.Config.MaxBytes != 2<<20 {
			t.Errorf("the operator's sbx_audit limit became %d", info.Config.MaxBytes)
		}
	}
	if sum > store {
		t.Fatalf("the limits reserve %d bytes of a %d-byte store", sum, store)
	}
	if !strings.Contains(logs.String(), "scaled") {
		t.Errorf("no log line says the limits were scaled: %q", logs.String())
	}
	// The bound still holds: SBX_OPS refuses, it does not grow.
	if _, err := js.Stream(ctx, events.StreamOps); err != nil {
		t.Fatal(errors.Join(errors.New("SBX_OPS"), err))
	}
}
