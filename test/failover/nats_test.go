package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestFailoverStreamLeaderKilled: a 3-node JetStream cluster (three
// `sandboxio nats-server` processes), two routers, two fake workers, the
// auditor and the reaper, everything with --replicas 3, under load. The
// node leading SBX_CMD is killed with SIGKILL, then started again on its
// store. Goal: no acknowledged operation without its records, none
// doubled, nothing left live, every failure coded.
func TestFailoverStreamLeaderKilled(t *testing.T) {
	full(t)
	sys := startSplit(t, splitOptions{nodes: 3, routers: 2,
		workers: [][2]string{{"fake-worker", "fo-nats-1"}, {"fake-worker", "fo-nats-2"}}})
	nc, cl := connectClient(t, sys.nats.URL())
	waitBackend(t, cl, "fake", 60*time.Second)
	l := startLoad(cl, 6, "fake", "echo", "hi")
	defer l.end()
	l.progress(t, 50, 60*time.Second, "at start")

	var recovered, notes []string
	for _, stream := range []string{events.StreamCommands, events.StreamOps} {
		leader := streamLeader(t, nc, stream)
		node := sys.nats.node(leader)
		if node == nil {
			t.Fatalf("no process for leader %q of %s", leader, stream)
		}
		t0 := time.Now()
		node.kill()
		l.progress(t, 50, 90*time.Second, "with the "+stream+" leader "+leader+" dead")
		recovered = append(recovered, stream+" leader "+leader+" killed: "+l.recovery(t0).Round(time.Millisecond).String())
		node.restart()
		t1 := time.Now()
		l.progress(t, 50, 90*time.Second, "after "+leader+" came back")
		recovered = append(recovered, leader+" back: "+l.recovery(t1).Round(time.Millisecond).String())
		notes = append(notes, stream+" leader after: "+streamLeader(t, nc, stream))
	}
	l.end()

	f := l.figures("NATS stream leader killed under load (3 nodes, 2 routers, 2 fake workers, --replicas 3)")
	f.recovered, f.notes = recovered, notes
	f.missing, f.doubled = checkAudit(t, sys.audit, l.confirmed, 60*time.Second)
	f.left = liveSandboxes(t, nc, 30*time.Second)
	f.notes = append(f.notes, "sbx_reaper replicas: "+bucketReplicas(t, nc, "KV_sbx_reaper"))
	f.print(t)
	if f.missing != 0 || f.doubled != 0 || f.left != 0 {
		t.Errorf("goal figures missed: %d missing, %d doubled, %d sandboxes left", f.missing, f.doubled, f.left)
	}
	f.checkCoded(t)
}

// streamLeader names the node leading a stream (retrying through an
// election).
func streamLeader(t *testing.T, nc *nats.Conn, name string) string {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	err = within(context.Background(), 30*time.Second, func(ctx context.Context) error {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		leader = info.Cluster.Leader
		return nil
	})
	if err != nil {
		t.Fatalf("leader of %s: %v", name, err)
	}
	return leader
}

func bucketReplicas(t *testing.T, nc *nats.Conn, stream string) string {
	js, err := jetstream.New(nc)
	if err != nil {
		return err.Error()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return err.Error()
	}
	return string(rune('0' + s.CachedInfo().Config.Replicas))
}
