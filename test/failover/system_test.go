package failover

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
)

// system is a split-mode sandboxio: routers, workers, an auditor and a
// reaper, each its own process, against nats.
type system struct {
	nats    *natsNodes
	routers []*proc
	workers []*proc
	auditor *proc
	reaper  *proc
	audit   string // the audit log
}

// splitOptions size a split-mode system.
type splitOptions struct {
	nodes, routers int
	// workers are the worker processes: role (fake-worker, docker-worker)
	// and --worker-id.
	workers [][2]string
	env     []string // extra environment of every process
}

func startSplit(t *testing.T, o splitOptions) *system {
	t.Helper()
	s := &system{nats: startNATS(t, o.nodes), audit: filepath.Join(t.TempDir(), "audit.jsonl")}
	url := s.nats.URL()
	var repl []string
	if o.nodes > 1 {
		repl = []string{"--replicas", "3"}
	}
	for i := range o.routers {
		args := append([]string{"router", "--nats", url}, repl...)
		s.routers = append(s.routers, startProc(t, "router-"+string(rune('a'+i)), o.env, args...))
	}
	for _, w := range o.workers {
		args := append([]string{w[0], "--nats", url, "--worker-id", w[1]}, repl...)
		s.workers = append(s.workers, startProc(t, w[0]+"-"+w[1], o.env, args...))
	}
	s.auditor = startProc(t, "auditor", o.env, "auditor", "--nats", url, "--log", s.audit)
	s.reaper = startProc(t, "reaper", o.env, append([]string{"reaper", "--nats", url}, repl...)...)
	return s
}

// waitBackend waits until a worker of backend is live for the routers.
func waitBackend(t *testing.T, cl *client.Client, backend string, d time.Duration) {
	t.Helper()
	err := within(context.Background(), d, func(ctx context.Context) error {
		b, err := cl.Backends(ctx)
		if err != nil {
			return err
		}
		for _, x := range b.Backends {
			if x.Name == backend && len(x.Workers) > 0 {
				return nil
			}
		}
		return errors.New("no live " + backend + " worker")
	})
	if err != nil {
		t.Fatalf("backend %s never became live: %v", backend, err)
	}
}
