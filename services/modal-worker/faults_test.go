package modalworker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	modalworker "github.com/sandboxio/sandboxio/services/modal-worker"
	"github.com/sandboxio/sandboxio/services/modal-worker/modalfake"
)

// pattern is what `seq` prints: lines make any loss or repeat visible.
func seqOutput(n int) string {
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "%d\n", i)
	}
	return sb.String()
}

// TestStdioBreaksResume: a stdio stream broken by UNAVAILABLE mid-chunk is
// reopened at the byte offset received, without loss or duplication.
func TestStdioBreaksResume(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	tests := []struct {
		name         string
		breaks, size int
	}{
		{"one break after 1000 bytes", 1, 1000},
		{"five breaks after 1 byte each", 5, 1},
		{"breaks before any byte", 3, 0},
		{"nine breaks of 5000 bytes", 9, 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Calls("TaskExecStdioRead")
			srv.BreakStdio(tc.breaks, tc.size)
			out, _, st, err := run(t, b, id, worker.Process{Cmd: []string{"seq", "1", "20000"}})
			if err != nil || st.Code != 0 {
				t.Fatalf("exec: %+v, %v", st, err)
			}
			if want := seqOutput(20000); out != want {
				t.Fatalf("output differs: %d bytes, want %d", len(out), len(want))
			}
			if got := srv.Calls("TaskExecStdioRead") - before; got < tc.breaks+2 {
				t.Fatalf("%d stdio reads, want at least %d (reconnects)", got, tc.breaks+2)
			}
		})
	}
	// A stream that never comes back ends the exec with BackendUnavailable
	// in bounded time, never a hang.
	srv.BreakStdio(1000, 0)
	start := time.Now()
	_, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"echo", "x"}})
	srv.BreakStdio(0, 0)
	if !errors.Is(err, events.ErrBackendUnavailable) || time.Since(start) > 20*time.Second {
		t.Fatalf("persistent break: %v after %s, want BackendUnavailable", err, time.Since(start))
	}
}

// TestRouterJWTRefresh: after the router rotates its key every call with an
// old JWT is UNAUTHENTICATED; the client fetches new access and goes on.
func TestRouterJWTRefresh(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	before := srv.Calls("TaskGetCommandRouterAccess")
	srv.RotateRouterKey()
	if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"echo", "after rotation"}}); err != nil || out != "after rotation\n" {
		t.Fatalf("exec after rotation: %q, %v", out, err)
	}
	if got := srv.Calls("TaskGetCommandRouterAccess") - before; got != 1 {
		t.Fatalf("%d access refreshes, want exactly 1 (shared by concurrent calls)", got)
	}
	// Mid-stream: rotate while a process drips output, then break the
	// stream so that it must reconnect with a fresh JWT.
	var out bytes.Buffer
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		_, err := b.Exec(context.Background(), id, worker.Process{ID: events.NewID(), Cmd: []string{"sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 0.2; done"},
			Stdout: lockedWriter{&mu, &out}, Stderr: lockedWriter{&mu, &out}})
		done <- err
	}()
	sbxtest.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return out.Len() > 0 }, "no output")
	srv.RotateRouterKey()
	srv.BreakStdio(2, 0)
	select {
	case err := <-done:
		if err != nil || out.String() != "1\n2\n3\n4\n5\n6\n" {
			t.Fatalf("exec: %q, %v", out.String(), err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not end")
	}
}

// TestRouterRefreshFails: when new router access cannot be had (the token
// was revoked too), the exec ends with Unauthorized in bounded time.
func TestRouterRefreshFails(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	srv.RotateRouterKey()
	srv.RejectTokens(true)
	defer srv.RejectTokens(false)
	start := time.Now()
	_, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"true"}})
	if !errors.Is(err, events.ErrUnauthorized) || time.Since(start) > 15*time.Second {
		t.Fatalf("exec: %v after %s, want Unauthorized", err, time.Since(start))
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestThrottling: RESOURCE_EXHAUSTED with an RPCRetryPolicy is retried
// after the delay the server asks for; one the caller cannot wait for ends
// with RateLimited at once.
func TestThrottling(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	srv.Throttle("SandboxCreate", 3, 100*time.Millisecond)
	start := time.Now()
	create(t, b, nil)
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("create took %s: the retry policy's delays were not honoured", took)
	}
	if got := srv.Calls("SandboxCreate"); got != 4 {
		t.Fatalf("%d SandboxCreate calls, want 4", got)
	}
	srv.Throttle("SandboxCreate", 1, 10*time.Minute)
	start = time.Now()
	_, err := b.Create(ctxT(t, 20*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, events.ErrRateLimited) || time.Since(start) > 5*time.Second {
		t.Fatalf("create throttled for 10 min: %v after %s, want RateLimited at once", err, time.Since(start))
	}
	// MODAL_MAX_THROTTLE_WAIT caps the total wait of one call.
	_, capped := setupWith(t, srv, func(c *modalworker.Config) { c.Modal.MaxThrottleWait = 250 * time.Millisecond })
	srv.Throttle("SandboxCreate", 5, 100*time.Millisecond)
	before := srv.Calls("SandboxCreate")
	_, err = capped.Create(ctxT(t, 20*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(capped), Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, events.ErrRateLimited) || srv.Calls("SandboxCreate")-before != 3 {
		t.Fatalf("capped throttle wait: %v after %d calls, want RateLimited after 3", err, srv.Calls("SandboxCreate")-before)
	}
	srv.Throttle("SandboxCreate", 0, 0)
	// Through the whole stack, the caller sees SBX_E1404.
	srv.Throttle("SandboxCreate", 1, 10*time.Minute)
	env := startEnv(t, b)
	if _, err := env.Client.Create(ctxT(t, 30*time.Second), events.CreateRequest{TimeoutS: 60}); !errors.Is(err, events.ErrRateLimited) {
		t.Fatalf("client create: %v, want RateLimited", err)
	}
}

// TestExpiryMidExec: the sandbox's lifetime ends while a process runs: the
// exec ends with SandboxGone in bounded time.
func TestExpiryMidExec(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	env := startEnv(t, b)
	ctx := ctxT(t, time.Minute)
	r, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Client.Kill(context.Background(), r.SandboxID)
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"sh", "-c", "echo started; sleep 60"}})
	if err != nil {
		t.Fatal(err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return srv.RunningProcesses() > 0 }, "process never started")
	mid, _ := b.ModalSandboxID(r.SandboxID)
	start := time.Now()
	srv.Expire(mid)
	_, err = p.Wait()
	if !errors.Is(err, events.ErrSandboxGone) || time.Since(start) > 15*time.Second {
		t.Fatalf("exec after expiry: %v after %s, want SandboxGone", err, time.Since(start))
	}
	if _, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: r.SandboxID, Cmd: []string{"true"}}); !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec in the expired sandbox: %v, want SandboxGone", err)
	}
}

// TestSlowCreate: a create that outlives its context returns the context's
// error (the runtime reports CreateTimeout), and the sandbox Modal finishes
// creating afterwards is terminated.
func TestSlowCreate(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	srv.SetCreateDelay(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Create(ctx, worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("slow create: %v after %s", err, time.Since(start))
	}
	sbxtest.Eventually(t, 20*time.Second, func() bool {
		return srv.Calls("SandboxCreate") == 1 && len(srv.SandboxIDs()) == 0 && srv.Calls("SandboxTerminate") > 0
	},
		"the late sandbox was not terminated: %v", srv.SandboxIDs())
	// Through the whole stack: the worker's create bound answers
	// CreateTimeout (SBX_E1203), and the late sandbox is removed.
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: routing, Worker: func(c *worker.Config) { c.CreateTimeout = time.Second }})
	srv.SetCreateDelay(2 * time.Second)
	terminated := srv.Calls("SandboxTerminate")
	start = time.Now()
	if _, err := env.Client.Create(ctxT(t, 30*time.Second), events.CreateRequest{TimeoutS: 60}); !errors.Is(err, events.ErrCreateTimeout) || time.Since(start) > 15*time.Second {
		t.Fatalf("client create: %v after %s, want CreateTimeout", err, time.Since(start))
	}
	// No sandbox running is not enough: the late one may not exist yet (the
	// fake is still creating it). It was terminated once a terminate came.
	sbxtest.Eventually(t, 20*time.Second, func() bool {
		return srv.Calls("SandboxCreate") == 2 && len(srv.SandboxIDs()) == 0 && srv.Calls("SandboxTerminate") > terminated
	}, "the late sandbox was not terminated: %v", srv.SandboxIDs())
	// Scheduling that takes long is bounded by the create's context too.
	srv.SetCreateDelay(0)
	srv2, b2 := setup(t, modalfake.Options{ScheduleDelay: time.Hour}, nil)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	if _, err := b2.Create(ctx2, worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b2), Deadline: time.Now().Add(time.Minute)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("unscheduled create: %v", err)
	}
	sbxtest.Eventually(t, 10*time.Second, func() bool { return len(srv2.SandboxIDs()) == 0 }, "unscheduled sandbox left: %v", srv2.SandboxIDs())
}

// TestRejectedTokenStopsTheWorker: a 401 at start is a clear error that
// names the variables and not their values.
func TestRejectedTokenStopsTheWorker(t *testing.T) {
	srv := startFake(t, modalfake.Options{})
	srv.RejectTokens(true)
	_, err := openBackend(t, srv, nil)
	id, secret := srv.Token()
	if err == nil || !strings.Contains(err.Error(), "rejected the token") || !strings.Contains(err.Error(), "MODAL_TOKEN_ID") ||
		strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), id) {
		t.Fatalf("NewBackend with a rejected token: %v", err)
	}
	srv.RejectTokens(false)
	_, err = openBackend(t, srv, func(c *modalworker.Config) { c.Modal.TokenSecret = "" })
	if err == nil || !strings.Contains(err.Error(), "MODAL_TOKEN_SECRET") {
		t.Fatalf("NewBackend without a secret: %v", err)
	}
	// Revoked after start: calls fail with Unauthorized, not a hang.
	_, b := setupWith(t, srv, nil)
	srv.RejectTokens(true)
	_, err = b.Create(ctxT(t, 20*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(time.Minute)})
	if !errors.Is(err, events.ErrUnauthorized) {
		t.Fatalf("create with a revoked token: %v, want Unauthorized", err)
	}
	srv.RejectTokens(false)
}

// TestNothingSecretIsLogged runs a whole lifecycle with debug logs and
// checks that no token, JWT or secret value appears in them.
func TestNothingSecretIsLogged(t *testing.T) {
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, b := setup(t, modalfake.Options{}, func(c *modalworker.Config) { c.Logger = log })
	srv.Throttle("SandboxCreate", 1, 10*time.Millisecond)
	id, _ := create(t, b, func(s *worker.CreateSpec) { s.Secrets = map[string]string{"DB_PASSWORD": "hunter2-secret"} })
	srv.RotateRouterKey()
	srv.BreakStdio(1, 3)
	if out, _, _, err := run(t, b, id, worker.Process{Cmd: []string{"sh", "-c", "echo payload-body-xyz"}}); err != nil || out != "payload-body-xyz\n" {
		t.Fatalf("exec: %q, %v", out, err)
	}
	if err := b.Kill(ctxT(t, 10*time.Second), id); err != nil {
		t.Fatal(err)
	}
	tokID, tokSecret := srv.Token()
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	if !strings.Contains(text, "sandbox created") {
		t.Fatalf("no logs captured: %q", text)
	}
	for _, bad := range []string{tokID, tokSecret, "hunter2-secret", "payload-body-xyz", "Bearer", "eyJ"} {
		if strings.Contains(text, bad) {
			t.Fatalf("log contains %q:\n%s", bad, text)
		}
	}
}

// TestStdinStreamLostAnswer: a TaskExecStdinWriteStream whose answer is
// lost after its end was applied is settled through TaskExecStdinStatus,
// without writing anything twice.
func TestStdinStreamLostAnswer(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	ctx := ctxT(t, 30*time.Second)
	data := bytes.Repeat([]byte("z"), 700<<10)
	srv.BreakStdinStreams(1)
	before := srv.Calls("TaskExecStdinStatus")
	if err := b.WriteFile(ctx, id, "/tmp/big", 0o644, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	if srv.Calls("TaskExecStdinStatus") == before {
		t.Fatal("the lost answer was not settled with TaskExecStdinStatus")
	}
	var got bytes.Buffer
	if _, err := b.ReadFile(ctx, id, "/tmp/big", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back %d bytes, %v", got.Len(), err)
	}
}

// TestTransientControlPlaneErrors: UNAVAILABLE is retried (the fake checks
// that every retry reuses its call's idempotency key); when it persists the
// create ends with BackendUnavailable in bounded time and leaves nothing.
func TestTransientControlPlaneErrors(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	srv.FailCalls("SandboxCreate", 2, codes.Unavailable)
	create(t, b, nil)
	if got := srv.Calls("SandboxCreate"); got != 3 {
		t.Fatalf("%d SandboxCreate calls, want 3", got)
	}
	srv.FailCalls("SandboxCreate", 100, codes.Unavailable)
	start := time.Now()
	_, err := b.Create(ctxT(t, 30*time.Second), worker.CreateSpec{SandboxID: events.NewID(), WorkerID: workerID(b), Deadline: time.Now().Add(time.Minute)})
	srv.FailCalls("SandboxCreate", 0, codes.Unavailable)
	if !errors.Is(err, events.ErrBackendUnavailable) || time.Since(start) > 10*time.Second {
		t.Fatalf("create: %v after %s, want BackendUnavailable", err, time.Since(start))
	}
	srv.FailCalls("SandboxGetTaskId", 1, codes.Internal)
	srv.FailCalls("TaskGetCommandRouterAccess", 1, codes.Unknown)
	create(t, b, nil)
}

// slowWriter stands for the runtime's backpressure: every write takes a
// while.
type slowWriter struct {
	buf   bytes.Buffer
	delay time.Duration
}

func (w *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay) // the backpressure being simulated
	return w.buf.Write(p)
}

// TestSlowReaderLosesNothing: output still being written out under
// backpressure after the process exited is not cut off by the drain
// timeout, which only ends streams that stay idle.
func TestSlowReaderLosesNothing(t *testing.T) {
	_, b := setup(t, modalfake.Options{}, func(c *modalworker.Config) { c.DrainTimeout = 200 * time.Millisecond })
	id, _ := create(t, b, nil)
	out := &slowWriter{delay: 20 * time.Millisecond}
	st, err := b.Exec(ctxT(t, time.Minute), id, worker.Process{ID: events.NewID(), Cmd: []string{"seq", "1", "30000"}, Stdout: out, Stderr: io.Discard})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v, %v", st, err)
	}
	if want := seqOutput(30000); out.buf.String() != want {
		t.Fatalf("got %d bytes, want %d", out.buf.Len(), len(want))
	}
	// A background child that keeps the pipes open does not hold the exec
	// beyond the drain timeout.
	start := time.Now()
	var o bytes.Buffer
	if _, err := b.Exec(ctxT(t, time.Minute), id, worker.Process{ID: events.NewID(), Cmd: []string{"sh", "-c", "echo parent; sleep 20 &"}, Stdout: &o, Stderr: io.Discard}); err != nil || o.String() != "parent\n" {
		t.Fatalf("exec with a background child: %q, %v", o.String(), err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a background child held the exec for %s", took)
	}
}

// TestStdinRetriesAreIdempotent: stdin writes whose answers are lost are
// retried at the same offset; the router drops what it already has, so
// the process reads every byte exactly once.
func TestStdinRetriesAreIdempotent(t *testing.T) {
	srv, b := setup(t, modalfake.Options{}, nil)
	id, _ := create(t, b, nil)
	in := seqOutput(40000) // ~230 KB: several 64 KiB writes
	srv.FailRouterCalls("TaskExecStdinWrite", 3, codes.Unavailable, true)
	out, _, st, err := run(t, b, id, worker.Process{Cmd: []string{"cat"}, Stdin: strings.NewReader(in)})
	if err != nil || st.Code != 0 || out != in {
		t.Fatalf("cat: %d bytes of %d, %+v, %v", len(out), len(in), st, err)
	}
	// Lost before they took effect: retried too.
	srv.FailRouterCalls("TaskExecStdinWrite", 2, codes.Unavailable, false)
	srv.FailRouterCalls("TaskExecWait", 2, codes.Internal, false)
	out, _, _, err = run(t, b, id, worker.Process{Cmd: []string{"cat"}, Stdin: strings.NewReader(in)})
	if err != nil || out != in {
		t.Fatalf("cat: %d bytes of %d, %v", len(out), len(in), err)
	}
}
