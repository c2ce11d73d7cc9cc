package workertest_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/worker/fake"
	"github.com/sandboxio/sandboxio/pkg/worker/workertest"
)

func TestFakeConformance(t *testing.T) {
	workertest.Run(t, fake.New(fake.Config{}), workertest.FakeCommands, workertest.Options{})
}
