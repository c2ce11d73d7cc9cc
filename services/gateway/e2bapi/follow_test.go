package e2bapi

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/internal/envdpb/process"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestFollowSendFailureLeavesProcessRunning: a client that goes away
// while its output is being written (the write fails before the request's
// context ends) leaves the process running, as envd does; Connect by pid
// follows it to its exit. A process whose Connect-Timeout-Ms deadline
// passes is ended.
func TestFollowSendFailureLeavesProcessRunning(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	s := &processService{}

	for _, c := range []struct {
		name     string
		deadline bool // the request's deadline passes instead
		want     string
	}{
		{"client gone mid-output", false, "exit 0"},
		{"deadline passed", true, "signal KILL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pid := uint32(1000 + len(c.name))
			// A process printing "drip i" every 10 ms for about 1 s.
			pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
			defer pcancel()
			p, err := env.Client.Stream(pctx, events.ExecRequest{SandboxID: sb.ID(), Cmd: []string{"drip", "100", "10"},
				ProcessID: processID(pid)})
			if err != nil {
				t.Fatal(err)
			}
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			if c.deadline {
				rctx, rcancel = context.WithTimeout(ctx, 100*time.Millisecond)
				defer rcancel()
			}
			gone := errors.New("write: broken pipe")
			data := 0
			send := func(ev *process.ProcessEvent) error {
				if ev.GetData() != nil {
					data++
				}
				if !c.deadline && data >= 3 {
					return gone // the client went away; its context is not yet done
				}
				return nil
			}
			err = s.follow(rctx, p, pid, nil, false, time.Minute, send)
			if c.deadline && err == nil || !c.deadline && !errors.Is(err, gone) {
				t.Fatalf("follow: %v", err)
			}
			a, err := env.Client.Attach(ctx, sb.ID(), processID(pid))
			if err != nil {
				t.Fatalf("re-attach: %v", err)
			}
			defer a.Close()
			var out strings.Builder
			for {
				ch, err := a.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("re-attached output: %v", err)
				}
				out.Write(ch.Data)
			}
			res, err := a.Wait()
			if err != nil {
				t.Fatalf("re-attached end: %v", err)
			}
			got := "exit " + strconv.Itoa(res.ExitCode)
			if res.Signal != "" {
				got = "signal " + res.Signal
			}
			if got != c.want || c.want == "exit 0" && !strings.HasSuffix(out.String(), "drip 100\n") {
				t.Fatalf("re-attached: %s, output ends %q; want %s", got, tail(out.String()), c.want)
			}
		})
	}
}

func tail(s string) string { return s[max(0, len(s)-20):] }
