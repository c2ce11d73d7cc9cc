package envd

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxio/sandboxio/internal/envdpb/process"
)

// Selector picks a process by PID or, when Tag is set, by tag.
type Selector struct {
	PID uint32
	Tag string
}

func (s Selector) proto() *process.ProcessSelector {
	if s.Tag != "" {
		return &process.ProcessSelector{Selector: &process.ProcessSelector_Tag{Tag: s.Tag}}
	}
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: s.PID}}
}

func (s Selector) String() string {
	if s.Tag != "" {
		return "tag " + s.Tag
	}
	return "pid " + strconv.FormatUint(uint64(s.PID), 10)
}

// Signal is a signal envd can send.
type Signal int32

// Signals supported by envd.
const (
	SIGTERM Signal = Signal(process.Signal_SIGNAL_SIGTERM)
	SIGKILL Signal = Signal(process.Signal_SIGNAL_SIGKILL)
)

// StartRequest describes a process to start.
type StartRequest struct {
	Cmd  string
	Args []string
	Envs map[string]string
	// Cwd defaults to the user's home directory.
	Cwd string
	// Tag names the process for Connect/SendInput/SendSignal by tag.
	Tag string
	// Stdin keeps stdin open for SendInput/CloseStdin (sent explicitly, as the
	// SDKs do; envd's default when omitted would be true).
	Stdin bool
	// PTY starts the process on a pseudo-terminal of this size (cols, rows).
	PTY *PTYSize
	// Timeout, when positive, is sent as Connect-Timeout-Ms: envd then kills
	// the process at the deadline and ends the stream with deadline_exceeded.
	// Zero means no process deadline (the caller's ctx deadline is NOT sent).
	Timeout time.Duration
}

// PTYSize is a terminal size.
type PTYSize struct{ Cols, Rows uint32 }

// EventType is the kind of a process event.
type EventType int

// Event types.
const (
	EventStart EventType = iota + 1
	EventStdout
	EventStderr
	EventPTY
	EventEnd
	EventKeepalive
)

func (t EventType) String() string {
	switch t {
	case EventStart:
		return "start"
	case EventStdout:
		return "stdout"
	case EventStderr:
		return "stderr"
	case EventPTY:
		return "pty"
	case EventEnd:
		return "end"
	case EventKeepalive:
		return "keepalive"
	}
	return "unknown"
}

// Exit is the content of an end event.
type Exit struct {
	// ExitCode is -1 when the process was killed by a signal.
	ExitCode int
	// Exited is false when the process was killed by a signal.
	Exited bool
	// Status is e.g. "exit status 3" or "signal: killed".
	Status string
	// Error is set for a non-zero exit or a signal.
	Error string
}

// Event is one process event.
type Event struct {
	Type EventType
	PID  uint32 // EventStart
	Data []byte // EventStdout, EventStderr, EventPTY
	Exit *Exit  // EventEnd
}

// Stream is an open process event stream (from Start or Connect).
type Stream struct {
	op     string
	recv   func() (*process.ProcessEvent, error)
	close  func() error
	cancel context.CancelFunc
}

// Recv returns the next event. After the end event it returns io.EOF once the
// stream is finished. A stream that ends cleanly without an end event also
// returns io.EOF; Run turns that into ErrStreamBroken/ErrSandboxGone.
func (s *Stream) Recv() (Event, error) {
	for {
		pe, err := s.recv()
		if err != nil {
			return Event{}, err
		}
		if ev, ok := convertEvent(pe); ok {
			return ev, nil
		}
	}
}

// Close cancels the stream. The process keeps running (envd semantics).
func (s *Stream) Close() error {
	s.cancel()
	return s.close()
}

func convertEvent(pe *process.ProcessEvent) (Event, bool) {
	switch e := pe.GetEvent().(type) {
	case *process.ProcessEvent_Start:
		return Event{Type: EventStart, PID: e.Start.GetPid()}, true
	case *process.ProcessEvent_Data:
		switch d := e.Data.GetOutput().(type) {
		case *process.ProcessEvent_DataEvent_Stdout:
			return Event{Type: EventStdout, Data: d.Stdout}, true
		case *process.ProcessEvent_DataEvent_Stderr:
			return Event{Type: EventStderr, Data: d.Stderr}, true
		case *process.ProcessEvent_DataEvent_Pty:
			return Event{Type: EventPTY, Data: d.Pty}, true
		}
	case *process.ProcessEvent_End:
		return Event{Type: EventEnd, Exit: &Exit{
			ExitCode: int(e.End.GetExitCode()),
			Exited:   e.End.GetExited(),
			Status:   e.End.GetStatus(),
			Error:    e.End.GetError(),
		}}, true
	case *process.ProcessEvent_Keepalive:
		return Event{Type: EventKeepalive}, true
	}
	return Event{}, false // unknown event kinds from newer envd versions are skipped
}

// streamCtx detaches the caller's deadline (connect-go would otherwise send it
// as Connect-Timeout-Ms, which envd uses as the process lifetime) while still
// cancelling the stream when ctx is done.
func streamCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return sctx, func() { stop(); cancel() }
}

type serverStream[T interface{ GetEvent() *process.ProcessEvent }] interface {
	Receive() bool
	Msg() T
	Err() error
	Close() error
}

func newStream[T interface{ GetEvent() *process.ProcessEvent }](op string, s serverStream[T], cancel context.CancelFunc) *Stream {
	return &Stream{
		op:     op,
		cancel: cancel,
		close:  s.Close,
		recv: func() (*process.ProcessEvent, error) {
			if s.Receive() {
				return s.Msg().GetEvent(), nil
			}
			if err := s.Err(); err != nil {
				return nil, fromConnect(op, err)
			}
			return nil, io.EOF
		},
	}
}

func (c *Client) keepaliveHeader() string {
	return strconv.FormatInt(int64(c.cfg.KeepaliveInterval/time.Second), 10)
}

// Start starts a process and returns its event stream; the first event is
// EventStart. Errors that envd reports in the stream (bad cwd, unknown user)
// come from the first Recv.
func (c *Client) Start(ctx context.Context, sr StartRequest) (*Stream, error) {
	cfg := &process.ProcessConfig{Cmd: sr.Cmd, Args: sr.Args, Envs: sr.Envs}
	if sr.Cwd != "" {
		cfg.Cwd = &sr.Cwd
	}
	msg := &process.StartRequest{Process: cfg, Stdin: &sr.Stdin}
	if sr.Tag != "" {
		msg.Tag = &sr.Tag
	}
	if sr.PTY != nil {
		msg.Pty = &process.PTY{Size: &process.PTY_Size{Cols: sr.PTY.Cols, Rows: sr.PTY.Rows}}
	}
	req := connect.NewRequest(msg)
	req.Header().Set(HeaderKeepalive, c.keepaliveHeader())
	if sr.Timeout > 0 {
		req.Header().Set(HeaderTimeout, strconv.FormatInt(max(1, sr.Timeout.Milliseconds()), 10))
	}
	sctx, cancel := streamCtx(ctx)
	s, err := c.process.Start(sctx, req)
	if err != nil {
		cancel()
		return nil, c.classify(ctx, fromConnect("start", err))
	}
	return newStream("start", s, cancel), nil
}

// Connect re-attaches to a running process (or one that exited in the last
// 30 s). The stream starts with EventStart and then carries only output
// produced after the re-attach.
func (c *Client) Connect(ctx context.Context, sel Selector) (*Stream, error) {
	req := connect.NewRequest(&process.ConnectRequest{Process: sel.proto()})
	req.Header().Set(HeaderKeepalive, c.keepaliveHeader())
	sctx, cancel := streamCtx(ctx)
	s, err := c.process.Connect(sctx, req)
	if err != nil {
		cancel()
		return nil, c.classify(ctx, fromConnect("connect", err))
	}
	return newStream("connect", s, cancel), nil
}

// SendInput writes to the process's stdin (or its PTY when pty is true).
func (c *Client) SendInput(ctx context.Context, sel Selector, data []byte, pty bool) error {
	in := &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}}
	if pty {
		in = &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}}
	}
	_, err := c.process.SendInput(ctx, connect.NewRequest(&process.SendInputRequest{Process: sel.proto(), Input: in}))
	return c.classify(ctx, wrapUnary("send_input", err))
}

// Resize changes the size of a process's PTY (process.Update).
func (c *Client) Resize(ctx context.Context, sel Selector, size PTYSize) error {
	_, err := c.process.Update(ctx, connect.NewRequest(&process.UpdateRequest{Process: sel.proto(),
		Pty: &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}}}))
	return c.classify(ctx, wrapUnary("update", err))
}

// CloseStdin closes the process's stdin (envd >= 0.5.2).
func (c *Client) CloseStdin(ctx context.Context, sel Selector) error {
	_, err := c.process.CloseStdin(ctx, connect.NewRequest(&process.CloseStdinRequest{Process: sel.proto()}))
	return c.classify(ctx, wrapUnary("close_stdin", err))
}

// SendSignal sends SIGTERM or SIGKILL. A process that already exited gives
// an error matching ErrNotFound.
func (c *Client) SendSignal(ctx context.Context, sel Selector, sig Signal) error {
	_, err := c.process.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{Process: sel.proto(), Signal: process.Signal(sig)}))
	return c.classify(ctx, wrapUnary("send_signal", err))
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
}

// List returns the running processes.
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, err := c.process.List(ctx, connect.NewRequest(&process.ListRequest{}))
	if err != nil {
		return nil, c.classify(ctx, wrapUnary("list", err))
	}
	out := make([]ProcessInfo, 0, len(resp.Msg.GetProcesses()))
	for _, p := range resp.Msg.GetProcesses() {
		out = append(out, ProcessInfo{
			PID: p.GetPid(), Tag: p.GetTag(),
			Cmd: p.GetConfig().GetCmd(), Args: p.GetConfig().GetArgs(),
			Envs: p.GetConfig().GetEnvs(), Cwd: p.GetConfig().GetCwd(),
		})
	}
	return out, nil
}

func wrapUnary(op string, err error) error {
	if err == nil {
		return nil
	}
	return fromConnect(op, err)
}

// errNoEnd is the cause recorded when a stream finished without an end event.
var errNoEnd = errors.New("process stream ended without an end event")
