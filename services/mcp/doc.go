// Package mcpserver is `sandboxio mcp`: a Model Context Protocol server
// (on github.com/modelcontextprotocol/go-sdk) that gives an agent
// sandboxes as tools — create_sandbox, run_command, command_status,
// run_code, write_file, read_file, list_files, set_timeout, list_sandboxes,
// kill_sandbox, expose_port — over stdio or streamable HTTP, against any sandboxio
// deployment reached through pkg/client.
//
// A sandbox created in an MCP session belongs to that session: the other
// tools act only on the session's sandboxes, and when the session ends
// (stdin closed, HTTP DELETE, the idle timeout, the server stopping) they
// are killed within Config.KillGrace; their lifetime is the backstop when
// that fails. Results are text (images as image content), long output is
// cut in the middle (its first and its real last bytes) with a note of how
// much, and every failure, a schema refusal of the arguments too, is a tool
// error naming its SBX code, whether to retry and what to do.
package mcpserver
