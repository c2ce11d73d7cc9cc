package workertest

import (
	"strings"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// processGroupKill: a KILL to a process reaches its whole tree, the children
// it left in the background (another process group, a daemon) included.
// Backends whose Commands have no Spawn skip it.
func (s *suite) processGroupKill(t *testing.T) {
	if s.cmds.Spawn == nil || s.cmds.Alive == nil {
		t.Skip("the backend's commands cannot start a background child")
	}
	ctx := s.ctx(t)
	id := s.create(t, ctx)
	p, err := s.env.Client.Stream(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Spawn})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var out strings.Builder
	var children []string
	for len(children) < 2 {
		c, err := p.Next()
		if err != nil {
			t.Fatalf("waiting for the children's pids: %v (so far %q)", err, out.String())
		}
		out.Write(c.Data)
		if strings.HasSuffix(out.String(), "\n") {
			children = strings.Fields(out.String())
		}
	}
	for _, pid := range children {
		if r := s.exec(t, ctx, id, s.cmds.Alive(pid)); r.ExitCode != 0 {
			t.Fatalf("child %s not running before the kill: exit %d", pid, r.ExitCode)
		}
	}
	if err := s.env.Client.Signal(ctx, id, p.ProcessID, "KILL"); err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(); err != nil || res.Signal != "KILL" {
		t.Fatalf("killed process: %+v, %v; want KILL", res, err)
	}
	for _, pid := range children {
		sbxtest.Eventually(t, 10*time.Second, func() bool {
			res, err := s.env.Client.Exec(ctx, events.ExecRequest{SandboxID: id, Cmd: s.cmds.Alive(pid)})
			return err == nil && res.ExitCode != 0
		}, "child %s of the killed process still runs", pid)
	}
}
