// Package agent is the docker worker's side of sbx-agent: a Client that
// speaks internal/agent/proto over one byte stream to the agent in a sandbox,
// treating everything the agent says as hostile (bounded frames, credit it
// must keep to, sequence numbers it must not skip, results that must
// validate), and Binary, which finds or builds the static agent binary the
// worker bind-mounts into containers.
package agent
