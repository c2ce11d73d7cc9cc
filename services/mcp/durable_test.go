package mcpserver_test

import (
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/sbxtest"
)

// TestDurableToolsRefuseWithoutSnapshots: on a backend that keeps no
// snapshots (the fake), pause_sandbox and snapshot_sandbox are tool errors
// with CapabilityNotSupported, resume_sandbox of a running sandbox says it
// runs, and the sandbox goes on.
func TestDurableToolsRefuseWithoutSnapshots(t *testing.T) {
	sys := startOn(t, sbxtest.Options{}, "http")
	cs := sys.connect(t)
	id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))
	fails(t, cs, "pause_sandbox", map[string]any{"sandbox_id": id}, events.CodeCapabilityNotSupp)
	fails(t, cs, "snapshot_sandbox", map[string]any{"sandbox_id": id}, events.CodeCapabilityNotSupp)
	ok(t, cs, "resume_sandbox", map[string]any{"sandbox_id": id})
	ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"echo", "hi"}})
}
