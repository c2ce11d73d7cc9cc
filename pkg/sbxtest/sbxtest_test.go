package sbxtest_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

func TestEndToEnd(t *testing.T) {
	env := sbxtest.Start(t, sbxtest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb := env.Create(ctx)
	res, err := env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo", "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hello\n" || res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	p, err := env.Client.Stream(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"write", "1000000", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	for c, err := range p.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		got.Write(c.Data)
	}
	r, err := p.Wait()
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("wait: %v %+v", err, r)
	}
	if !bytes.Equal(got.Bytes(), fake.Pattern(1000000)) {
		t.Fatalf("stream: got %d bytes, not the pattern", got.Len())
	}
	if _, err := env.Client.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	_, err = env.Client.Exec(ctx, events.ExecRequest{SandboxID: sb.SandboxID, Cmd: []string{"echo"}})
	if !errors.Is(err, events.ErrSandboxGone) {
		t.Fatalf("exec after kill: %v", err)
	}
}
