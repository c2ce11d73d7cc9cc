package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sandboxio/sandboxio/internal/cutproxy"
	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// fakeRouter is an instance of the router's micro service that records
// what it receives and answers only what answer allows.
type fakeRouter struct {
	nc  *nats.Conn
	svc micro.Service

	mu   sync.Mutex
	got  map[string]int // op → requests received
	sigs []events.SignalRequest
}

func startFakeRouter(t *testing.T, url string, answer func(op string, n int) bool) *fakeRouter {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r := &fakeRouter{nc: nc, got: map[string]int{}}
	r.svc, err = micro.AddService(nc, micro.Config{Name: events.ServiceName, Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{events.OpGet, events.OpExec, events.OpSignal, events.OpKill, events.OpCreate} {
		err := r.svc.AddEndpoint(op, micro.HandlerFunc(func(req micro.Request) {
			r.mu.Lock()
			r.got[op]++
			n := r.got[op]
			if op == events.OpSignal {
				var s events.SignalRequest
				_ = json.Unmarshal(req.Data(), &s)
				r.sigs = append(r.sigs, s)
			}
			r.mu.Unlock()
			if !answer(op, n) {
				return // swallowed: the router "dies" with it
			}
			switch op {
			case events.OpGet:
				_ = req.RespondJSON(events.Sandbox{SandboxID: "sb-1", State: events.StateRunning})
			case events.OpCreate:
				var c events.CreateRequest
				_ = json.Unmarshal(req.Data(), &c)
				_ = req.RespondJSON(events.CreateReply{SandboxID: c.SandboxID})
			default:
				_ = req.RespondJSON(struct{}{})
			}
		}), micro.WithEndpointSubject(events.APISubject(op)))
		if err != nil {
			t.Fatal(err)
		}
	}
	// The endpoints' subscriptions reach the server before a request is
	// sent: else the first one finds no responder (seen in CI).
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *fakeRouter) count(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[op]
}

func (r *fakeRouter) signals() []events.SignalRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]events.SignalRequest(nil), r.sigs...)
}

// kill ends the instance the way SIGKILL does: its connection closes with
// the requests it holds unanswered.
func (r *fakeRouter) kill() { r.nc.Close() }

func never(string, int) bool  { return false }
func always(string, int) bool { return true }

// TestReplyLostToADeadRouter: a request held by a router instance that dies
// (SIGKILL: its pending table is gone) is not left to the caller's timeout.
// An idempotent one (get, kill) is sent again at once and answered by
// another instance; an exec is never sent again (ADR 2) and is answered
// SBX_E1623 ReplyLost, not retryable (it may have run), by its deadline,
// its process killed.
func TestReplyLostToADeadRouter(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, cl *client.Client) error
		op   string
		// resent: the op is sent again and answered; else it fails with
		// ReplyLost at the deadline.
		resent bool
		// noBaseline: the client has not seen the dying router answer a
		// ping (it died right after it started); the live one started
		// after the request tells.
		noBaseline bool
	}{
		{"get, the dead router never seen", func(ctx context.Context, cl *client.Client) error { _, err := cl.Get(ctx, "sb-1"); return err }, events.OpGet, true, true},
		{"get", func(ctx context.Context, cl *client.Client) error { _, err := cl.Get(ctx, "sb-1"); return err }, events.OpGet, true, false},
		{"kill", func(ctx context.Context, cl *client.Client) error { _, err := cl.Kill(ctx, "sb-1"); return err }, events.OpKill, true, false},
		// A create names its sandbox (the client chooses the id): sending
		// it again is safe (ADR 37).
		{"create", func(ctx context.Context, cl *client.Client) error {
			_, err := cl.Create(ctx, events.CreateRequest{SandboxID: "sb-1", TimeoutS: 60})
			return err
		}, events.OpCreate, true, false},
		{"exec", func(ctx context.Context, cl *client.Client) error {
			_, err := cl.Exec(ctx, events.ExecRequest{SandboxID: "sb-1", ProcessID: "p-1", Cmd: []string{"true"}})
			return err
		}, events.OpExec, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t, &server.Options{})
			dying := startFakeRouter(t, srv.ClientURL(), never)
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			cl, err := client.New(nc, client.WithLostCheck(100*time.Millisecond), client.WithTeardownGrace(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.noBaseline {
				cl.RefreshRouters() // the instances before the request: the dying one
			}

			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, cl) }()
			poll.Eventually(t, 5*time.Second, func() error {
				if dying.count(tc.op) == 0 {
					return errors.New("the request has not reached the dying router")
				}
				return nil
			})
			live := startFakeRouter(t, srv.ClientURL(), always)
			dying.kill()
			err = <-done
			took := time.Since(start)
			if tc.resent {
				if err != nil {
					t.Fatalf("%s held by a dead router: %v after %s, want an answer from the live one", tc.op, err, took)
				}
				if took > 2*time.Second {
					t.Errorf("%s answered after %s: not resent promptly", tc.op, took)
				}
				if n := live.count(tc.op); n != 1 {
					t.Errorf("the live router got %d %s requests, want 1", n, tc.op)
				}
				return
			}
			var e *events.Error
			if !errors.Is(err, events.ErrReplyLost) || !errors.As(err, &e) || e.Retryable || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s held by a dead router: %v, want %s, not retryable: it may have run (also a deadline)", tc.op, err, events.CodeReplyLost)
			}
			if n := live.count(tc.op); n != 0 {
				t.Errorf("the %s was sent again (%d times): it must run at most once", tc.op, n)
			}
			if s := live.signals(); len(s) != 1 || s[0].ProcessID != "p-1" || s[0].Signal != "KILL" {
				t.Errorf("signals after the lost exec: %+v, want one KILL of p-1", s)
			}
		})
	}
}

// TestReplyLostToAReconnect: the client's own connection to NATS drops and
// comes back while a get waits (a NATS node killed): the reply the router
// sent meanwhile is gone, so the get is sent again at once.
func TestReplyLostToAReconnect(t *testing.T) {
	srv := runServer(t, &server.Options{})
	r := startFakeRouter(t, srv.ClientURL(), func(_ string, n int) bool { return n > 1 })
	px, err := cutproxy.New(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	nc, err := nats.Connect("nats://"+px.Addr(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cl, err := client.New(nc, client.WithLostCheck(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := cl.Get(ctx, "sb-1"); done <- err }()
	poll.Eventually(t, 5*time.Second, func() error {
		if r.count(events.OpGet) == 0 {
			return errors.New("the get has not reached the router")
		}
		return nil
	})
	px.SetCut(true)
	px.SetCut(false)
	if err := <-done; err != nil {
		t.Fatalf("get across a reconnect: %v after %s", err, time.Since(start))
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("get across a reconnect answered after %s: not resent promptly", took)
	}
	if n := r.count(events.OpGet); n != 2 {
		t.Errorf("the router got %d gets, want 2 (the lost one and the resend)", n)
	}
}

// TestCallerDeadlineIsAnsweredWithACode: a caller whose deadline is shorter
// than the router's bound for its command (a buffered exec still running, a
// reply lost between worker and router) gets the router's coded answer
// before its deadline (SBX_E1602 WorkerTimeout, not retryable since the
// exec may have run, details caller_deadline) instead of a bare timeout; it still matches
// context.DeadlineExceeded, and the process is killed.
func TestCallerDeadlineIsAnsweredWithACode(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	sb := env.Create(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "slow", Cmd: []string{"sleep", "60000"}})
	var e *events.Error
	if !errors.As(err, &e) || e.Code != events.CodeWorkerTimeout || e.Retryable || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec past the caller's deadline: %v, want %s, not retryable (also a deadline)", err, events.CodeWorkerTimeout)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Signal(context.Background(), sb.SandboxID, "slow", "KILL")
		if !errors.Is(err, events.ErrProcessNotFound) {
			return fmt.Errorf("the process outlived the exec given up on: signal %v", err)
		}
		return nil
	})
}
