package router_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestExecTimeoutOverflowRefused: a timeout_ms whose milliseconds overflow
// a time.Duration once answered SBX_E1602 (retryable) at once while the
// command ran, uncounted by the exec quota. It is refused at decode now,
// and nothing reaches the backend.
func TestExecTimeoutOverflowRefused(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	a := newTenant(t, env)
	id := a.create(events.CreateRequest{TimeoutS: 300}).SandboxID
	for _, op := range []string{events.OpExec, events.OpRunCode} {
		var req any = events.ExecRequest{SandboxID: id, Cmd: []string{"sleep", "5"}, TimeoutMS: 9223372036854}
		if op == events.OpRunCode {
			req = events.RunCodeRequest{SandboxID: id, Code: "1", TimeoutMS: 9223372036854}
		}
		e := a.do(op, req, nil)
		wantCode(t, op+" with timeout_ms 9223372036854", e, events.CodeInvalidValue)
		if e.Retryable {
			t.Fatalf("%s: a refused request is retryable: %v", op, e)
		}
	}
	if n := len(env.Fake.CallsTo("Exec")) + len(env.Fake.CallsTo("RunCode")); n != 0 {
		t.Fatalf("%d refused execs reached the backend", n)
	}
}

// TestOversizedHeadersRefusedAtOnce: a 70 KB traceparent once got no
// answer for 15-35 s and then a retryable code. Headers are bounded and
// the traceparent checked (W3C: 55 bytes) before anything is sent.
func TestOversizedHeadersRefusedAtOnce(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	nc := env.Conn("headers")
	sb := env.Create(ctx(t))
	valid := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		headers map[string]string
		want    events.Code // "" = served
	}{
		{"valid traceparent", map[string]string{events.HeaderTraceparent: valid}, ""},
		{"70 KB traceparent", map[string]string{events.HeaderTraceparent: strings.Repeat("a", 70<<10)}, events.CodePayloadTooLarge},
		{"malformed traceparent", map[string]string{events.HeaderTraceparent: "00-zz-00f067aa0ba902b7-01"}, events.CodeInvalidValue},
		{"uppercase traceparent", map[string]string{events.HeaderTraceparent: strings.ToUpper(valid)}, events.CodeInvalidValue},
		{"70 KB other header", map[string]string{"X-Junk": strings.Repeat("a", 70<<10)}, events.CodePayloadTooLarge},
		{"70 KB tracestate", map[string]string{events.HeaderTraceparent: valid, "tracestate": strings.Repeat("a", 70<<10)}, events.CodePayloadTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, op := range []string{events.OpExec, events.OpGet} {
				body, _ := json.Marshal(events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}})
				if op == events.OpGet {
					body, _ = json.Marshal(events.GetRequest{SandboxID: sb.SandboxID})
				}
				m := nats.NewMsg(events.APISubject(op))
				m.Data = body
				for k, v := range tt.headers {
					m.Header[k] = []string{v}
				}
				start := time.Now()
				reply, err := nc.RequestMsg(m, 10*time.Second)
				if err != nil {
					t.Fatalf("%s: %v after %s", op, err, time.Since(start))
				}
				e := events.DecodeError(reply.Data)
				if tt.want == "" {
					if e != nil {
						t.Fatalf("%s: %v", op, e)
					}
					continue
				}
				if e == nil || e.Code != tt.want || e.Retryable {
					t.Fatalf("%s: got %v after %s, want %s, not retryable", op, e, time.Since(start), tt.want)
				}
			}
		})
	}
}

// TestMayHaveRunIsNotRetryable: an exec the router stops waiting for (here
// at the caller's deadline) may still run: its answer keeps its code but is
// not retryable, with details.outcome "unknown", so that a client retrying
// on retryable does not run it twice.
func TestMayHaveRunIsNotRetryable(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	nc := env.Conn("outcome")
	sb := env.Create(ctx(t))
	body, _ := json.Marshal(events.ExecRequest{SandboxID: sb.SandboxID, ProcessID: "slow", Cmd: []string{"sleep", "60000"}})
	m := nats.NewMsg(events.APISubject(events.OpExec))
	m.Data = body
	m.Header.Set(events.HeaderCallerTimeout, "1500")
	reply, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	e := events.DecodeError(reply.Data)
	if e == nil || e.Code != events.CodeWorkerTimeout || e.Retryable || e.Details["outcome"] != "unknown" {
		t.Fatalf("exec past the caller's deadline: %+v, want %s, not retryable, outcome unknown", e, events.CodeWorkerTimeout)
	}
	_ = env.Client.Signal(ctx(t), sb.SandboxID, "slow", "KILL")
}
