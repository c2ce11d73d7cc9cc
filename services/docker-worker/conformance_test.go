//go:build integration

package dockerworker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

const conformanceRouting = `default_class: standard
classes:
  standard: {backend: docker, image: sandboxio/base:latest, require_isolation: container}
  code: {backend: docker, image: "sandboxio/python:3.11", require_isolation: container}
`

// TestConformance runs the backend conformance suite (runtime, router and
// client on an embedded JetStream) against the real daemon.
func TestConformance(t *testing.T) {
	b := newTestBackend(t, Config{DefaultImage: baseImage})
	routing, plot := conformanceRouting, ""
	if _, err := b.cli.ImageInspect(context.Background(), dataImage); err == nil {
		routing += "  plot: {backend: docker, image: \"" + dataImage + "\", require_isolation: container}\n"
		plot = "plot"
	}
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: routing, CodeClass: "code", PlotClass: plot,
		Restarted: func(t *testing.T, workerID string) worker.Backend {
			return newTestBackend(t, Config{DefaultImage: baseImage, WorkerID: workerID})
		},
		Reattaches: true})
}

// TestConformanceWithoutAgent runs the suite on the Docker exec fallback.
func TestConformanceWithoutAgent(t *testing.T) {
	b := newTestBackend(t, Config{DefaultImage: baseImage, Agent: AgentOff})
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: conformanceRouting, CodeClass: "code",
		Restarted: func(t *testing.T, workerID string) worker.Backend {
			return newTestBackend(t, Config{DefaultImage: baseImage, WorkerID: workerID, Agent: AgentOff})
		}})
}

// TestConformanceGVisor runs the agent's probes (stateful code, PTY) on
// gVisor (runsc), where the daemon has it.
func TestConformanceGVisor(t *testing.T) {
	b := newTestBackend(t, Config{DefaultImage: baseImage})
	if _, ok := b.RuntimeTier(RuntimeRunsc); !ok {
		t.Skip("runsc is not registered with the daemon")
	}
	workertest.RunProbes(t, b, workertest.ShellCommands, workertest.Options{CodeClass: "code", Routing: `default_class: code
classes:
  code: {backend: docker, image: "sandboxio/python:3.11", runtime: runsc, require_isolation: gvisor}
`}, "StatefulContexts", "PTY")
}

// TestClassesThroughRouter places the routing file's classes on this
// worker: runc gives the container tier, runsc (where registered) gvisor,
// and a class naming runsc is refused before dispatch where it is not.
func TestClassesThroughRouter(t *testing.T) {
	b := newTestBackend(t, Config{DefaultImage: baseImage})
	env := sbxtest.Start(t, sbxtest.Options{Backend: b, Routing: `default_class: standard
classes:
  standard: {backend: docker, image: "sandboxio/python:3.11", require_isolation: container}
  hardened: {backend: docker, image: "sandboxio/python:3.11", runtime: runsc, require_isolation: gvisor}
`})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	std, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60})
	if err != nil || std.Isolation != events.TierContainer {
		t.Fatalf("standard: %+v, %v", std, err)
	}
	res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: std.SandboxID, Cmd: []string{"python3", "-c", "import json; print(json.dumps([6*7]))"}})
	if err != nil || string(res.Stdout) != "[42]\n" {
		t.Fatalf("python in standard: %+v, %v", res, err)
	}
	hardened, err := env.Client.Create(ctx, events.CreateRequest{TimeoutS: 60, Class: "hardened"})
	if _, ok := b.RuntimeTier(RuntimeRunsc); !ok {
		if !errors.Is(err, events.ErrIsolationUnavailable) {
			t.Fatalf("hardened without runsc: %v, want IsolationUnavailable", err)
		}
		return
	}
	if err != nil || hardened.Isolation != events.TierGVisor {
		t.Fatalf("hardened: %+v, %v", hardened, err)
	}
	// gVisor answers with its own kernel release, not the host's.
	res, err = env.Client.Exec(ctx, events.ExecRequest{SandboxID: hardened.SandboxID, Cmd: []string{"python3", "-c", "import os; print(os.uname().release)"}})
	if err != nil || len(res.Stdout) == 0 {
		t.Fatalf("exec under gvisor: %+v, %v", res, err)
	}
	t.Logf("gvisor kernel release %q", res.Stdout)
}
