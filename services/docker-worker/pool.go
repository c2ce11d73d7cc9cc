package dockerworker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// pool keeps, per configured class spec, idle pre-created containers: hardened
// like any sandbox, network none, labelled io.sandboxio.pool=true and named
// sbx-pool-<random>. A create that matches takes one and renames it
// sbx-<sandbox id>: Docker labels are immutable, so the name is the durable,
// label-free record of the adoption (ListSandboxes and lookups go by it). A
// member is taken once and never returns to the pool: single use.
type pool struct {
	b     *Backend
	kick  chan struct{}
	specs []poolSpec

	mu     sync.Mutex
	idle   map[string][]*member // by shape key
	missed map[string]bool      // pools whose image a create asked for in another shape (logged once)
}

type poolSpec struct {
	cfg   PoolConfig
	shape shape
}

type member struct {
	containerID string
	class       string
	expires     time.Time     // its deadline label
	agent       *agent.Client // connected at fill time: adoption needs no handshake
	hasAgent    bool
	sockName    string // its agent's socket directory, "" for the attach stream
}

func newPool(b *Backend) *pool {
	p := &pool{b: b, kick: make(chan struct{}, 1), idle: make(map[string][]*member), missed: make(map[string]bool)}
	for _, pc := range b.cfg.Pools {
		if pc.Size <= 0 {
			continue
		}
		sh := shape{image: pc.Image, runtime: pc.Runtime, readOnly: pc.ReadOnlyRoot || b.cfg.ReadOnlyRoot}
		if sh.image == "" {
			sh.image = b.cfg.DefaultImage
		}
		img, err := b.imageAllow.check(sh.image)
		if err != nil {
			b.log.Warn("warm pool warms nothing: its image is refused", "pool", pc.Class, "image", sh.image, slog.Any("err", err))
			continue
		}
		if img != sh.image {
			b.log.Info("warm pool image normalised", "pool", pc.Class, "configured", sh.image, "image", img)
		}
		sh.image = img
		if sh.runtime == "" {
			sh.runtime = b.cfg.Runtime
		}
		res := pc.Resources
		sh.resources, _ = b.resolveResources(&res)
		p.specs = append(p.specs, poolSpec{cfg: pc, shape: sh})
	}
	return p
}

// take pops an idle member of the shape, or returns nil. The caller asks for
// the refill (signal) once the claimed sandbox has had its first exec.
func (p *pool) take(key string) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[key]
	if n := len(list); n > 0 {
		m := list[n-1]
		p.idle[key] = list[:n-1]
		return m
	}
	p.noteMiss(key)
	return nil
}

// noteMiss logs, once per pool, a create of a pool's image in a shape no
// pool has (another runtime, read-only root or resources): that pool warms
// containers such creates never take. Called with p.mu held.
func (p *pool) noteMiss(key string) {
	img, _, _ := strings.Cut(key, "|") // a shape key starts with its image
	for _, s := range p.specs {
		k := s.shape.key()
		if k == key {
			return // a pool of this shape, empty for now
		}
		if strings.HasPrefix(k, img+"|") && !p.missed[s.cfg.Class] {
			p.missed[s.cfg.Class] = true
			p.b.log.Warn("a create of a warm pool's image does not fit the pool: it is created cold",
				"pool", s.cfg.Class, "pool_shape", k, "create_shape", key)
		}
	}
}

// claimSettle bounds how long a claimed pool member's housekeeping waits
// for the sandbox's first exec to end (afterFirstExec).
const claimSettle = 100 * time.Millisecond

// afterFirstExec runs fn, once, in the background when the sandbox's first
// exec has ended, or claimSettle after now if none ends before, or at once
// when the backend stops. A warm claim is interactive in milliseconds, and a
// Docker exec or a container start begun at the same moment would take the
// host's CPU from that first exec (the time to interactive).
func (b *Backend) afterFirstExec(sb *sandbox, fn func()) {
	ch := make(chan struct{})
	sb.mu.Lock()
	sb.firstExec = ch
	sb.mu.Unlock()
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTimer(b.claimSettle)
		defer t.Stop()
		select {
		case <-ch:
		case <-t.C:
		case <-b.runDone:
		}
		fn()
	}()
}

// execEnded is called when one of the sandbox's execs has ended.
func (sb *sandbox) execEnded() {
	sb.mu.Lock()
	ch := sb.firstExec
	sb.firstExec = nil
	sb.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (p *pool) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// PoolIdle returns the number of idle members of each pool, by class.
func (b *Backend) PoolIdle() map[string]int {
	out := map[string]int{}
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	for _, s := range b.pool.specs {
		out[s.cfg.Class] = len(b.pool.idle[s.shape.key()])
	}
	return out
}

// run fills the pools until ctx is done: at once, whenever a member is taken,
// and every PoolRefillInterval.
func (p *pool) run(ctx context.Context) {
	if len(p.specs) == 0 {
		return
	}
	t := time.NewTicker(p.b.cfg.PoolRefillInterval)
	defer t.Stop()
	for {
		p.fill(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-t.C:
		}
	}
}

func (p *pool) fill(ctx context.Context) {
	p.retire(ctx)
	for _, s := range p.specs {
		key := s.shape.key()
		for ctx.Err() == nil {
			p.mu.Lock()
			n := len(p.idle[key])
			p.mu.Unlock()
			if n >= s.cfg.Size {
				break
			}
			m, err := p.create(ctx, s)
			if err != nil {
				if ctx.Err() == nil {
					p.b.log.Warn("fill warm pool", "pool", s.cfg.Class, slog.Any("err", err))
				}
				break
			}
			p.mu.Lock()
			p.idle[key] = append(p.idle[key], m)
			p.mu.Unlock()
		}
	}
}

func (p *pool) create(ctx context.Context, s poolSpec) (*member, error) {
	facts, err := p.b.ensureImage(ctx, s.shape.image)
	if err != nil {
		return nil, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	now := time.Now().UTC()
	expires := now.Add(p.b.cfg.PoolMemberTTL)
	// The deadline label is the idle member's own: a janitor removes it once
	// past, whichever worker made it, and the keeper replaces it before.
	labels := map[string]string{
		LabelWorker:   p.b.cfg.WorkerID,
		LabelPool:     "true",
		LabelClass:    s.cfg.Class,
		LabelCreated:  now.Format(time.RFC3339Nano),
		LabelDeadline: expires.Format(time.RFC3339Nano),
	}
	withAgent := p.b.agentBin() != ""
	id, cl, sock, err := p.b.runContainer(ctx, poolNamePrefix+hex.EncodeToString(rnd[:]), s.shape, facts, labels, nil, true, withAgent)
	if err != nil && errors.Is(err, errAgentStart) && ctx.Err() == nil {
		if errors.Is(err, errAgentMount) {
			p.b.disableAgent(err.Error())
		}
		withAgent = false
		id, cl, sock, err = p.b.runContainer(ctx, poolNamePrefix+hex.EncodeToString(rnd[:]), s.shape, facts, labels, nil, true, false)
	}
	if err != nil {
		return nil, err
	}
	if cl != nil {
		p.b.warmUp(ctx, id, cl)
	}
	return &member{containerID: id, class: s.cfg.Class, expires: expires, agent: cl, hasAgent: withAgent, sockName: sock}, nil
}

// warmUpTimeout bounds a pool member's warm-up exec.
const warmUpTimeout = 5 * time.Second

// warmUp runs `true` once through an idle pool member's agent, before any
// tenant has it: the first exec in a fresh container pays for its rootfs's
// first lookups (each container has its own fuse-overlayfs, cold), the
// agent's first fork and its runtime's first growth, ≈ 3 ms of a warm
// claim's time to interactive that the claimed sandbox's first
// exec no longer waits for. The member has no env, no secrets and no tenant
// yet; the outcome does not matter (an image without `true` still warms the
// agent).
func (b *Backend) warmUp(ctx context.Context, containerID string, cl *agent.Client) {
	wctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	if _, err := cl.Exec(wctx, agent.ExecRequest{Argv: []string{"true"}}); err != nil {
		b.log.Debug("warm up a pool member", "container", containerID, slog.Any("err", err))
	}
}

// retire removes idle members close to their deadline label, before any
// janitor would: fill replaces them.
func (p *pool) retire(ctx context.Context) {
	limit := time.Now().Add(min(2*p.b.cfg.PoolRefillInterval, p.b.cfg.PoolMemberTTL/4))
	var old []*member
	p.mu.Lock()
	for key, list := range p.idle {
		keep := list[:0]
		for _, m := range list {
			if m.expires.Before(limit) {
				old = append(old, m)
			} else {
				keep = append(keep, m)
			}
		}
		p.idle[key] = keep
	}
	p.mu.Unlock()
	for _, m := range old {
		if m.agent != nil {
			_ = m.agent.Close()
		}
		p.b.discard(ctx, m.containerID)
	}
}

// removeIdle removes this worker's idle pool members: those in memory and any
// left by an earlier run (a member never adopted is never a sandbox).
func (p *pool) removeIdle(ctx context.Context) error {
	p.mu.Lock()
	for _, list := range p.idle {
		for _, m := range list {
			if m.agent != nil {
				_ = m.agent.Close()
			}
		}
	}
	p.idle = make(map[string][]*member)
	p.mu.Unlock()
	list, err := p.b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelWorker+"="+p.b.cfg.WorkerID), filters.Arg("label", LabelPool+"=true"))})
	if err != nil {
		return fmt.Errorf("list pool members: %w", err)
	}
	var errs []error
	for _, c := range list {
		if sandboxIDFromNames(c.Names) != "" || !hasPoolName(c.Names) {
			continue // adopted: a sandbox, the runtime's to keep or kill
		}
		if err := p.b.removeContainer(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func hasPoolName(names []string) bool {
	for _, n := range names {
		if strings.HasPrefix(strings.TrimPrefix(n, "/"), poolNamePrefix) {
			return true
		}
	}
	return false
}
