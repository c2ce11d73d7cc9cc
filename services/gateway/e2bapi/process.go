package e2bapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/process"
	"github.com/sandboxio/sandboxio/internal/envdpb/process/processconnect"
	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// processService is envd's process.Process over sandboxio's exec,
// stdin and signal ops. A pid is a random number; the sandboxio process
// id is "e2b-<pid>", so any front door can address a process started
// through another. Tags and List know only the processes this front door
// started.
type processService struct {
	processconnect.UnimplementedProcessHandler
	a *API

	mu    sync.Mutex
	procs map[string]map[uint32]*procInfo // sandbox -> pid -> info
}

var _ processconnect.ProcessHandler = (*processService)(nil)

type procInfo struct {
	cfg *process.ProcessConfig
	tag *string
}

// maxProcsPerSandbox bounds what List and tags remember per sandbox.
const maxProcsPerSandbox = 1024

// startHold bounds how long a start event waits for the process's first
// output or exit.
const startHold = 100 * time.Millisecond

// defaultKeepalive is envd's keepalive interval without the header.
const defaultKeepalive = 90 * time.Second

func processID(pid uint32) string { return "e2b-" + strconv.FormatUint(uint64(pid), 10) }

func (s *processService) remember(sandbox string, pid uint32, info *procInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs == nil {
		s.procs = map[string]map[uint32]*procInfo{}
	}
	m := s.procs[sandbox]
	if m == nil {
		if len(s.procs) >= 4*maxProcsPerSandbox {
			s.procs = map[string]map[uint32]*procInfo{}
		}
		m = map[uint32]*procInfo{}
		s.procs[sandbox] = m
	}
	if len(m) >= maxProcsPerSandbox {
		for k := range m {
			delete(m, k)
			break
		}
	}
	m[pid] = info
}

func (s *processService) forget(sandbox string, pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs[sandbox], pid)
}

// resolve finds the pid a selector names.
func (s *processService) resolve(sandbox string, sel *process.ProcessSelector) (uint32, error) {
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		return v.Pid, nil
	case *process.ProcessSelector_Tag:
		s.mu.Lock()
		defer s.mu.Unlock()
		for pid, p := range s.procs[sandbox] {
			if p.tag != nil && *p.tag == v.Tag {
				return pid, nil
			}
		}
		return 0, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %s not found", truncate(v.Tag, 64)))
	}
	return 0, connect.NewError(connect.CodeInvalidArgument, errors.New("invalid input type: process selector is empty"))
}

func notFoundPid(pid uint32) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", pid))
}

// Start runs a command as a streamed exec: start{pid}, data events as the
// output comes, keepalives while it is silent, end{…} at its exit. The
// Connect-Timeout-Ms deadline is the process's lifetime (envd's rule); a
// client that goes away leaves it running.
func (s *processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	t := targetOf(ctx)
	m := req.Msg
	cfg := m.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is empty"))
	}
	pid := uint32(rand.Int32N(1<<30) + 1)
	ereq := events.ExecRequest{SandboxID: t.id, Cmd: append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
		Env: cfg.GetEnvs(), Cwd: cfg.GetCwd(), ProcessID: processID(pid),
		KeepStdinOpen: m.Stdin == nil || m.GetStdin()}
	if pty := m.GetPty(); pty != nil {
		ereq.TTY, ereq.KeepStdinOpen = true, true
		ereq.Rows, ereq.Cols = int(pty.GetSize().GetRows()), int(pty.GetSize().GetCols())
	}
	if dl, ok := ctx.Deadline(); ok {
		ereq.TimeoutMS = max(time.Until(dl).Milliseconds(), 1)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	// The process outlives its reader, as envd's do: a client that goes
	// away detaches (Connect re-attaches); only its timeout or a signal
	// ends it.
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	p, err := t.cl.Stream(pctx, ereq)
	if err != nil {
		return startFailed(err, pid, cfg, false, send)
	}
	s.remember(t.id, pid, &procInfo{cfg: cfg, tag: m.Tag})
	defer s.forget(t.id, pid)
	return s.follow(ctx, p, pid, cfg, ereq.TTY, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), send)
}

// startFailed answers a process that could not start as envd does: a
// missing working directory is invalid_argument before any event; a
// command that cannot be run starts, says why on stderr and exits 127 (126
// when it exists but cannot be executed), as envd's shell wrapper does.
func startFailed(err error, pid uint32, cfg *process.ProcessConfig, started bool, send func(*process.ProcessEvent) error) error {
	var e *events.Error
	if !errors.Is(err, events.ErrExecFailed) || !errors.As(err, &e) {
		return connectErrOf(err)
	}
	msg := strings.ToLower(e.Message)
	if cfg.Cwd != nil && (strings.Contains(msg, "chdir") || strings.Contains(msg, "cwd") || strings.Contains(msg, "working directory")) {
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", cfg.GetCwd()))
	}
	code, why := 127, "No such file or directory"
	if strings.Contains(msg, "permission denied") || strings.Contains(msg, "is a directory") || strings.Contains(msg, "exec format") {
		code, why = 126, "Permission denied"
	}
	status := "exit status " + strconv.Itoa(code)
	evs := []*process.ProcessEvent{
		{Event: &process.ProcessEvent_Data{Data: &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stderr{
			Stderr: []byte(cfg.GetCmd() + ": " + why + "\n")}}}},
		{Event: &process.ProcessEvent_End{End: &process.ProcessEvent_EndEvent{ExitCode: int32(code), Exited: true, Status: status, Error: &status}}},
	}
	if !started {
		evs = append([]*process.ProcessEvent{{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}}, evs...)
	}
	for _, ev := range evs {
		if err := send(ev); err != nil {
			return err
		}
	}
	return nil
}

// Connect re-attaches to a process by pid or tag: start{pid}, then its
// output from the beginning of what sandboxio still holds (envd sends only
// what comes after the re-attach), then end.
func (s *processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	t := targetOf(ctx)
	pid, err := s.resolve(t.id, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer pcancel()
	p, err := t.cl.Attach(pctx, t.id, processID(pid))
	if err != nil {
		if statusOf(err) == 400 || errors.Is(err, events.ErrProcessNotFound) {
			return notFoundPid(pid)
		}
		return connectErrOf(err)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	return s.follow(ctx, p, pid, nil, false, keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), send)
}

func keepaliveOf(h string) time.Duration {
	if n, err := strconv.Atoi(h); err == nil && n > 0 && n <= 3600 {
		return time.Duration(n) * time.Second
	}
	return defaultKeepalive
}

// follow streams one process's events until its exit.
func (s *processService) follow(ctx context.Context, p *client.Process, pid uint32, cfg *process.ProcessConfig, tty bool, keepalive time.Duration, send func(*process.ProcessEvent) error) error {
	type next struct {
		c   client.OutputChunk
		err error
	}
	chunks := make(chan next)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := p.Next()
			select {
			case chunks <- next{c, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	// The process outlives its reader, as envd's do: whatever ends this
	// stream (the client gone, a write that failed, sandboxio's stream
	// lost) detaches from it; only its exit or the request's deadline
	// (Connect-Timeout-Ms) ends it here.
	ended := false
	defer func() {
		close(done)
		if ended || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			_ = p.Close()
		} else {
			p.Detach()
		}
		wg.Wait()
	}()
	// The start event waits for the process's first sign (output, exit)
	// or startHold: sandboxio accepts an exec before the process runs, and a
	// process that cannot start (a missing cwd) gets no start from envd.
	started := false
	startNow := func() error {
		if started {
			return nil
		}
		started = true
		return send(&process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}})
	}
	hold := time.NewTimer(startHold)
	defer hold.Stop()
	timer := time.NewTimer(keepalive)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return connectErrOf(ctx.Err())
		case <-hold.C:
			if err := startNow(); err != nil {
				return err
			}
		case <-timer.C:
			if err := startNow(); err != nil {
				return err
			}
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			timer.Reset(keepalive)
		case n := <-chunks:
			if errors.Is(n.err, io.EOF) {
				ended = true
				res, err := p.Wait()
				if err != nil && cfg != nil && errors.Is(err, events.ErrExecFailed) {
					return startFailed(err, pid, cfg, started, send)
				}
				if err := startNow(); err != nil {
					return err
				}
				if err != nil {
					return connectErrOf(err)
				}
				if res.TimedOut {
					return connect.NewError(connect.CodeDeadlineExceeded, errors.New("context deadline exceeded"))
				}
				return send(&process.ProcessEvent{Event: &process.ProcessEvent_End{End: endEvent(res)}})
			}
			if n.err != nil {
				if ctx.Err() != nil {
					return connectErrOf(ctx.Err())
				}
				if cfg != nil && errors.Is(n.err, events.ErrExecFailed) {
					return startFailed(n.err, pid, cfg, started, send)
				}
				if err := startNow(); err != nil {
					return err
				}
				return connectErrOf(n.err)
			}
			if err := startNow(); err != nil {
				return err
			}
			data := &process.ProcessEvent_DataEvent{Output: &process.ProcessEvent_DataEvent_Stdout{Stdout: n.c.Data}}
			switch {
			case tty:
				data.Output = &process.ProcessEvent_DataEvent_Pty{Pty: n.c.Data}
			case n.c.Stream == events.Stderr:
				data.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: n.c.Data}
			}
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: data}}); err != nil {
				return err
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(keepalive)
		}
	}
}

// signalNames are Go's wait-status words for the signals sandboxio names.
var signalNames = map[string]string{"KILL": "killed", "TERM": "terminated", "INT": "interrupt",
	"HUP": "hangup", "QUIT": "quit", "USR1": "user defined signal 1", "USR2": "user defined signal 2"}

// endEvent is envd's end event for an exit: exit N gives exitCode N (left
// out when 0), exited and "exit status N"; a signal gives exitCode -1 and
// "signal: killed".
func endEvent(res *events.ExecResult) *process.ProcessEvent_EndEvent {
	if res.Signal != "" {
		word := signalNames[res.Signal]
		if word == "" {
			word = res.Signal
		}
		status := "signal: " + word
		return &process.ProcessEvent_EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := "exit status " + strconv.Itoa(res.ExitCode)
	end := &process.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status}
	if res.ExitCode != 0 {
		end.Error = &status
	}
	return end
}

// List lists the processes this front door started in the sandbox that
// are still running.
func (s *processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	t := targetOf(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &process.ListResponse{}
	for pid, p := range s.procs[t.id] {
		out.Processes = append(out.Processes, &process.ProcessInfo{Config: p.cfg, Pid: pid, Tag: p.tag})
	}
	return connect.NewResponse(out), nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	t := targetOf(ctx)
	pid, err := s.resolve(t.id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	in := req.Msg.GetInput()
	data := in.GetStdin()
	if in.GetPty() != nil {
		data = in.GetPty()
	}
	if in.GetInput() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("invalid input type: input is empty"))
	}
	if err := t.cl.SendStdin(ctx, t.id, processID(pid), data, false); err != nil {
		return nil, processErr(err, pid)
	}
	return connect.NewResponse(&process.SendInputResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	t := targetOf(ctx)
	pid, err := s.resolve(t.id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := t.cl.SendStdin(ctx, t.id, processID(pid), nil, true); err != nil {
		return nil, processErr(err, pid)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	t := targetOf(ctx)
	pid, err := s.resolve(t.id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sig := ""
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case process.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		// envd looks the process up first: an unknown one is not_found
		// whatever the signal.
		if !s.known(t.id, pid) {
			return nil, notFoundPid(pid)
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal: %s", req.Msg.GetSignal()))
	}
	if err := t.cl.Signal(ctx, t.id, processID(pid), sig); err != nil {
		return nil, processErr(err, pid)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

func (s *processService) known(sandbox string, pid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.procs[sandbox][pid]
	return ok
}

// Update resizes a process's terminal.
func (s *processService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	t := targetOf(ctx)
	pid, err := s.resolve(t.id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if pty := req.Msg.GetPty(); pty != nil {
		err := t.cl.Resize(ctx, t.id, processID(pid), int(pty.GetSize().GetRows()), int(pty.GetSize().GetCols()))
		if errors.Is(err, events.ErrPTYNotFound) {
			return nil, connect.NewError(connect.CodeInternal, errors.New("error resizing tty: tty not assigned to process"))
		}
		if err != nil {
			return nil, processErr(err, pid)
		}
	}
	return connect.NewResponse(&process.UpdateResponse{}), nil
}

// processErr: a process sandboxio does not know (or no longer runs) is
// envd's not_found.
func processErr(err error, pid uint32) error {
	if errors.Is(err, events.ErrProcessNotFound) || errors.Is(err, events.ErrProcessExited) {
		return notFoundPid(pid)
	}
	return connectErrOf(err)
}
