package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestGetListKillRetried: get, list and kill are safe to repeat, so the
// client sends them again when no router answers yet (no responders) or
// an attempt gets no answer (a timeout), backing off, for as long as no
// router answers within the caller's deadline (not a count of attempts: a
// router restart takes from 0.6 s to seconds); a create (it names its
// sandbox: ADR 37) is sent again when no router answers. An exec is never
// sent again.
//
// The "before any router" cases start the router only once the client has
// seen noRouter attempts find none, so that the retry is what the test sees.
func TestGetListKillRetried(t *testing.T) {
	get := func(ctx context.Context, cl *client.Client) error { _, err := cl.Get(ctx, "sb-1"); return err }
	kill := func(ctx context.Context, cl *client.Client) error { _, err := cl.Kill(ctx, "sb-1"); return err }
	create := func(ctx context.Context, cl *client.Client) error {
		_, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 60})
		return err
	}
	tests := []struct {
		name string
		// answer: which requests the router answers (n counts from 1).
		answer func(op string, n int) bool
		// noRouter: the router starts once this many attempts found none
		// (0: it runs from the start).
		noRouter int
		call     func(context.Context, *client.Client) error
		op       string
		want     int // requests the router gets
	}{
		{"get before any router", always, 1, get, events.OpGet, 1},
		{"kill before any router", always, 1, kill, events.OpKill, 1},
		{"create before any router", always, 1, create, events.OpCreate, 1},
		// Six attempts without a router take 50+100+200+400+800 ms of
		// back-off: longer than a count of four retries allowed.
		{"get while no router for six attempts", always, 6, get, events.OpGet, 1},
		{"kill while no router for six attempts", always, 6, kill, events.OpKill, 1},
		{"create while no router for six attempts", always, 6, create, events.OpCreate, 1},
		{"get whose first answer never comes", func(_ string, n int) bool { return n > 1 }, 0, get, events.OpGet, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t, &server.Options{})
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			var mu sync.Mutex
			attempts, noRouter := 0, 0
			sawEnough := make(chan struct{})
			observe := func(op string, err error) {
				mu.Lock()
				defer mu.Unlock()
				if op != tc.op {
					return
				}
				attempts++
				if errors.Is(err, nats.ErrNoResponders) {
					if noRouter++; noRouter == tc.noRouter {
						close(sawEnough)
					}
				}
			}
			cl, err := client.New(nc, client.WithTeardownGrace(time.Second), client.WithAttemptObserver(observe))
			if err != nil {
				t.Fatal(err)
			}
			var r *fakeRouter
			if tc.noRouter == 0 {
				r = startFakeRouter(t, srv.ClientURL(), tc.answer)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, cl) }()
			if tc.noRouter > 0 {
				select {
				case <-sawEnough:
				case err := <-done:
					t.Fatalf("%s gave up after %d attempts without a router: %v", tc.op, noRouterSeen(&mu, &noRouter), err)
				case <-ctx.Done():
					t.Fatalf("the client did not try %d times", tc.noRouter)
				}
				r = startFakeRouter(t, srv.ClientURL(), tc.answer)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			if n := r.count(tc.op); n != tc.want {
				t.Fatalf("the router got %d %s requests, want %d", n, tc.op, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.noRouter > 0 && attempts < tc.noRouter+1 {
				t.Fatalf("%d attempts seen, want at least %d", attempts, tc.noRouter+1)
			}
		})
	}
}

func noRouterSeen(mu *sync.Mutex, n *int) int {
	mu.Lock()
	defer mu.Unlock()
	return *n
}
