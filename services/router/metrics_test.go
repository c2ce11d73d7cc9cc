package router_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestOutcomeMetrics: /metrics counts every call by op, every error by op
// and SBX code, and the latency of answers — those given in the handler
// (a refused create), those sent after it (an exec forwarded to a worker,
// an error found asynchronously), which `nats micro stats` misses.
func TestOutcomeMetrics(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	c := ctx(t)
	sb := env.Create(c)
	if _, err := env.Client.Exec(c, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hi"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Create(c, events.CreateRequest{Class: "nope", TimeoutS: 60}); !errors.Is(err, events.ErrUnknownClass) {
		t.Fatalf("create of an unknown class: %v", err)
	}
	_, err := env.Client.Exec(c, events.ExecRequest{SandboxID: "nosuchsandbox", Cmd: []string{"echo"}})
	if err == nil {
		t.Fatal("exec in a sandbox that does not exist succeeded")
	}
	notFound := events.AsError(err).Code // SBX_E1201, or SBX_E1402 for a tenant (no existence leak)
	scrape := func() string {
		rec := httptest.NewRecorder()
		env.RouterServices[0].MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	want := []string{
		`sandboxio_router_calls_total{op="exec"} 2`,
		`sandboxio_router_errors_total{code="SBX_E1101",op="create"} 1`,
		`sandboxio_router_errors_total{code="` + string(notFound) + `",op="exec"} 1`,
		`sandboxio_router_call_duration_seconds_count{op="exec",outcome="ok"} 1`,
		`sandboxio_router_call_duration_seconds_count{op="create",outcome="ok"} 1`,
	}
	poll.Eventually(t, 10*time.Second, func() error {
		body := scrape()
		for _, w := range want {
			if !strings.Contains(body, w) {
				return errors.New("metrics lack " + w + ":\n" + body)
			}
		}
		return nil
	})
}
