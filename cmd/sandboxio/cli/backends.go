package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/sandboxio/sandboxio/pkg/worker"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

func init() {
	backendOpeners["docker"] = func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error) {
		pools, err := parsePools(os.Getenv("SBX_DOCKER_POOL"))
		if err != nil {
			return nil, nil, err
		}
		b, err := dockerworker.NewBackend(ctx, dockerworker.Config{WorkerID: workerID, Logger: log, Pools: pools,
			Agent: dockerworker.AgentMode(os.Getenv("SBX_DOCKER_AGENT")), AgentBinary: os.Getenv("SBX_AGENT_BINARY")})
		if err != nil {
			return nil, nil, err
		}
		return b, func() { _ = b.Close() }, nil
	}
}

// parsePools reads SBX_DOCKER_POOL: a comma-separated list of IMAGE=SIZE
// (optionally IMAGE@RUNTIME=SIZE), e.g. "sandboxio/python:3.11=4".
func parsePools(spec string) ([]dockerworker.PoolConfig, error) {
	var pools []dockerworker.PoolConfig
	for _, item := range splitList(spec) {
		i := strings.LastIndex(item, "=")
		if i <= 0 {
			return nil, fmt.Errorf("SBX_DOCKER_POOL entry %q: want IMAGE=SIZE", item)
		}
		size, err := strconv.Atoi(item[i+1:])
		if err != nil || size < 0 || size > 1000 {
			return nil, fmt.Errorf("SBX_DOCKER_POOL entry %q: size must be 0..1000", item)
		}
		image, runtime, _ := strings.Cut(item[:i], "@")
		pools = append(pools, dockerworker.PoolConfig{Class: strings.NewReplacer("/", "-", ":", "-", ".", "-").Replace(image), Image: image, Runtime: runtime, Size: size})
	}
	return pools, nil
}
