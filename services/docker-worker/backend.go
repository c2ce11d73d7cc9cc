package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"golang.org/x/sync/singleflight"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// Labels on every container the backend creates.
const (
	LabelSandbox  = "io.sandboxio.sandbox"
	LabelWorker   = "io.sandboxio.worker"
	LabelOwner    = "io.sandboxio.owner"
	LabelDeadline = "io.sandboxio.deadline"
	LabelCreated  = "io.sandboxio.created"
	LabelClass    = "io.sandboxio.class"
	LabelPool     = "io.sandboxio.pool"
	// LabelUser is the user the sandbox's processes run as, when its init
	// runs as root (see pid1.go).
	LabelUser = "io.sandboxio.user"
	// LabelMetaPrefix prefixes each metadata key.
	LabelMetaPrefix = "io.sandboxio.meta."
)

// Container names: a sandbox's container is always named namePrefix+id
// (a warm-pool member is renamed to it when adopted); an idle pool member is
// named poolNamePrefix+random.
const (
	namePrefix     = "sbx-"
	poolNamePrefix = "sbx-pool-"
)

// RuntimeRunsc is the gVisor OCI runtime.
const RuntimeRunsc = "runsc"

// Backend runs sandboxes as Docker containers. Create it with NewBackend.
type Backend struct {
	cfg    Config
	log    *slog.Logger
	cli    dockerAPI
	runsc  bool // the daemon has the runsc runtime registered
	disk   DiskQuota
	userns userNS
	// imageAllow is the image allowlist.
	imageAllow *imagePolicy

	// agentBin is the agent binary bind-mounted into sandboxes ("" = no
	// agent, for agentNote's reason).
	agentBinV atomic.Pointer[string] // read with agentBin()
	agentMu   sync.Mutex
	agentNote string // under agentMu
	// agentTar is the agent as a tar stream for the archive API (a daemon
	// that cannot bind-mount it), nil for the bind mount; set once before
	// agentBinV.
	agentTar []byte
	// sockBase is AgentSocketDir when the agent's socket channel is usable
	// (agentsock.go), "" for the attach stream everywhere; set once before
	// the first create. sockOff turns the channel off for later creates (the
	// daemon could not mount the directory); attachOnly makes new sandboxes
	// use the attach stream (the channel benchmarks' A/B).
	sockBase   string
	sockOff    atomic.Bool
	attachOnly atomic.Bool

	createSem *semaphore
	execSem   *semaphore

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by sandbox id
	images    map[string]imageFacts

	uids uidState // the sandboxes' own host uids (ownuid.go)

	pool *pool
	// onDeath and onReap are the runtime's worker.DeathWatcher and
	// worker.Janitor handlers, nil when none.
	onDeath func(sandboxID, reason string)
	onReap  func(worker.Reaped)

	started time.Time // when NewBackend ran

	egress egressState // network allow/allowlist machinery (egress.go)

	restoring singleflight.Group // lookups restoring a sandbox after a restart, by id

	closeOnce sync.Once
	stopped   chan struct{} // closed by Close
	stop      context.CancelFunc
	// runDone is done when the background loops are to end: stop (a crash
	// or Close). Every goroutine counted in wg ends on it or is bounded.
	runDone <-chan struct{}
	wg      sync.WaitGroup

	// claimSettle is claimSettle, or a test's own.
	claimSettle time.Duration
}

// sandbox is what the backend knows of one live sandbox.
type sandbox struct {
	id          string
	containerID string
	// env is injected into every exec: the sandbox's secrets (never put in
	// the container's config) and, for an adopted pool member, its env.
	env []string
	// secretValues are the secret values alone; envRestored says env was
	// read back from the container after a restart.
	secretValues []string
	envRestored  bool
	deadline     time.Time // guarded by mu once the sandbox is registered
	created      time.Time
	fromPool     bool
	// runtime is the container's OCI runtime ("" or runc, runsc).
	runtime string
	gone    atomic.Bool // Kill has begun
	// died is closed when the daemon reports the container dead (not by
	// Kill): running execs end at once with SandboxGone.
	died     chan struct{}
	diedOnce sync.Once
	// death is what a runsc container's death was (an OOM: the host's
	// memory cgroup kills the whole runtime), judged before died is
	// closed, while the container is still there to inspect; read only
	// once died is closed.
	death *deathOutcome
	// judging is set by the die event that judges the death, so that a
	// second event for the same container does not judge it again.
	judging atomic.Bool

	mu    sync.Mutex
	agent *agent.Client // nil: execs go through Docker exec
	// agentStderr is the agent's stderr, kept for a crash's reason
	// (agentcrash.go); nil until the agent is adopted.
	agentStderr *agentStderr
	// hasAgent says the container has the agent binary (for the one-shot
	// helpers), execNote why execs do not go through it.
	hasAgent bool
	execNote string
	// sockName is the agent's socket directory (agentsock.go), "" for the
	// attach stream.
	sockName  string
	procs     map[string]*process
	contexts  map[string]*pyContext // stateful code contexts, by id
	oomSeen   int
	factsRead bool
	workDir   string
	user      string
	// firstExec is closed when the first exec after a warm claim ends
	// (afterFirstExec); nil when nothing waits for it.
	firstExec chan struct{}

	// ctxKnown are the context ids made and not deleted, live or crashed
	// (a crashed one restarts; codecontext.go), under mu.
	ctxKnown map[string]bool
}

var (
	_ worker.Backend    = (*Backend)(nil)
	_ worker.Signaller  = (*Backend)(nil)
	_ worker.FileSystem = (*Backend)(nil)
	_ worker.CodeRunner = (*Backend)(nil)
	_ worker.Lister     = (*Backend)(nil)
	_ worker.HostLister = (*Backend)(nil)
	_ worker.Resizer    = (*Backend)(nil)

	_ worker.CodeContexts = (*Backend)(nil)
)

// NewBackend connects to the Docker daemon, checks that it answers, detects
// the runsc runtime and starts the warm-pool keeper. Close releases it.
func NewBackend(ctx context.Context, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if !events.ValidID(cfg.WorkerID) {
		return nil, fmt.Errorf("dockerworker: worker id %q is not a valid id", cfg.WorkerID)
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("dockerworker: docker client: %w", err)
	}
	b, err := newBackend(ctx, cfg, cli)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return b, nil
}

func newBackend(ctx context.Context, cfg Config, cli dockerAPI) (*Backend, error) {
	log := cfg.Logger.With("service", "docker-worker", "worker", cfg.WorkerID)
	if _, err := cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("dockerworker: ping docker daemon: %w", errors.Join(events.Errorf(events.CodeBackendUnavailable, "docker daemon unreachable"), err))
	}
	info, err := cli.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("dockerworker: docker info: %w", err)
	}
	_, runsc := info.Runtimes[RuntimeRunsc]
	disk, err := detectDiskQuota(ctx, cli, info, cfg, log)
	if err != nil {
		return nil, err
	}
	images, err := imageAllowlist(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Pull != PullNever && cfg.Pull != PullMissing {
		return nil, fmt.Errorf("dockerworker: pull policy %q: want never or missing", cfg.Pull)
	}
	userns, err := detectUserNS(info)
	if err != nil {
		return nil, err
	}
	if cfg.RequireUserNS && !userns.enabled {
		return nil, fmt.Errorf("dockerworker: user namespaces required, but the docker daemon does not remap users (start dockerd with --userns-remap=default; see docs/backends/docker.md)")
	}
	b := &Backend{
		disk:       disk,
		imageAllow: images,
		userns:     userns,
		cfg:        cfg,
		log:        log,
		cli:        cli,
		runsc:      runsc,
		createSem:  newSemaphore(cfg.MaxConcurrentCreates),
		execSem:    newSemaphore(cfg.MaxConcurrentExecs),
		sandboxes:  make(map[string]*sandbox),
		images:     make(map[string]imageFacts),
		started:    time.Now(),
		stopped:    make(chan struct{}),

		claimSettle: claimSettle,
	}
	for _, pc := range cfg.Pools {
		if pc.Runtime == RuntimeRunsc && !runsc {
			return nil, fmt.Errorf("dockerworker: pool %q names runtime runsc, which the daemon does not have", pc.Class)
		}
	}
	if runsc {
		setupGVisorBudget(log, info) // before any runsc container is made
	}
	b.agentSetup(ctx)
	if err := b.requireAgent(); err != nil {
		return nil, err
	}
	if b.egress, err = startEgress(ctx, cfg, cli, info, log); err != nil {
		return nil, err
	}
	log.Info("docker backend ready", "egress_allowlist", b.egress.mgr != nil, "server_version", info.ServerVersion, "runsc", runsc,
		"runsc_egress", b.egress.runscNetRuntime, "runsc_no_egress", b.egress.runscNet,
		"cgroup_version", info.CgroupVersion, "pools", len(cfg.Pools), "storage_driver", info.Driver, "disk_quota", disk, "userns_remap", userns.enabled)
	b.sockSetup()
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	b.stop, b.runDone = stop, runCtx.Done()
	b.pool = newPool(b)
	if err := b.pool.removeIdle(ctx); err != nil {
		log.Warn("remove stale pool members", slog.Any("err", err))
	}
	b.wg.Add(3)
	go func() {
		defer b.wg.Done()
		b.pool.run(runCtx)
	}()
	go func() {
		defer b.wg.Done()
		b.watchDeaths(runCtx)
	}()
	go func() {
		defer b.wg.Done()
		b.runJanitor(runCtx)
	}()
	return b, nil
}

// Info describes the backend: Docker with runc is the container tier.
// It advertises disk_quota only where disk_mb is enforced, and stateful
// code and files.watch where sandboxes get the agent.
func (b *Backend) Info() worker.Info {
	caps := events.Capabilities{events.CapExec, events.CapStream, events.CapFiles,
		events.CapRunCode, events.CapSignal, events.CapStdin, events.CapSetTimeout}
	if b.disk != DiskNone {
		caps = append(caps, events.CapDiskQuota)
	}
	if b.agentBin() != "" {
		caps = append(caps, events.CapStatefulCode, events.CapFilesWatch, events.CapPorts)
	}
	if _, ok := b.cli.(pauser); ok {
		caps = append(caps, events.CapPause, events.CapSnapshot) // runc sandboxes (snapshot.go)
	}
	return worker.Info{Name: "docker", Isolation: events.TierContainer, Capabilities: egressCapabilities(b.egress, caps)}
}

// UserNamespaces reports whether the daemon remaps the sandboxes' users
// into a subordinate range (dockerd --userns-remap).
func (b *Backend) UserNamespaces() bool { return b.userns.enabled }

// DiskQuotaMode is how this backend enforces disk_mb on this host.
func (b *Backend) DiskQuotaMode() DiskQuota { return b.disk }

// RuntimeTier is the isolation tier a class naming runtime gets here, and
// whether this host can run it at all: "" and runc are container, runsc is
// gvisor only when the daemon has the runsc runtime registered.
func (b *Backend) RuntimeTier(runtime string) (events.IsolationTier, bool) {
	switch runtime {
	case "", "runc":
		return events.TierContainer, true
	case RuntimeRunsc:
		return events.TierGVisor, b.runsc
	default:
		return events.TierUnknown, false
	}
}

// RuntimeTiers implements worker.RuntimeTiers: the tier of each container
// runtime this daemon can run, advertised in the worker's lease so the
// router can place classes that name a runtime.
func (b *Backend) RuntimeTiers() map[string]events.IsolationTier {
	tiers := map[string]events.IsolationTier{"runc": events.TierContainer}
	if b.runsc {
		tiers[RuntimeRunsc] = events.TierGVisor
	}
	return tiers
}

// agentClients are the live agent clients of the sandboxes.
func (b *Backend) agentClients() []*agent.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	var clients []*agent.Client
	for _, sb := range b.sandboxes {
		if cl := sb.agentOf(); cl != nil {
			clients = append(clients, cl)
		}
	}
	return clients
}

// Close stops the pool keeper, removes the idle pool members and closes the
// client. Sandboxes are left alone: the runtime kills them (or re-adopts them
// after a restart).
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.stop()
		close(b.stopped)
		for _, cl := range b.agentClients() { // their operations fail; the sandboxes live on
			_ = cl.Close()
		}
		b.wg.Wait()
		// Close takes no context: removing the idle pool is teardown, bounded here.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if e := b.pool.removeIdle(ctx); e != nil {
			b.log.Warn("remove idle pool members", slog.Any("err", e))
		}
		if b.egress.mgr != nil {
			b.egress.mgr.Close()
		}
		err = b.cli.Close()
	})
	return err
}

// ListSandboxes lists the sandboxes of this worker: containers labelled with
// its id, cold ones by their labels, adopted pool members by their name.
func (b *Backend) ListSandboxes(ctx context.Context) ([]worker.Listed, error) {
	return b.listSandboxes(ctx, LabelWorker+"="+b.cfg.WorkerID)
}

// ListHostSandboxes implements worker.HostLister: the sandboxes of every
// worker on this daemon, so that a worker can remove those a worker that
// is gone for good left behind.
func (b *Backend) ListHostSandboxes(ctx context.Context) ([]worker.Listed, error) {
	return b.listSandboxes(ctx, LabelWorker)
}

func (b *Backend) listSandboxes(ctx context.Context, label string) ([]worker.Listed, error) {
	list, err := b.cli.ContainerList(ctx, container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", label))})
	if err != nil {
		return nil, fmt.Errorf("dockerworker: list containers: %w", err)
	}
	var out []worker.Listed
	for _, c := range list {
		id := sandboxIDFromNames(c.Names)
		if id == "" {
			continue // an idle pool member is not a sandbox
		}
		l := worker.Listed{SandboxID: id, WorkerID: c.Labels[LabelWorker], CreatedAt: time.Unix(c.Created, 0).UTC()}
		if t, err := time.Parse(time.RFC3339Nano, c.Labels[LabelCreated]); err == nil {
			l.CreatedAt = t
		}
		if t, err := time.Parse(time.RFC3339Nano, c.Labels[LabelDeadline]); err == nil && c.Labels[LabelSandbox] == id {
			l.Deadline = t
		}
		if sb := b.lookupCached(id); sb != nil {
			if d := sb.currentDeadline(); !d.IsZero() {
				l.Deadline = d
			}
		}
		out = append(out, l)
	}
	return out, nil
}

func sandboxIDFromNames(names []string) string {
	for _, n := range names {
		n = strings.TrimPrefix(n, "/")
		if strings.HasPrefix(n, poolNamePrefix) || strings.HasPrefix(n, probeNamePrefix) || !strings.HasPrefix(n, namePrefix) {
			continue
		}
		if id := strings.TrimPrefix(n, namePrefix); events.ValidID(id) {
			return id
		}
	}
	return ""
}

func (b *Backend) lookupCached(id string) *sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sandboxes[id]
}

// lookup finds a live sandbox: in memory, else (after a restart) by its
// container name. A sandbox with no container is SandboxGone.
//
// Concurrent lookups of one sandbox share one restore: a restore attaches to
// the sandbox's agent, and a second attach would take the agent over from
// the first (its handshake ends the other connection's session).
func (b *Backend) lookup(ctx context.Context, id string) (*sandbox, error) {
	if sb := b.lookupCached(id); sb != nil {
		return sb, nil
	}
	v, err, _ := b.restoring.Do(id, func() (any, error) {
		if sb := b.lookupCached(id); sb != nil {
			return sb, nil
		}
		return b.restore(ctx, id)
	})
	if err != nil {
		return nil, err
	}
	return v.(*sandbox), nil
}

// restore rebuilds a sandbox this worker owns from its container.
func (b *Backend) restore(ctx context.Context, id string) (*sandbox, error) {
	if !events.ValidID(id) {
		return nil, events.Errorf(events.CodeInvalidID, "sandbox id %q is not valid", id)
	}
	c, err := b.cli.ContainerInspect(ctx, namePrefix+id)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s has no container", id)
		}
		return nil, fmt.Errorf("dockerworker: inspect sandbox %s: %w", id, err)
	}
	if c.Config == nil || c.Config.Labels[LabelWorker] != b.cfg.WorkerID {
		return nil, events.Errorf(events.CodeSandboxGone, "sandbox %s belongs to another worker", id)
	}
	if c.State != nil && c.State.Paused {
		// A predecessor died while a snapshot held it frozen: the record
		// still says running (a paused one has no container to restore),
		// so it runs again.
		if p, ok := b.cli.(pauser); ok {
			if err := p.ContainerUnpause(ctx, c.ID); err != nil {
				return nil, fmt.Errorf("dockerworker: thaw sandbox %s: %w", id, err)
			}
		}
	}
	sb := &sandbox{id: id, containerID: c.ID, procs: make(map[string]*process), died: make(chan struct{})}
	if c.HostConfig != nil {
		sb.runtime = c.HostConfig.Runtime
		if sb.runtime == RuntimeRunscNet {
			sb.runtime = RuntimeRunsc // gVisor with its own network stack (egress.go)
		}
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Config.Labels[LabelDeadline]); err == nil && c.Config.Labels[LabelSandbox] == id {
		sb.deadline = t
	}
	sb.hasAgent = c.Config.Labels[LabelAgent] == "1" && c.State != nil && c.State.Running
	sb.sockName = c.Config.Labels[LabelAgentSock]
	b.restoreEnv(ctx, sb)
	if sb.hasAgent {
		var cl *agent.Client
		if name := sb.sockName; name != "" {
			// The socket channel: listen again where the agent connects.
			var s *agentSock
			if s, err = b.reopenAgentSock(name); err == nil {
				cl, err = b.dialAgentSock(ctx, s)
			}
		} else {
			cl, err = b.attachAgent(ctx, c.ID)
		}
		if err == nil {
			b.adoptAgent(sb, cl, true)
		} else {
			sb.execNote = "the agent did not answer after a worker restart: " + err.Error()
			b.log.Warn("re-attach sandbox agent", "sandbox", id, slog.Any("err", err))
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.sandboxes[id]; cur != nil {
		if sb.agent != nil {
			_ = sb.agent.Close()
		}
		return cur, nil
	}
	b.sandboxes[id] = sb
	return sb, nil
}

// Kill removes the sandbox's container and returns once Docker confirms it is
// gone. Killing a sandbox that does not exist is not an error.
func (b *Backend) Kill(ctx context.Context, sandboxID string) error {
	ref := namePrefix + sandboxID
	if sb := b.lookupCached(sandboxID); sb != nil {
		sb.gone.Store(true)
		ref = sb.containerID
	} else if !events.ValidID(sandboxID) {
		return events.Errorf(events.CodeInvalidID, "sandbox id %q is not valid", sandboxID)
	}
	if err := b.removeContainer(ctx, ref); err != nil {
		return fmt.Errorf("dockerworker: kill sandbox %s: %w", sandboxID, err)
	}
	b.detachEgress(ctx, sandboxID)
	if sb := b.lookupCached(sandboxID); sb != nil {
		if sb.sockName != "" {
			b.removeSockDir(sb.sockName)
		}
		b.closeContexts(sb)
		if cl := sb.agentOf(); cl != nil {
			_ = cl.Close()
		}
	}
	b.mu.Lock()
	delete(b.sandboxes, sandboxID)
	b.mu.Unlock()
	b.log.Debug("sandbox killed", "sandbox", sandboxID)
	return nil
}

// removeContainer force-removes a container with its anonymous volumes and
// polls until the daemon no longer knows it (404 = gone).
func (b *Backend) removeContainer(ctx context.Context, ref string) error {
	err := b.cli.ContainerRemove(ctx, ref, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		// A conflict is a removal already in progress: wait for it below.
		return fmt.Errorf("remove container %s: %w", ref, err)
	}
	delay := 5 * time.Millisecond
	for {
		_, err := b.cli.ContainerInspect(ctx, ref)
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		if err == nil && delay > 100*time.Millisecond {
			// Still there long after a forced remove: ask again.
			if err := b.cli.ContainerRemove(ctx, ref, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil &&
				!cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
				return fmt.Errorf("remove container %s: %w", ref, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s not confirmed gone: %w", ref, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}
