package modalapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/modalclient"
	tcr "github.com/sandboxio/sandboxio/services/modal-worker/internal/gen/taskcommandrouter"
)

// Router retry policy: the SDKs' 10 retries, 10 ms doubling without a cap
// (about 10 s in all), for calls and for each stdio stream.
const (
	routerRetries    = 10
	routerBaseDelay  = 10 * time.Millisecond
	stdinStreamChunk = 256 << 10
)

// Until the router first answers, UNAVAILABLE is retried as Modal's Python
// SDK retries its connection to a router, "the sandbox may take a long time
// to start on the worker": 34 attempts, 1 s doubling, capped at 10 s
// (about 5 min in all), always bounded by the caller's context.
const (
	connectRetries   = 33
	connectBaseDelay = time.Second
	connectMaxDelay  = 10 * time.Second
)

// Router is a connection to the TaskCommandRouter of one task. Its JWT
// comes from TaskGetCommandRouterAccess and is refreshed on UNAUTHENTICATED.
type Router struct {
	c      *Client
	taskID string
	conn   *grpc.ClientConn
	api    tcr.TaskCommandRouterClient

	mu       sync.Mutex
	jwt      string
	inflight chan struct{}
	gen      int // bumped by every refresh
	lastErr  error

	reached atomic.Bool // the router has answered once (anything but UNAVAILABLE)
}

// OpenRouter asks for the task's router access and connects to it (the
// connection itself is lazy).
func (c *Client) OpenRouter(ctx context.Context, taskID string) (*Router, error) {
	acc, err := c.api.TaskGetCommandRouterAccess(ctx, &pb.TaskGetCommandRouterAccessRequest{TaskId: taskID})
	if err != nil {
		return nil, fmt.Errorf("modalapi: TaskGetCommandRouterAccess: %w", err)
	}
	if _, err := JWTClaims(acc.GetJwt()); err != nil {
		return nil, fmt.Errorf("modalapi: router access for %s: %w", taskID, err)
	}
	u, err := url.Parse(acc.GetUrl())
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("modalapi: router URL %q is not a URL", acc.GetUrl())
	}
	var creds credentials.TransportCredentials
	switch {
	case u.Scheme == "https" && c.local:
		// As Modal's Go SDK: a localhost control plane means a plaintext
		// router, whatever the scheme says.
		creds = insecure.NewCredentials()
	case u.Scheme == "https":
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case u.Scheme == "http" && c.local:
		creds = insecure.NewCredentials()
	default:
		return nil, fmt.Errorf("modalapi: router URL %q: want https://", acc.GetUrl())
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	r := &Router{c: c, taskID: taskID, jwt: acc.GetJwt()}
	conn, err := grpc.NewClient(hostPort(u.Hostname(), port), append(dialOptions(creds), grpc.WithPerRPCCredentials(jwtCreds{r}))...)
	if err != nil {
		return nil, fmt.Errorf("modalapi: dial router: %w", err)
	}
	r.conn = conn
	r.api = tcr.NewTaskCommandRouterClient(conn)
	return r, nil
}

// TaskID is the task the router serves.
func (r *Router) TaskID() string { return r.taskID }

// Close closes the router connection.
func (r *Router) Close() error { return r.conn.Close() }

// jwtCreds sends only authorization: Bearer <jwt> (none of the x-modal-*
// headers go to the router).
type jwtCreds struct{ r *Router }

func (j jwtCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	return map[string]string{"authorization": "Bearer " + j.r.jwt}, nil
}
func (jwtCreds) RequireTransportSecurity() bool { return false }

func (r *Router) generation() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// refresh fetches a new JWT unless another refresh since gen already did.
func (r *Router) refresh(ctx context.Context, gen int) error {
	for {
		r.mu.Lock()
		if r.gen != gen {
			err := r.lastErr
			r.mu.Unlock()
			return err
		}
		if ch := r.inflight; ch != nil {
			r.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		ch := make(chan struct{})
		r.inflight = ch
		r.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		acc, err := r.c.api.TaskGetCommandRouterAccess(cctx, &pb.TaskGetCommandRouterAccessRequest{TaskId: r.taskID})
		cancel()
		if err == nil {
			if _, perr := JWTClaims(acc.GetJwt()); perr != nil {
				err = fmt.Errorf("modalapi: refreshed router JWT: %w", perr)
			}
		} else {
			err = fmt.Errorf("modalapi: refresh router access: %w", err)
		}
		r.mu.Lock()
		if err == nil {
			r.jwt = acc.GetJwt()
		}
		r.gen++
		r.lastErr = err
		r.inflight = nil
		close(ch)
		r.mu.Unlock()
		return err
	}
}

// observe records that the router answered (an error other than
// UNAVAILABLE is an answer too).
func (r *Router) observe(err error) {
	if err == nil || status.Code(err) != codes.Unavailable {
		r.reached.Store(true)
	}
}

// connecting reports whether err is the router not being up yet: it has
// never answered and says UNAVAILABLE.
func (r *Router) connecting(err error) bool {
	return !r.reached.Load() && status.Code(err) == codes.Unavailable
}

// call runs one unary router RPC with the router retry policy (the connect
// policy until the router first answers) and one JWT refresh per
// UNAUTHENTICATED.
func (r *Router) call(ctx context.Context, f func(ctx context.Context) error) error {
	delay, cdelay := routerBaseDelay, connectBaseDelay
	for attempt, cattempt := 0, 0; ; {
		gen := r.generation()
		err := f(ctx)
		r.observe(err)
		if err == nil || ctx.Err() != nil {
			return err
		}
		code := status.Code(err)
		switch {
		case r.connecting(err) && cattempt < connectRetries:
			if !sleep(ctx, cdelay) {
				return err
			}
			cattempt++
			cdelay = min(2*cdelay, connectMaxDelay)
			continue
		case code == codes.Unauthenticated && attempt < routerRetries:
			attempt++
			if rerr := r.refresh(ctx, gen); rerr != nil {
				return errors.Join(err, rerr)
			}
			continue
		case !Retryable(code) || attempt >= routerRetries:
			return err
		}
		if !sleep(ctx, delay) {
			return err
		}
		attempt++
		delay *= 2
	}
}

// ExecStart starts a process (idempotent on req.ExecId).
func (r *Router) ExecStart(ctx context.Context, req *tcr.TaskExecStartRequest) error {
	req.TaskId = r.taskID
	return r.call(ctx, func(ctx context.Context) error {
		_, err := r.api.TaskExecStart(ctx, req)
		return err
	})
}

// ReadStdio copies one stdio stream of an exec to w until the stream ends
// (the fd reached EOF). A broken stream is reopened at the number of bytes
// received so far, so nothing is lost or repeated; it gives up after 10
// consecutive failures. It returns the bytes written.
func (r *Router) ReadStdio(ctx context.Context, execID string, fd tcr.TaskExecStdioFileDescriptor, w io.Writer) (int64, error) {
	var off uint64
	fails := 0
	delay := routerBaseDelay
	for {
		gen := r.generation()
		err := func() error {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stream, err := r.api.TaskExecStdioRead(sctx, &tcr.TaskExecStdioReadRequest{TaskId: r.taskID, ExecId: execID, Offset: off, FileDescriptor: fd})
			if err != nil {
				return err
			}
			for {
				msg, err := stream.Recv()
				if err != nil {
					return err
				}
				if d := msg.GetData(); len(d) > 0 {
					if _, werr := w.Write(d); werr != nil {
						return &writeError{werr}
					}
					off += uint64(len(d))
					fails, delay = 0, routerBaseDelay
				}
			}
		}()
		r.observe(err)
		if errors.Is(err, io.EOF) {
			return int64(off), nil
		}
		var we *writeError
		if errors.As(err, &we) {
			return int64(off), we.err
		}
		if ctx.Err() != nil {
			return int64(off), ctx.Err()
		}
		code := status.Code(err)
		if fails >= routerRetries || (code != codes.Unauthenticated && !Retryable(code)) {
			return int64(off), fmt.Errorf("modalapi: stdio stream of exec %s: %w", execID, err)
		}
		fails++
		if code == codes.Unauthenticated {
			if rerr := r.refresh(ctx, gen); rerr != nil {
				return int64(off), errors.Join(err, rerr)
			}
			continue
		}
		if !sleep(ctx, delay) {
			// Stopped while the stream was failing: that failure, not the
			// stop, is why output is missing.
			return int64(off), fmt.Errorf("modalapi: stdio stream of exec %s: %w", execID, err)
		}
		delay *= 2
	}
}

type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// WriteStdin writes data at offset (idempotent across retries: the server
// drops what it already has) and closes stdin when eof.
func (r *Router) WriteStdin(ctx context.Context, execID string, offset uint64, data []byte, eof bool) error {
	return r.call(ctx, func(ctx context.Context) error {
		_, err := r.api.TaskExecStdinWrite(ctx, &tcr.TaskExecStdinWriteRequest{TaskId: r.taskID, ExecId: execID, Offset: offset, Data: data, Eof: eof})
		return err
	})
}

// StdinStatus reports how many stdin bytes the exec received and whether
// its stdin is closed.
func (r *Router) StdinStatus(ctx context.Context, execID string) (uint64, bool, error) {
	var resp *tcr.TaskExecStdinStatusResponse
	err := r.call(ctx, func(ctx context.Context) error {
		var err error
		resp, err = r.api.TaskExecStdinStatus(ctx, &tcr.TaskExecStdinStatusRequest{TaskId: r.taskID, ExecId: execID})
		return err
	})
	return resp.GetNumBytesWritten(), resp.GetClosed(), err
}

// WriteStdinStream sends data through TaskExecStdinWriteStream in 256 KiB
// chunks and ends it (closing stdin). A broken stream is resumed at the
// offset TaskExecStdinStatus reports (up to 9 times).
func (r *Router) WriteStdinStream(ctx context.Context, execID string, data []byte) error {
	var off uint64
	var lastErr error
	for resume := 0; resume < 10; resume++ {
		gen := r.generation()
		err := r.sendStdinStream(ctx, execID, data, off)
		if err == nil {
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		code := status.Code(err)
		if code == codes.FailedPrecondition || code == codes.Aborted {
			return err // the binary exited early
		}
		if code == codes.Unauthenticated {
			if rerr := r.refresh(ctx, gen); rerr != nil {
				return errors.Join(err, rerr)
			}
		} else if !Retryable(code) {
			return err
		}
		n, closed, serr := r.StdinStatus(ctx, execID)
		if serr != nil {
			return errors.Join(err, serr)
		}
		if closed && n == uint64(len(data)) {
			return nil // done; only the answer was lost
		}
		if n > uint64(len(data)) {
			return fmt.Errorf("modalapi: router has %d stdin bytes of %d", n, len(data))
		}
		off = n
	}
	return lastErr
}

func (r *Router) sendStdinStream(ctx context.Context, execID string, data []byte, off uint64) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := r.api.TaskExecStdinWriteStream(sctx)
	if err != nil {
		return err
	}
	send := func(m *tcr.TaskExecStdinWriteStreamRequest) error {
		if err := st.Send(m); err != nil {
			if errors.Is(err, io.EOF) {
				_, rerr := st.CloseAndRecv()
				return rerr
			}
			return err
		}
		return nil
	}
	start := &tcr.TaskExecStdinWriteStreamRequest{Payload: &tcr.TaskExecStdinWriteStreamRequest_Start{Start: &tcr.TaskExecStdinWriteStreamStart{TaskId: r.taskID, ExecId: execID, Offset: off}}}
	if err := send(start); err != nil {
		return err
	}
	for rest := data[off:]; len(rest) > 0; {
		n := min(len(rest), stdinStreamChunk)
		if err := send(&tcr.TaskExecStdinWriteStreamRequest{Payload: &tcr.TaskExecStdinWriteStreamRequest_Data{Data: rest[:n]}}); err != nil {
			return err
		}
		rest = rest[n:]
	}
	if err := send(&tcr.TaskExecStdinWriteStreamRequest{Payload: &tcr.TaskExecStdinWriteStreamRequest_End{End: &tcr.TaskExecStdinWriteStreamEnd{}}}); err != nil {
		return err
	}
	_, err = st.CloseAndRecv()
	return err
}

// Exit is how an exec ended: a code, or the signal that killed it.
type Exit struct {
	Code   int
	Signal int // 0 unless killed by a signal
}

// ErrUnexpectedExit: TaskExecWait answered with neither a code nor a signal.
var ErrUnexpectedExit = errors.New("modalapi: unexpected exit status")

// Wait blocks until the exec exits. Each call is bounded at 60 s and
// re-issued (1 s apart on transient errors) until ctx ends; NOT_FOUND means
// the task is gone.
func (r *Router) Wait(ctx context.Context, execID string) (Exit, error) {
	for {
		gen := r.generation()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		resp, err := r.api.TaskExecWait(wctx, &tcr.TaskExecWaitRequest{TaskId: r.taskID, ExecId: execID})
		cancel()
		if err == nil {
			switch st := resp.GetExitStatus().(type) {
			case *tcr.TaskExecWaitResponse_Code:
				return Exit{Code: int(st.Code)}, nil
			case *tcr.TaskExecWaitResponse_Signal:
				return Exit{Code: 128 + int(st.Signal), Signal: int(st.Signal)}, nil
			}
			return Exit{}, ErrUnexpectedExit
		}
		if ctx.Err() != nil {
			return Exit{}, ctx.Err()
		}
		code := status.Code(err)
		switch {
		case code == codes.Unauthenticated:
			if rerr := r.refresh(ctx, gen); rerr != nil {
				return Exit{}, errors.Join(err, rerr)
			}
		case Retryable(code):
			if !sleep(ctx, time.Second) {
				return Exit{}, ctx.Err()
			}
		default:
			return Exit{}, fmt.Errorf("modalapi: wait for exec %s: %w", execID, err)
		}
	}
}
