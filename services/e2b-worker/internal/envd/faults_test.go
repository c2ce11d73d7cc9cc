package envd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/services/e2b-worker/e2bfake"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envd"
)

func TestRunFaults(t *testing.T) {
	tests := []struct {
		name    string
		faults  e2bfake.Faults
		cmd     string
		stall   time.Duration
		want    error
		wantPID bool
	}{
		{name: "drop stream mid-way", faults: e2bfake.Faults{DropStreamAfter: 2}, cmd: "echo a; sleep 5; echo b", want: envd.ErrStreamBroken, wantPID: true},
		{name: "omit end event", faults: e2bfake.Faults{OmitEnd: true}, cmd: "echo a", want: envd.ErrStreamBroken, wantPID: true},
		{name: "stall", faults: e2bfake.Faults{Stall: true}, cmd: "sleep 5", stall: 300 * time.Millisecond, want: envd.ErrStreamBroken, wantPID: true},
		{name: "bad gateway", faults: e2bfake.Faults{BadGateway: true}, cmd: "true", want: envd.ErrSandboxGone},
		{name: "expire mid-exec", faults: e2bfake.Faults{ExpireAfter: 1}, cmd: "sleep 5", want: envd.ErrSandboxGone, wantPID: true},
		{name: "delay only", faults: e2bfake.Faults{Delay: 100 * time.Millisecond}, cmd: "echo ok"},
	}
	for _, tc := range tests {
		for _, scope := range []string{"server", "sandbox"} {
			t.Run(tc.name+"/"+scope, func(t *testing.T) {
				e := setup(t, nil)
				if scope == "server" {
					e.fake.SetFaults(tc.faults)
				} else if !e.fake.SetSandboxFaults(e.sb.SandboxID, tc.faults) {
					t.Fatal("SetSandboxFaults: no such sandbox")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				res, err := e.c.Run(ctx, tc.cmd, envd.RunOptions{StallTimeout: tc.stall})
				if tc.want == nil {
					if err != nil || res.ExitCode() != 0 {
						t.Fatalf("Run = %+v, %v", res, err)
					}
					return
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				if tc.want == envd.ErrStreamBroken && errors.Is(err, envd.ErrSandboxGone) {
					t.Fatalf("err = %v matches both classes", err)
				}
				if tc.wantPID && (res == nil || res.PID == 0) {
					t.Fatalf("res = %+v, want the PID for re-attaching", res)
				}
			})
		}
	}
}

// TestKeepaliveEvents: while a process runs, envd sends a keepalive per
// interval. The process ends only once the test has seen a keepalive (it
// reads stdin until the test closes it), so the count of keepalives depends
// on how fast the machine is, never whether one arrives.
func TestKeepaliveEvents(t *testing.T) {
	e := setup(t, func(c *envd.Config) { c.KeepaliveInterval = time.Second })
	ctx := ctxT(t)
	s, err := e.c.Start(ctx, envd.StartRequest{Cmd: "cat", Stdin: true, Tag: "keepalive"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var kinds []envd.EventType
	for {
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", kinds, err)
		}
		kinds = append(kinds, ev.Type)
		if ev.Type == envd.EventKeepalive && len(kinds) == 2 {
			if err := e.c.CloseStdin(ctx, envd.Selector{Tag: "keepalive"}); err != nil {
				t.Fatal(err)
			}
		}
		if ev.Type == envd.EventEnd {
			break
		}
	}
	if len(kinds) < 3 || kinds[0] != envd.EventStart || kinds[1] != envd.EventKeepalive {
		t.Fatalf("events = %v, want start, keepalive, [keepalive...], end", kinds)
	}
	for _, k := range kinds[1 : len(kinds)-1] {
		if k != envd.EventKeepalive {
			t.Fatalf("events = %v: %v between start and end of a silent process", kinds, k)
		}
	}
}

func TestUnreachableIsGone(t *testing.T) {
	e := setup(t, nil)
	e.fake.Close()
	ctx := ctxT(t)
	if err := e.c.Health(ctx); !errors.Is(err, envd.ErrSandboxGone) {
		t.Fatalf("Health: %v", err)
	}
	if _, err := e.c.Run(ctx, "true", envd.RunOptions{}); !errors.Is(err, envd.ErrSandboxGone) {
		t.Fatalf("Run: %v", err)
	}
}
