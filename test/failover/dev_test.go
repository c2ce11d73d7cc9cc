package failover

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestFailoverDevKilled: `sandboxio dev` (Docker and fake backends) with
// live Docker sandboxes, one of them streaming, is killed with SIGKILL and
// started again, first on the same data directory, then on a new one
// (whose registry knows nothing of the old sandboxes). Counted: the
// containers of the killed instance's workers still present once their
// lifetime (30 s) and a grace have passed, and a load on the restarted
// instance.
func TestFailoverDevKilled(t *testing.T) {
	full(t)
	if !dockerAvailable() {
		t.Skip("no Docker daemon")
	}
	const lifetime = 30
	port := freePorts(t, "127.0.0.1", 1)[0]
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	url := "nats://" + listen
	dirs := []string{filepath.Join(t.TempDir(), "data-1")}
	dirs = append(dirs, dirs[0], filepath.Join(t.TempDir(), "data-2"))
	var workers []string
	t.Cleanup(func() { removeContainers(workers) })

	// The Docker janitor (it removes containers past their deadline label
	// whatever the registry says) sweeps every 5 s with a 5 s grace here.
	janitor := []string{"SBX_DOCKER_JANITOR_INTERVAL=5s", "SBX_DOCKER_JANITOR_GRACE=5s"}
	dev := startProc(t, "dev-1", janitor, "dev", "--backends", "docker,fake", "--data-dir", dirs[0], "--listen", listen)
	nc, cl := connectClient(t, url)
	waitBackend(t, cl, "docker", 60*time.Second)
	f := figures{scenario: "dev killed with SIGKILL with live Docker sandboxes, restarted on the same and on a new data dir", errs: map[string]int{}, leftDock: 0,
		missing: -1, doubled: -1} // the records are checked by the other scenarios
	for i, next := range []string{"same data dir", "new data dir"} {
		ids := liveSet(t, cl, 3, lifetime)
		startStreamedIn(t, cl, ids[0])
		var round []string
		for _, id := range ids {
			sb, err := cl.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			round = append(round, sb.Worker)
		}
		workers = append(workers, round...)
		if before := dockerLeft(dedupe(round), 0); before < len(ids) {
			t.Fatalf("only %d containers labelled with the workers %v before the kill, want %d: the count would mean nothing", before, dedupe(round), len(ids))
		}
		deadline := time.Now().Add(lifetime * time.Second)
		t0 := time.Now()
		dev.kill()
		dev = startProc(t, fmt.Sprintf("dev-%d", i+2), janitor, "dev", "--backends", "docker,fake", "--data-dir", dirs[i+1], "--listen", listen)
		waitBackend(t, cl, "docker", 90*time.Second)
		l := startLoad(cl, 2, "base", "echo", "hi")
		l.progress(t, 5, 90*time.Second, "after the restart on the "+next)
		l.end()
		f.recovered = append(f.recovered, "dev back on the "+next+": "+l.recovery(t0).Round(time.Millisecond).String())
		lf := l.figures("")
		f.requests += lf.requests
		for k, v := range lf.errs {
			f.errs[k] += v
		}
		f.confirmed += lf.confirmed
		left := dockerLeft(dedupe(round), time.Until(deadline)+60*time.Second)
		gone := "counted " + time.Since(deadline).Round(time.Second).String() + " after their deadline"
		if left == 0 && time.Now().Before(deadline) {
			gone = "all gone " + time.Until(deadline).Round(time.Second).String() + " before their deadline"
		} else if left == 0 {
			gone = "all gone " + time.Since(deadline).Round(time.Second).String() + " after their deadline"
		}
		f.notes = append(f.notes, fmt.Sprintf("%d containers of the killed dev (%s): %d left, %s", len(ids), next, left, gone))
		f.leftDock += left
	}
	f.left = liveSandboxes(t, nc, 10*time.Second)
	f.print(t)
	if f.leftDock != 0 {
		t.Errorf("goal figures missed: %d containers left past their deadline", f.leftDock)
	}
}

// liveSet creates n Docker sandboxes with a lifetime of secs.
func liveSet(t *testing.T, cl *client.Client, n, secs int) []string {
	t.Helper()
	var ids []string
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		sb, err := cl.Create(ctx, events.CreateRequest{Class: "base", TimeoutS: secs})
		cancel()
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		ids = append(ids, sb.SandboxID)
	}
	return ids
}

// startStreamedIn streams a sleeping process in an existing sandbox and
// returns once it has printed (its reader is left to the crash).
func startStreamedIn(t *testing.T, cl *client.Client, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p, err := cl.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: []string{"sh", "-c", "echo started; sleep 600"}})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if _, err := p.Next(); err != nil {
		t.Fatalf("stream: %v", err)
	}
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
