package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/pkg/worker"
	dockerworker "github.com/sandboxio/sandboxio/services/docker-worker"
)

func init() {
	backendOpeners["docker"] = func(ctx context.Context, workerID string, log *slog.Logger) (worker.Backend, func(), error) {
		pools, err := parsePools(os.Getenv("SBX_DOCKER_POOL"))
		if err != nil {
			return nil, nil, err
		}
		cfg := dockerworker.Config{WorkerID: workerID, Logger: log, Pools: pools}
		if cfg.JanitorInterval, err = envDuration("SBX_DOCKER_JANITOR_INTERVAL"); err != nil {
			return nil, nil, err
		}
		if cfg.JanitorGrace, err = envDuration("SBX_DOCKER_JANITOR_GRACE"); err != nil {
			return nil, nil, err
		}
		containmentFromEnv(&cfg)
		cfg.Agent, cfg.AgentBinary = dockerworker.AgentMode(os.Getenv("SBX_DOCKER_AGENT")), os.Getenv("SBX_AGENT_BINARY")
		cfg.AgentChannel = dockerworker.AgentChannel(os.Getenv("SBX_DOCKER_AGENT_CHANNEL"))
		cfg.AllowNoAgent = os.Getenv("SBX_DOCKER_NO_AGENT") == "1" // start without sbx-agent: docker exec (ADR 33)
		cfg.Egress = dockerEgressFromEnv()
		b, err := dockerworker.NewBackend(ctx, cfg)
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

// envDuration reads a Go duration (e.g. 10s) from the environment; unset is
// zero (the default).
func envDuration(name string) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s %q: want a duration such as 10s", name, v)
	}
	return d, nil
}

// containmentFromEnv reads the docker worker's containment settings:
// SBX_DOCKER_IMAGES (the image allowlist, comma-separated), SBX_DOCKER_PULL
// (never or missing), SBX_DOCKER_DISK_QUOTA (auto, storage-opt, tmpfs or
// none) and SBX_DOCKER_USERNS (required: refuse to start unless the daemon
// remaps users). See docs/backends/docker.md.
func containmentFromEnv(cfg *dockerworker.Config) {
	if v := os.Getenv("SBX_DOCKER_IMAGES"); v != "" {
		cfg.Images = splitList(v)
	}
	cfg.Pull = dockerworker.PullPolicy(os.Getenv("SBX_DOCKER_PULL"))
	cfg.DiskQuota = dockerworker.DiskQuota(os.Getenv("SBX_DOCKER_DISK_QUOTA"))
	cfg.RequireUserNS = os.Getenv("SBX_DOCKER_USERNS") == "required"
}
