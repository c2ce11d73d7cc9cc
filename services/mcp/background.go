package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxio/sandboxio/pkg/client"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// maxBackgroundPerSession bounds the background commands a session keeps
// (running or finished and not yet read).
const maxBackgroundPerSession = 16

// background is a command started with run_command background=true: a
// goroutine copies its output into bounded buffers until it exits.
type background struct {
	sandboxID, processID string
	argv                 []string
	started              time.Time
	p                    *client.Process
	stdout, stderr       *headTail
	done                 chan struct{}

	mu  sync.Mutex
	res *events.ExecResult
	err error
}

func (s *Server) startBackground(ctx context.Context, st *session, sb *client.Sandbox, argv []string, opts []client.ExecOption) (*mcp.CallToolResult, error) {
	st.mu.Lock()
	n := len(st.procs)
	st.mu.Unlock()
	if n >= maxBackgroundPerSession {
		return nil, events.Errorf(events.CodeQuotaExceeded, "this session keeps %d background commands, the most it may; read finished ones with command_status (which forgets them) or signal them", n)
	}
	// The process outlives this call: it is bound to the session, not to
	// the request's context (the session's end kills the sandbox). Its
	// output is streamed (command_status shows it while it runs), so it is
	// stored in SBX_OUT: only up to backgroundStore per stream, not the
	// streamed default of 1 GiB.
	opts = append(opts, client.OutputLimit(s.backgroundStore()))
	p, err := sb.Stream(context.WithoutCancel(ctx), argv, opts...)
	if err != nil {
		return nil, err
	}
	bg := &background{sandboxID: sb.ID(), processID: p.ProcessID, argv: argv, started: time.Now(), p: p,
		stdout: newHeadTail(s.cfg.MaxOutputBytes), stderr: newHeadTail(s.cfg.MaxOutputBytes), done: make(chan struct{})}
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		_ = p.Close()
		return nil, events.Errorf(events.CodeSandboxGone, "the session ended")
	}
	st.procs[p.ProcessID] = bg
	st.mu.Unlock()
	go bg.copy()
	res := textResult("started in the background: process_id %s in sandbox %s\ncall command_status with it for the output and the exit code", p.ProcessID, sb.ID())
	res.StructuredContent = map[string]any{"process_id": p.ProcessID, "sandbox_id": sb.ID()}
	return res, nil
}

// backgroundStore is how much of each stream of a background command the
// worker stores in SBX_OUT: many times what a reply shows, so that the
// tail command_status shows is the real one for all but floods, and at
// least 1 MiB.
func (s *Server) backgroundStore() int64 {
	return min(max(64*int64(s.cfg.MaxOutputBytes), 1<<20), events.MaxOutputLimit)
}

// copy reads the output until the process exits. It is waited for by
// stop, which the session's end calls.
func (bg *background) copy() {
	defer close(bg.done)
	for c, err := range bg.p.Chunks() {
		if err != nil {
			break
		}
		if c.Stream == events.Stderr {
			_, _ = bg.stderr.Write(c.Data)
		} else {
			_, _ = bg.stdout.Write(c.Data)
		}
	}
	res, err := bg.p.Wait()
	if res != nil { // what it wrote past the store's cap is said, not shown
		bg.stdout.produced(res.StdoutBytes)
		bg.stderr.produced(res.StderrBytes)
	}
	bg.mu.Lock()
	bg.res, bg.err = res, err
	bg.mu.Unlock()
}

// stop kills the process if it still runs and waits for its copier.
func (bg *background) stop() {
	_ = bg.p.Close()
	<-bg.done
}

type statusIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox of the command"`
	ProcessID string `json:"process_id" jsonschema:"the process_id run_command returned"`
	Wait      any    `json:"wait,omitempty" jsonschema:"wait up to this long for the command to finish: seconds or a duration (at most 60s); default 0"`
	Signal    string `json:"signal,omitempty" jsonschema:"send this signal first: TERM, INT, HUP, KILL"`
}

func (s *Server) commandStatus(ctx context.Context, st *session, in statusIn) (*mcp.CallToolResult, error) {
	if _, err := st.sandbox(in.SandboxID); err != nil {
		return nil, err
	}
	st.mu.Lock()
	bg, ok := st.procs[in.ProcessID]
	st.mu.Unlock()
	if !ok || bg.sandboxID != in.SandboxID {
		return nil, events.Errorf(events.CodeProcessNotFound, "no background command %q in sandbox %s in this session", in.ProcessID, in.SandboxID).With("field", "process_id")
	}
	wait, bad := duration("wait", in.Wait, 0, time.Minute)
	if bad != nil {
		return bad, nil
	}
	if in.Signal != "" {
		if err := s.cfg.Client.Signal(ctx, bg.sandboxID, bg.processID, strings.ToUpper(in.Signal)); err != nil {
			return nil, err
		}
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-bg.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	var b strings.Builder
	select {
	case <-bg.done:
		bg.mu.Lock()
		res, err := bg.res, bg.err
		bg.mu.Unlock()
		st.mu.Lock()
		delete(st.procs, in.ProcessID) // read once finished: forgotten
		st.mu.Unlock()
		if err != nil && res == nil {
			r := toolError(err)
			r.Content = append(r.Content, &mcp.TextContent{Text: "output before it ended:\nstdout:\n" + bg.stdout.String() + "\nstderr:\n" + bg.stderr.String()})
			return r, nil
		}
		fmt.Fprintf(&b, "state: exited\nexit_code: %d", res.ExitCode)
		if res.Signal != "" {
			fmt.Fprintf(&b, " (signal %s)", res.Signal)
		}
		if err != nil {
			fmt.Fprintf(&b, "\nerror: %v", err)
		}
		b.WriteString("\n")
	default:
		fmt.Fprintf(&b, "state: running for %s\n", time.Since(bg.started).Round(time.Second))
	}
	fmt.Fprintf(&b, "stdout:\n%s\nstderr:\n%s\n", orEmpty(bg.stdout.String()), orEmpty(bg.stderr.String()))
	return textResult("%s", b.String()), nil
}

func orEmpty(s string) string {
	if s == "" {
		return "(empty)"
	}
	return s
}
