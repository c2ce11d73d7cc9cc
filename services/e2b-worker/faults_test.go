package e2bworker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	e2bworker "github.com/sandboxio/sandboxio/services/e2b-worker"
	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
)

// chatty writes a line every 100 ms for 3 s, then exits 0.
var chatty = []string{"sh", "-c", `i=0; while [ $i -lt 30 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done`}

func sbxErr(t *testing.T, err error) *events.Error {
	t.Helper()
	var e *events.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an SBX error", err, err)
	}
	return e
}

// TestDataPlaneFaults injects each data-plane fault of the fake into one
// sandbox and checks that exec and run_code end, within a bound, with the
// SBX error that says what happened.
func TestDataPlaneFaults(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	env := startEnv(t, b)
	tests := []struct {
		name   string
		faults e2bfake.Faults
		expire bool // expire the sandbox on E2B's side while the exec runs
		code   bool // run_code instead of exec
		want   *events.Error
		bound  time.Duration
	}{
		{name: "stream dropped mid-way", faults: e2bfake.Faults{DropStreamAfter: 3}, want: events.ErrBackendUnavailable, bound: 10 * time.Second},
		{name: "end event missing", faults: e2bfake.Faults{OmitEnd: true}, want: events.ErrBackendUnavailable, bound: 10 * time.Second},
		{name: "stream stalls", faults: e2bfake.Faults{Stall: true}, want: events.ErrBackendUnavailable, bound: 10 * time.Second},
		{name: "expires mid-stream", faults: e2bfake.Faults{ExpireAfter: 3}, want: events.ErrSandboxGone, bound: 10 * time.Second},
		{name: "expires mid-exec", expire: true, want: events.ErrSandboxGone, bound: 10 * time.Second},
		{name: "502 from the proxy", faults: e2bfake.Faults{BadGateway: true}, want: events.ErrSandboxGone, bound: 10 * time.Second},
		{name: "delays", faults: e2bfake.Faults{Delay: 300 * time.Millisecond}, want: nil, bound: 15 * time.Second},
		{name: "run_code stream dropped", code: true, faults: e2bfake.Faults{DropStreamAfter: 1}, want: events.ErrBackendUnavailable, bound: 10 * time.Second},
		{name: "run_code end missing", code: true, faults: e2bfake.Faults{OmitEnd: true}, want: events.ErrBackendUnavailable, bound: 10 * time.Second},
		{name: "run_code stalls", code: true, faults: e2bfake.Faults{Stall: true}, want: events.ErrBackendUnavailable, bound: 15 * time.Second},
		{name: "run_code 502", code: true, faults: e2bfake.Faults{BadGateway: true}, want: events.ErrSandboxGone, bound: 10 * time.Second},
		{name: "run_code expires mid-stream", code: true, faults: e2bfake.Faults{ExpireAfter: 1}, want: events.ErrSandboxGone, bound: 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = env.Client.Kill(context.Background(), r.SandboxID) }()
			e2bID, _ := b.E2BSandboxID(r.SandboxID)
			if !srv.SetSandboxFaults(e2bID, tc.faults) {
				t.Fatal("no such E2B sandbox")
			}
			start := time.Now()
			switch {
			case tc.expire:
				// Streamed, so that the expiry comes once output flows.
				p, serr := env.Client.Stream(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: chatty})
				if serr != nil {
					t.Fatal(serr)
				}
				for _, cerr := range p.Chunks() {
					if cerr != nil {
						t.Fatal(cerr)
					}
					break
				}
				srv.ExpireSandbox(e2bID)
				_, err = p.Wait()
			case tc.code:
				_, err = env.Client.RunCode(ctx, events.RunCodeRequest{SandboxID: r.SandboxID,
					Code: "import time\nfor i in range(20):\n    print(i, flush=True)\n    time.sleep(0.1)\n"})
			default:
				_, err = env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: chatty})
			}
			took := time.Since(start)
			if took > tc.bound {
				t.Errorf("took %s, bound %s", took, tc.bound)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("err %v, want success", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %s", err, tc.want.Name)
			}
			if e := sbxErr(t, err); e.Retryable != tc.want.Retryable {
				t.Fatalf("retryable %t, want %t", e.Retryable, tc.want.Retryable)
			}
		})
	}
}

// TestControlPlaneFaults injects 429, 5xx and delays into the API.
func TestControlPlaneFaults(t *testing.T) {
	tests := []struct {
		name   string
		faults e2bfake.Faults
		want   *events.Error
	}{
		{"429 then success after back-off", e2bfake.Faults{RateLimit: 1, RetryAfter: "0"}, nil},
		{"429 until the retries are used up", e2bfake.Faults{RateLimit: 10}, events.ErrRateLimited},
		{"5xx", e2bfake.Faults{ServerErrors: 1}, events.ErrBackendUnavailable},
		{"API slower than the request timeout", e2bfake.Faults{Delay: 3 * time.Second}, events.ErrBackendUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := startFake(t)
			b := newBackend(t, srv, func(c *e2bworker.Config) {
				c.E2B.MaxRetries = 2
				c.E2B.RetryBaseDelay = 10 * time.Millisecond
				c.E2B.RetryMaxDelay = 50 * time.Millisecond
				c.RequestTimeout = time.Second
			})
			env := startEnv(t, b)
			ctx := ctxT(t, time.Minute)
			srv.SetFaults(tc.faults)
			start := time.Now()
			r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("create took %s", took)
			}
			srv.SetFaults(e2bfake.Faults{})
			if tc.want == nil {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				_, _ = env.Client.Kill(ctx, r.SandboxID)
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("create: %v, want %s", err, tc.want.Name)
			}
			if e := sbxErr(t, err); !e.Retryable {
				t.Fatalf("%s is not retryable", e.Name)
			}
			// Nothing is left behind on E2B, even when E2B finished the
			// create after the client gave up.
			sbxtest.Eventually(t, 20*time.Second, func() bool { return len(srv.SandboxIDs()) == 0 },
				"failed create left %v", srv.SandboxIDs())
		})
	}
}
