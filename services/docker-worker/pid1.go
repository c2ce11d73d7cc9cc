package dockerworker

// PID 1 of a sandbox (docker-init, then the keep-alive sleep) runs as root
// without capabilities, and every process of the sandbox as the sandbox's
// user (LabelUser): a process of the sandbox user cannot signal its init
// (kill -TERM 1 would stop the container), read or write its memory
// through /proc/1/mem (which the seccomp ptrace denial does not cover) or
// trace it. An image that runs as root gets a root init as before.
//
// This is for sandboxes without the agent. The agent (the container's main
// process, withAgent) cannot change credentials, so with it the container
// runs as LabelUser with no docker-init: the agent is PID 1 and makes
// itself non-dumpable (ADR 29).
func initUser(sandboxUser string) string {
	if sandboxUser == "" {
		return ""
	}
	return "0:0"
}
