package dockerworker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxio/sandboxio/internal/agent/proto"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// AgentMode says whether sandboxes get the in-sandbox agent.
type AgentMode string

// The agent modes.
const (
	// AgentAuto injects sbx-agent into every sandbox where it can: the
	// worker's host must be the daemon's (a bind mount) and a binary must be
	// configured or buildable. Otherwise, and for a sandbox whose agent does
	// not start, execs go through Docker exec and the record says so.
	AgentAuto AgentMode = "auto"
	// AgentOff never injects it: every exec is a Docker exec.
	AgentOff AgentMode = "off"
	// AgentCopy injects it with the archive API (copied into each container
	// before it starts) even when the daemon could bind-mount it. A remote
	// daemon (DOCKER_HOST tcp:// or ssh://) gets the copy under AgentAuto.
	AgentCopy AgentMode = "copy"
)

// Where the agent is in a container, and the label that says it is.
const (
	agentPath  = "/.sbx/sbx-agent"
	LabelAgent = "io.sandboxio.agent"
)

// agentSetup decides, once, whether this backend injects the agent.
func (b *Backend) agentSetup(ctx context.Context) {
	b.agentMu.Lock()
	defer b.agentMu.Unlock()
	switch {
	case b.cfg.Agent == AgentOff:
		b.agentNote = "the operator turned the agent off"
	default:
		p, err := agent.Binary(ctx, b.cfg.AgentBinary, b.cfg.AgentCacheDir)
		if err != nil {
			b.agentNote = "no agent binary: " + err.Error()
			break
		}
		if agentInjection(b.cfg.Agent, b.cfg.Host) == injectCopy {
			// The daemon's host does not have our files: copy the binary in.
			if err := b.loadAgentCopy(ctx, p); err != nil {
				b.agentNote = "the agent cannot be copied into sandboxes: " + err.Error()
				break
			}
		}
		b.agentBinV.Store(&p)
		return
	}
	b.log.Warn("sandboxes run without the agent: execs go through docker exec", "reason", b.agentNote)
}

// agentBin is the agent binary bind-mounted into new sandboxes, "" for none.
func (b *Backend) agentBin() string {
	if p := b.agentBinV.Load(); p != nil {
		return *p
	}
	return ""
}

// disableAgent stops injecting the agent into new sandboxes: the daemon
// could not mount it (a worker in a container, whose binary path is not on
// the daemon's host).
func (b *Backend) disableAgent(reason string) {
	if b.agentBinV.Swap(nil) == nil {
		return
	}
	b.agentMu.Lock()
	b.agentNote = reason
	b.agentMu.Unlock()
	b.log.Warn("the agent binary cannot be mounted into sandboxes: execs go through docker exec from now on",
		"reason", reason)
}

func (b *Backend) agentReason() string {
	b.agentMu.Lock()
	defer b.agentMu.Unlock()
	return b.agentNote
}

// localDaemon reports whether the daemon is reached by a unix socket, so
// shares this host's filesystem.
func localDaemon(host string) bool {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	return host == "" || strings.HasPrefix(host, "unix://")
}

// withAgent makes the agent the container's main process and PID 1, serving
// on its attached stdin/stdout. Not under docker-init (ADR 29): that would be
// a process of the sandbox's uid whose memory the sandbox could write; the
// agent reaps, and makes itself non-dumpable.
func (b *Backend) withAgent(cfg *container.Config, hc *container.HostConfig) {
	noInit := false
	hc.Init = &noInit
	cfg.Entrypoint = agentEntrypoint(hc)
	cfg.Cmd = nil
	cfg.OpenStdin = true
	cfg.StdinOnce = false
	cfg.AttachStdin, cfg.AttachStdout, cfg.AttachStderr = false, false, false
	cfg.Labels[LabelAgent] = "1"
	// The agent starts every process with its own credentials and holds no
	// capability to change them, so it runs as the sandbox's user (ADR 15):
	// the root init of pid1.go is for sandboxes without the agent.
	if u := cfg.Labels[LabelUser]; u != "" {
		cfg.User = u
	}
	if b.agentTar != nil {
		hc.Mounts = append(hc.Mounts, agentCopyMount())
		return
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: b.agentBin(), Target: agentPath, ReadOnly: true})
}

// agentEntrypoint is the agent's command line in a container of hc: serve,
// with Go code on as many processors as the sandbox's CPU limit, rounded up,
// then extra. The Go runtime's own default is at least 2, even under a
// one-CPU limit: two processors taking turns on one CPU cost the agent
// about 29 context switches an exec instead of 21 (ADR 28).
func agentEntrypoint(hc *container.HostConfig, extra ...string) []string {
	args := []string{agentPath, "serve"}
	if n := hc.NanoCPUs; n > 0 {
		args = append(args, "--procs", strconv.FormatInt((n+1e9-1)/1e9, 10))
	}
	return append(args, extra...)
}

// attachAgent attaches to a container's agent and does the handshake.
func (b *Backend) attachAgent(ctx context.Context, containerID string) (*agent.Client, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hj, err := b.cli.ContainerAttach(actx, containerID, container.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	conn := &attachConn{hj: hj.Conn, r: &demux{r: hj.Reader, stderr: &stderrHead{}}}
	c, err := agent.Dial(actx, conn, agent.Options{})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// attachConn is a container attach stream as the agent's byte stream: reads
// are the container's stdout. Of stderr, where only a fatal crash's report
// goes, the first bytes are kept for the death's reason (agentcrash.go).
type attachConn struct {
	hj net.Conn
	r  *demux
}

func (a *attachConn) Read(p []byte) (int, error)         { return a.r.Read(p) }
func (a *attachConn) Write(p []byte) (int, error)        { return a.hj.Write(p) }
func (a *attachConn) Close() error                       { return a.hj.Close() }
func (a *attachConn) SetWriteDeadline(t time.Time) error { return a.hj.SetWriteDeadline(t) }

// demux reads the stdout of Docker's multiplexed attach stream (8-byte
// headers: stream, 0, 0, 0, big-endian length).
type demux struct {
	r      *bufio.Reader
	left   int
	stderr *stderrHead
}

func (d *demux) Read(p []byte) (int, error) {
	for d.left == 0 {
		var h [8]byte
		if _, err := io.ReadFull(d.r, h[:]); err != nil {
			return 0, err
		}
		n := int(binary.BigEndian.Uint32(h[4:]))
		if h[0] == 1 {
			d.left = n
			continue
		}
		if h[0] == 2 && d.stderr != nil {
			k, err := d.stderr.readFrom(d.r, n)
			if err != nil {
				return 0, err
			}
			n -= k
		}
		if _, err := d.r.Discard(n); err != nil {
			return 0, err
		}
	}
	if len(p) > d.left {
		p = p[:d.left]
	}
	n, err := d.r.Read(p)
	d.left -= n
	return n, err
}

// agentOf returns the sandbox's live agent client, or nil when its execs go
// through Docker exec.
func (sb *sandbox) agentOf() *agent.Client {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	c := sb.agent
	if c == nil {
		return nil
	}
	select {
	case <-c.Done():
		return nil
	default:
		return c
	}
}

// agentFailed classifies an error of the sandbox's agent. A protocol
// violation kills the sandbox; an agent that stopped answering sends later
// operations to Docker exec; a container that stopped is gone.
func (b *Backend) agentFailed(ctx context.Context, sb *sandbox, err error) error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		if pe.Kind == proto.ErrInternal {
			return agentInternal(sb.id, pe)
		}
		return err // an operation's own failure, for the caller to classify
	}
	if ctx.Err() != nil && !errors.Is(err, agent.ErrProtocol) && !errors.Is(err, agent.ErrUnavailable) {
		return ctx.Err()
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if errors.Is(err, agent.ErrProtocol) {
		b.killForViolation(kctx, sb, err)
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeAgentProtocol, "sandbox %s: its agent broke the protocol; the sandbox was killed", sb.id), err)
	}
	if sb.gone.Load() {
		// Removed by a Kill, or after the daemon reported it dead: then
		// what the death was judged to be (runsc: an OOM or a crash).
		if d := sb.reportedDeath(); d != nil {
			return fmt.Errorf("%w: %w", d.err, err)
		}
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeSandboxGone, "sandbox %s stopped", sb.id), err)
	}
	if b.agentClosed(err) {
		// The agent's end of its socket closed: its process is gone (a
		// live agent never closes it), and with it the container's main
		// process, before the daemon has noticed. Wait for that.
		b.waitStopped(kctx, sb, 2*time.Second)
	}
	if !b.running(kctx, sb) {
		// The container died under the agent: an OOM (gVisor's runtime is
		// killed whole) is SandboxOOMKilled, as on the Docker exec path.
		if _, derr := b.deathOf(sb); errors.Is(derr, events.ErrSandboxOOMKilled) {
			return fmt.Errorf("%w: %w", derr, err)
		}
		return fmt.Errorf("%w: %w", events.Errorf(events.CodeSandboxGone, "sandbox %s stopped", sb.id), err)
	}
	b.log.Warn("sandbox agent stopped answering: falling back to docker exec", "sandbox", sb.id, slog.Any("err", err))
	return fmt.Errorf("%w: %w", events.Errorf(events.CodeAgentUnavailable, "sandbox %s: its agent stopped answering", sb.id), err)
}

// killForViolation removes the sandbox of an agent that broke the protocol
// and reports its end as a death (the worker's handler marks it gone in the
// registry, with the reason, and closes its records): the daemon's die
// event for this removal is the backend's own, and is not reported. Only
// the first of concurrent callers (the agent's watcher, an operation in
// flight) does it, and none after a Kill.
func (b *Backend) killForViolation(ctx context.Context, sb *sandbox, err error) {
	if !sb.gone.CompareAndSwap(false, true) {
		// Another caller is removing it, or a Kill is: returns once it is
		// gone (a removal in progress is waited for), as the first does.
		_ = b.removeContainer(ctx, sb.containerID)
		return
	}
	b.log.Warn("sandbox agent broke the protocol: killing the sandbox", "sandbox", sb.id, slog.Any("err", err))
	if kerr := b.removeContainer(ctx, sb.containerID); kerr != nil {
		b.log.Error("kill sandbox of a misbehaving agent", "sandbox", sb.id, slog.Any("err", kerr))
	}
	sb.markDead()
	b.reportDeath(sb.id, violationReason(err))
}

// violationReason is the reason recorded for a protocol kill: what the
// client's check found, bounded (it names frame types and stream numbers,
// never a payload).
func violationReason(err error) string {
	const max = 160
	msg := err.Error()
	if len(msg) > max {
		msg = msg[:max]
	}
	return "agent broke the protocol: " + msg
}

// agentInternal is a request the agent failed serving and recovered from
// (a bug in the agent, ADR 29): the sandbox goes on.
func agentInternal(sandboxID string, pe *proto.Error) *events.Error {
	e := events.Errorf(events.CodeAgentInternal, "the sandbox's agent: %s", pe.Message)
	if sandboxID != "" {
		e = e.With("sandbox_id", sandboxID)
	}
	return e
}

// agentClosed reports whether err is the agent's end of the connection
// closing (end of file, reset), not a timeout.
func (b *Backend) agentClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// waitStopped polls, at most for d, until the daemon no longer reports the
// sandbox's container running (or reports it dead).
func (b *Backend) waitStopped(ctx context.Context, sb *sandbox, d time.Duration) {
	deadline := time.Now().Add(d)
	for delay := 2 * time.Millisecond; time.Now().Before(deadline); delay = min(2*delay, 100*time.Millisecond) {
		if !b.running(ctx, sb) {
			return
		}
		select {
		case <-sb.died:
			return
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// fileErr turns an agent's file operation error into an SBX error.
func fileErr(p string, err error) error {
	var pe *proto.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Kind {
	case proto.ErrNotFound:
		return events.Errorf(events.CodeFileNotFound, "no file or directory %q", p).With("field", "path").With("reason", "not_found")
	case proto.ErrSymlink:
		return events.Errorf(events.CodePathIsSymlink, "path %q is a symbolic link; the files API does not follow it", p).With("field", "path")
	case proto.ErrForbidden:
		return events.Errorf(events.CodeForbidden, "path %q is outside the sandbox's filesystem", p).With("field", "path")
	case proto.ErrPermission:
		return events.Errorf(events.CodeForbidden, "the sandbox user may not do this to %q", p).With("field", "path").With("reason", "permission")
	case proto.ErrTooLarge:
		return events.Errorf(events.CodePayloadTooLarge, "%s", pe.Message).With("field", "path")
	case proto.ErrIsDir:
		return events.Errorf(events.CodeInvalidValue, "path %q is a directory", p).With("field", "path")
	case proto.ErrInternal:
		return agentInternal("", pe).With("path", p)
	case proto.ErrNotDir, proto.ErrNotRegular, proto.ErrExists, proto.ErrInvalid:
		return events.Errorf(events.CodeInvalidValue, "path %q: %s", p, pe.Message).With("field", "path")
	}
	return fmt.Errorf("dockerworker: file %q: %w", p, err)
}

// adoptAgent gives a sandbox its agent client (nil: Docker exec) and watches
// it: an agent that breaks the protocol, even while idle, kills its sandbox.
func (b *Backend) adoptAgent(sb *sandbox, cl *agent.Client, hasAgent bool) {
	sb.mu.Lock()
	sb.agent, sb.hasAgent = cl, hasAgent
	if cl == nil && sb.execNote == "" {
		sb.execNote = b.agentReason()
	}
	sb.mu.Unlock()
	if cl == nil {
		return
	}
	b.keepAgentStderr(sb, cl)
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		// Ends with the backend's loops (b.stop), not only with Close: a
		// stopped backend's wg.Wait must not wait for live agents.
		select {
		case <-cl.Done():
		case <-b.runDone:
			return
		}
		if err := cl.Err(); errors.Is(err, agent.ErrProtocol) && !sb.gone.Load() {
			// After the agent's connection ended, on a goroutine the backend waits for: no caller.
			_ = b.agentFailed(context.Background(), sb, err)
		}
	}()
}

// created is the create's answer, with the exec path for the record.
func (b *Backend) created(sb *sandbox, image string, warnings []string) worker.Created {
	out := worker.Created{Image: image, Warnings: warnings, ExecPath: events.ExecPathAgent}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.agent == nil {
		out.ExecPath, out.ExecPathNote = events.ExecPathDockerExec, sb.execNote
	}
	return out
}
