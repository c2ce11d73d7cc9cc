package failover

import (
	"testing"
	"time"
)

// TestFailoverRouterRestarts: two routers on one NATS node under a steady
// load; each is restarted in turn (the first killed with SIGKILL, the
// second stopped with SIGTERM). The cheapest scenario: it runs in every
// `go test` (make check), bounded at about a minute.
//
// Goal figures, asserted: no acknowledged operation without its records,
// none doubled, no sandbox left live, every failed request answered with
// an SBX code, also those in flight on the router killed with SIGKILL
// (nobody is left to answer them: the client sees the router go and sends
// an idempotent request again, or answers SBX_E1623 ReplyLost).
func TestFailoverRouterRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	sys := startSplit(t, splitOptions{nodes: 1, routers: 2, workers: [][2]string{{"fake-worker", "fo-fake-1"}}})
	nc, cl := connectClient(t, sys.nats.URL())
	waitBackend(t, cl, "fake", 30*time.Second)
	l := startLoad(cl, 4, "fake", "echo", "hi")
	defer l.end()
	l.progress(t, 20, 30*time.Second, "at start")

	var recovered []string
	for i, r := range sys.routers {
		t0 := time.Now()
		how := "SIGTERM"
		if i == 0 {
			how = "SIGKILL"
			r.kill()
		} else {
			r.stop()
		}
		r.restart()
		l.progress(t, 100, 40*time.Second, "after restarting "+r.name)
		recovered = append(recovered, r.name+" ("+how+"): "+l.recovery(t0).Round(time.Millisecond).String())
	}
	l.end()

	f := l.figures("routers restarted one by one under load (1 NATS node, 2 routers, fake backend)")
	f.recovered = recovered
	f.missing, f.doubled = checkAudit(t, sys.audit, l.confirmed, 30*time.Second)
	f.left = liveSandboxes(t, nc, 20*time.Second)
	f.print(t)
	if f.missing != 0 || f.doubled != 0 || f.left != 0 {
		t.Errorf("goal figures missed: %d missing, %d doubled, %d sandboxes left", f.missing, f.doubled, f.left)
	}
	f.checkCoded(t)
}
