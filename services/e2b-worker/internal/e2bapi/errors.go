package e2bapi

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinels matched by *APIError through errors.Is.
var (
	// ErrUnauthorized: 401 or 403 (missing, malformed or revoked API key).
	ErrUnauthorized = errors.New("e2b: unauthorized")
	// ErrNotFound: 404 (unknown or already killed sandbox).
	ErrNotFound = errors.New("e2b: not found")
	// ErrConflict: 409 (e.g. pausing a paused sandbox).
	ErrConflict = errors.New("e2b: conflict")
	// ErrBadRequest: 400 (e.g. timeout out of range).
	ErrBadRequest = errors.New("e2b: bad request")
	// ErrRateLimited: 429 after the retries were used up (concurrency or rate limit).
	ErrRateLimited = errors.New("e2b: rate limited")
	// ErrUnavailable: any 5xx.
	ErrUnavailable = errors.New("e2b: unavailable")
)

// APIError is a non-2xx answer from the control plane. The fields mirror E2B's
// error body {"code","message","error_code"}.
type APIError struct {
	// Op is the client operation, e.g. "create", "kill".
	Op string
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the body's "code" (normally equal to StatusCode; 0 if absent).
	Code int
	// Message is the body's "message", or the raw body if it was not JSON.
	Message string
	// ErrorCode is the body's semantic "error_code", e.g. "sandbox_capacity_unavailable".
	ErrorCode string
	// RetryAfter is the parsed Retry-After header (0 if absent).
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("e2b api %s: %d %s", e.Op, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.ErrorCode != "" {
		s += " (" + e.ErrorCode + ")"
	}
	return s
}

// Is reports whether the error belongs to the class of target.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrNotFound:
		return e.StatusCode == http.StatusNotFound
	case ErrConflict:
		return e.StatusCode == http.StatusConflict
	case ErrBadRequest:
		return e.StatusCode == http.StatusBadRequest
	case ErrRateLimited:
		return e.StatusCode == http.StatusTooManyRequests
	case ErrUnavailable:
		return e.StatusCode >= 500
	}
	return false
}

// Retryable reports whether err is worth retrying later (rate limit or 5xx).
func Retryable(err error) bool {
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable)
}
