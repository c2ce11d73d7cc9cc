package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/internal/poll"
)

type watchOut struct {
	events          []proto.WatchEvent
	truncated, gone bool
	err             error
}

// watchWhile runs a watch of dir and repeats change (with an increasing
// counter) until the watch answers: the watch is set up at some point the
// test cannot see, so the change is made until it is seen.
func watchWhile(t *testing.T, c *Client, dir string, max int, change func(i int)) watchOut {
	t.Helper()
	got := make(chan watchOut, 1)
	go func() {
		evs, tr, gone, err := c.Watch(context.Background(), dir, 10*time.Second, max)
		got <- watchOut{evs, tr, gone, err}
	}()
	var out watchOut
	i := 0
	poll.Eventually(t, 10*time.Second, func() error {
		select {
		case out = <-got:
			return nil
		default:
		}
		change(i)
		i++
		return errors.New("no answer yet")
	})
	return out
}

func TestWatchThroughAgent(t *testing.T) {
	c := realPair(t)
	dir := t.TempDir()
	w := watchWhile(t, c, dir, 100, func(i int) {
		f := filepath.Join(dir, "f"+strconv.Itoa(i))
		g := filepath.Join(dir, "g"+strconv.Itoa(i))
		_ = os.WriteFile(f, []byte("x"), 0o644)
		_ = os.Rename(f, g)
		_ = os.Remove(g)
	})
	if w.err != nil || w.truncated || w.gone {
		t.Fatalf("watch: %+v", w)
	}
	// The first cycle the watch saw, whole and in order.
	var seen []string
	for _, ev := range w.events {
		seen = append(seen, ev.Type+" "+filepath.Base(ev.Path))
	}
	if len(seen) < 5 {
		t.Fatalf("events %q, want a whole cycle", seen)
	}
	n := filepath.Base(w.events[0].Path)[1:]
	if w.events[0].Type != proto.WatchCreate || filepath.Base(w.events[0].Path)[0] != 'f' {
		n = "" // the watch began mid-cycle: find the next whole one
		for _, ev := range w.events {
			if ev.Type == proto.WatchCreate && filepath.Base(ev.Path)[0] == 'f' {
				n = filepath.Base(ev.Path)[1:]
				break
			}
		}
	}
	want := []string{"create f" + n, "write f" + n, "rename f" + n, "create g" + n, "remove g" + n}
	at := -1
	for i, s := range seen {
		if s == want[0] {
			at = i
			break
		}
	}
	if at < 0 || len(seen) < at+len(want) {
		t.Fatalf("events %q, want %q in them", seen, want)
	}
	for i, s := range want {
		if seen[at+i] != s {
			t.Fatalf("events %q, want %q in them", seen, want)
		}
	}
	if w.events[0].Path[0] != '/' {
		t.Fatalf("event path %q is not absolute", w.events[0].Path)
	}

	// More events than asked for: truncated.
	w = watchWhile(t, c, dir, 2, func(i int) {
		for j := 0; j < 5; j++ {
			_ = os.WriteFile(filepath.Join(dir, "t"+strconv.Itoa(i)+"-"+strconv.Itoa(j)), nil, 0o644)
		}
	})
	if w.err != nil || !w.truncated || len(w.events) != 2 {
		t.Fatalf("truncated watch: %+v", w)
	}

	// The directory itself removed: gone.
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	// Moved away and back until the watch sees it (a watch that began while
	// it was away finds nothing, and is tried again).
	for range 5 {
		w = watchWhile(t, c, sub, 10, func(int) {
			_ = os.Rename(sub, sub+".away")
			_ = os.Rename(sub+".away", sub)
		})
		var pe *proto.Error
		if !errors.As(w.err, &pe) || pe.Kind != proto.ErrNotFound {
			break
		}
	}
	if w.err != nil || !w.gone {
		t.Fatalf("removed directory: %+v", w)
	}

	// Nothing happens: the timeout answers with no events.
	start := time.Now()
	evs, _, _, err := c.Watch(context.Background(), dir, 300*time.Millisecond, 10)
	if err != nil || len(evs) != 0 || time.Since(start) > 3*time.Second {
		t.Fatalf("quiet watch: %v %v after %s", evs, err, time.Since(start))
	}
	// A cancelled watch ends at once.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, _, _, err := c.Watch(ctx, dir, 30*time.Second, 10); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled watch: %v", err)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("cancelled watch took %s", time.Since(start))
	}
	// Refused: kernel filesystems, files, missing directories.
	for p, kind := range map[string]string{"/proc": proto.ErrForbidden, filepath.Join(dir, "nope"): proto.ErrNotFound} {
		_, _, _, err := c.Watch(context.Background(), p, time.Second, 10)
		var pe *proto.Error
		if !errors.As(err, &pe) || pe.Kind != kind {
			t.Errorf("watch %s: %v, want %s", p, err, kind)
		}
	}
	f := filepath.Join(dir, "file")
	_ = os.WriteFile(f, nil, 0o644)
	if _, _, _, err := c.Watch(context.Background(), f, time.Second, 10); err == nil {
		t.Errorf("watch of a regular file: no error")
	}
}
