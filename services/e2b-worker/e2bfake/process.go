package e2bfake

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxio/sandboxio/internal/envdpb/process"
	"github.com/sandboxio/sandboxio/internal/envdpb/process/processconnect"
	"github.com/sandboxio/sandboxio/internal/fakejail"
	"github.com/sandboxio/sandboxio/internal/timerslack"
)

const (
	pipeReadSize = 32 << 10 // envd reads stdout/stderr in 32 KiB chunks
	ptyReadSize  = 16 << 10
)

func withUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey, user)
}

func userFrom(ctx context.Context) string {
	if u, ok := ctx.Value(userKey).(string); ok {
		return u
	}
	return defaultUser
}

// proc is one child process.
type proc struct {
	pid    uint32
	tag    *string
	config *process.ProcessConfig

	cmd   *exec.Cmd
	stdin io.WriteCloser // nil when stdin is disabled or closed
	pty   *os.File

	mu   sync.Mutex
	subs map[*subscriber]struct{}
	end  *process.ProcessEvent_EndEvent
	done chan struct{}
	inMu sync.Mutex
}

type subscriber struct {
	ch   chan *process.ProcessEvent
	gone chan struct{}
}

type procTable struct {
	sb      *sandbox
	mu      sync.Mutex
	running map[uint32]*proc
	exited  map[uint32]*proc // retained for ExitRetention after exit
	closed  bool             // killAll ran: no process starts any more
	wg      sync.WaitGroup
}

func newProcTable(sb *sandbox) *procTable {
	return &procTable{sb: sb, running: map[uint32]*proc{}, exited: map[uint32]*proc{}}
}

// find looks up a running process.
func (t *procTable) find(sel *process.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return findIn(t.running, sel)
}

func findIn(m map[uint32]*proc, sel *process.ProcessSelector) (*proc, error) {
	switch s := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		if p := m[s.Pid]; p != nil {
			return p, nil
		}
		return nil, connectErr(connect.CodeNotFound, "process with pid %d not found", s.Pid)
	case *process.ProcessSelector_Tag:
		for _, p := range m {
			if p.tag != nil && *p.tag == s.Tag {
				return p, nil
			}
		}
		return nil, connectErr(connect.CodeNotFound, "process with tag %s not found", s.Tag)
	}
	return nil, connectErr(connect.CodeInvalidArgument, "invalid process selector")
}

func (t *procTable) signalAll(sig syscall.Signal) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.running {
		_ = syscall.Kill(-int(p.pid), sig)
	}
}

func (t *procTable) killAll() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.signalAll(syscall.SIGCONT)
	t.signalAll(syscall.SIGKILL)
	t.wg.Wait()
}

func (p *proc) subscribe() *subscriber {
	s := &subscriber{ch: make(chan *process.ProcessEvent, 64), gone: make(chan struct{})}
	p.mu.Lock()
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// broadcast delivers an event to the current subscribers; output produced
// while nobody is subscribed is discarded, as in envd.
func (p *proc) broadcast(ev *process.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

func dataEvent(kind int, b []byte) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	switch kind {
	case 1:
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case 2:
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

func startEvent(pid uint32) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}
}

func keepaliveEvent() *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}
}

func endEvent(e *process.ProcessEvent_EndEvent) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: e}}
}

type processService struct {
	processconnect.UnimplementedProcessHandler
	sb *sandbox
}

var _ processconnect.ProcessHandler = (*processService)(nil)

func (s *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	t := s.sb.procs
	t.mu.Lock()
	pids := make([]int, 0, len(t.running))
	for pid := range t.running {
		pids = append(pids, int(pid))
	}
	sort.Ints(pids)
	out := &process.ListResponse{}
	for _, pid := range pids {
		p := t.running[uint32(pid)]
		out.Processes = append(out.Processes, &process.ProcessInfo{Config: p.config, Pid: p.pid, Tag: p.tag})
	}
	t.mu.Unlock()
	return connect.NewResponse(out), nil
}

// childEnv builds the environment envd gives a process.
// Jailed processes see the sandbox's paths (HOME=/home/user); otherwise
// HOME is the host directory standing for it. PATH is envd's default, not
// the fake's.
func (sb *sandbox) childEnv(user string, req map[string]string) []string {
	home := users[user]
	if !jailed() {
		_, home = sb.hostPath(users[user], user)
	}
	env := map[string]string{
		"PATH": fakejail.DefaultPath, "HOME": home, "USER": user, "LOGNAME": user, "E2B_SANDBOX": "false",
	}
	for k, v := range sb.envVars {
		env[k] = v
	}
	for k, v := range req {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// wrapper mirrors envd's /bin/sh -c '... exec nice -n 0 "$@"' -- cmd args;
// it makes a missing binary an exit 127 with nice's message on stderr.
const wrapper = `if [ -x /usr/bin/nice ]; then exec /usr/bin/nice -n 0 "$@"; else exec "$@"; fi`

func (s *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	sb := s.sb
	user := userFrom(ctx)
	m := req.Msg
	cfg := proto.Clone(m.GetProcess()).(*process.ProcessConfig)
	if cfg == nil {
		cfg = &process.ProcessConfig{}
	}
	var dir, sp string
	if cfg.Cwd != nil {
		sp, dir = sb.hostPath(cfg.GetCwd(), user)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return connectErr(connect.CodeInvalidArgument, "cwd '%s' does not exist", sp)
		}
	} else {
		sp, dir = sb.hostPath(users[user], user)
	}
	keepalive, ok := s.keepalive(req.Header())
	args := append([]string{"-c", wrapper, "--", cfg.GetCmd()}, cfg.GetArgs()...)
	var cmd *exec.Cmd
	if jailed() {
		// In the sandbox's root, as the envd user: the files API and the
		// process see the same files, owned by the same user.
		cmd = fakejail.Command(fakejail.Detect(), sb.root, sp, credOf(user), append([]string{"/bin/sh"}, args...))
	} else {
		cmd = exec.Command("/bin/sh", args...)
		cmd.Dir = dir
	}
	cmd.Env = sb.childEnv(user, cfg.GetEnvs())
	p := &proc{config: cfg, tag: m.Tag, subs: map[*subscriber]struct{}{}, done: make(chan struct{}), cmd: cmd}

	var readers []*os.File
	var kinds []int
	var closeAfterStart []*os.File
	if m.Pty != nil {
		master, slave, err := openPTY(m.GetPty().GetSize().GetCols(), m.GetPty().GetSize().GetRows())
		if err != nil {
			return connectErr(connect.CodeInternal, "error starting pty: %v", err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		p.pty = master
		readers, kinds = []*os.File{master}, []int{3}
		closeAfterStart = append(closeAfterStart, slave)
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		for _, kind := range []int{1, 2} {
			r, w, err := os.Pipe()
			if err != nil {
				return connectErr(connect.CodeInternal, "error creating pipe: %v", err)
			}
			if kind == 1 {
				cmd.Stdout = w
			} else {
				cmd.Stderr = w
			}
			readers, kinds = append(readers, r), append(kinds, kind)
			closeAfterStart = append(closeAfterStart, w)
		}
		if m.Stdin == nil || m.GetStdin() {
			w, err := cmd.StdinPipe()
			if err != nil {
				return connectErr(connect.CodeInternal, "error creating stdin pipe: %v", err)
			}
			p.stdin = w
		}
	}
	if err := timerslack.Start(cmd.Start); err != nil {
		for _, f := range append(readers, closeAfterStart...) {
			_ = f.Close()
		}
		return connectErr(connect.CodeInternal, "error starting process: %v", err)
	}
	for _, f := range closeAfterStart {
		_ = f.Close()
	}
	p.pid = uint32(cmd.Process.Pid)
	sub := p.subscribe()
	t := sb.procs
	t.mu.Lock()
	if t.closed {
		// The sandbox was destroyed while this Start ran (a kill racing
		// it): its process table waits for no newcomer.
		t.mu.Unlock()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		for _, f := range readers {
			_ = f.Close()
		}
		p.unsubscribe(sub)
		return connectErr(connect.CodeUnavailable, "sandbox is gone")
	}
	t.running[p.pid] = p
	t.wg.Add(1) // under mu: killAll closes the table under it before it waits
	t.mu.Unlock()
	go t.supervise(p, readers, kinds)

	// Connect-Timeout-Ms on Start is the process lifetime: kill at the
	// deadline, but not when the client merely disconnects.
	if _, has := ctx.Deadline(); has {
		go func() {
			select {
			case <-ctx.Done():
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					_ = syscall.Kill(int(p.pid), syscall.SIGKILL)
				}
			case <-p.done:
			}
		}()
	}
	return s.pump(ctx, p, sub, keepalive, ok, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	keepalive, ok := s.keepalive(req.Header())
	t := s.sb.procs
	t.mu.Lock()
	p, err := findIn(t.running, req.Msg.GetProcess())
	var sub *subscriber
	if err == nil {
		sub = p.subscribe()
	} else if p, err = findIn(t.exited, req.Msg.GetProcess()); err == nil {
		t.mu.Unlock()
		// Retained end event: start + end at once.
		if err := stream.Send(&process.ConnectResponse{Event: startEvent(p.pid)}); err != nil {
			return err
		}
		p.mu.Lock()
		end := p.end
		p.mu.Unlock()
		return stream.Send(&process.ConnectResponse{Event: endEvent(end)})
	}
	t.mu.Unlock()
	if err != nil {
		return err
	}
	return s.pump(ctx, p, sub, keepalive, ok, func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

// keepalive parses Keepalive-Ping-Interval (seconds; envd's default 90 s).
func (s *processService) keepalive(h http.Header) (time.Duration, bool) {
	v := h.Get("Keepalive-Ping-Interval")
	if v == "" {
		return s.sb.srv.opts.DefaultKeepalive, true
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return s.sb.srv.opts.DefaultKeepalive, true
	}
	if n <= 0 {
		return 0, false // envd panics in time.NewTicker
	}
	return time.Duration(n) * time.Second, true
}

// streamFaults counts messages of one stream and applies injected faults.
type streamFaults struct {
	sb   *sandbox
	f    Faults
	sent int
}

// after is called after each message; it aborts the connection or expires
// the sandbox when a fault says so.
func (sf *streamFaults) after() {
	sf.sent++
	if sf.f.ExpireAfter > 0 && sf.sent == sf.f.ExpireAfter {
		// Asynchronously: expiring waits for this sandbox's streams and processes.
		go sf.sb.srv.expire(sf.sb)
	}
	if sf.f.DropStreamAfter > 0 && sf.sent >= sf.f.DropStreamAfter {
		panic(http.ErrAbortHandler)
	}
}

// pump streams a process's events to one subscriber: start first, then
// data/keepalive, then end. Errors travel in the end-stream message.
func (s *processService) pump(ctx context.Context, p *proc, sub *subscriber, keepalive time.Duration, keepaliveOK bool, send func(*process.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	sf := &streamFaults{sb: s.sb, f: s.sb.srv.dataFaults(s.sb)}
	gone := s.sb.goneCh()
	if err := send(startEvent(p.pid)); err != nil {
		return err
	}
	if !keepaliveOK {
		// envd 0.6.13 panics here and the connection drops (transcript 99).
		panic(http.ErrAbortHandler)
	}
	sf.after()
	if sf.f.Stall {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			panic(http.ErrAbortHandler)
		}
	}
	ticker := time.NewTicker(keepalive)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-gone:
			panic(http.ErrAbortHandler)
		case <-ticker.C:
			if err := send(keepaliveEvent()); err != nil {
				return err
			}
			sf.after()
		case ev := <-sub.ch:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if _, isEnd := ev.GetEvent().(*process.ProcessEvent_End); isEnd {
				if sf.f.OmitEnd {
					return nil
				}
				if err := send(ev); err != nil {
					return err
				}
				sf.after()
				return nil
			}
			if err := send(ev); err != nil {
				return err
			}
			sf.after()
			ticker.Reset(keepalive)
		}
	}
}

// supervise reads the process output, waits for it and publishes the end
// event; the process then leaves the table and is retained for Connect.
func (t *procTable) supervise(p *proc, readers []*os.File, kinds []int) {
	defer t.wg.Done()
	var rwg sync.WaitGroup
	for i, r := range readers {
		rwg.Add(1)
		go func(r *os.File, kind int) {
			defer rwg.Done()
			size := pipeReadSize
			if kind == 3 {
				size = ptyReadSize
			}
			for {
				buf := make([]byte, size)
				n, err := r.Read(buf)
				if n > 0 {
					p.broadcast(dataEvent(kind, buf[:n]))
				}
				if err != nil {
					return
				}
			}
		}(r, kinds[i])
	}
	err := p.cmd.Wait()
	// Wait for the readers to drain; a grandchild may keep a pipe open, so
	// give up after a grace period.
	drained := make(chan struct{})
	go func() { rwg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(200 * time.Millisecond):
		for _, r := range readers {
			_ = r.Close()
		}
		<-drained
	}
	for _, r := range readers {
		_ = r.Close()
	}
	ps := p.cmd.ProcessState
	end := &process.ProcessEvent_EndEvent{ExitCode: int32(ps.ExitCode()), Exited: ps.Exited(), Status: ps.String()}
	if err != nil {
		msg := err.Error()
		end.Error = &msg
	}
	p.inMu.Lock()
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	p.inMu.Unlock()
	p.mu.Lock()
	p.end = end
	p.mu.Unlock()
	t.mu.Lock()
	delete(t.running, p.pid)
	t.exited[p.pid] = p
	t.mu.Unlock()
	time.AfterFunc(t.sb.srv.opts.ExitRetention, func() {
		t.mu.Lock()
		if t.exited[p.pid] == p {
			delete(t.exited, p.pid)
		}
		t.mu.Unlock()
	})
	p.broadcast(endEvent(end))
	close(p.done)
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	p, err := s.sb.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	switch in := req.Msg.GetInput().GetInput().(type) {
	case *process.ProcessInput_Pty:
		if p.pty == nil {
			return nil, connectErr(connect.CodeInternal, "error writing to pty: pty not assigned to process")
		}
		if _, err := p.pty.Write(in.Pty); err != nil {
			return nil, connectErr(connect.CodeInternal, "error writing to pty: %v", err)
		}
	default:
		p.inMu.Lock()
		defer p.inMu.Unlock()
		if p.stdin == nil {
			return nil, connectErr(connect.CodeInternal, "error writing to stdin: stdin not enabled or closed")
		}
		if _, err := p.stdin.Write(req.Msg.GetInput().GetStdin()); err != nil {
			return nil, connectErr(connect.CodeInternal, "error writing to stdin: %v", err)
		}
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	p, err := s.sb.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.pty != nil {
		return nil, connectErr(connect.CodeFailedPrecondition, "cannot close stdin for PTY process — send Ctrl+D (0x04) instead")
	}
	if p.stdin != nil {
		_ = p.stdin.Close()
		p.stdin = nil
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	p, err := s.sb.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case process.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connectErr(connect.CodeUnimplemented, "invalid signal: %s", req.Msg.GetSignal())
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return nil, connectErr(connect.CodeInternal, "error sending signal: %v", err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	p, err := s.sb.procs.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty != nil {
		if p.pty == nil {
			return nil, connectErr(connect.CodeInternal, "error resizing tty: tty not assigned to process")
		}
		if err := setWinsize(p.pty, req.Msg.GetPty().GetSize().GetCols(), req.Msg.GetPty().GetSize().GetRows()); err != nil {
			return nil, connectErr(connect.CodeInternal, "error resizing tty: %v", err)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// panicAbort drops the client connection without an end-stream message, the
// way a dying sandbox or a crashed envd does.
func panicAbort() { panic(http.ErrAbortHandler) }
