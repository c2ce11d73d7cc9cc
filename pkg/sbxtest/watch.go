package sbxtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// WatchWhile starts files.watch of dir (bounded by timeout) and calls
// poke(i), i = 0, 1, …, until the watch answers, within within: the watch
// is set up at a moment a test cannot see, so the test changes the
// directory until an event comes back.
func WatchWhile(t testing.TB, ctx context.Context, cl *client.Client, sandboxID, dir string, timeout, within time.Duration, poke func(i int) error) (*events.FilesWatchReply, error) {
	t.Helper()
	type answer struct {
		r   *events.FilesWatchReply
		err error
	}
	got := make(chan answer, 1)
	go func() {
		r, err := cl.WatchFiles(ctx, sandboxID, dir, timeout, 0)
		got <- answer{r, err}
	}()
	var a answer
	i := 0
	poll.Eventually(t, within, func() error {
		select {
		case a = <-got:
			return nil
		default:
		}
		if err := poke(i); err != nil {
			return err
		}
		i++
		return errors.New("no answer yet")
	})
	return a.r, a.err
}
