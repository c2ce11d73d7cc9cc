//go:build integration

package dockerworker

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

const conformanceRouting = `default_class: standard
classes:
  standard: {backend: docker, image: sandboxio/base:latest, require_isolation: container}
`

// TestConformance runs the backend conformance suite (runtime, router and
// client on an embedded JetStream) against the real daemon.
func TestConformance(t *testing.T) {
	b := newTestBackend(t, Config{DefaultImage: baseImage})
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: conformanceRouting})
}
