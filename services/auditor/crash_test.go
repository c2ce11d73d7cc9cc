package auditor

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestCrashAndServerRestart kills an auditor between fsync and ack (its
// connection dies), then restarts the NATS server under the next one, all
// while records are being published: every record is in the log exactly once.
func TestCrashAndServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server")
	}
	dir := t.TempDir()
	srv, err := embednats.Start(embednats.Config{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Addr().(*net.TCPAddr).Port
	url := srv.ClientURL()
	defer func() { srv.Stop() }()
	dial := func(name string) *nats.Conn {
		nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	pub := dial("publisher")
	pjs, _ := jetstream.New(pub)
	if err := bus.Ensure(context.Background(), pjs, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.jsonl")
	const ops = 200
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := range ops {
			for _, ph := range []string{events.EventOpened, events.EventClosed} {
				rec := record(opID(i), events.OpExec, ph)
				data, _ := json.Marshal(rec)
				typ := events.TypeOpOpened
				if ph == events.EventClosed {
					typ = events.TypeOpClosed
				}
				for { // retry through the restart; Nats-Msg-Id de-duplicates
					m, _ := cemsg.Encode(events.OpsSubject("fake", "sbx1", ph), cemsg.Envelope{
						ID: rec.OpID + "-" + ph, Type: typ, Source: "test", Data: data})
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := pjs.PublishMsg(ctx, m)
					cancel()
					if err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// Auditor A: written, then its connection dies before (some) acks.
	ncA := dial("auditor-a")
	a, err := New(Config{LogPath: path, Batch: 16, AckWait: time.Second}, ncA)
	if err != nil {
		t.Fatal(err)
	}
	stopA := runService(t, a)
	eventually(t, 10*time.Second, "a writes", func() bool { return a.Written() >= 50 })
	ncA.Close()
	stopA()

	b, err := New(Config{LogPath: path, Batch: 16, AckWait: time.Second}, dial("auditor-b"))
	if err != nil {
		t.Fatal(err)
	}
	stopB := runService(t, b)
	eventually(t, 10*time.Second, "b writes", func() bool { return b.Written() >= 20 })

	srv.Stop()
	srv, err = embednats.Start(embednats.Config{StoreDir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	<-pubDone
	eventually(t, 30*time.Second, "every record", func() bool { return len(readEntries(t, path)) >= 2*ops })
	// Let redeliveries (AckWait 1s) arrive and be skipped.
	eventually(t, 10*time.Second, "nothing pending", func() bool {
		c, err := b.js.Consumer(context.Background(), events.StreamOps, "auditor")
		if err != nil {
			return false
		}
		info, err := c.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	stopB()
	n := countIDs(t, path)
	if len(n) != 2*ops {
		t.Fatalf("%d distinct records, want %d", len(n), 2*ops)
	}
	for id, c := range n {
		if c != 1 {
			t.Errorf("%s written %d times", id, c)
		}
	}
	verifyFile(t, path)
}
