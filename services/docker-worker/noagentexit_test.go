//go:build integration

package dockerworker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/internal/cemsg"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestNoAgentStartFailureCodes: on the docker-exec path (no agent), a
// command that does not exist is 127 and one that cannot be run 126, the
// same in the reply (details.exit_code) and in the exec's closed audit
// record (the record said 126 for both; issue 22 D.20); the agent's path
// agrees.
func TestNoAgentStartFailureCodes(t *testing.T) {
	for _, mode := range []AgentMode{AgentOff, AgentAuto} {
		t.Run(string(mode), func(t *testing.T) { startFailureCodes(t, mode) })
	}
}

func startFailureCodes(t *testing.T, mode AgentMode) {
	b := newTestBackend(t, Config{DefaultImage: baseImage, Agent: mode})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: lifecycleRouting, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = env.Client.Kill(context.WithoutCancel(ctx), sb.SandboxID) }()
	for _, tc := range []struct {
		name string
		cmd  string
		want int
	}{
		{"not found", "no-such-command", 127},
		{"not found by path", "/no/such/file", 127},
		{"a directory", "/etc", 126},
		{"not executable", "/etc/passwd", 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pid := events.NewID()
			_, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{tc.cmd}, ProcessID: pid})
			var e *events.Error
			if !errors.As(err, &e) || e.Code != events.CodeExecFailed {
				t.Fatalf("exec %s: %v, want %s", tc.cmd, err, events.CodeExecFailed)
			}
			if got, _ := e.Details["exit_code"].(float64); int(got) != tc.want {
				t.Errorf("reply's exit_code %v, want %d (%s)", e.Details["exit_code"], tc.want, e.Message)
			}
			if got := closedExitCode(t, env, sb.SandboxID, pid); got != tc.want {
				t.Errorf("closed record's exit_code %d, want %d as the reply", got, tc.want)
			}
		})
	}
}

// closedExitCode waits for the closed exec record of process pid and
// returns its exit_code (-1 when it has none).
func closedExitCode(t *testing.T, env *sbxtest.Env, sandboxID, pid string) int {
	t.Helper()
	js, err := jetstream.New(env.Conn("records"))
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	eventually(t, 15*time.Second, "the exec's closed record", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cons, err := js.OrderedConsumer(ctx, events.StreamOps, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{events.OpsSubject("docker", sandboxID, events.EventClosed)}})
		if err != nil {
			return false
		}
		for {
			batch, err := cons.FetchNoWait(256)
			if err != nil {
				return false
			}
			got := 0
			for m := range batch.Messages() {
				got++
				env, err := cemsg.Decode(m.Headers(), m.Data())
				if err != nil {
					continue
				}
				var rec events.OpRecord
				if json.Unmarshal(env.Data, &rec) == nil && rec.Kind == events.OpExec && rec.ProcessID == pid {
					code = -1
					if rec.ExitCode != nil {
						code = *rec.ExitCode
					}
					return true
				}
			}
			if got == 0 {
				return false
			}
		}
	})
	return code
}
