package modalfake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxio/sandboxio/internal/fakejail"
	tcr "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/taskcommandrouter"
)

// FSToolsPath is the path of Modal's file helper inside every sandbox.
const FSToolsPath = "/__modal/.bin/modal-sandbox-fs-tools"

type routerServer struct {
	tcr.UnimplementedTaskCommandRouterServer
	s *Server
}

// task finds the running sandbox of a task and checks the JWT was issued
// for it.
func (s *Server) task(ctx context.Context, method, taskID string) (*sandbox, error) {
	if !reTaskID.MatchString(taskID) {
		s.deviate("%s: task_id %q is not a task id", method, taskID)
		return nil, status.Errorf(codes.InvalidArgument, "invalid task_id %q", taskID)
	}
	if jwtTask, _ := ctx.Value(taskKey{}).(string); jwtTask != taskID {
		return nil, status.Errorf(codes.PermissionDenied, "the jwt was issued for task %q", jwtTask)
	}
	s.mu.Lock()
	sb := s.tasks[taskID]
	s.mu.Unlock()
	if sb == nil || !sb.running() {
		return nil, status.Errorf(codes.NotFound, "Task %s not found", taskID)
	}
	return sb, nil
}

func (s *Server) execFor(ctx context.Context, method, taskID, execID string) (*sandbox, *proc, error) {
	sb, err := s.task(ctx, method, taskID)
	if err != nil {
		return nil, nil, err
	}
	if !reUUID4.MatchString(execID) {
		s.deviate("%s: exec_id %q is not a UUIDv4", method, execID)
		return nil, nil, status.Errorf(codes.InvalidArgument, "invalid exec_id %q", execID)
	}
	sb.mu.Lock()
	p := sb.execs[execID]
	sb.mu.Unlock()
	if p == nil {
		return nil, nil, status.Errorf(codes.NotFound, "Exec %s not found", execID)
	}
	return sb, p, nil
}

func (r *routerServer) TaskExecStart(ctx context.Context, req *tcr.TaskExecStartRequest) (*tcr.TaskExecStartResponse, error) {
	s := r.s
	sb, err := s.task(ctx, "TaskExecStart", req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if !reUUID4.MatchString(req.GetExecId()) {
		s.deviate("TaskExecStart: exec_id %q is not a UUIDv4", req.GetExecId())
		return nil, status.Error(codes.InvalidArgument, "invalid exec_id")
	}
	args := req.GetCommandArgs()
	if len(args) == 0 || args[0] == "" {
		s.deviate("TaskExecStart: empty command_args")
		return nil, status.Error(codes.InvalidArgument, "empty command_args")
	}
	total := 0
	for _, a := range args {
		total += len(a)
	}
	if total > 65536 {
		s.deviate("TaskExecStart: command_args total %d bytes > 65536 (the SDKs refuse this client-side)", total)
		return nil, status.Error(codes.InvalidArgument, "command too long")
	}
	if req.GetStderrConfig() == tcr.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_STDOUT {
		s.deviate("TaskExecStart: stderr_config STDOUT (Modal's own mock asserts clients never send it)")
	}
	if req.GetContainerId() != "" {
		return nil, status.Error(codes.Unimplemented, "modalfake: sidecar containers are not supported")
	}
	if req.GetPtyInfo().GetEnabled() {
		return nil, status.Error(codes.Unimplemented, "modalfake: PTY execs are not supported")
	}
	wd := "/"
	if req.Workdir != nil {
		if !strings.HasPrefix(req.GetWorkdir(), "/") {
			s.deviate("TaskExecStart: workdir %q is not absolute", req.GetWorkdir())
			return nil, status.Error(codes.InvalidArgument, "workdir must be absolute")
		}
		wd = req.GetWorkdir()
	}
	env := map[string]string{"PATH": fakejail.DefaultPath, "HOME": "/root"}
	s.mu.Lock()
	for _, sid := range req.GetSecretIds() {
		sec, ok := s.secrets[sid]
		if !ok {
			s.mu.Unlock()
			return nil, status.Errorf(codes.NotFound, "Secret %s not found", sid)
		}
		for k, v := range sec {
			env[k] = v
		}
	}
	s.mu.Unlock()
	sb.mu.Lock()
	for k, v := range sb.env {
		if _, set := env[k]; !set || k == "PATH" || k == "HOME" {
			env[k] = v
		}
	}
	for k, v := range req.GetEnv() {
		env[k] = v
	}
	if _, dup := sb.execs[req.GetExecId()]; dup {
		sb.mu.Unlock()
		return &tcr.TaskExecStartResponse{}, nil // idempotent on exec_id
	}
	p := newProc(req.GetExecId())
	sb.execs[p.id] = p
	sb.mu.Unlock()

	pipe := [2]bool{req.GetStdoutConfig() == tcr.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_PIPE,
		req.GetStderrConfig() == tcr.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_PIPE}
	if args[0] == FSToolsPath {
		p.stdinMu.Lock()
		p.stdin = &bufferCloser{buf: new(bytes.Buffer), closed: make(chan struct{})}
		p.stdinMu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runFSTools(sb, p, args, pipe)
		}()
		return &tcr.TaskExecStartResponse{}, nil
	}
	cmd := fakejail.Command(DetectJail(), sb.root, wd, nil, args)
	sb.net.wrap(cmd)
	envList := make([]string, 0, len(env))
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	sort.Strings(envList)
	cmd.Env = envList
	if DetectJail() == fakejail.None {
		cmd.Env = append(cmd.Env, "HOME="+sb.root+"/root")
	}
	if err := p.start(cmd, pipe, &s.wg); err != nil {
		p.closeOut(0)
		p.closeOut(1)
		p.appendOut(1, []byte("modalfake: "+err.Error()+"\n"))
		p.setExit(127, 0)
		return &tcr.TaskExecStartResponse{}, nil
	}
	if req.TimeoutSecs != nil && req.GetTimeoutSecs() > 0 {
		p.mu.Lock()
		p.timer = time.AfterFunc(time.Duration(req.GetTimeoutSecs())*time.Second, func() { p.kill(syscall.SIGKILL) })
		p.mu.Unlock()
	}
	if !sb.running() { // terminated while starting
		p.kill(syscall.SIGKILL)
	}
	return &tcr.TaskExecStartResponse{}, nil
}

// ReadChunk is the largest data message of a stdio stream (as Modal's mock).
const ReadChunk = 4096

func (r *routerServer) TaskExecStdioRead(req *tcr.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[tcr.TaskExecStdioReadResponse]) error {
	s := r.s
	ctx := stream.Context()
	sb, p, err := s.execFor(ctx, "TaskExecStdioRead", req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	fd := 0
	switch req.GetFileDescriptor() {
	case tcr.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT:
	case tcr.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR:
		fd = 1
	default:
		s.deviate("TaskExecStdioRead: file_descriptor %v", req.GetFileDescriptor())
		return status.Error(codes.InvalidArgument, "invalid file_descriptor")
	}
	s.mu.Lock()
	breakAfter := -1
	if s.faults.breakStdio > 0 {
		s.faults.breakStdio--
		breakAfter = s.faults.breakStdioAfter
	}
	s.mu.Unlock()
	off := req.GetOffset()
	p.mu.Lock()
	have := uint64(len(p.out[fd]))
	p.mu.Unlock()
	if off > have {
		// Offsets count bytes received: one past the history is a client bug.
		s.deviate("TaskExecStdioRead: offset %d is past the %d bytes produced", off, have)
		return status.Error(codes.OutOfRange, "offset past the output")
	}
	sent := 0
	for {
		data, eof, changed := p.snapshot(fd, off)
		for len(data) > 0 {
			n := min(len(data), ReadChunk)
			if breakAfter >= 0 && sent+n > breakAfter {
				n = breakAfter - sent
				if n > 0 {
					if err := stream.Send(&tcr.TaskExecStdioReadResponse{Data: data[:n]}); err != nil {
						return err
					}
				}
				return status.Error(codes.Unavailable, "modalfake: injected stream break")
			}
			if err := stream.Send(&tcr.TaskExecStdioReadResponse{Data: data[:n]}); err != nil {
				return err
			}
			data = data[n:]
			off += uint64(n)
			sent += n
		}
		if eof {
			if breakAfter >= 0 {
				return status.Error(codes.Unavailable, "modalfake: injected stream break before the end")
			}
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-sb.done:
			// The task is gone; whatever the process wrote is still sent
			// once its pipe closes, unless that takes too long.
			select {
			case <-changed:
			case <-time.After(2 * time.Second):
				return status.Error(codes.NotFound, "task finished")
			case <-ctx.Done():
				return status.FromContextError(ctx.Err()).Err()
			}
		}
	}
}

func stdinError(err error) error {
	switch {
	case errors.Is(err, errStdinGap):
		return status.Error(codes.FailedPrecondition, "stdin offset mismatch")
	case errors.Is(err, errStdinClosed):
		return status.Error(codes.FailedPrecondition, "stdin is closed")
	}
	return status.Error(codes.Internal, err.Error())
}

func (r *routerServer) TaskExecStdinWrite(ctx context.Context, req *tcr.TaskExecStdinWriteRequest) (*tcr.TaskExecStdinWriteResponse, error) {
	_, p, err := r.s.execFor(ctx, "TaskExecStdinWrite", req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := p.writeStdin(req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
		return nil, stdinError(err)
	}
	return &tcr.TaskExecStdinWriteResponse{}, nil
}

func (r *routerServer) TaskExecStdinWriteStream(stream grpc.ClientStreamingServer[tcr.TaskExecStdinWriteStreamRequest, tcr.TaskExecStdinWriteStreamResponse]) error {
	s := r.s
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		s.deviate("TaskExecStdinWriteStream: first message is not start")
		return status.Error(codes.InvalidArgument, "first message must be start")
	}
	_, p, err := s.execFor(ctx, "TaskExecStdinWriteStream", start.GetTaskId(), start.GetExecId())
	if err != nil {
		return err
	}
	if n, _ := p.stdinStatus(); start.GetOffset() != n {
		return status.Error(codes.FailedPrecondition, "stdin offset mismatch")
	}
	off := start.GetOffset()
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil // a stream without end leaves stdin open
		}
		if err != nil {
			return err
		}
		switch pl := m.GetPayload().(type) {
		case *tcr.TaskExecStdinWriteStreamRequest_Data:
			if err := p.writeStdin(off, pl.Data, false); err != nil {
				return stdinError(err)
			}
			off += uint64(len(pl.Data))
		case *tcr.TaskExecStdinWriteStreamRequest_End:
			if err := p.writeStdin(off, nil, true); err != nil {
				return stdinError(err)
			}
			s.mu.Lock()
			lose := s.faults.breakStdinEnd > 0
			if lose {
				s.faults.breakStdinEnd--
			}
			s.mu.Unlock()
			if lose {
				return status.Error(codes.Unavailable, "modalfake: injected break after end")
			}
			return stream.SendAndClose(&tcr.TaskExecStdinWriteStreamResponse{})
		case *tcr.TaskExecStdinWriteStreamRequest_Start:
			s.deviate("TaskExecStdinWriteStream: a second start message")
			return status.Error(codes.InvalidArgument, "start must come first and once")
		default:
			s.deviate("TaskExecStdinWriteStream: empty message")
			return status.Error(codes.InvalidArgument, "empty payload")
		}
	}
}

func (r *routerServer) TaskExecStdinStatus(ctx context.Context, req *tcr.TaskExecStdinStatusRequest) (*tcr.TaskExecStdinStatusResponse, error) {
	_, p, err := r.s.execFor(ctx, "TaskExecStdinStatus", req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	n, closed := p.stdinStatus()
	return &tcr.TaskExecStdinStatusResponse{NumBytesWritten: n, Closed: closed}, nil
}

func (r *routerServer) TaskExecWait(ctx context.Context, req *tcr.TaskExecWaitRequest) (*tcr.TaskExecWaitResponse, error) {
	sb, p, err := r.s.execFor(ctx, "TaskExecWait", req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-p.exitCh:
	case <-sb.done:
		return nil, status.Errorf(codes.NotFound, "Task %s not found", req.GetTaskId())
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	_, code, sig := p.exitStatus()
	if sig != 0 {
		return &tcr.TaskExecWaitResponse{ExitStatus: &tcr.TaskExecWaitResponse_Signal{Signal: sig}}, nil
	}
	return &tcr.TaskExecWaitResponse{ExitStatus: &tcr.TaskExecWaitResponse_Code{Code: code}}, nil
}

func (r *routerServer) TaskExecPoll(ctx context.Context, req *tcr.TaskExecPollRequest) (*tcr.TaskExecPollResponse, error) {
	_, p, err := r.s.execFor(ctx, "TaskExecPoll", req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	exited, code, sig := p.exitStatus()
	switch {
	case !exited:
		return &tcr.TaskExecPollResponse{}, nil
	case sig != 0:
		return &tcr.TaskExecPollResponse{ExitStatus: &tcr.TaskExecPollResponse_Signal{Signal: sig}}, nil
	}
	return &tcr.TaskExecPollResponse{ExitStatus: &tcr.TaskExecPollResponse_Code{Code: code}}, nil
}
