package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/auditor"
)

// TestAuditVerifyMissingPublishedCheckpoint: `audit verify
// --checkpoint-from-bus` of a log whose checkpoint key is absent from KV
// sbx_audit (never published, or deleted) fails with exit 1 and says so:
// a missing checkpoint must not let a cut-off tail pass.
func TestAuditVerifyMissingPublishedCheckpoint(t *testing.T) {
	srv, err := embednats.Start(embednats.Config{StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := nats.Connect(srv.ClientURL())
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
	if err := bus.EnsureWithRetry(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := auditor.OpenLog(path)
	if err != nil {
		t.Fatal(err)
	}
	e := signedAs(t, auditor.Entry{ID: "op0-closed", Type: events.TypeOpClosed, Source: "s", Time: time.Now().UTC(),
		Subject: "sbx.ops.fake.sb.closed", Record: []byte(`{}`), Sig: "ok"})
	if _, err := l.Append([]auditor.Entry{e}); err != nil {
		t.Fatal(err)
	}
	if err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	logID := l.LogID()
	l.Close()
	kv, err := js.KeyValue(ctx, events.BucketAudit)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func() error
	}{
		{"never published", func() error { return nil }},
		{"another log's only", func() error {
			_, err := kv.Put(ctx, "other-log", []byte(`{}`))
			return err
		}},
		{"deleted", func() error {
			if _, err := kv.Put(ctx, logID, []byte(`{}`)); err != nil {
				return err
			}
			return kv.Delete(ctx, logID)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.setup(); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := run(context.Background(), "sandboxio", []string{"audit", "verify", "--nats", srv.ClientURL(),
				"--checkpoint-from-bus", path}, &out, &errb)
			if code != exitFailure {
				t.Fatalf("exit %d, want %d; stdout %s stderr %s", code, exitFailure, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), logID) || !strings.Contains(errb.String(), events.BucketAudit) {
				t.Errorf("stderr names neither the log %s nor %s: %s", logID, events.BucketAudit, errb.String())
			}
		})
	}
}
