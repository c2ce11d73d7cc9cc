package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestGetListKillRetried: get, list and kill are safe to repeat, so the
// client sends them again when no router answers yet (no responders) or
// an attempt gets no answer (a timeout), bounded and backing off, within
// the caller's deadline; a create (it names its sandbox: ADR 37) is sent
// again when no router answers. An exec is never sent again.
func TestGetListKillRetried(t *testing.T) {
	tests := []struct {
		name string
		// answer: which requests the router answers (n counts from 1).
		answer func(op string, n int) bool
		late   bool // the router starts after the first request
		call   func(context.Context, *client.Client) error
		op     string
		want   int // requests the router gets
	}{
		{"get before any router", always, true, func(ctx context.Context, cl *client.Client) error { _, err := cl.Get(ctx, "sb-1"); return err }, events.OpGet, 1},
		{"kill before any router", always, true, func(ctx context.Context, cl *client.Client) error { _, err := cl.Kill(ctx, "sb-1"); return err }, events.OpKill, 1},
		{"create before any router", always, true, func(ctx context.Context, cl *client.Client) error {
			_, err := cl.Create(ctx, events.CreateRequest{TimeoutS: 60})
			return err
		}, events.OpCreate, 1},
		{"get whose first answer never comes", func(_ string, n int) bool { return n > 1 }, false,
			func(ctx context.Context, cl *client.Client) error { _, err := cl.Get(ctx, "sb-1"); return err }, events.OpGet, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t, &server.Options{})
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			cl, err := client.New(nc, client.WithTeardownGrace(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var r *fakeRouter
			if !tc.late {
				r = startFakeRouter(t, srv.ClientURL(), tc.answer)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, cl) }()
			if tc.late {
				time.Sleep(100 * time.Millisecond) // the first request finds no router
				r = startFakeRouter(t, srv.ClientURL(), tc.answer)
			}
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", tc.op, err)
			}
			if n := r.count(tc.op); n != tc.want {
				t.Fatalf("the router got %d %s requests, want %d", n, tc.op, tc.want)
			}
		})
	}
}
