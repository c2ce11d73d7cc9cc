package auditor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/internal/embednats"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

type env struct {
	srv *embednats.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	dir string
}

func startEnv(t testing.TB) *env {
	t.Helper()
	dir := t.TempDir()
	srv, err := embednats.Start(embednats.Config{StoreDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect("auditor-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bus.Ensure(ctx, js, bus.Config{}); err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, js: js, dir: dir}
}

func record(opID, kind, phase string) events.OpRecord {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := events.OpRecord{OpID: opID, Kind: kind, Phase: phase, SandboxID: "sbx1", Backend: "fake", Worker: "w1", StartedAt: start}
	if phase == events.EventClosed {
		end := start.Add(1500 * time.Millisecond)
		r.EndedAt, r.DurationMS, r.Outcome = &end, 1500, events.OutcomeOK
		r.BytesIn, r.BytesOut = 10, 200
	}
	return r
}

// publish publishes rec as the worker does; msgID overrides Nats-Msg-Id when
// not empty (to get a second stream message with the same ce-id).
func publish(t *testing.T, js jetstream.JetStream, rec events.OpRecord, msgID string) {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	typ := events.TypeOpOpened
	if rec.Phase == events.EventClosed {
		typ = events.TypeOpClosed
	}
	m, err := cemsg.Encode(events.OpsSubject(rec.Backend, rec.SandboxID, rec.Phase), cemsg.Envelope{
		ID: rec.OpID + "-" + rec.Phase, Type: typ, Source: "sandboxio/worker/" + rec.Worker, Subject: rec.SandboxID,
		Traceparent: rec.Traceparent, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if msgID != "" {
		m.Header.Set(events.HeaderMsgID, msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	poll.Eventually(t, d, poll.Bool(what, cond))
}

// runService starts s.Run and returns a stop function that cancels and waits.
func runService(t testing.TB, s *Service) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

func opID(i int) string { return fmt.Sprintf("op%05d", i) }
