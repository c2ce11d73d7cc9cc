package backendkit

import (
	"errors"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// classified is an SBX error that keeps its cause: the worker runtime finds
// the *events.Error, Go callers can still match the backend's own errors
// with errors.Is and errors.As.
type classified struct {
	sbx   *events.Error
	cause error
}

func (e *classified) Error() string   { return e.sbx.Error() }
func (e *classified) Unwrap() []error { return []error{e.sbx, e.cause} }

// Wrap returns sbx with cause kept behind it; sbx itself when cause is nil.
// The error's message is sbx's.
func Wrap(sbx *events.Error, cause error) error {
	if cause == nil {
		return sbx
	}
	return &classified{sbx: sbx, cause: cause}
}

// Classify maps a backend failure onto an SBX code. A nil err is nil, and
// an err that already carries an SBX code is returned as it is; otherwise
// code says what err is: an SBX error (returned wrapped around err), or nil
// to return err unchanged (a caller's cancellation or deadline, which the
// runtime reports itself).
func Classify(err error, code func(err error) *events.Error) error {
	if err == nil {
		return nil
	}
	var sbx *events.Error
	if errors.As(err, &sbx) {
		return err
	}
	e := code(err)
	if e == nil {
		return err
	}
	return Wrap(e, err)
}
