package dockerworker

import (
	"fmt"
	"os"
	"path/filepath"
)

// How a worker's sandboxes run execs, as advertised in its lease and shown
// by `sandboxio backends`.
const (
	ExecPathAgent      = "agent"       // through sbx-agent in the sandbox
	ExecPathDockerExec = "docker-exec" // one Docker exec each (no agent)
)

// ExecPath says how new sandboxes of this worker run execs: ExecPathAgent,
// or ExecPathDockerExec when the agent is off, was not found, or the daemon
// could not mount it.
func (b *Backend) ExecPath() string {
	if b.agentBin() != "" {
		return ExecPathAgent
	}
	return ExecPathDockerExec
}

// AgentFound reports whether a static sbx-agent is beside the running
// binary, where `make build` puts it and where the worker looks first after
// a configured one (for `sandboxio version`).
func AgentFound() (string, bool) {
	p := agentBesideExecutable()
	fi, err := os.Stat(p)
	return p, err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func agentBesideExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return "sbx-agent"
	}
	return filepath.Join(filepath.Dir(exe), "sbx-agent")
}

// requireAgent refuses a worker that would run every exec through docker
// exec without the operator having asked for it: a binary installed alone
// (go install, a copy to a server) has no agent beside it and no module to
// build one from (ADR 33).
func (b *Backend) requireAgent() error {
	if b.agentBin() != "" || b.cfg.Agent == AgentOff || b.cfg.AllowNoAgent {
		return nil
	}
	return fmt.Errorf("dockerworker: the docker worker needs sbx-agent, the in-sandbox agent (%s); without it every exec is a docker exec "+
		"(about 40 times slower, no stateful run_code, no PTY). Build it beside this binary from a sandboxio checkout: "+
		"CGO_ENABLED=0 go build -o %s ./cmd/sbx-agent (or `make build`, which builds both), or point SBX_AGENT_BINARY at a static sbx-agent; "+
		"to run without it on purpose, set SBX_DOCKER_NO_AGENT=1 (or SBX_DOCKER_AGENT=off)",
		b.agentReason(), agentBesideExecutable())
}
