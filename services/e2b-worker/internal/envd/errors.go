package envd

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
)

// Sentinels matched with errors.Is.
var (
	// ErrSandboxGone: the sandbox is not running any more (the proxy answers
	// 502, or envd is unreachable). Not retryable against the same sandbox.
	ErrSandboxGone = errors.New("envd: sandbox gone")
	// ErrStreamBroken: a process stream ended without an end event or stalled,
	// but the sandbox is still healthy. Retryable: re-attach with Connect.
	ErrStreamBroken = errors.New("envd: stream broken")

	ErrNotFound         = errors.New("envd: not found")
	ErrAlreadyExists    = errors.New("envd: already exists")
	ErrInvalidArgument  = errors.New("envd: invalid argument")
	ErrUnauthenticated  = errors.New("envd: unauthenticated")
	ErrDeadlineExceeded = errors.New("envd: deadline exceeded")
	ErrUnavailable      = errors.New("envd: unavailable")
	ErrInternal         = errors.New("envd: internal error")
)

// Error is an error answer from envd: a Connect error (Code set) or an HTTP
// error of /files or /health (Status set, Code derived from it).
type Error struct {
	Op      string
	Code    connect.Code
	Status  int // HTTP status for the HTTP endpoints; 0 for RPCs
	Message string
	cause   error
}

// Unwrap returns the underlying connect-go error, if any.
func (e *Error) Unwrap() error { return e.cause }

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("envd %s: %d %s: %s", e.Op, e.Status, e.Code, e.Message)
	}
	return fmt.Sprintf("envd %s: %s: %s", e.Op, e.Code, e.Message)
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Code == connect.CodeNotFound
	case ErrAlreadyExists:
		return e.Code == connect.CodeAlreadyExists
	case ErrInvalidArgument:
		return e.Code == connect.CodeInvalidArgument
	case ErrUnauthenticated:
		return e.Code == connect.CodeUnauthenticated || e.Code == connect.CodePermissionDenied
	case ErrDeadlineExceeded:
		return e.Code == connect.CodeDeadlineExceeded
	case ErrUnavailable:
		return e.Code == connect.CodeUnavailable
	case ErrInternal:
		return e.Code == connect.CodeInternal || e.Code == connect.CodeUnknown
	}
	return false
}

// codeForStatus maps an HTTP status as E2B's Python SDK does.
func codeForStatus(status int) connect.Code {
	switch status {
	case 400:
		return connect.CodeInvalidArgument
	case 401:
		return connect.CodeUnauthenticated
	case 403:
		return connect.CodePermissionDenied
	case 404:
		return connect.CodeNotFound
	case 409:
		return connect.CodeAlreadyExists
	case 429:
		return connect.CodeResourceExhausted
	case 502, 503:
		return connect.CodeUnavailable
	case 504:
		return connect.CodeDeadlineExceeded
	case 507:
		return connect.CodeResourceExhausted
	}
	return connect.CodeInternal
}

// fromConnect converts a connect-go error into *Error.
func fromConnect(op string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &Error{Op: op, Code: ce.Code(), Message: ce.Message(), cause: err}
	}
	return fmt.Errorf("envd %s: %w", op, err)
}
