package cli

import (
	"os"
	"strconv"

	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

// dockerEgressFromEnv reads the docker worker's egress settings:
// SBX_DOCKER_EGRESS_POOL (CIDR), SBX_DOCKER_EGRESS_DENY and
// SBX_DOCKER_EGRESS_DNS (comma-separated), SBX_DOCKER_EGRESS_MAX_ENTRIES,
// SBX_DOCKER_EGRESS_DISABLED=1, SBX_DOCKER_EGRESS_UNFILTERED=1 and
// SBX_DOCKER_EGRESS_ALLOW_METADATA=1 (see
// docs/backends/docker.md).
func dockerEgressFromEnv() dockerworker.EgressConfig {
	c := dockerworker.EgressConfig{
		Pool:       os.Getenv("SBX_DOCKER_EGRESS_POOL"),
		Deny:       splitList(os.Getenv("SBX_DOCKER_EGRESS_DENY")),
		DNS:        splitList(os.Getenv("SBX_DOCKER_EGRESS_DNS")),
		Disabled:   os.Getenv("SBX_DOCKER_EGRESS_DISABLED") == "1",
		Unfiltered: os.Getenv("SBX_DOCKER_EGRESS_UNFILTERED") == "1",
		// AllowMetadata: link-local and cloud metadata addresses may be listed.
		AllowMetadata: os.Getenv("SBX_DOCKER_EGRESS_ALLOW_METADATA") == "1",
	}
	if n, err := strconv.Atoi(os.Getenv("SBX_DOCKER_EGRESS_MAX_ENTRIES")); err == nil {
		c.MaxEntries = n
	}
	return c
}
