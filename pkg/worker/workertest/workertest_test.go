package workertest_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

func TestFakeConformance(t *testing.T) {
	var restarted *fake.Backend // in memory: a restarted worker gets the same one
	workertest.Run(t, fake.New(fake.Config{}), workertest.FakeCommands, workertest.Options{
		Restarted: func(*testing.T, string) worker.Backend {
			if restarted == nil {
				restarted = fake.New(fake.Config{})
			}
			return restarted
		},
	})
}
