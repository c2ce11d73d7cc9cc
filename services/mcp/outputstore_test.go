package mcpserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker/fake"
)

// TestRunCommandStoresNoFlood runs a command that writes 50 MiB through
// run_command: the reply shows the output's head, its real end and how
// much was cut, and SBX_OUT (shared by every tenant) stores at most a few
// times what the reply can show, not the 50 MiB.
func TestRunCommandStoresNoFlood(t *testing.T) {
	const size = 50 << 20
	sys := start(t, "stdio")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))

	nc := sys.env.Conn("mcp-test")
	before := outputBytes(t, nc)
	got := ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"write", fmt.Sprint(size)}})
	stored := outputBytes(t, nc) - before

	const maxStored = 256 << 10 // the reply shows 1 KiB per stream (start's MaxOutputBytes)
	if stored > maxStored {
		t.Errorf("SBX_OUT stored %d bytes for one run_command, want at most %d", stored, maxStored)
	}
	out := fake.Pattern(size)
	head, end := string(out[:40]), string(out[size-40:])
	stdout, _, _ := strings.Cut(got, "\nstderr:")
	if !strings.Contains(stdout, "stdout:\n"+head) || !strings.HasSuffix(strings.TrimSuffix(stdout, "\n"), end) ||
		!strings.Contains(stdout, "in all; the first") || !strings.Contains(stdout, fmt.Sprint(size)) {
		t.Errorf("reply lacks the head %q, the real end %q or the note of %d bytes: %.300q … %.300q",
			head, end, size, stdout, stdout[max(0, len(stdout)-300):])
	}
}

// outputBytes is what the output stream SBX_OUT stores now.
func outputBytes(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, events.StreamOutput)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Bytes
}

// TestBackgroundCommandStoreBounded: a background command's output is
// streamed, so stored in SBX_OUT, but only up to the server's bound (1 MiB
// per stream with a 1 KiB reply), and command_status says that the server
// capped it and how much was written.
func TestBackgroundCommandStoreBounded(t *testing.T) {
	const size = 8 << 20
	sys := start(t, "stdio")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
	nc := sys.env.Conn("mcp-test")
	before := outputBytes(t, nc)
	res, _ := call(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"write", fmt.Sprint(size)}, "background": true})
	pid, _ := res.StructuredContent.(map[string]any)["process_id"].(string)
	got := ok(t, cs, "command_status", map[string]any{"sandbox_id": id, "process_id": pid, "wait": 25})
	stored := outputBytes(t, nc) - before
	const maxStored = 1<<20 + 64<<10
	if stored > maxStored {
		t.Errorf("SBX_OUT stored %d bytes for one background command, want at most %d", stored, maxStored)
	}
	if !strings.Contains(got, "state: exited") || !strings.Contains(got, "output capped by the server") || !strings.Contains(got, fmt.Sprintf("of the %d bytes written", size)) {
		t.Errorf("command_status does not say the server capped the output: %.2000q", got)
	}
}
