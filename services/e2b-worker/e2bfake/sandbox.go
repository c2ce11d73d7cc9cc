package e2bfake

import (
	"github.com/sandboxio/sandboxio/internal/fakejail"

	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// users are the envd users of a fake sandbox and their home directories.
var users = map[string]string{"root": "/root", "user": "/home/user"}

// defaultUser is envd's built-in default user (no /init defaultUser).
const defaultUser = "root"

type sandbox struct {
	srv *Server

	id, templateID, alias string
	token                 string // envdAccessToken; "" = not secure
	metadata, envVars     map[string]string
	allowInternet         *bool
	network               map[string]any
	autoPause             bool
	startedAt             time.Time
	root                  string // host dir standing for "/"

	// guarded by srv.mu
	endAt  time.Time
	state  string
	timer  *time.Timer
	faults *Faults

	gone       chan struct{} // closed when the sandbox is killed, expired or paused; guarded by srv.mu
	goneClosed bool

	procs    *procTable
	watchers *watchHub
	interp   *interpreter
}

func randID(prefix string, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}

func randToken() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) newSandbox(templateID string, secure bool) (*sandbox, error) {
	root, err := s.tempRoot()
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"root", "home/user", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	if jailed() {
		// Processes run chrooted into root: give it the system directories
		// (as mounts inside each process's namespace) and a "/" that every
		// user may traverse.
		if err := fakejail.PrepareRoot(root); err != nil {
			return nil, err
		}
		if err := os.Chmod(root, 0o755); err != nil {
			return nil, err
		}
	}
	if c := credOf("user"); c != nil {
		// As in an E2B template, user owns its home.
		_ = os.Chown(filepath.Join(root, "home/user"), int(c.UID), int(c.GID))
	}
	sb := &sandbox{
		srv: s, id: randID("i", 20), templateID: templateID, root: root,
		startedAt: time.Now().UTC(), state: "running", gone: make(chan struct{}),
	}
	if secure {
		sb.token = randToken()
	}
	sb.procs = newProcTable(sb)
	sb.watchers = &watchHub{}
	sb.interp = newInterpreter(sb)
	return sb, nil
}

// SandboxOptions creates a sandbox directly (bypassing the API), e.g. for
// replaying raw envd traffic.
type SandboxOptions struct {
	TemplateID string
	Timeout    time.Duration // default 5 min
	Secure     bool          // issue an envd access token
	EnvVars    map[string]string
	Metadata   map[string]string
}

// SandboxInfo identifies a sandbox made with CreateSandbox.
type SandboxInfo struct {
	ID              string
	EnvdAccessToken string
	Dir             string // host directory standing for "/"
}

// CreateSandbox creates a running sandbox without going through the API.
func (s *Server) CreateSandbox(o SandboxOptions) (SandboxInfo, error) {
	if o.TemplateID == "" {
		o.TemplateID = "base"
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	sb, err := s.newSandbox(o.TemplateID, o.Secure)
	if err != nil {
		return SandboxInfo{}, err
	}
	sb.envVars, sb.metadata = o.EnvVars, o.Metadata
	s.mu.Lock()
	s.sandboxes[sb.id] = sb
	s.setTimeoutLocked(sb, o.Timeout)
	s.mu.Unlock()
	return SandboxInfo{ID: sb.id, EnvdAccessToken: sb.token, Dir: sb.root}, nil
}

// setTimeoutLocked sets endAt = now + d and (re)arms the expiry timer.
func (s *Server) setTimeoutLocked(sb *sandbox, d time.Duration) {
	sb.endAt = time.Now().UTC().Add(d)
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.timer = time.AfterFunc(d, func() { s.expire(sb) })
}

// expire ends a sandbox at its timeout: paused with autoPause, else killed.
func (s *Server) expire(sb *sandbox) {
	if sb.autoPause {
		s.pause(sb)
		return
	}
	s.kill(sb)
}

func (s *Server) kill(sb *sandbox) bool {
	s.mu.Lock()
	if s.sandboxes[sb.id] != sb {
		s.mu.Unlock()
		return false
	}
	delete(s.sandboxes, sb.id)
	if sb.timer != nil {
		sb.timer.Stop()
	}
	s.mu.Unlock()
	s.log.Debug("sandbox killed", slog.String("sandbox_id", sb.id))
	sb.destroy()
	return true
}

// pause freezes the sandbox's processes (SIGSTOP to their process groups);
// resume continues them. Paused sandboxes answer 502 on the data plane.
func (s *Server) pause(sb *sandbox) bool {
	s.mu.Lock()
	if s.sandboxes[sb.id] != sb || sb.state == "paused" {
		s.mu.Unlock()
		return false
	}
	sb.state = "paused"
	if sb.timer != nil {
		sb.timer.Stop()
	}
	sb.closeGoneLocked()
	sb.gone, sb.goneClosed = make(chan struct{}), false
	s.mu.Unlock()
	sb.procs.signalAll(syscall.SIGSTOP)
	return true
}

func (s *Server) resumeLocked(sb *sandbox, d time.Duration) {
	sb.state = "running"
	s.setTimeoutLocked(sb, d)
	sb.procs.signalAll(syscall.SIGCONT)
}

// goneCh returns the channel closed when the sandbox stops serving.
func (sb *sandbox) goneCh() <-chan struct{} {
	sb.srv.mu.Lock()
	defer sb.srv.mu.Unlock()
	return sb.gone
}

func (sb *sandbox) closeGoneLocked() {
	if !sb.goneClosed {
		close(sb.gone)
		sb.goneClosed = true
	}
}

func (sb *sandbox) destroy() {
	sb.srv.mu.Lock()
	sb.closeGoneLocked()
	sb.srv.mu.Unlock()
	sb.procs.killAll()
	sb.interp.close()
	_ = os.RemoveAll(sb.root)
}

// userIDs are the uid and gid of the envd users inside a jailed sandbox
// (E2B templates' user is uid 1000).
var userIDs = map[string]fakejail.Cred{"root": {UID: 0, GID: 0}, "user": {UID: 1000, GID: 1000}}

// jailed reports whether processes run chrooted into the sandbox's root
// (see internal/fakejail), so that they and the files API see the same
// paths.
func jailed() bool { return !fakejail.HostView(fakejail.Detect()) }

// credOf is the credential a process of user runs with, nil when the fake
// cannot switch users (not root, or no jail): then every process is the
// fake's own user.
func credOf(user string) *fakejail.Cred {
	c, ok := userIDs[user]
	if !ok || c.UID == 0 || fakejail.Detect() != fakejail.Chroot || os.Geteuid() != 0 {
		return nil
	}
	return &c
}

// chownTo gives a file the API created to the requesting user, as envd
// does (a no-op when the fake cannot switch users).
func chownTo(host, user string) {
	if c := credOf(user); c != nil {
		_ = os.Lchown(host, int(c.UID), int(c.GID))
	}
}

// hostPath maps a sandbox path to the host. Relative paths resolve against
// the user's home and "~" expands to it, as in envd.
func (sb *sandbox) hostPath(p, user string) (sandboxPath, host string) {
	home := users[user]
	if home == "" {
		home = users[defaultUser]
	}
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home, p[2:])
	case !path.IsAbs(p):
		p = path.Join(home, p)
	}
	p = path.Clean(p)
	return p, filepath.Join(sb.root, filepath.FromSlash(p))
}

// sandboxPath maps a host path back into the sandbox.
func (sb *sandbox) sandboxPath(host string) string {
	rel, err := filepath.Rel(sb.root, host)
	if err != nil || strings.HasPrefix(rel, "..") {
		return host
	}
	return "/" + filepath.ToSlash(rel)
}

// scrub replaces host paths in a message with sandbox paths.
func (sb *sandbox) scrub(msg string) string { return strings.ReplaceAll(msg, sb.root, "") }
