package cli

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/poll"
)

// TestDevMetrics: with SBX_METRICS_ADDR, dev serves one /metrics with the
// router's outcome metrics (calls, errors by code, latency) and the
// auditor's operation metrics.
func TestDevMetrics(t *testing.T) {
	addr := freeAddr(t)
	t.Setenv("SBX_METRICS_ADDR", addr)
	dev := startDev(t, "--backends", "fake")
	dev.waitLive(t, "fake", "")
	if r := cli(t, dev.URL, "run", "--class", "fake", "echo", "hi"); r.code != 0 {
		t.Fatalf("run: %+v", r)
	}
	if r := cli(t, dev.URL, "create", "--class", "nope"); r.code != exitSBXError {
		t.Fatalf("create of an unknown class: %+v", r)
	}
	poll.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body := string(b)
		for _, want := range []string{`sandboxio_router_calls_total{op="create"}`, `sandboxio_router_errors_total{code="SBX_E1101",op="create"} 1`,
			`sandboxio_router_call_duration_seconds_bucket{op="exec",outcome="ok"`, "sandboxio_operations"} {
			if !strings.Contains(body, want) {
				return errors.New("/metrics lacks " + want)
			}
		}
		return nil
	})
}
