package mcpserver_test

import (
	"strings"
	"testing"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TestMCPToolAnswers drives the MCP items of issue 22 (D.21) on both
// transports: long output keeps its real tail, a second kill_sandbox is
// not SandboxNotFound, a background command's process_id is in
// structuredContent, and arguments that fail the tool's schema are a tool
// error with an SBX code.
func TestMCPToolAnswers(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sys := start(t, tr)
			cs := sys.connect(t)
			id := sandboxID(t, ok(t, cs, "create_sandbox", map[string]any{"lifetime": 120}))

			t.Run("the real tail of output past the server's cap", func(t *testing.T) {
				in := strings.Repeat("x", events.DefaultBufferedOutputCap+(64<<10)) + "THE-REAL-END\n"
				got := ok(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"cat"}, "stdin": in})
				if !strings.Contains(got, "THE-REAL-END") || !strings.Contains(got, "bytes cut here") || len(got) > 4000 {
					t.Errorf("long output does not end with its real tail (%d bytes): %.200q … %.200q", len(got), got, got[max(0, len(got)-200):])
				}
			})

			t.Run("background process_id in structuredContent", func(t *testing.T) {
				res, text := call(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": []string{"sleep", "50"}, "background": true})
				sc, _ := res.StructuredContent.(map[string]any)
				pid, _ := sc["process_id"].(string)
				if res.IsError || pid == "" || !strings.Contains(text, pid) || sc["sandbox_id"] != id {
					t.Errorf("background: structuredContent %v, text %q", res.StructuredContent, text)
				}
			})

			t.Run("schema errors carry an SBX code", func(t *testing.T) {
				fails(t, cs, "run_command", map[string]any{"sandbox_id": id, "argv": "echo hi"}, events.CodeInvalidValue)
				fails(t, cs, "run_command", map[string]any{"argv": []string{"echo"}}, events.CodeMissingField)
			})

			t.Run("kill_sandbox twice", func(t *testing.T) {
				ok(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id})
				if got := ok(t, cs, "kill_sandbox", map[string]any{"sandbox_id": id}); !strings.Contains(got, "already gone") {
					t.Errorf("second kill: %q", got)
				}
				fails(t, cs, "kill_sandbox", map[string]any{"sandbox_id": "never-made"}, events.CodeSandboxNotFound)
			})
		})
	}
}
