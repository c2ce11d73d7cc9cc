package dockerworker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxio/sandboxio/services/docker-worker/internal/agent"
)

// The agent's socket channel (ADR 24, amending ADR 14). Where it works (the
// runc runtime on a local daemon with the agent bind-mounted), the worker
// listens on a unix socket in a per-sandbox host directory and the agent
// connects to it, so the protocol's frames no longer pass through dockerd
// and the shim. gVisor (whose sandboxes reach no host socket without
// runsc's --host-uds) and remote daemons keep the attach stream.
//
// The directory is the worker's, never the sandbox's:
//
//	AgentSocketDir/       0700, the worker's user: only it and root reach in
//	  <32 hex>/           0555, the worker's: bind-mounted read-only at /.sbx/run
//	    agent.sock        0666 socket, created by the worker before the container starts
//
// The sandbox sees only the per-sandbox directory, read-only: it cannot
// plant a file, a symlink or another socket there, so the worker never
// resolves a path the sandbox controls. The agent connects again whenever
// its connection ends; a restarted worker (same id, ADR 7) finds the
// directory from the container's label, makes a new socket in it and
// accepts the agent's next connection.

// AgentChannel says how the worker talks to a sandbox's agent.
type AgentChannel string

// The agent channels.
const (
	// ChannelAuto is the socket where it works (runc, a local daemon, the
	// agent bind-mounted, a usable AgentSocketDir), else the attach stream.
	ChannelAuto AgentChannel = "auto"
	// ChannelAttach is always the container's attach stream (ADR 14).
	ChannelAttach AgentChannel = "attach"
)

// The socket's place in a container, and the label naming the sandbox's
// socket directory (its base name under AgentSocketDir).
const (
	agentRunDir     = "/.sbx/run"
	agentSocketName = "agent.sock"
	LabelAgentSock  = "io.sandboxio.agent-socket"
)

// agentAcceptTimeout bounds the wait for the agent's connection, at a start
// and after a worker restart (the agent tries again at most every 100 ms).
const agentAcceptTimeout = 5 * time.Second

// defaultAgentSocketDir is AgentSocketDir's default: a root worker's
// /run/sandboxio/agent, else under the temporary directory by user id.
func defaultAgentSocketDir() string {
	if os.Geteuid() == 0 {
		return "/run/sandboxio/agent"
	}
	return filepath.Join(os.TempDir(), "sandboxio-agent-"+strconv.Itoa(os.Geteuid()))
}

// sockSetup decides once whether the socket channel is usable: the base
// directory exists (made 0700), is a real directory owned by the worker's
// user and open to nobody else. Otherwise sockBase stays "".
func (b *Backend) sockSetup() {
	if b.cfg.AgentChannel == ChannelAttach || b.agentTar != nil || b.agentBin() == "" {
		return
	}
	base := b.cfg.AgentSocketDir
	if err := checkSockBase(base); err != nil {
		b.log.Warn("the agent's socket channel is off: agents use the attach stream", "dir", base, "err", err)
		return
	}
	b.sockBase = base
}

func checkSockBase(base string) error {
	if !filepath.IsAbs(base) {
		return fmt.Errorf("%q is not an absolute path", base)
	}
	// A socket path must fit sockaddr_un (108 bytes with its NUL).
	if len(base)+1+32+1+len(agentSocketName) >= 108 {
		return fmt.Errorf("%q is too long for a socket path", base)
	}
	if err := os.MkdirAll(base, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(base)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%q is not a directory of this user", base)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(base, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// sockFor reports whether a container of this runtime gets the socket
// channel.
func (b *Backend) sockFor(runtime string) bool {
	if b.sockBase == "" || b.sockOff.Load() || b.attachOnly.Load() {
		return false
	}
	return runtime == "" || runtime == "runc"
}

// agentSock is one sandbox's listening socket, open until its agent has
// connected.
type agentSock struct {
	name   string // base name of the per-sandbox directory
	dir    string // its host path
	ln     *net.UnixListener
	passwd bool // the directory holds the sandbox's passwdFile
}

// passwdFile is the sandbox's /etc/passwd in its socket directory.
const passwdFile = "passwd"

// validSockName is a directory name the worker made: 32 lowercase hex.
func validSockName(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newAgentSock makes a fresh per-sandbox directory and its listening
// socket; with passwd, also the sandbox's /etc/passwd (ownuid.go), 0444.
func (b *Backend) newAgentSock(passwd []byte) (*agentSock, error) {
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	s := &agentSock{name: hex.EncodeToString(rnd[:])}
	s.dir = filepath.Join(b.sockBase, s.name)
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("agent socket directory: %w", err)
	}
	if passwd != nil {
		s.passwd = true
		if err := os.WriteFile(filepath.Join(s.dir, passwdFile), passwd, 0o444); err != nil {
			_ = os.RemoveAll(s.dir)
			return nil, fmt.Errorf("sandbox passwd: %w", err)
		}
	}
	if err := s.listen(); err != nil {
		_ = os.RemoveAll(s.dir)
		return nil, err
	}
	return s, nil
}

// reopenAgentSock listens again in an existing per-sandbox directory (a
// restarted worker): the old socket, which nobody listens on any more, is
// replaced by a new one at the same path, where the agent connects next.
func (b *Backend) reopenAgentSock(name string) (*agentSock, error) {
	if !validSockName(name) {
		return nil, fmt.Errorf("agent socket directory %q is not one of this host's", name)
	}
	s := &agentSock{name: name, dir: filepath.Join(b.cfg.AgentSocketDir, name)}
	fi, err := os.Lstat(s.dir)
	if err != nil {
		return nil, fmt.Errorf("agent socket directory: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("agent socket directory %q is not this worker's", s.dir)
	}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(filepath.Join(s.dir, agentSocketName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// listen makes the socket (0666: the sandbox's user, whoever it is, may
// connect) and then closes the directory to writes (0555).
func (s *agentSock) listen() error {
	p := filepath.Join(s.dir, agentSocketName)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return fmt.Errorf("agent socket: %w", err)
	}
	// The socket stays when the listener closes: a restart replaces it.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(p, 0o666); err != nil {
		_ = ln.Close()
		return fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chmod(s.dir, 0o555); err != nil {
		_ = ln.Close()
		return fmt.Errorf("agent socket directory: %w", err)
	}
	s.ln = ln
	return nil
}

// accept waits for the agent's connection and closes the listener: one
// connection per sandbox, whatever else in it tries to connect.
func (s *agentSock) accept(ctx context.Context) (*net.UnixConn, error) {
	defer s.ln.Close()
	deadline := time.Now().Add(agentAcceptTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = s.ln.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = s.ln.SetDeadline(time.Now()) })
	defer stop()
	c, err := s.ln.AcceptUnix()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("the agent did not connect: %w", err)
	}
	// Room for a stream's frames in flight (the kernel's default is about
	// 200 KiB each way).
	_ = c.SetReadBuffer(1 << 20)
	_ = c.SetWriteBuffer(1 << 20)
	return c, nil
}

// dialAgentSock accepts the agent's connection and does the handshake.
func (b *Backend) dialAgentSock(ctx context.Context, s *agentSock) (*agent.Client, error) {
	c, err := s.accept(ctx)
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithTimeout(ctx, agentAcceptTimeout)
	defer cancel()
	return agent.Dial(actx, c, agent.Options{})
}

// close ends the listener (idempotent).
func (s *agentSock) close() {
	if s != nil && s.ln != nil {
		_ = s.ln.Close()
	}
}

// removeSockDir removes a per-sandbox socket directory once its container
// is gone.
func (b *Backend) removeSockDir(name string) {
	if !validSockName(name) {
		return
	}
	dir := filepath.Join(b.cfg.AgentSocketDir, name)
	_ = os.Chmod(dir, 0o755)
	if err := os.RemoveAll(dir); err != nil {
		b.log.Warn("remove agent socket directory", "dir", dir, "err", err)
	}
}

// sweepSockDirs removes the socket directories no container names any more
// (a container removed by the janitor, the pool, another worker of this
// host), older than grace: list is every container with LabelWorker.
func (b *Backend) sweepSockDirs(list []container.Summary, grace time.Duration, now time.Time) {
	if b.sockBase == "" {
		return
	}
	live := make(map[string]bool, len(list))
	for _, c := range list {
		if n := c.Labels[LabelAgentSock]; n != "" {
			live[n] = true
		}
	}
	ents, err := os.ReadDir(b.sockBase)
	if err != nil {
		return
	}
	for _, e := range ents {
		if live[e.Name()] || !validSockName(e.Name()) {
			continue
		}
		if fi, err := e.Info(); err != nil || now.Sub(fi.ModTime()) < grace {
			continue
		}
		b.removeSockDir(e.Name())
	}
}

// withAgentSock points a container's agent at its socket: the directory
// bind-mounted read-only at /.sbx/run, and its name in a label for a
// restarted worker.
func withAgentSock(cfg *container.Config, hc *container.HostConfig, s *agentSock) {
	cfg.Entrypoint = agentEntrypoint(hc, "--connect", agentRunDir+"/"+agentSocketName)
	cfg.OpenStdin = false
	cfg.Labels = maps.Clone(cfg.Labels) // the caller's map serves a retry without the socket
	cfg.Labels[LabelAgentSock] = s.name
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: s.dir, Target: agentRunDir, ReadOnly: true})
	if s.passwd {
		hc.Mounts = append(hc.Mounts, passwdMount(filepath.Join(s.dir, passwdFile)))
	}
}
