package e2bworker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/pkg/worker/backendkit"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/e2bapi"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/envd"
	"github.com/sandboxio/sandboxio/services/e2b-worker/internal/interpreter"
)

// Metadata keys set on every E2B sandbox the backend creates (E2B metadata
// is the counterpart of Docker labels).
const (
	MetaSandbox  = "io.sandboxio.sandbox"
	MetaWorker   = "io.sandboxio.worker"
	MetaOwner    = "io.sandboxio.owner"
	MetaDeadline = "io.sandboxio.deadline"
	MetaClass    = "io.sandboxio.class"
	// MetaUserPrefix prefixes each key of the request's metadata.
	MetaUserPrefix = "io.sandboxio.meta."
)

// AllTraffic is the CIDR E2B's SDKs call ALL_TRAFFIC: in network.denyOut it
// denies every destination that network.allowOut does not allow.
const AllTraffic = "0.0.0.0/0"

// Backend runs sandboxes on E2B. Create it with NewBackend.
type Backend struct {
	cfg  Config
	log  *slog.Logger
	api  *e2bapi.Client
	data *http.Client

	boxes backendkit.Handles[*box] // by sandbox id

	wg        sync.WaitGroup // stdin pumps, cleanups
	stop      chan struct{}  // closed by Close
	closeOnce sync.Once
}

// box is what the backend knows of one E2B sandbox.
type box struct {
	id       string // sandboxio id
	e2bID    string
	template string
	envd     *envd.Client
	interp   *interpreter.Client

	mu       sync.Mutex
	contexts map[string]string // request context_id → interpreter context id
	pids     map[string]uint32 // running exec's process id → its envd PID
}

// setPID records (pid > 0) or forgets the envd PID of a running exec.
func (bx *box) setPID(processID string, pid uint32) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if pid == 0 {
		delete(bx.pids, processID)
		return
	}
	if bx.pids == nil {
		bx.pids = make(map[string]uint32)
	}
	bx.pids[processID] = pid
}

func (bx *box) pid(processID string) uint32 {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	return bx.pids[processID]
}

var (
	_ worker.Backend       = (*Backend)(nil)
	_ worker.Signaller     = (*Backend)(nil)
	_ worker.FileSystem    = (*Backend)(nil)
	_ worker.CodeRunner    = (*Backend)(nil)
	_ worker.TimeoutSetter = (*Backend)(nil)
	_ worker.Lister        = (*Backend)(nil)

	_ worker.Resizer      = (*Backend)(nil)
	_ worker.CodeContexts = (*Backend)(nil)
	_ worker.Reattacher   = (*Backend)(nil)
)

// NewBackend returns a Backend. It fails when the API key is missing or
// rejected (a list call checks it); other failures of that check are only
// logged, so a worker can start while E2B has a hiccup.
func NewBackend(ctx context.Context, cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if cfg.E2B.APIKey == "" {
		return nil, fmt.Errorf("e2bworker: %s is not set: the E2B backend needs an API key", e2bapi.EnvAPIKey)
	}
	if !events.ValidID(cfg.WorkerID) {
		return nil, fmt.Errorf("e2bworker: worker id %q is not a valid id", cfg.WorkerID)
	}
	log := cfg.Logger.With("service", "e2b-worker", "worker_id", cfg.WorkerID)
	apiCfg := cfg.E2B
	if apiCfg.HTTPClient == nil {
		apiCfg.HTTPClient = &http.Client{Timeout: cfg.RequestTimeout}
	}
	if apiCfg.Logger == nil {
		apiCfg.Logger = log
	}
	api, err := e2bapi.New(apiCfg)
	if err != nil {
		return nil, fmt.Errorf("e2bworker: %w", err)
	}
	data := cfg.HTTPClient
	if data == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DisableCompression = true
		tr.MaxIdleConnsPerHost = 64
		tr.ResponseHeaderTimeout = cfg.RequestTimeout
		data = &http.Client{Transport: tr}
	}
	b := &Backend{cfg: cfg, log: log, api: api, data: data, stop: make(chan struct{})}
	pctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	if _, err := api.List(pctx, e2bapi.ListOptions{Metadata: map[string]string{MetaWorker: cfg.WorkerID}, Limit: 1}); err != nil {
		if errors.Is(err, e2bapi.ErrUnauthorized) {
			return nil, fmt.Errorf("e2bworker: the E2B API rejected %s: %w", e2bapi.EnvAPIKey, err)
		}
		log.Warn("e2b api check failed", slog.Any("err", err))
	}
	log.Info("e2b backend ready", slog.Any("e2b", cfg.E2B), "template", cfg.Template, "code_interpreter", cfg.CodeInterpreter)
	return b, nil
}

// Close stops the backend's background work (stdin pumps, cleanups of
// failed creates) and waits for it. It does not kill sandboxes: the worker
// runtime does that when asked to.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
	return nil
}

// Info implements worker.Backend.
func (b *Backend) Info() worker.Info {
	caps := events.Capabilities{
		events.CapExec, events.CapStream, events.CapFiles, events.CapSignal, events.CapStdin,
		events.CapSetTimeout, events.CapNetworkAllowlist, events.CapFilesWatch,
	}
	if b.cfg.CodeInterpreter {
		caps = append(caps, events.CapRunCode, events.CapStatefulCode)
	}
	return worker.Info{Name: "e2b", Isolation: events.TierMicroVM, Capabilities: caps}
}

// E2BSandboxID returns the E2B sandbox id behind a sandboxio sandbox this
// backend holds (for operators and tests).
func (b *Backend) E2BSandboxID(sandboxID string) (string, bool) {
	bx, ok := b.boxes.Get(sandboxID)
	if !ok {
		return "", false
	}
	return bx.e2bID, true
}

// ceilSeconds rounds a lifetime up to whole seconds (at least 1), as the SDKs.
func ceilSeconds(d time.Duration) time.Duration {
	s := math.Ceil(d.Seconds())
	if s < 1 {
		s = 1
	}
	return time.Duration(s) * time.Second
}

// networkFor maps a network policy onto E2B's create fields:
//   - deny (default): allow_internet_access false (E2B: the same as
//     network.denyOut [0.0.0.0/0]);
//   - allow with no list: allow_internet_access true, no network rules;
//   - allow with a list: network.denyOut [0.0.0.0/0] and network.allowOut
//     the list (hosts, IPs, CIDRs; allow rules win over deny rules), with
//     allow_internet_access true as the SDKs send it for this combination.
func networkFor(p events.NetworkPolicy) (allowInternet bool, nw *e2bapi.NetworkConfig) {
	if !p.EgressAllowed() {
		return false, nil
	}
	if len(p.Allow) == 0 {
		return true, nil
	}
	return true, &e2bapi.NetworkConfig{AllowOut: append([]string(nil), p.Allow...), DenyOut: []string{AllTraffic}}
}

// metadataFor builds the E2B metadata of a sandbox. Secrets never go there.
func metadataFor(spec worker.CreateSpec) map[string]string {
	md := make(map[string]string, len(spec.Metadata)+5)
	for k, v := range spec.Metadata {
		md[MetaUserPrefix+k] = v
	}
	md[MetaSandbox] = spec.SandboxID
	md[MetaWorker] = spec.WorkerID
	md[MetaDeadline] = spec.Deadline.UTC().Format(time.RFC3339)
	if spec.Owner != "" {
		md[MetaOwner] = spec.Owner
	}
	if spec.Spec.Name != "" {
		md[MetaClass] = spec.Spec.Name
	}
	return md
}

// Create implements worker.Backend: POST /sandboxes.
func (b *Backend) Create(ctx context.Context, spec worker.CreateSpec) (worker.Created, error) {
	template := spec.Spec.Template
	if template == "" {
		template = b.cfg.Template
	}
	if spec.Spec.Image != "" && spec.Spec.Template == "" {
		template = spec.Spec.Image
	}
	left := time.Until(spec.Deadline)
	if left <= 0 {
		return worker.Created{}, events.Errorf(events.CodeInvalidValue, "the sandbox deadline has already passed").With("field", "timeout_s")
	}
	var warnings []string
	if r := spec.Resources; r.CPUs > 0 || r.MemoryMB > 0 || r.PIDs > 0 || r.DiskMB > 0 {
		warnings = append(warnings, "resources are fixed by the E2B template "+template+"; the requested resources were not applied")
	}
	env := make(map[string]string, len(spec.Env)+len(spec.Secrets))
	for k, v := range spec.Env {
		env[k] = v
	}
	for k, v := range spec.Secrets {
		env[k] = v
	}
	allowInternet, nw := networkFor(spec.Network)
	secure := true
	req := e2bapi.CreateRequest{
		TemplateID: template, Timeout: ceilSeconds(left), Metadata: metadataFor(spec), EnvVars: env,
		Secure: &secure, AllowInternetAccess: &allowInternet, Network: nw,
	}
	if len(env) == 0 {
		req.EnvVars = nil
	}
	sb, err := b.api.Create(ctx, req)
	if err != nil {
		// The request may have reached E2B (a timeout, a dropped answer):
		// make sure nothing is left behind.
		if !errors.Is(err, e2bapi.ErrBadRequest) && !errors.Is(err, e2bapi.ErrUnauthorized) && !errors.Is(err, e2bapi.ErrRateLimited) {
			b.cleanupAfterCreate(spec.SandboxID)
		}
		return worker.Created{}, createError(ctx, template, err)
	}
	bx, err := b.newBox(spec.SandboxID, template, sb.SandboxID, sb.EnvdAccessToken, sb.Domain, sb.TrafficAccessToken)
	if err != nil {
		_, _ = b.api.Kill(context.WithoutCancel(ctx), sb.SandboxID)
		return worker.Created{}, err
	}
	b.boxes.Put(spec.SandboxID, bx)
	b.log.Info("sandbox created", "sandbox_id", spec.SandboxID, "e2b_sandbox_id", sb.SandboxID, "template", template,
		"egress", spec.Network.Egress, "allow_count", len(spec.Network.Allow))
	return worker.Created{Image: "e2b:" + template, Warnings: warnings}, nil
}

func (b *Backend) newBox(id, template, e2bID, token, domain, trafficToken string) (*box, error) {
	cfg := b.api.Config()
	ec, err := envd.New(envd.Config{
		BaseURL: cfg.EnvdURL(e2bID, domain), SandboxID: e2bID, AccessToken: token, User: b.cfg.User,
		HTTPClient: b.data, Logger: b.log, KeepaliveInterval: b.cfg.KeepaliveInterval, StallGrace: b.cfg.StallGrace,
		HealthTimeout: min(b.cfg.RequestTimeout, 10*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("e2bworker: envd client: %w", err)
	}
	ic, err := interpreter.New(interpreter.Config{
		BaseURL: cfg.PortURL(interpreter.Port, e2bID, domain), SandboxID: e2bID, AccessToken: token,
		TrafficAccessToken: trafficToken, HTTPClient: b.data, Logger: b.log,
	})
	if err != nil {
		return nil, fmt.Errorf("e2bworker: interpreter client: %w", err)
	}
	return &box{id: id, e2bID: e2bID, template: template, envd: ec, interp: ic, contexts: make(map[string]string)}, nil
}

// findE2B finds the E2B sandbox carrying a sandboxio id in its metadata.
func (b *Backend) findE2B(ctx context.Context, sandboxID string) ([]e2bapi.SandboxDetail, error) {
	return b.api.ListAll(ctx, e2bapi.ListOptions{Metadata: map[string]string{MetaSandbox: sandboxID}})
}

// cleanupDelays are the waits between the attempts of cleanupAfterCreate.
var cleanupDelays = []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// cleanupAfterCreate kills, in the background, whatever E2B sandbox carries
// sandboxID after a create whose outcome is unknown (a timeout, a dropped
// answer): E2B may finish creating it after the client gave up. It looks
// for it a few times over about 15 s and stops once it killed one; E2B's own
// timeout and the reaper's reconciler are the backstops.
func (b *Backend) cleanupAfterCreate(sandboxID string) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for _, d := range cleanupDelays {
			t := time.NewTimer(d)
			select {
			case <-b.stop:
				t.Stop()
				return
			case <-t.C:
			}
			if b.killByMetadata(sandboxID) {
				return
			}
		}
	}()
}

// killByMetadata kills whatever E2B sandbox carries sandboxID (bounded) and
// reports whether it killed one.
func (b *Backend) killByMetadata(sandboxID string) bool {
	// Cleanup after an abandoned create, on a goroutine the backend waits for: its own bound, no caller.
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
	defer cancel()
	found, err := b.findE2B(ctx, sandboxID)
	if err != nil {
		b.log.Warn("cleanup after failed create could not list", "sandbox_id", sandboxID, slog.Any("err", err))
		return false
	}
	killed := false
	for _, d := range found {
		if _, err := b.api.Kill(ctx, d.SandboxID); err != nil {
			b.log.Warn("cleanup after failed create could not kill", "sandbox_id", sandboxID, "e2b_sandbox_id", d.SandboxID, slog.Any("err", err))
			continue
		}
		b.log.Info("sandbox of a failed create killed", "sandbox_id", sandboxID, "e2b_sandbox_id", d.SandboxID)
		killed = true
	}
	return killed
}

// lookup returns the box of a sandbox. A sandbox this process did not create
// (a worker restart) is found by its metadata and adopted.
func (b *Backend) lookup(ctx context.Context, sandboxID string) (*box, error) {
	return b.boxes.Lookup(ctx, sandboxID, b.cfg.RequestTimeout, func(ctx context.Context) (*box, error) {
		found, err := b.findE2B(ctx, sandboxID)
		if err != nil {
			return nil, sbxError(err, "find sandbox")
		}
		for _, d := range found {
			if d.Metadata[MetaWorker] != b.cfg.WorkerID || d.State != e2bapi.StateRunning {
				continue
			}
			full, err := b.api.Get(ctx, d.SandboxID)
			if err != nil {
				return nil, sbxError(err, "get sandbox")
			}
			return b.newBox(sandboxID, full.TemplateID, full.SandboxID, full.EnvdAccessToken, full.Domain, "")
		}
		return nil, events.Errorf(events.CodeSandboxGone, "no E2B sandbox holds sandbox %s", sandboxID)
	}, nil)
}

// Kill implements worker.Backend: DELETE /sandboxes/{id}; 404 means it is
// already gone.
func (b *Backend) Kill(ctx context.Context, sandboxID string) error {
	var ids []string
	if bx, ok := b.boxes.Get(sandboxID); ok {
		ids = []string{bx.e2bID}
	} else {
		found, err := b.findE2B(ctx, sandboxID)
		if err != nil {
			return sbxError(err, "find sandbox")
		}
		for _, d := range found {
			ids = append(ids, d.SandboxID)
		}
	}
	for _, id := range ids {
		if _, err := b.api.Kill(ctx, id); err != nil {
			return sbxError(err, "kill sandbox")
		}
	}
	b.boxes.Delete(sandboxID)
	b.log.Info("sandbox killed", "sandbox_id", sandboxID)
	return nil
}

// SetTimeout implements worker.TimeoutSetter: POST /sandboxes/{id}/timeout
// with the seconds left until the new deadline (E2B's TTL becomes now+that,
// so it can also shorten the lifetime).
func (b *Backend) SetTimeout(ctx context.Context, sandboxID string, deadline time.Time) error {
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if err := b.api.SetTimeout(ctx, bx.e2bID, ceilSeconds(time.Until(deadline))); err != nil {
		return sbxError(err, "set timeout")
	}
	return nil
}

// ListSandboxes implements worker.Lister: the running E2B sandboxes whose
// metadata names this worker.
func (b *Backend) ListSandboxes(ctx context.Context) ([]worker.Listed, error) {
	all, err := b.api.ListAll(ctx, e2bapi.ListOptions{Metadata: map[string]string{MetaWorker: b.cfg.WorkerID}})
	if err != nil {
		return nil, sbxError(err, "list sandboxes")
	}
	out := make([]worker.Listed, 0, len(all))
	for _, d := range all {
		id := d.Metadata[MetaSandbox]
		if id == "" {
			continue
		}
		out = append(out, worker.Listed{SandboxID: id, WorkerID: d.Metadata[MetaWorker], CreatedAt: d.StartedAt, Deadline: d.EndAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SandboxID < out[j].SandboxID })
	return out, nil
}

// Resize implements worker.Resizer: process.Update of the process's PTY.
// A process without a terminal, or one not (yet, or any more) running, is
// PTYNotFound.
func (b *Backend) Resize(ctx context.Context, sandboxID, processID string, rows, cols int) error {
	if rows <= 0 || cols <= 0 || rows > events.MaxWindow || cols > events.MaxWindow {
		return events.Errorf(events.CodeInvalidValue, "window size %dx%d out of range", rows, cols).With("field", "rows")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	err = bx.envd.Resize(cctx, envd.Selector{Tag: processTag(processID)}, envd.PTYSize{Cols: uint32(cols), Rows: uint32(rows)})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, envd.ErrNotFound) || strings.Contains(envdMessage(err), "tty not assigned"):
		return wrap(events.Errorf(events.CodePTYNotFound, "no process %s on a terminal in sandbox %s", processID, sandboxID).With("process_id", processID), err)
	}
	return sbxError(err, "resize")
}

// processTag is the envd tag of a process: it lets the backend signal a
// process before its start event arrived.
func processTag(processID string) string { return "sbx-" + processID }

// Exec implements worker.Backend: process.Start with the argv as given (no
// shell), streamed to p's writers.
func (b *Backend) Exec(ctx context.Context, sandboxID string, p worker.Process) (worker.ExitStatus, error) {
	if len(p.Cmd) == 0 || p.Cmd[0] == "" {
		return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "empty command")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.ExitStatus{}, err
	}
	tag := processTag(p.ID)
	envs := make(map[string]string, len(p.Env)+1)
	maps.Copy(envs, p.Env)
	envs[EnvProcessID] = p.ID
	opts := envd.RunOptions{Argv: p.Cmd, Envs: envs, Cwd: p.Cwd, Tag: tag, Stdin: p.Stdin != nil, Stdout: p.Stdout, Stderr: p.Stderr}
	if p.TTY {
		// A terminal: stderr on it, stdin is its keyboard.
		opts.PTY = &envd.PTYSize{Cols: uint32(cmp.Or(p.Cols, 80)), Rows: uint32(cmp.Or(p.Rows, 24))}
	}
	pumpCtx, stopPump := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPump()
	defer bx.setPID(p.ID, 0)
	opts.OnStart = func(pid uint32) {
		bx.setPID(p.ID, pid)
		if p.Stdin == nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pumpStdin(pumpCtx, bx, envd.Selector{PID: pid}, p.Stdin, p.TTY)
		}()
	}
	res, err := bx.envd.Run(ctx, "", opts)
	if ctx.Err() != nil {
		b.killProcess(ctx, bx, p.ID, res)
		return worker.ExitStatus{Code: 137, Signal: "KILL"}, ctx.Err()
	}
	if err != nil {
		if res != nil && !errors.Is(err, envd.ErrSandboxGone) {
			// The stream broke but the process may still run: it must not
			// outlive its exec.
			b.killProcess(ctx, bx, p.ID, res)
		}
		if errors.Is(err, envd.ErrInvalidArgument) {
			return worker.ExitStatus{}, wrap(events.Errorf(events.CodeExecFailed, "cannot start %q: %s", p.Cmd[0], envdMessage(err)), err)
		}
		return worker.ExitStatus{}, sbxError(err, "exec")
	}
	st := exitStatus(res.Exit)
	if st.Code == 127 && st.Signal == "" {
		if missing := b.commandMissing(ctx, bx, p); missing {
			return st, events.Errorf(events.CodeExecFailed, "%s: command not found", p.Cmd[0])
		}
	}
	return st, nil
}

// commandMissing tells a missing command from a command that exited 127
// (envd runs every command through /bin/sh, which reports both as 127): it
// asks the sandbox's shell whether argv[0] resolves, with the exec's env and
// working directory.
func (b *Backend) commandMissing(ctx context.Context, bx *box, p worker.Process) bool {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	const probe = `case $1 in */*) [ -f "$1" ] && [ -x "$1" ] ;; *) command -v "$1" >/dev/null 2>&1 ;; esac`
	res, err := bx.envd.Run(ctx, "", envd.RunOptions{Argv: []string{"/bin/sh", "-c", probe, "sh", p.Cmd[0]}, Envs: p.Env, Cwd: p.Cwd})
	if err != nil || res.Exit == nil {
		return false
	}
	return res.Exit.Exited && res.Exit.ExitCode != 0
}

// pumpStdin copies r to the process's stdin, then closes it.
func (b *Backend) pumpStdin(ctx context.Context, bx *box, sel envd.Selector, r io.Reader, pty bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
			serr := bx.envd.SendInput(cctx, sel, append([]byte(nil), buf[:n]...), pty)
			cancel()
			if serr != nil {
				if ctx.Err() == nil && !errors.Is(serr, envd.ErrNotFound) {
					b.log.Debug("stdin not delivered", "sandbox_id", bx.id, slog.Any("err", serr))
				}
				return
			}
		}
		if err != nil {
			if ctx.Err() != nil || pty {
				// A terminal stays open to the end of its process (envd
				// refuses to close a PTY's input), as on Docker.
				return
			}
			cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
			_ = bx.envd.CloseStdin(cctx, sel)
			cancel()
			return
		}
	}
}

// EnvProcessID marks an exec's process tree: every process the backend
// starts carries EnvProcessID=<process id> in its environment, and its
// children inherit it (a daemonised child that left the process group and
// was reparented included), as on Docker (internal/proctree).
const EnvProcessID = "SBX_PROCESS_ID"

// killTreeScript kills, inside the sandbox, every process whose environment
// carries the mark $1=$2: envd's SendSignal signals the process it started
// alone, so its children would outlive a KILL. The tree is frozen with
// SIGSTOP until no new member appears (a fork loop cannot outrun it), then
// killed, and killed again until none is left. It uses only a POSIX shell,
// GNU/busybox grep -z and /proc, and runs as the sandbox's user, who owns
// the processes it kills. Exit 0: none left.
const killTreeScript = `m="$1=$2"; stopped=" "
scan() {
	found=
	for f in $(grep -lsxzF -- "$m" /proc/[0-9]*/environ 2>/dev/null); do
		p=${f#/proc/}; p=${p%/environ}
		[ "$p" = "$$" ] || found="$found $p"
	done
}
i=0
while [ $i -lt 20 ]; do
	i=$((i+1)); scan; grew=
	for p in $found; do
		case $stopped in
		*" $p "*) ;;
		*) kill -STOP "$p" 2>/dev/null; stopped="$stopped$p "; grew=1 ;;
		esac
	done
	[ -n "$grew" ] || break
done
[ "$stopped" = " " ] || kill -KILL $stopped 2>/dev/null
i=0
while [ $i -lt 20 ]; do
	i=$((i+1)); scan
	[ -n "$found" ] || exit 0
	kill -KILL $found 2>/dev/null
done
exit 1`

// termGroupScript sends SIGTERM to every process that carries the mark $1=$2
// and is in the process group of PID $3 (the exec's leader, which carries
// the mark too): what a terminal's signal to the foreground group reaches.
// A marked process that left the group (setsid, a daemon) is not signalled,
// as on Docker; a KILL reaches it (killTreeScript). Exit 0: the leader was
// signalled; 3: it is gone.
const termGroupScript = `m="$1=$2"; leader=$3; hit=3
pgrp() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo "$3"; }
pg=$(pgrp "$leader") || exit 3
for f in $(grep -lsxzF -- "$m" /proc/[0-9]*/environ 2>/dev/null); do
	p=${f#/proc/}; p=${p%/environ}
	[ "$p" = "$$" ] && continue
	[ "$(pgrp "$p")" = "$pg" ] || continue
	if kill -TERM "$p" 2>/dev/null && [ "$p" = "$leader" ]; then hit=0; fi
done
exit $hit`

// termGroup sends SIGTERM to a running exec's process group
// (termGroupScript), bounded by KillTimeout. It reports whether the leader
// got it; if not, the caller signals through envd, which knows whether the
// process still runs.
func (b *Backend) termGroup(ctx context.Context, bx *box, processID string) bool {
	pid := bx.pid(processID)
	if pid == 0 {
		return false
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KillTimeout)
	defer cancel()
	args := []string{"/bin/sh", "-c", termGroupScript, "sh", EnvProcessID, processID, strconv.FormatUint(uint64(pid), 10)}
	res, err := bx.envd.Run(kctx, "", envd.RunOptions{Argv: args})
	if err != nil {
		if !errors.Is(err, envd.ErrSandboxGone) {
			b.log.Warn("process group not signalled", "sandbox_id", bx.id, "process_id", processID, slog.Any("err", err))
		}
		return false
	}
	return res.Exit != nil && res.Exit.Exited && res.Exit.ExitCode == 0
}

// killTree kills every process of the sandbox that carries processID's mark
// (killTreeScript), bounded by KillTimeout. It reports whether none is left.
func (b *Backend) killTree(ctx context.Context, bx *box, processID string) bool {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KillTimeout)
	defer cancel()
	res, err := bx.envd.Run(kctx, "", envd.RunOptions{Argv: []string{"/bin/sh", "-c", killTreeScript, "sh", EnvProcessID, processID}})
	if err != nil || res.Exit == nil || !res.Exit.Exited || res.Exit.ExitCode != 0 {
		if !errors.Is(err, envd.ErrSandboxGone) {
			b.log.Warn("process tree not killed", "sandbox_id", bx.id, "process_id", processID, slog.Any("err", err))
		}
		return false
	}
	return true
}

// Reattach implements worker.Reattacher, and never re-attaches: envd keeps
// a process running when its stream breaks, and Connect re-attaches to it,
// but envd discards the output written while no client is connected and
// has no replay, so the output from the stored offsets on is not to be had
// (docs/backends/e2b.md). The restarted worker ends the process as lost
// (SBX_E1621) and abandons it.
func (b *Backend) Reattach(_ context.Context, _ string, p worker.ReattachProcess) (worker.ExitStatus, error) {
	return worker.ExitStatus{}, fmt.Errorf("e2b: envd keeps none of the output process %s wrote while no worker was connected: %w", p.ID, worker.ErrNotReattachable)
}

// Abandon implements worker.Reattacher: it kills a lost process and every
// process it left (they carry its mark; killTree), which envd would
// otherwise keep running out of anybody's sight.
func (b *Backend) Abandon(ctx context.Context, sandboxID, processID string) error {
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if !b.killTree(ctx, bx, processID) {
		return events.Errorf(events.CodeInternal, "the processes of %s in sandbox %s were not all killed", processID, sandboxID)
	}
	return nil
}

// killProcess sends SIGKILL to a process whose exec ended early, by PID
// when its start event arrived, else by tag, then kills what it left
// behind (killTree); bounded by KillTimeout.
func (b *Backend) killProcess(ctx context.Context, bx *box, processID string, res *envd.RunResult) {
	b.killLeader(ctx, bx, processTag(processID), res)
	b.killTree(ctx, bx, processID)
}

func (b *Backend) killLeader(ctx context.Context, bx *box, tag string, res *envd.RunResult) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KillTimeout)
	defer cancel()
	sel := envd.Selector{Tag: tag}
	if res != nil && res.PID != 0 {
		sel = envd.Selector{PID: res.PID}
	}
	err := bx.envd.SendSignal(kctx, sel, envd.SIGKILL)
	if err == nil || errors.Is(err, envd.ErrSandboxGone) {
		return
	}
	if errors.Is(err, envd.ErrNotFound) && sel.Tag != "" {
		// The Start request may still be on its way to envd: try again for
		// a short, bounded while.
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for i := 0; i < 5; i++ {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
			}
			if err = bx.envd.SendSignal(kctx, sel, envd.SIGKILL); err == nil {
				return
			}
		}
		return
	}
	if !errors.Is(err, envd.ErrNotFound) {
		b.log.Warn("process not killed", "sandbox_id", bx.id, "tag", tag, slog.Any("err", err))
	}
}

// signalNumbers maps Go's names of signals ("killed", "terminated"), which
// envd reports as "signal: <name>", to their numbers.
var signalNumbers = func() map[string]syscall.Signal {
	m := make(map[string]syscall.Signal)
	for i := 1; i < 32; i++ {
		s := syscall.Signal(i)
		m[s.String()] = s
	}
	return m
}()

// signalNames are the short names the wire uses.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGILL: "ILL",
	syscall.SIGTRAP: "TRAP", syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGFPE: "FPE",
	syscall.SIGKILL: "KILL", syscall.SIGUSR1: "USR1", syscall.SIGSEGV: "SEGV", syscall.SIGUSR2: "USR2",
	syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM", syscall.SIGXCPU: "XCPU",
	syscall.SIGXFSZ: "XFSZ", syscall.SIGSYS: "SYS",
}

// exitStatus converts envd's end event. A process ended by a signal has no
// exit code on the wire, only the status "signal: killed"; it becomes
// 128+signal as a shell reports it.
func exitStatus(e *envd.Exit) worker.ExitStatus {
	if e == nil {
		return worker.ExitStatus{Code: -1}
	}
	if e.Exited {
		return worker.ExitStatus{Code: e.ExitCode}
	}
	name := strings.TrimSuffix(strings.TrimPrefix(e.Status, "signal: "), " (core dumped)")
	if sig, ok := signalNumbers[name]; ok {
		short := signalNames[sig]
		if short == "" {
			short = strconv.Itoa(int(sig))
		}
		return worker.ExitStatus{Code: 128 + int(sig), Signal: short}
	}
	if e.ExitCode != 0 {
		return worker.ExitStatus{Code: e.ExitCode}
	}
	return worker.ExitStatus{Code: -1}
}

// Signal implements worker.Signaller. envd delivers only SIGTERM and SIGKILL,
// and to the process alone: a TERM also goes to the rest of the process's
// group and a KILL to its whole tree (the processes carrying its mark), each
// through a short shell script that the backend runs in the sandbox.
func (b *Backend) Signal(ctx context.Context, sandboxID, processID, signal string) error {
	var sig envd.Signal
	switch signal {
	case "TERM":
		sig = envd.SIGTERM
	case "KILL":
		sig = envd.SIGKILL
	default:
		return events.Errorf(events.CodeCapabilityNotSupp, "E2B's envd can deliver only TERM and KILL, not %s", signal).With("field", "signal")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if sig == envd.SIGTERM && b.termGroup(ctx, bx, processID) {
		// envd would signal the process alone: its group got the TERM.
		return nil
	}
	if err := bx.envd.SendSignal(ctx, envd.Selector{Tag: processTag(processID)}, sig); err != nil {
		if errors.Is(err, envd.ErrNotFound) {
			return events.Errorf(events.CodeProcessNotFound, "no running process %s in sandbox %s", processID, sandboxID)
		}
		return sbxError(err, "signal")
	}
	if sig == envd.SIGKILL {
		// envd killed the process alone: its children (background jobs,
		// daemons in another session) carry its mark and die with it.
		b.killTree(ctx, bx, processID)
	}
	return nil
}

// filePath makes a request path absolute: relative paths are resolved by
// envd against the user's home, which is what E2B users expect.
func filePath(p string) (string, error) {
	if p == "" {
		return "", events.Errorf(events.CodeInvalidValue, "empty path").With("field", "path")
	}
	if strings.ContainsRune(p, 0) {
		return "", events.Errorf(events.CodeInvalidValue, "path has a NUL byte").With("field", "path")
	}
	if path.IsAbs(p) {
		return path.Clean(p), nil
	}
	return p, nil
}

// WriteFile implements worker.FileSystem: POST /files (octet-stream). envd
// has no chmod: a mode other than 0644 is applied with chmod in the sandbox.
func (b *Backend) WriteFile(ctx context.Context, sandboxID, p string, mode uint32, r io.Reader, size int64) error {
	fp, err := filePath(p)
	if err != nil {
		return err
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if size >= 0 {
		r = io.LimitReader(r, size)
	}
	if _, err := bx.envd.Upload(ctx, fp, r); err != nil {
		return fileError(err, "write", p)
	}
	if mode != 0 && mode&0o7777 != 0o644 {
		res, err := bx.envd.Run(ctx, "", envd.RunOptions{Argv: []string{"chmod", strconv.FormatUint(uint64(mode&0o7777), 8), fp}})
		if err != nil {
			return sbxError(err, "chmod")
		}
		if res.ExitCode() != 0 {
			return events.Errorf(events.CodeBackendError, "chmod %o %s exited %d", mode&0o7777, p, res.ExitCode())
		}
	}
	return nil
}

// ReadFile implements worker.FileSystem: GET /files.
func (b *Backend) ReadFile(ctx context.Context, sandboxID, p string, w io.Writer) (int64, error) {
	fp, err := filePath(p)
	if err != nil {
		return 0, err
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return 0, err
	}
	n, err := bx.envd.Download(ctx, fp, w)
	if err != nil {
		return n, fileError(err, "read", p)
	}
	return n, nil
}

// ListFiles implements worker.FileSystem: filesystem.ListDir with depth 1
// (a file lists as itself).
func (b *Backend) ListFiles(ctx context.Context, sandboxID, p string) ([]events.FileInfo, error) {
	fp, err := filePath(p)
	if err != nil {
		return nil, err
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	st, err := bx.envd.Stat(ctx, fp)
	if err != nil {
		return nil, fileError(err, "list", p)
	}
	if st.Type != envd.FileTypeDirectory {
		return []events.FileInfo{fileInfo(st)}, nil
	}
	entries, err := bx.envd.ListDir(ctx, fp, 1)
	if err != nil {
		return nil, fileError(err, "list", p)
	}
	out := make([]events.FileInfo, 0, len(entries))
	for _, e := range entries {
		out = append(out, fileInfo(e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// WatchFiles implements worker.FileWatcher through envd's WatchDir.
func (b *Backend) WatchFiles(ctx context.Context, sandboxID string, r events.FilesWatchRequest) (events.FilesWatchReply, error) {
	fp, err := filePath(r.Path)
	if err != nil {
		return events.FilesWatchReply{}, err
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return events.FilesWatchReply{}, err
	}
	r = r.WithDefaults()
	evs, truncated, err := bx.envd.Watch(ctx, fp, time.Duration(r.TimeoutMS)*time.Millisecond, r.MaxEvents, 100*time.Millisecond)
	if err != nil {
		return events.FilesWatchReply{}, fileError(err, "watch", r.Path)
	}
	out := events.FilesWatchReply{Events: make([]events.FileEvent, 0, len(evs)), Truncated: truncated}
	for _, ev := range evs {
		out.Events = append(out.Events, events.FileEvent{Type: ev.Type, Path: ev.Path, IsDir: ev.IsDir})
	}
	return out, nil
}

func fileInfo(e envd.EntryInfo) events.FileInfo {
	return events.FileInfo{Name: e.Name, Path: e.Path, Size: e.Size, Mode: uint32(e.Mode.Perm()),
		IsDir: e.Type == envd.FileTypeDirectory, ModTime: e.ModifiedTime}
}

// RunCode implements worker.CodeRunner through the code interpreter's
// /execute stream. A request context_id names a stateful context, created
// on first use in this sandbox; without one, the language's default context
// runs the code.
func (b *Backend) RunCode(ctx context.Context, sandboxID string, req worker.CodeRequest) (worker.CodeResult, error) {
	if !b.cfg.CodeInterpreter {
		return worker.CodeResult{}, events.Errorf(events.CodeCapabilityNotSupp, "this E2B worker's templates have no code interpreter")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return worker.CodeResult{}, err
	}
	lang := strings.ToLower(req.Language)
	var ictx string
	if req.ContextID != "" {
		if ictx, err = b.codeContext(ctx, bx, req.ContextID, lang); err != nil {
			return worker.CodeResult{}, b.codeError(ctx, bx, err)
		}
		lang = ""
	}
	var werr error
	opts := interpreter.ExecuteOptions{
		StallTimeout: b.cfg.CodeStallTimeout,
		OnStdout: func(s string) {
			if _, err := io.WriteString(req.Stdout, s); err != nil && werr == nil {
				werr = err
			}
		},
		OnStderr: func(s string) {
			if _, err := io.WriteString(req.Stderr, s); err != nil && werr == nil {
				werr = err
			}
		},
	}
	ex, err := bx.interp.Execute(ctx, req.Code, lang, ictx, opts)
	if ctx.Err() != nil {
		return worker.CodeResult{ExitStatus: worker.ExitStatus{Code: 137, Signal: "KILL"}}, ctx.Err()
	}
	if err != nil {
		if errors.Is(err, envd.ErrNotFound) && req.ContextID != "" {
			// The context vanished (restarted server): forget it.
			bx.mu.Lock()
			delete(bx.contexts, req.ContextID)
			bx.mu.Unlock()
		}
		return worker.CodeResult{}, b.codeError(ctx, bx, err)
	}
	if werr != nil {
		return worker.CodeResult{}, fmt.Errorf("e2bworker: run_code output: %w", werr)
	}
	if ex.Error != nil && ex.Error.Name == kernelDied {
		// The code interpreter's kernel ended under the code (os._exit, a
		// crash, out of memory): its state is lost, and the next execute
		// starts a fresh kernel in the same context.
		what := "the default context"
		if req.ContextID != "" {
			what = "context " + req.ContextID
		}
		e := events.Errorf(events.CodeContextCrashed, "%s crashed (%s); the next run starts a fresh one", what, ex.Error.Value)
		if req.ContextID != "" {
			e = e.With("context_id", req.ContextID)
		}
		return worker.CodeResult{ExitStatus: worker.ExitStatus{Code: 1}}, e
	}
	out := worker.CodeResult{}
	for _, r := range ex.Results {
		out.Results = append(out.Results, events.RichResult{Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, PNG: r.PNG,
			JPEG: r.JPEG, SVG: r.SVG, JSON: r.JSON, IsMainResult: r.IsMainResult})
	}
	if ex.Error != nil {
		out.Error = &events.CodeError{Name: ex.Error.Name, Value: ex.Error.Value, Traceback: ex.Error.Traceback}
		out.Code = 1
	}
	return out, nil
}

// CodeContext implements worker.CodeContexts with the code interpreter's
// /contexts endpoints: create on first use (nothing for a context this
// sandbox has), restart (POST /contexts/{id}/restart: a fresh kernel, the
// id kept), delete (DELETE /contexts/{id}). A context id this sandbox never
// made, or deleted, is ContextNotFound to restart and delete.
func (b *Backend) CodeContext(ctx context.Context, sandboxID string, req worker.ContextRequest) error {
	if !b.cfg.CodeInterpreter {
		return events.Errorf(events.CodeCapabilityNotSupp, "this E2B worker's templates have no code interpreter")
	}
	bx, err := b.lookup(ctx, sandboxID)
	if err != nil {
		return err
	}
	if req.Action == events.ContextCreate {
		if _, err := b.codeContext(ctx, bx, req.ContextID, strings.ToLower(req.Language)); err != nil {
			return b.codeError(ctx, bx, err)
		}
		return nil
	}
	bx.mu.Lock()
	ictx, ok := bx.contexts[req.ContextID]
	if req.Action == events.ContextDelete {
		delete(bx.contexts, req.ContextID)
	}
	bx.mu.Unlock()
	if !ok {
		return events.Errorf(events.CodeContextNotFound, "sandbox %s has no code context %s", sandboxID, req.ContextID).With("context_id", req.ContextID)
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	if req.Action == events.ContextDelete {
		if err := bx.interp.DeleteContext(cctx, ictx); err != nil && !errors.Is(err, envd.ErrNotFound) {
			return b.codeError(ctx, bx, err)
		}
		return nil
	}
	err = bx.interp.RestartContext(cctx, ictx)
	if errors.Is(err, envd.ErrNotFound) {
		// The interpreter forgot it (it restarted): a fresh one under the id.
		bx.mu.Lock()
		delete(bx.contexts, req.ContextID)
		bx.mu.Unlock()
		_, err = b.codeContext(ctx, bx, req.ContextID, "")
	}
	if err != nil {
		return b.codeError(ctx, bx, err)
	}
	return nil
}

// kernelDied is the error name the code interpreter streams when its kernel
// ended during an execution.
const kernelDied = "UnexpectedEndOfExecution"

// codeContext returns the interpreter context for a request context id,
// creating it on first use.
func (b *Backend) codeContext(ctx context.Context, bx *box, id, lang string) (string, error) {
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if c, ok := bx.contexts[id]; ok {
		return c, nil
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	c, err := bx.interp.CreateContext(cctx, lang, "")
	if err != nil {
		return "", err
	}
	bx.contexts[id] = c.ID
	return c.ID, nil
}

// codeError classifies a code-interpreter failure. A 502 on port 49999 while
// envd is healthy means the template has no interpreter.
func (b *Backend) codeError(ctx context.Context, bx *box, err error) error {
	if errors.Is(err, envd.ErrSandboxGone) {
		if herr := bx.envd.Health(context.WithoutCancel(ctx)); herr == nil {
			var ie *interpreter.Error
			if errors.As(err, &ie) {
				return wrap(events.Errorf(events.CodeCapabilityNotSupp, "template %s has no code interpreter (port %d is not open)", bx.template, interpreter.Port), err)
			}
			return wrap(events.Errorf(events.CodeBackendUnavailable, "code interpreter unreachable: %v", err), err)
		}
	}
	if errors.Is(err, envd.ErrInvalidArgument) {
		return wrap(events.Errorf(events.CodeInvalidValue, "the code interpreter refused the request: %s", errMessage(err)).With("field", "language"), err)
	}
	return sbxError(err, "run_code")
}

// wrap keeps cause behind an SBX error.
var wrap = backendkit.Wrap

// envdMessage is the message of an envd or interpreter error without the
// client's prefixes.
func envdMessage(err error) string {
	var ee *envd.Error
	if errors.As(err, &ee) {
		return ee.Message
	}
	var ie *interpreter.Error
	if errors.As(err, &ie) {
		return ie.Message
	}
	return err.Error()
}

func errMessage(err error) string { return envdMessage(err) }

// sbxError maps a failure of the E2B API, envd or the code interpreter onto
// an SBX code. Context errors are returned as they are: the runtime reports
// timeouts and cancellation itself.
func sbxError(err error, op string) error {
	return backendkit.Classify(err, func(err error) *events.Error { return e2bCode(err, op) })
}

// e2bCode is the SBX error of a failure of E2B, nil for the caller's
// context errors.
func e2bCode(err error, op string) *events.Error {
	code := events.CodeBackendError
	var ee *envd.Error
	var ae *e2bapi.APIError
	switch {
	case errors.Is(err, envd.ErrSandboxGone):
		code = events.CodeSandboxGone
	case errors.Is(err, envd.ErrStreamBroken):
		code = events.CodeBackendUnavailable
	case errors.Is(err, e2bapi.ErrUnauthorized), errors.Is(err, envd.ErrUnauthenticated):
		code = events.CodeUnauthorized
	case errors.Is(err, e2bapi.ErrRateLimited):
		code = events.CodeRateLimited
	case errors.As(err, &ee) && ee.Status == http.StatusInsufficientStorage:
		code = events.CodeQuotaExceeded
	case errors.As(err, &ee) && ee.Status == http.StatusTooManyRequests:
		code = events.CodeRateLimited
	case errors.Is(err, e2bapi.ErrUnavailable), errors.Is(err, envd.ErrUnavailable):
		code = events.CodeBackendUnavailable
	case errors.Is(err, e2bapi.ErrNotFound):
		code = events.CodeSandboxGone
	case errors.As(err, &ae):
		code = events.CodeBackendError
	case errors.As(err, &ee):
		code = events.CodeBackendError
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !isTransportTimeout(err):
		return nil
	default:
		// Transport failures (refused, reset, timeouts) of the control plane.
		code = events.CodeBackendUnavailable
	}
	return events.Errorf(code, "e2b %s: %v", op, err)
}

// isTransportTimeout reports an HTTP client timeout (not the caller's ctx).
func isTransportTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// createError maps a failed POST /sandboxes.
func createError(ctx context.Context, template string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, e2bapi.ErrNotFound):
		return wrap(events.Errorf(events.CodeImageNotFound, "E2B template %q not found: %v", template, err), err)
	case errors.Is(err, e2bapi.ErrBadRequest):
		return wrap(events.Errorf(events.CodeCreateFailed, "E2B refused the sandbox: %v", err), err)
	}
	return sbxError(err, "create")
}

// fileError maps a failed file operation; a missing path is the caller's.
func fileError(err error, op, p string) error {
	switch {
	case errors.Is(err, envd.ErrSandboxGone):
		return sbxError(err, op+" file")
	case errors.Is(err, envd.ErrNotFound):
		return wrap(events.Errorf(events.CodeFileNotFound, "no file or directory %q", p).With("field", "path").With("reason", "not_found"), err)
	case errors.Is(err, envd.ErrInvalidArgument):
		return wrap(events.Errorf(events.CodeInvalidValue, "%s %q: %s", op, p, envdMessage(err)).With("field", "path"), err)
	}
	return sbxError(err, op+" file")
}
