package bus_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestBallastKeepsTheCommandBlock: a work queue that every command empties
// makes the file store open a new message block per command; with the
// ballast running, 300 commands published and consumed one at a time stay
// in the first few blocks. Without it (ballast off) the block index
// reaches the command count.
func TestBallastKeepsTheCommandBlock(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ballast   bool
		maxBlocks int // the highest block index allowed; -1: at least the command count
	}{
		{"ballast", true, 20},
		{"none", false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const commands = 300
			dir := t.TempDir()
			_, js := startIn(t, dir)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := bus.Ensure(ctx, js, bus.Config{Owner: true}); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			bctx, stop := context.WithCancel(ctx)
			defer func() { stop(); wg.Wait() }()
			if tc.ballast {
				wg.Add(1)
				go func() { defer wg.Done(); bus.RunBallast(bctx, js, slog.New(slog.DiscardHandler)) }()
				st, _ := js.Stream(ctx, events.StreamCommands)
				poll.Eventually(t, 5*time.Second, func() error {
					_, err := st.GetLastMsgForSubject(ctx, events.SubjectCmdBallast)
					return err
				})
			}
			cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamCommands, jetstream.ConsumerConfig{
				Durable: "w", FilterSubject: events.NodeFilter("fake", "w"), AckPolicy: jetstream.AckExplicitPolicy,
			})
			if err != nil {
				t.Fatal(err)
			}
			it, err := cons.Messages()
			if err != nil {
				t.Fatal(err)
			}
			defer it.Stop()
			for i := range commands {
				if _, err := js.Publish(ctx, events.NodeSubject("fake", "w", "exec"), []byte("cmd "+strconv.Itoa(i))); err != nil {
					t.Fatal(err)
				}
				m, err := it.Next()
				if err != nil {
					t.Fatal(err)
				}
				if err := m.DoubleAck(ctx); err != nil {
					t.Fatal(err)
				}
			}
			top := highestBlock(t, dir)
			t.Logf("%d commands: highest message block %d", commands, top)
			if tc.maxBlocks >= 0 && top > tc.maxBlocks {
				t.Fatalf("highest message block %d after %d commands, want ≤ %d: the last block emptied per command", top, commands, tc.maxBlocks)
			}
			if tc.maxBlocks < 0 && top < commands {
				t.Fatalf("highest message block %d after %d commands without a ballast: the file store no longer churns; the ballast may be unnecessary", top, commands)
			}
		})
	}
}

// highestBlock is the largest N of the SBX_CMD store's N.blk files.
func highestBlock(t *testing.T, dir string) int {
	t.Helper()
	top := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, string(filepath.Separator)+events.StreamCommands+string(filepath.Separator)) {
			return err
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(d.Name(), ".blk")); err == nil && strings.HasSuffix(d.Name(), ".blk") {
			top = max(top, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return top
}
