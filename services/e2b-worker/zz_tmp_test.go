package e2bworker_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

func TestZZShell(t *testing.T) {
	srv := startFake(t)
	b := newBackend(t, srv, nil)
	workertest.Run(t, b, workertest.ShellCommands, workertest.Options{Routing: routing})
}
