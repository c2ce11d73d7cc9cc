package modalworker

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker/backendkit"
	"github.com/sandboxio/sandboxio/services/modal-worker/internal/modalapi"
)

// wrap keeps cause behind an SBX error.
var wrap = backendkit.Wrap

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
	return backendkit.Classify(err, func(err error) *events.Error { return modalCode(err, op) })
}

// modalCode is the SBX error of a failure of Modal's API, nil for the
// caller's context errors.
func modalCode(err error, op string) *events.Error {
	var te *modalapi.ThrottledError
	if errors.As(err, &te) {
		return events.Errorf(events.CodeRateLimited, "modal %s: throttled, retry after %s", op, te.RetryAfter).With("retry_after_ms", te.RetryAfter.Milliseconds())
	}
	if errors.Is(err, modalapi.ErrNoCredentials) {
		return events.Errorf(events.CodeUnauthorized, "modal %s: %v", op, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return events.Errorf(events.CodeBackendError, "modal %s: %v", op, err)
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
	return events.Errorf(code, "modal %s: %s", op, grpcMessage(err))
}

// isCode reports whether err carries the gRPC code c.
func isCode(err error, c codes.Code) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == c
}
