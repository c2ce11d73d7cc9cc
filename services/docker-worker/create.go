package dockerworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/go-units"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/egress"
)

// sleepForever is the main process of every sandbox (under docker-init): a
// sleep of the longest time both busybox and coreutils accept.
var sleepForever = []string{"sleep", "2147483647"}

// shape is everything that decides how a container is made, and so whether a
// warm-pool member fits a create.
type shape struct {
	image     string
	runtime   string
	readOnly  bool
	resources events.Resources
	egress    *egress.Attachment // the sandbox's own network (allow, allowlist); not part of key
}

func (s shape) key() string {
	r := s.resources
	return fmt.Sprintf("%s|%s|%t|%g|%d|%d|%d", s.image, s.runtime, s.readOnly, r.CPUs, r.MemoryMB, r.PIDs, r.DiskMB)
}

// resolveResources layers request over class over defaults, field by field,
// and checks the result against MaxResources.
func (b *Backend) resolveResources(layers ...*events.Resources) (events.Resources, error) {
	r := b.cfg.Resources
	asked := false
	for _, l := range layers {
		if l == nil {
			continue
		}
		if l.CPUs > 0 {
			r.CPUs = l.CPUs
		}
		if l.MemoryMB > 0 {
			r.MemoryMB = l.MemoryMB
		}
		if l.PIDs > 0 {
			r.PIDs = l.PIDs
		}
		if l.DiskMB > 0 {
			r.DiskMB, asked = l.DiskMB, true
		}
	}
	m := b.cfg.MaxResources
	switch {
	case m.CPUs > 0 && r.CPUs > m.CPUs:
		return r, events.Errorf(events.CodeInvalidValue, "cpus %g exceeds this worker's maximum %g", r.CPUs, m.CPUs).With("field", "resources.cpus")
	case m.MemoryMB > 0 && r.MemoryMB > m.MemoryMB:
		return r, events.Errorf(events.CodeInvalidValue, "memory_mb %d exceeds this worker's maximum %d", r.MemoryMB, m.MemoryMB).With("field", "resources.memory_mb")
	case m.PIDs > 0 && r.PIDs > m.PIDs:
		return r, events.Errorf(events.CodeInvalidValue, "pids %d exceeds this worker's maximum %d", r.PIDs, m.PIDs).With("field", "resources.pids")
	}
	switch {
	case b.disk == DiskNone:
		r.DiskMB = 0
	case !asked && b.disk == DiskTmpfs:
		// Memory-backed: a default quota leaves half the memory to processes.
		r.DiskMB = min(r.DiskMB, max(r.MemoryMB/2, 1))
	}
	return r, b.checkDisk(r, asked)
}

// Create makes a running, hardened container for the sandbox: from the warm
// pool when one matches, else cold. On failure nothing is left behind.
func (b *Backend) Create(ctx context.Context, spec worker.CreateSpec) (worker.Created, error) {
	if !events.ValidID(spec.SandboxID) {
		return worker.Created{}, events.Errorf(events.CodeInvalidID, "sandbox id %q is not valid", spec.SandboxID)
	}
	sh := shape{image: spec.Spec.Image, runtime: spec.Spec.Runtime, readOnly: spec.Spec.ReadOnlyRoot || b.cfg.ReadOnlyRoot}
	if sh.image == "" {
		sh.image = b.cfg.DefaultImage
	}
	img, err := b.imageAllow.check(sh.image)
	if err != nil {
		return worker.Created{}, err
	}
	sh.image = img
	if sh.runtime == "" {
		sh.runtime = b.cfg.Runtime
	}
	tier, ok := b.RuntimeTier(sh.runtime)
	if !ok {
		return worker.Created{}, events.Errorf(events.CodeIsolationUnavailable, "runtime %q is not registered with this host's docker daemon", sh.runtime)
	}
	if !tier.Satisfies(spec.Spec.RequireIsolation) {
		return worker.Created{}, events.Errorf(events.CodeIsolationUnavailable, "runtime %q gives isolation %s, the class requires %s",
			sh.runtime, tier, spec.Spec.RequireIsolation)
	}
	pol, err := b.egressPolicy(spec.Network, sh.runtime)
	if err != nil {
		return worker.Created{}, err
	}
	res, err := b.resolveResources(spec.Spec.Resources, &spec.Resources)
	if err != nil {
		return worker.Created{}, err
	}
	if sh.runtime == RuntimeRunsc {
		if err := checkRunscPIDs(spec.Spec.Resources, &spec.Resources); err != nil {
			return worker.Created{}, err
		}
	}
	var warnings []string
	if w := b.egressWarning(pol); w != "" {
		warnings = append(warnings, w)
	}
	sh.resources = res

	out, err := b.create(ctx, spec, sh, pol)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, events.ErrImageNotFound) {
			return worker.Created{}, fmt.Errorf("%w: %w", events.Errorf(events.CodeCreateTimeout, "sandbox %s not ready in time", spec.SandboxID), err)
		}
		return worker.Created{}, err
	}
	out.Warnings = append(warnings, out.Warnings...)
	return out, nil
}

func (b *Backend) create(ctx context.Context, spec worker.CreateSpec, sh shape, pol egress.Policy) (worker.Created, error) {
	start := time.Now()
	facts, err := b.ensureImage(ctx, sh.image)
	if err != nil {
		return worker.Created{}, err
	}
	var warnings []string
	if facts.warning != "" {
		warnings = append(warnings, facts.warning)
	}
	sb := &sandbox{id: spec.SandboxID, deadline: spec.Deadline, created: time.Now().UTC(), procs: make(map[string]*process),
		runtime: sh.runtime, died: make(chan struct{})}
	sb.env = envList(spec.Secrets)
	for _, v := range spec.Secrets {
		sb.secretValues = append(sb.secretValues, v)
	}

	if !spec.Network.EgressAllowed() {
		if m := b.pool.take(sh.key()); m != nil {
			err := b.cli.ContainerRename(ctx, m.containerID, namePrefix+spec.SandboxID)
			if err == nil {
				sb.containerID, sb.fromPool, sb.sockName = m.containerID, true, m.sockName
				b.adoptAgent(sb, m.agent, m.hasAgent)
				sb.env = append(envList(spec.Env), sb.env...)
				if err := b.register(sb); err != nil {
					b.pool.signal()
					b.discard(ctx, m.containerID)
					return worker.Created{}, err
				}
				// The claim's housekeeping (a root Docker exec that saves the
				// state, the pool's refill: a container start) waits for the
				// sandbox's first exec, so as not to take the host's CPU from it.
				b.afterFirstExec(sb, func() {
					if !sb.gone.Load() { // killed meanwhile: nothing to save
						b.saveEnv(sb, spec.Secrets)
						b.saveDeadline(sb, spec.Deadline) // its labels are the pool member's
					}
					b.pool.signal()
				})
				b.log.Info("sandbox created", "sandbox", spec.SandboxID, "from_pool", true, "pool", m.class,
					"duration_ms", time.Since(start).Milliseconds())
				c := b.created(sb, sh.image, warnings)
				c.Network = pol.Record()
				return c, nil
			}
			b.pool.signal()
			if m.agent != nil {
				_ = m.agent.Close()
			}
			b.discard(ctx, m.containerID)
			if cerrdefs.IsConflict(err) {
				return worker.Created{}, events.Errorf(events.CodeSandboxExists, "sandbox %s already has a container", spec.SandboxID)
			}
			b.log.Warn("adopt pool member", "sandbox", spec.SandboxID, slog.Any("err", err))
		}
	}

	labels := map[string]string{
		LabelSandbox:  spec.SandboxID,
		LabelWorker:   b.cfg.WorkerID,
		LabelOwner:    spec.Owner,
		LabelDeadline: spec.Deadline.UTC().Format(time.RFC3339Nano),
		LabelCreated:  sb.created.Format(time.RFC3339Nano),
		LabelClass:    spec.Spec.Name,
	}
	for k, v := range spec.Metadata {
		labels[LabelMetaPrefix+k] = v
	}
	if sh.egress, err = b.attachEgress(ctx, spec.SandboxID, pol); err != nil {
		return worker.Created{}, err
	}
	useAgent := b.agentBin() != ""
	id, cl, sock, err := b.runContainer(ctx, namePrefix+spec.SandboxID, sh, facts, labels, envList(spec.Env), !spec.Network.EgressAllowed(), useAgent)
	if err != nil && errors.Is(err, errAgentStart) && ctx.Err() == nil {
		// The image breaks the agent, or the daemon cannot mount it: the
		// sandbox runs without it.
		b.log.Warn("sandbox agent did not start: running without it", "sandbox", spec.SandboxID, slog.Any("err", err))
		sb.execNote = "the agent did not start in this image: " + err.Error()
		if errors.Is(err, errAgentMount) {
			b.disableAgent(err.Error())
			sb.execNote = "the daemon could not mount the agent binary: " + err.Error()
		}
		useAgent = false
		id, cl, sock, err = b.runContainer(ctx, namePrefix+spec.SandboxID, sh, facts, labels, envList(spec.Env), !spec.Network.EgressAllowed(), false)
	}
	if err != nil {
		b.detachEgress(ctx, spec.SandboxID)
		if cerrdefs.IsConflict(err) {
			return worker.Created{}, fmt.Errorf("%w: %w", events.Errorf(events.CodeSandboxExists, "sandbox %s already has a container", spec.SandboxID), err)
		}
		return worker.Created{}, err
	}
	sb.containerID, sb.sockName = id, sock
	b.adoptAgent(sb, cl, useAgent)
	if err := b.register(sb); err != nil {
		if cl != nil {
			_ = cl.Close()
		}
		b.discard(ctx, id)
		b.detachEgress(ctx, spec.SandboxID)
		return worker.Created{}, err
	}
	b.saveEnv(sb, spec.Secrets)
	b.log.Info("sandbox created", "sandbox", spec.SandboxID, "image", sh.image, "runtime", sh.runtime,
		"network", pol.Mode, "exec_path", map[bool]string{true: "agent", false: "docker-exec"}[useAgent],
		"duration_ms", time.Since(start).Milliseconds())
	c := b.created(sb, sh.image, warnings)
	c.Network = pol.Record()
	return c, nil
}

func (b *Backend) register(sb *sandbox) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.sandboxes[sb.id]; ok {
		return events.Errorf(events.CodeSandboxExists, "sandbox %s exists", sb.id)
	}
	b.sandboxes[sb.id] = sb
	return nil
}

// discard removes a container we made but will not use, even when ctx is done.
func (b *Backend) discard(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.removeContainer(rctx, id); err != nil {
		b.log.Error("remove failed container", "container", id, slog.Any("err", err))
	}
}

// runContainer creates and starts one hardened container, within the create
// semaphore, and removes it again if anything fails.
// With withAgent the agent is the container's main process and the
// returned client is connected to it, through its socket (the returned
// socket directory's name, ADR 24) or its attach stream (""); an agent that
// does not answer fails the create with errAgentStart (the container
// removed).
func (b *Backend) runContainer(ctx context.Context, name string, sh shape, facts imageFacts,
	labels map[string]string, env []string, noNetwork, withAgent bool) (string, *agent.Client, string, error) {
	if err := b.createSem.acquire(ctx, b.cfg.QueueWait, "creates"); err != nil {
		return "", nil, "", err
	}
	defer b.createSem.release()
	facts, env, own, err := b.ownUser(ctx, name, sh, facts, env)
	if err != nil {
		return "", nil, "", err
	}
	var sock *agentSock
	if withAgent && b.sockFor(sh.runtime) {
		var passwd []byte
		if own != nil {
			passwd = own.passwd
		}
		if sock, err = b.newAgentSock(passwd); err != nil {
			b.log.Warn("agent socket: using the attach stream", "container", name, "err", err)
		}
	}
	cfg, hc := b.containerConfig(sh, facts, labels, env, noNetwork)
	if withAgent {
		b.withAgent(cfg, hc)
		if sock != nil {
			withAgentSock(cfg, hc, sock)
		}
	}
	c, err := b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	if err != nil && sock != nil && ctx.Err() == nil && cerrdefs.IsInvalidArgument(err) {
		// The daemon cannot mount the socket directory (it is not on the
		// daemon's host): the attach stream from now on.
		b.log.Warn("the daemon cannot mount the agent's socket directory: agents use the attach stream from now on", "err", err)
		b.sockOff.Store(true)
		sock.close()
		b.removeSockDir(sock.name)
		sock = nil
		cfg, hc = b.containerConfig(sh, facts, labels, env, noNetwork)
		b.withAgent(cfg, hc)
		c, err = b.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
	}
	if own != nil {
		// A create whose caller gave up may still be made by the daemon.
		own.release(err == nil || ctx.Err() != nil)
	}
	fail := func(id string) {
		if id != "" {
			b.discard(ctx, id)
		}
		if sock != nil {
			sock.close()
			b.removeSockDir(sock.name)
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			// The daemon may finish a create whose caller gave up: remove
			// it by name (a 404 is fine).
			fail(name)
		} else {
			fail("")
		}
		if withAgent && ctx.Err() == nil && cerrdefs.IsInvalidArgument(err) {
			// The bind source is not on the daemon's host.
			return "", nil, "", fmt.Errorf("dockerworker: create container %s: %w: %w", name, errAgentMount, err)
		}
		return "", nil, "", fmt.Errorf("dockerworker: create container %s: %w", name, err)
	}
	if withAgent && b.agentTar != nil {
		if err := b.copyAgent(ctx, c.ID); err != nil {
			fail(c.ID)
			if ctx.Err() != nil {
				return "", nil, "", ctx.Err()
			}
			return "", nil, "", fmt.Errorf("dockerworker: %w: %w", errAgentStart, err)
		}
	}
	if err := b.giveRoot(ctx, c.ID, own, sock != nil && sock.passwd); err != nil {
		fail(c.ID)
		return "", nil, "", err
	}
	if err := b.cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		fail(c.ID)
		if withAgent && ctx.Err() == nil {
			return "", nil, "", fmt.Errorf("dockerworker: start container %s: %w: %w", name, errAgentStart, err)
		}
		return "", nil, "", fmt.Errorf("dockerworker: start container %s: %w", name, err)
	}
	if !withAgent {
		return c.ID, nil, "", nil
	}
	var cl *agent.Client
	if sock != nil {
		cl, err = b.dialAgentSock(ctx, sock)
	} else {
		cl, err = b.attachAgent(ctx, c.ID)
	}
	if err != nil {
		fail(c.ID)
		if ctx.Err() != nil {
			return "", nil, "", ctx.Err()
		}
		return "", nil, "", fmt.Errorf("dockerworker: container %s: %w: %w", name, errAgentStart, err)
	}
	if sock != nil {
		return c.ID, cl, sock.name, nil
	}
	return c.ID, cl, "", nil
}

// errAgentStart says a container's agent did not start or answer;
// errAgentMount (which is one) that the daemon could not mount it at all.
var (
	errAgentStart = errors.New("the agent did not start")
	errAgentMount = fmt.Errorf("%w: the daemon cannot mount the agent binary", errAgentStart)
)

// containerConfig is the hardened container: see docs/backends/docker.md.
func (b *Backend) containerConfig(sh shape, facts imageFacts, labels map[string]string, env []string, noNetwork bool) (*container.Config, *container.HostConfig) {
	r := sh.resources
	pids := int64(r.PIDs)
	mem := int64(r.MemoryMB) << 20
	yes := true
	cfg := &container.Config{
		Image:           sh.image,
		Entrypoint:      sleepForever,
		Cmd:             nil,
		User:            initUser(facts.user),
		WorkingDir:      facts.workDir,
		Env:             env,
		Labels:          labels,
		NetworkDisabled: noNetwork,
		Hostname:        "sandbox",
	}
	hc := &container.HostConfig{
		NetworkMode:    "bridge",
		Privileged:     false,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges", seccompOpt},
		Init:           &yes,
		IpcMode:        "private",
		ReadonlyRootfs: sh.readOnly,
		Runtime:        sh.runtime,
		LogConfig:      container.LogConfig{Type: "none"},
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Resources: container.Resources{
			Memory:     mem,
			MemorySwap: mem,
			NanoCPUs:   int64(r.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*units.Ulimit{
				{Name: "nofile", Soft: 4096, Hard: 4096},
				{Name: "core", Soft: 0, Hard: 0},
			},
		},
	}
	if noNetwork {
		hc.NetworkMode = "none"
	}
	if sh.runtime == RuntimeRunsc {
		applyGVisorLimits(hc, r)
	}
	if facts.user != "" {
		cfg.Labels = maps.Clone(labels)
		cfg.Labels[LabelUser] = facts.user
	}
	hc.Tmpfs = map[string]string{stateDir: stateTmpfs}
	b.applyDisk(hc, sh, facts)
	b.applyEgress(cfg, hc, sh.egress)
	return cfg, hc
}

func envList(m map[string]string) []string {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}
