package cli

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestBufferedExecNamesItsProcessWhileItRuns: `exec --buffered` prints the
// process line while the process runs (so that it can be signalled or its
// records found), not only once it ended (review #18).
func TestBufferedExecNamesItsProcessWhileItRuns(t *testing.T) {
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	id := created(t, dev.URL)
	defer cli(t, dev.URL, "kill", id)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb sbxtest.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, "sandboxio", []string{"--nats", dev.URL, "--log-level", "error", "exec", "--buffered", id, "sleep", "600000"}, &out, &errb)
	}()
	var named []string
	poll.Eventually(t, 20*time.Second, func() error {
		select {
		case code := <-done:
			t.Fatalf("exec ended (exit %d) before the test ended it: %s", code, errb.String())
		default:
		}
		if named = processLine.FindStringSubmatch(errb.String()); named == nil {
			return errors.New("no process line on stderr while the process runs: " + errb.String())
		}
		return nil
	})
	if named[2] != id {
		t.Errorf("process line names sandbox %s, want %s", named[2], id)
	}
	cli(t, dev.URL, "kill", id)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not end within 30s of its sandbox's kill")
	}
}
