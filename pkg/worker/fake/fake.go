package fake

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
)

// Call is one recorded call to the backend.
type Call struct {
	Method    string
	SandboxID string
	ProcessID string
	Cmd       []string
	Time      time.Time
}

// Config configures the fake.
type Config struct {
	// Name is the backend name; default "fake".
	Name string
	// Isolation is the advertised tier; default unknown.
	Isolation events.IsolationTier
	// CreateDelay is added to every create.
	CreateDelay time.Duration
	// CreateGate, when set, holds every create (after CreateDelay) until
	// it is closed or the create's context ends.
	CreateGate <-chan struct{}
	// Serve says what listens on a port of a sandbox (ports.go): the
	// function that serves each connection to it, or nil for nothing (a
	// dial is refused: PortUnreachable). Nil Serve: nothing listens
	// anywhere.
	Serve func(sandboxID string, port int) func(net.Conn)
}

// Backend is the fake backend.
type Backend struct {
	cfg Config

	mu        sync.Mutex
	calls     []Call
	sandboxes map[string]*box
	killed    map[string]bool
}

type box struct {
	spec  worker.CreateSpec
	files map[string][]byte
	procs map[string]context.CancelCauseFunc
	conns map[net.Conn]struct{} // both ends of each port connection (ports.go)
}

var (
	_ worker.Backend       = (*Backend)(nil)
	_ worker.FileSystem    = (*Backend)(nil)
	_ worker.CodeRunner    = (*Backend)(nil)
	_ worker.Signaller     = (*Backend)(nil)
	_ worker.TimeoutSetter = (*Backend)(nil)
	_ worker.Lister        = (*Backend)(nil)
	_ worker.HostLister    = (*Backend)(nil)
)

// New returns a fake backend.
func New(cfg Config) *Backend {
	if cfg.Name == "" {
		cfg.Name = "fake"
	}
	if cfg.Isolation == "" {
		cfg.Isolation = events.TierUnknown
	}
	return &Backend{cfg: cfg, sandboxes: make(map[string]*box), killed: make(map[string]bool)}
}

// Info implements worker.Backend.
func (b *Backend) Info() worker.Info {
	return worker.Info{Name: b.cfg.Name, Isolation: b.cfg.Isolation, Capabilities: events.Capabilities{
		events.CapExec, events.CapStream, events.CapFiles, events.CapRunCode, events.CapSignal,
		events.CapStdin, events.CapSetTimeout, events.CapPorts,
	}}
}

// MaxCalls is how many calls a fake remembers: the oldest half is forgotten
// when a call would make more (`sandboxio dev` runs this backend for as long
// as it runs, and every exec is a call).
const MaxCalls = 100_000

func (b *Backend) record(c Call) {
	c.Time = time.Now()
	// Copies: the ids and the command may be substrings of a command's
	// whole message (its header block, its payload), which a remembered
	// call would otherwise keep alive.
	c.SandboxID, c.ProcessID = strings.Clone(c.SandboxID), strings.Clone(c.ProcessID)
	if c.Cmd != nil {
		cmd := make([]string, len(c.Cmd))
		for i, a := range c.Cmd {
			cmd[i] = strings.Clone(a)
		}
		c.Cmd = cmd
	}
	b.mu.Lock()
	if len(b.calls) >= MaxCalls {
		n := copy(b.calls, b.calls[len(b.calls)-MaxCalls/2:])
		clear(b.calls[n:])
		b.calls = b.calls[:n]
	}
	b.calls = append(b.calls, c)
	b.mu.Unlock()
}

// Calls returns a copy of every call so far (the last MaxCalls at most).
func (b *Backend) Calls() []Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Call(nil), b.calls...)
}

// CallsTo returns the recorded calls of one method.
func (b *Backend) CallsTo(method string) []Call {
	var out []Call
	for _, c := range b.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Live returns the ids of the sandboxes that exist now.
func (b *Backend) Live() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, 0, len(b.sandboxes))
	for id := range b.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Create implements worker.Backend.
func (b *Backend) Create(ctx context.Context, spec worker.CreateSpec) (worker.Created, error) {
	b.record(Call{Method: "Create", SandboxID: spec.SandboxID})
	if b.cfg.CreateDelay > 0 {
		select {
		case <-time.After(b.cfg.CreateDelay):
		case <-ctx.Done():
			return worker.Created{}, ctx.Err()
		}
	}
	if b.cfg.CreateGate != nil {
		select {
		case <-b.cfg.CreateGate:
		case <-ctx.Done():
			return worker.Created{}, ctx.Err()
		}
	}
	switch spec.Spec.Image {
	case "fail-create":
		return worker.Created{}, events.Errorf(events.CodeCreateFailed, "fake: create refused as asked")
	case "missing-image":
		return worker.Created{}, events.Errorf(events.CodeImageNotFound, "fake: image %q does not exist", spec.Spec.Image)
	case "pull-progress":
		for _, msg := range []string{"pulling image pull-progress", "pulling image pull-progress: layer 1/2", "pulled image pull-progress"} {
			worker.ReportProgress(ctx, msg)
		}
	case "slow-create":
		<-ctx.Done()
		return worker.Created{}, ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sandboxes[spec.SandboxID] = &box{spec: spec, files: make(map[string][]byte), procs: make(map[string]context.CancelCauseFunc)}
	return worker.Created{Image: "fake:" + spec.Spec.Image}, nil
}

// Kill implements worker.Backend.
func (b *Backend) Kill(ctx context.Context, id string) error {
	b.record(Call{Method: "Kill", SandboxID: id})
	b.mu.Lock()
	defer b.mu.Unlock()
	if bx, ok := b.sandboxes[id]; ok {
		for _, cancel := range bx.procs {
			cancel(errKilled)
		}
		for c := range bx.conns {
			_ = c.Close()
		}
		delete(b.sandboxes, id)
		b.killed[id] = true
	}
	return nil
}

var (
	errKilled = fmt.Errorf("fake: sandbox killed")
	errTerm   = fmt.Errorf("fake: TERM")
)

func (b *Backend) get(id string) (*box, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	bx, ok := b.sandboxes[id]
	if !ok {
		return nil, events.Errorf(events.CodeSandboxGone, "fake: no sandbox %s", id)
	}
	return bx, nil
}

// Exec implements worker.Backend.
func (b *Backend) Exec(ctx context.Context, id string, p worker.Process) (worker.ExitStatus, error) {
	b.record(Call{Method: "Exec", SandboxID: id, ProcessID: p.ID, Cmd: p.Cmd})
	bx, err := b.get(id)
	if err != nil {
		return worker.ExitStatus{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	b.mu.Lock()
	bx.procs[p.ID] = cancel
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(bx.procs, p.ID)
		b.mu.Unlock()
	}()
	st, err := b.run(ctx, bx, p)
	if cerr := context.Cause(ctx); cerr != nil && err == nil {
		if cerr == errTerm {
			return worker.ExitStatus{Code: 143, Signal: "TERM"}, nil
		}
		return worker.ExitStatus{Code: 137, Signal: "KILL"}, nil
	}
	return st, err
}

func (b *Backend) run(ctx context.Context, bx *box, p worker.Process) (worker.ExitStatus, error) {
	args := p.Cmd[1:]
	intArg := func(i int, def int) (int, error) {
		if len(args) <= i {
			return def, nil
		}
		return strconv.Atoi(args[i])
	}
	switch p.Cmd[0] {
	case "echo":
		_, err := io.WriteString(p.Stdout, strings.Join(args, " ")+"\n")
		return worker.ExitStatus{}, err
	case "echo-stderr":
		_, err := io.WriteString(p.Stderr, strings.Join(args, " ")+"\n")
		return worker.ExitStatus{}, err
	case "exit":
		n, err := intArg(0, 0)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: exit: %v", err)
		}
		return worker.ExitStatus{Code: n}, nil
	case "sleep":
		ms, err := intArg(0, 0)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: sleep: %v", err)
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		return worker.ExitStatus{}, nil
	case "write", "write-stderr":
		n, err := intArg(0, 0)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: write: %v", err)
		}
		chunk, err := intArg(1, 64<<10)
		if err != nil || chunk <= 0 {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: write: bad chunk size")
		}
		out := p.Stdout
		if p.Cmd[0] == "write-stderr" {
			out = p.Stderr
		}
		return worker.ExitStatus{}, writePattern(ctx, out, n, chunk)
	case "drip":
		n, err := intArg(0, 0)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: drip: %v", err)
		}
		ms, err := intArg(1, 100)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: drip: %v", err)
		}
		for i := 1; i <= n; i++ {
			if i > 1 {
				t := time.NewTimer(time.Duration(ms) * time.Millisecond)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return worker.ExitStatus{}, nil
				}
			}
			if _, err := fmt.Fprintf(p.Stdout, "drip %d\n", i); err != nil {
				return worker.ExitStatus{}, err
			}
		}
		return worker.ExitStatus{}, nil
	case "interleave":
		n, err := intArg(0, 0)
		if err != nil {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: interleave: %v", err)
		}
		for i := 1; i <= n && ctx.Err() == nil; i++ {
			if _, err := fmt.Fprintf(p.Stdout, "out %d\n", i); err != nil {
				return worker.ExitStatus{}, err
			}
			if _, err := fmt.Fprintf(p.Stderr, "err %d\n", i); err != nil {
				return worker.ExitStatus{}, err
			}
		}
		return worker.ExitStatus{}, nil
	case "cat":
		if p.Stdin == nil {
			return worker.ExitStatus{}, nil
		}
		done := make(chan error, 1)
		go func() { _, err := io.Copy(p.Stdout, p.Stdin); done <- err }()
		select {
		case err := <-done:
			return worker.ExitStatus{}, err
		case <-ctx.Done():
			return worker.ExitStatus{}, nil
		}
	case "env", "env-sha256":
		if len(args) != 1 {
			return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: %s takes one name", p.Cmd[0])
		}
		v, ok := p.Env[args[0]]
		if !ok {
			v, ok = bx.spec.Env[args[0]]
		}
		if !ok {
			v = bx.spec.Secrets[args[0]]
		}
		if p.Cmd[0] == "env-sha256" {
			sum := sha256.Sum256([]byte(v))
			v = hex.EncodeToString(sum[:])
		}
		_, err := io.WriteString(p.Stdout, v+"\n")
		return worker.ExitStatus{}, err
	case "pwd":
		cwd := p.Cwd
		if cwd == "" {
			cwd = "/"
		}
		_, err := io.WriteString(p.Stdout, cwd+"\n")
		return worker.ExitStatus{}, err
	case "binary":
		buf := make([]byte, 256)
		for i := range buf {
			buf[i] = byte(i)
		}
		_, err := p.Stdout.Write(buf)
		return worker.ExitStatus{}, err
	case "oom":
		return worker.ExitStatus{Code: 137, OOMKilled: true, Signal: "KILL"}, nil
	case "rm": // rm [-rf] [--] PATH...: removes files and what is under them
		b.mu.Lock()
		for _, a := range args {
			if strings.HasPrefix(a, "-") {
				continue
			}
			target := cleanPath(a)
			for f := range bx.files {
				if f == target || strings.HasPrefix(f, target+"/") {
					delete(bx.files, f)
				}
			}
		}
		b.mu.Unlock()
		return worker.ExitStatus{}, nil
	}
	return worker.ExitStatus{}, events.Errorf(events.CodeExecFailed, "fake: %s: command not found", p.Cmd[0])
}

// Pattern returns the n bytes that "write n" produces, for assertions.
func Pattern(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = 'a' + byte(i%26)
	}
	return out
}

func writePattern(ctx context.Context, w io.Writer, n, chunk int) error {
	block := Pattern(chunk + 26)
	written := 0
	for written < n {
		if ctx.Err() != nil {
			return nil
		}
		k := min(chunk, n-written)
		off := written % 26
		if _, err := w.Write(block[off : off+k]); err != nil {
			return err
		}
		written += k
	}
	return nil
}

// Signal implements worker.Signaller: TERM ends the process with 143; other
// signals are recorded and ignored.
func (b *Backend) Signal(ctx context.Context, id, pid, sig string) error {
	b.record(Call{Method: "Signal", SandboxID: id, ProcessID: pid, Cmd: []string{sig}})
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	b.mu.Lock()
	cancel, ok := bx.procs[pid]
	b.mu.Unlock()
	if !ok {
		return events.Errorf(events.CodeProcessNotFound, "fake: no process %s", pid)
	}
	if sig == "TERM" {
		cancel(errTerm)
	}
	return nil
}

// SetTimeout implements worker.TimeoutSetter.
func (b *Backend) SetTimeout(ctx context.Context, id string, deadline time.Time) error {
	b.record(Call{Method: "SetTimeout", SandboxID: id})
	_, err := b.get(id)
	return err
}

// ListHostSandboxes implements worker.HostLister: the fake is one host.
func (b *Backend) ListHostSandboxes(ctx context.Context) ([]worker.Listed, error) {
	return b.ListSandboxes(ctx)
}

// ListSandboxes implements worker.Lister.
func (b *Backend) ListSandboxes(ctx context.Context) ([]worker.Listed, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]worker.Listed, 0, len(b.sandboxes))
	for id, bx := range b.sandboxes {
		out = append(out, worker.Listed{SandboxID: id, WorkerID: bx.spec.WorkerID, Deadline: bx.spec.Deadline})
	}
	return out, nil
}

// cleanPath resolves a path the way the fake's files live: relative to /work.
func cleanPath(p string) string {
	if !path.IsAbs(p) {
		p = "/work/" + p
	}
	return path.Clean(p)
}

// WriteFile implements worker.FileSystem.
func (b *Backend) WriteFile(ctx context.Context, id, p string, mode uint32, r io.Reader, size int64) error {
	b.record(Call{Method: "WriteFile", SandboxID: id, Cmd: []string{p}})
	bx, err := b.get(id)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	p = cleanPath(p)
	b.mu.Lock()
	bx.files[p] = data
	b.mu.Unlock()
	return nil
}

// ReadFile implements worker.FileSystem.
func (b *Backend) ReadFile(ctx context.Context, id, p string, w io.Writer) (int64, error) {
	b.record(Call{Method: "ReadFile", SandboxID: id, Cmd: []string{p}})
	bx, err := b.get(id)
	if err != nil {
		return 0, err
	}
	p = cleanPath(p)
	b.mu.Lock()
	data, ok := bx.files[p]
	b.mu.Unlock()
	if !ok {
		return 0, events.Errorf(events.CodeFileNotFound, "fake: %s: no such file", p).With("field", "path").With("reason", "not_found")
	}
	n, err := io.Copy(w, bytes.NewReader(data))
	return n, err
}

// ListFiles implements worker.FileSystem as the Docker backend does: a
// directory lists its files and subdirectories (directories are implicit:
// those files are under), a file lists as itself, "/", "/work" and "/tmp"
// always exist, anything else is FileNotFound.
func (b *Backend) ListFiles(ctx context.Context, id, dir string) ([]events.FileInfo, error) {
	b.record(Call{Method: "ListFiles", SandboxID: id, Cmd: []string{dir}})
	bx, err := b.get(id)
	if err != nil {
		return nil, err
	}
	dir = cleanPath(dir)
	b.mu.Lock()
	defer b.mu.Unlock()
	if data, ok := bx.files[dir]; ok {
		return []events.FileInfo{{Name: path.Base(dir), Path: dir, Size: int64(len(data)), Mode: 0o644}}, nil
	}
	out := []events.FileInfo{}
	subdirs := map[string]bool{}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for p, data := range bx.files {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok {
			continue
		}
		if sub, _, nested := strings.Cut(rest, "/"); nested {
			subdirs[sub] = true
			continue
		}
		out = append(out, events.FileInfo{Name: path.Base(p), Path: p, Size: int64(len(data)), Mode: 0o644})
	}
	for sub := range subdirs {
		out = append(out, events.FileInfo{Name: sub, Path: prefix + sub, IsDir: true, Mode: uint32(fs.ModeDir | 0o755)})
	}
	if len(out) == 0 && dir != "/" && dir != "/work" && dir != "/tmp" {
		return nil, events.Errorf(events.CodeFileNotFound, "fake: %s: no such file or directory", dir).With("field", "path").With("reason", "not_found")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// RunCode implements worker.CodeRunner.
func (b *Backend) RunCode(ctx context.Context, id string, req worker.CodeRequest) (worker.CodeResult, error) {
	b.record(Call{Method: "RunCode", SandboxID: id, ProcessID: req.ProcessID, Cmd: []string{req.Language}})
	if _, err := b.get(id); err != nil {
		return worker.CodeResult{}, err
	}
	if req.Code == "raise" {
		return worker.CodeResult{ExitStatus: worker.ExitStatus{Code: 1},
			Error: &events.CodeError{Name: "RuntimeError", Value: "raised as asked", Traceback: "fake traceback"}}, nil
	}
	if _, err := io.WriteString(req.Stdout, req.Code+"\n"); err != nil {
		return worker.CodeResult{}, err
	}
	return worker.CodeResult{Results: []events.RichResult{{Text: req.Code, IsMainResult: true}}}, nil
}
