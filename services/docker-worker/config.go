package dockerworker

import (
	"log/slog"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Config configures a Backend. The zero value is usable: every field has a
// default (see withDefaults).
type Config struct {
	// Host is the Docker daemon address (unix:///var/run/docker.sock,
	// tcp://...). Empty means the environment (DOCKER_HOST, DOCKER_API_VERSION,
	// DOCKER_CERT_PATH, DOCKER_TLS_VERIFY), as the docker CLI does.
	Host string
	// WorkerID labels every container (io.sandboxio.worker) and scopes
	// ListSandboxes. Required; events.ValidID.
	WorkerID string
	// DefaultImage is used when a class spec names no image.
	DefaultImage string
	// Pull decides what happens when an image is missing: PullNever (the
	// default) fails at once with ImageNotFound; PullMissing tries one pull,
	// bounded by PullTimeout and the create's context.
	Pull PullPolicy
	// Images is the image allowlist (see imagePolicy): a create naming an
	// image outside it fails with ImageNotAllowed (SBX_E1707) before the
	// daemon is asked. Default: BuiltImages. DefaultImage and the pools'
	// images are always allowed.
	Images []string
	// PullTimeout bounds one pull attempt. Default 2 minutes.
	PullTimeout time.Duration

	// Resources are the defaults for what neither the request nor the class
	// sets. Defaults: 1 CPU, 512 MiB, 256 pids, 1024 MiB of disk (at most
	// half the memory where the disk quota is memory-backed).
	Resources events.Resources
	// MaxResources caps what a request may ask for; zero fields are uncapped.
	MaxResources events.Resources
	// DiskQuota says how disk_mb is enforced: DiskAuto (the default) uses
	// the storage driver's per-container size where it has one and a
	// read-only root with a tmpfs /work elsewhere; DiskNone refuses disk_mb.
	// See disk.go and docs/backends/docker.md.
	DiskQuota DiskQuota
	// ReadOnlyRoot makes every sandbox's root filesystem read-only (a class
	// can also ask for it), with a writable /work volume and a /tmp tmpfs.
	ReadOnlyRoot bool
	// TmpfsSizeMB is the size of /tmp on a read-only root, of the user's
	// home under a tmpfs disk quota and of /dev/shm. Default 64.
	TmpfsSizeMB int
	// User is the user sandboxes run as when the image has it in its
	// /etc/passwd. Default "1000:1000". An image without that uid runs as its
	// own USER, with a warning when that is root.
	User string
	// WorkDir is the working directory when the image sets none, and the
	// base of relative file paths. Default /work.
	WorkDir string
	// RequireUserNS makes NewBackend fail unless the daemon remaps users
	// (dockerd --userns-remap), so that the sandbox's uid is no host user's.
	RequireUserNS bool
	// Runtime is the OCI runtime for classes that name none ("" = the
	// daemon's default, runc).
	Runtime string

	// Pools are the warm pools, one per class spec.
	Pools []PoolConfig
	// PoolRefillInterval is how often the pool keeper checks the pools besides
	// when a member is taken. Default 5 s.
	PoolRefillInterval time.Duration

	// MaxConcurrentCreates bounds creates in flight on this host (container
	// create+start, including pool refills). Default 8.
	MaxConcurrentCreates int
	// MaxConcurrentExecs bounds execs running on this host. Default 256.
	MaxConcurrentExecs int
	// QueueWait is how long a create or exec waits for a slot before it fails
	// with Overloaded (retryable). Default 10 s.
	QueueWait time.Duration

	// KillGrace bounds how long Exec waits for a killed process's streams to
	// end before it returns anyway. Default 2 s.
	KillGrace time.Duration

	// JanitorInterval is how often the janitor sweeps the host (janitor.go):
	// every sandboxio container of any worker or deployment past its
	// deadline label by JanitorGrace, probe containers older than
	// ProbeMaxAge, idle pool members past their own deadline. At most
	// JanitorBatch removals a sweep. Defaults 30 s, 30 s, 32, 2 min.
	JanitorInterval time.Duration
	JanitorGrace    time.Duration
	JanitorBatch    int
	ProbeMaxAge     time.Duration
	// PoolMemberTTL is an idle pool member's lifetime (its deadline label):
	// the keeper replaces members before it, so that the members of a
	// worker killed for good are removed by any janitor on the host.
	// Default 10 min.
	PoolMemberTTL time.Duration

	// Egress configures network egress allow and allowlist (egress.go).
	Egress EgressConfig

	// Agent says whether sandboxes get sbx-agent, the in-sandbox agent that
	// runs execs and file operations (AgentAuto, the default, AgentOff, or
	// AgentCopy to inject it with the archive API instead of a bind mount).
	Agent AgentMode
	// AgentBinary is a static sbx-agent binary to inject. Empty: built with
	// the Go toolchain at start (a source checkout), else no agent.
	AgentBinary string
	// AllowNoAgent lets the worker start when it finds no agent binary
	// (AgentAuto, AgentCopy): every exec is then a docker exec. Without it
	// such a worker refuses to start and says how to get the agent
	// (SBX_DOCKER_NO_AGENT=1; ADR 33).
	AllowNoAgent bool
	// AgentCacheDir is where a built agent binary goes. Default: the user's
	// cache directory (sandboxio/).
	AgentCacheDir string
	// AgentChannel is how the worker talks to the agents: ChannelAuto (the
	// default) a unix socket where it works (runc on a local daemon, ADR 24),
	// ChannelAttach always the container's attach stream (ADR 14).
	AgentChannel AgentChannel
	// AgentSocketDir holds the agents' per-sandbox socket directories.
	// It must be the same across restarts of a worker. Default:
	// /run/sandboxio/agent for root, else sandboxio-agent-UID in the
	// temporary directory.
	AgentSocketDir string

	// Logger receives the backend's logs. Default: discard.
	Logger *slog.Logger
}

// PullPolicy says whether a missing image is pulled.
type PullPolicy string

// The pull policies.
const (
	PullMissing PullPolicy = "missing"
	PullNever   PullPolicy = "never"
)

// PoolConfig is one warm pool: Size pre-created containers matching a class
// spec (image, runtime, read-only root, resources), network none.
type PoolConfig struct {
	// Class is a name for logs; matching is by the spec fields below.
	Class        string
	Image        string
	Runtime      string
	ReadOnlyRoot bool
	Resources    events.Resources
	Size         int
}

func (c Config) withDefaults() Config {
	if c.DefaultImage == "" {
		c.DefaultImage = "sandboxio/base:latest"
	}
	if c.Pull == "" {
		c.Pull = PullNever
	}
	if len(c.Images) == 0 {
		c.Images = BuiltImages
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = 2 * time.Minute
	}
	if c.Resources.CPUs <= 0 {
		c.Resources.CPUs = 1
	}
	if c.Resources.MemoryMB <= 0 {
		c.Resources.MemoryMB = 512
	}
	if c.Resources.PIDs <= 0 {
		c.Resources.PIDs = 256
	}
	if c.Resources.DiskMB <= 0 {
		c.Resources.DiskMB = 1024
	}
	if c.DiskQuota == "" {
		c.DiskQuota = DiskAuto
	}
	if c.TmpfsSizeMB <= 0 {
		c.TmpfsSizeMB = 64
	}
	if c.User == "" {
		c.User = "1000:1000"
	}
	if c.WorkDir == "" {
		c.WorkDir = "/work"
	}
	if c.PoolRefillInterval <= 0 {
		c.PoolRefillInterval = 5 * time.Second
	}
	if c.MaxConcurrentCreates <= 0 {
		c.MaxConcurrentCreates = 8
	}
	if c.MaxConcurrentExecs <= 0 {
		c.MaxConcurrentExecs = 256
	}
	if c.QueueWait <= 0 {
		c.QueueWait = 10 * time.Second
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 2 * time.Second
	}
	if c.JanitorInterval <= 0 {
		c.JanitorInterval = 30 * time.Second
	}
	if c.JanitorGrace < 0 {
		c.JanitorGrace = 0
	} else if c.JanitorGrace == 0 {
		c.JanitorGrace = 30 * time.Second
	}
	if c.JanitorBatch <= 0 {
		c.JanitorBatch = 32
	}
	if c.ProbeMaxAge <= 0 {
		c.ProbeMaxAge = 2 * time.Minute
	}
	if c.PoolMemberTTL <= 0 {
		c.PoolMemberTTL = 10 * time.Minute
	}
	if c.Agent != AgentOff && c.Agent != AgentCopy {
		c.Agent = AgentAuto
	}
	if c.AgentChannel != ChannelAttach {
		c.AgentChannel = ChannelAuto
	}
	if c.AgentSocketDir == "" {
		c.AgentSocketDir = defaultAgentSocketDir()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
