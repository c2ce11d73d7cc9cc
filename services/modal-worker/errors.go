package modalworker

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
)

// classified is an SBX error that keeps its cause for errors.Is/As.
type classified struct {
	sbx   *events.Error
	cause error
}

func (e *classified) Error() string   { return e.sbx.Error() }
func (e *classified) Unwrap() []error { return []error{e.sbx, e.cause} }

func wrap(sbx *events.Error, cause error) error {
	if cause == nil {
		return sbx
	}
	return &classified{sbx: sbx, cause: cause}
}

// grpcMessage is the server's message of a gRPC error (never a secret: the
// server does not echo tokens).
func grpcMessage(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Code().String() + ": " + st.Message()
	}
	return err.Error()
}

// sbxError maps a failure of Modal's API onto an SBX code. Context errors
// of the caller are returned as they are: the runtime reports timeouts and
// cancellation itself.
func sbxError(err error, op string) error {
	if err == nil {
		return nil
	}
	var sbx *events.Error
	if errors.As(err, &sbx) {
		return err
	}
	var te *modalapi.ThrottledError
	if errors.As(err, &te) {
		return wrap(events.Errorf(events.CodeRateLimited, "modal %s: throttled, retry after %s", op, te.RetryAfter).With("retry_after_ms", te.RetryAfter.Milliseconds()), err)
	}
	if errors.Is(err, modalapi.ErrNoCredentials) {
		return wrap(events.Errorf(events.CodeUnauthorized, "modal %s: %v", op, err), err)
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return wrap(events.Errorf(events.CodeBackendError, "modal %s: %v", op, err), err)
	}
	code := events.CodeBackendError
	switch st.Code() {
	case codes.Unauthenticated:
		code = events.CodeUnauthorized
	case codes.PermissionDenied:
		code = events.CodeForbidden
	case codes.ResourceExhausted:
		code = events.CodeRateLimited
	case codes.Unavailable, codes.Unknown:
		code = events.CodeBackendUnavailable
	case codes.DeadlineExceeded, codes.Canceled:
		code = events.CodeBackendUnavailable
	case codes.NotFound:
		code = events.CodeSandboxGone
	case codes.InvalidArgument, codes.OutOfRange:
		code = events.CodeInvalidValue
	}
	return wrap(events.Errorf(code, "modal %s: %s", op, grpcMessage(err)), err)
}

// isCode reports whether err carries the gRPC code c.
func isCode(err error, c codes.Code) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == c
}
