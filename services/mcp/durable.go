package mcpserver

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Durable sandboxes through MCP: a paused sandbox keeps its files (not its
// processes or memory) and costs no worker anything; resume_sandbox brings
// it back; snapshot_sandbox keeps the files while it runs. A session's
// sandboxes, paused ones too, are killed when the session ends; snapshots
// stay until deleted or expired.

type resumeIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Lifetime  any    `json:"lifetime,omitempty" jsonschema:"its new lifetime: seconds (600) or a duration (10m, 1h); default the one it was created with"`
}

type snapshotIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox, from create_sandbox"`
	Name      string `json:"name,omitempty" jsonschema:"a name for the snapshot"`
}

func (s *Server) addDurableTools() {
	tool(s, "pause_sandbox", "Pause a sandbox: its files (work directory, home, /tmp) are kept and it stops costing anything; "+
		"running processes and memory are not kept. resume_sandbox brings it back.", s.pauseSandbox)
	tool(s, "resume_sandbox", "Resume a paused sandbox with its files, environment and secrets, and a new lifetime.", s.resumeSandbox)
	tool(s, "snapshot_sandbox", "Keep a snapshot of a running sandbox's files (it keeps running); returns the snapshot_id "+
		"that create_sandbox's from_snapshot starts new sandboxes from.", s.snapshotSandbox)
}

func (s *Server) pauseSandbox(ctx context.Context, st *session, in sandboxIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	p, err := sb.Client().Pause(ctx, sb.ID())
	if err != nil {
		return nil, err
	}
	return textResult("sandbox %s is paused (snapshot %s, %d bytes): its files are kept, its processes and memory are not; "+
		"resume_sandbox brings it back", sb.ID(), p.SnapshotID, p.Bytes), nil
}

func (s *Server) resumeSandbox(ctx context.Context, st *session, in resumeIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	d, bad := duration("lifetime", in.Lifetime, 0, s.cfg.MaxLifetime)
	if bad != nil {
		return bad, nil
	}
	r, err := sb.Client().Resume(ctx, sb.ID(), d)
	if err != nil {
		return nil, err
	}
	return textResult("sandbox %s runs again on %s until %s (in %s); its files are back, processes start fresh",
		sb.ID(), r.Backend, r.Deadline.UTC().Format(time.RFC3339), time.Until(r.Deadline).Round(time.Second)), nil
}

func (s *Server) snapshotSandbox(ctx context.Context, st *session, in snapshotIn) (*mcp.CallToolResult, error) {
	sb, err := st.sandbox(in.SandboxID)
	if err != nil {
		return nil, err
	}
	snap, err := sb.Client().Snapshot(ctx, sb.ID(), in.Name)
	if err != nil {
		return nil, err
	}
	return textResult("snapshot %s of sandbox %s: %d files, %d bytes (files only, no memory)", snap.SnapshotID, sb.ID(), snap.Files, snap.Bytes), nil
}
