package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/natsconn"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Exit codes of the CLI itself; a command's own exit code is passed
// through. They follow GNU timeout (124) and docker run (125–127).
const (
	exitFailure       = 1   // a local failure (a file, a broken audit log)
	exitUsage         = 2   // bad flags or arguments
	exitUnreachable   = 69  // no NATS server answers, no sandboxio router on it, or TLS cannot verify it (sysexits EX_UNAVAILABLE)
	exitNoPerm        = 77  // the NATS server refused the credentials or the client certificate (sysexits EX_NOPERM)
	exitTimeout       = 124 // the command ran past --exec-timeout (or the create past its limit)
	exitSBXError      = 125 // sandboxio refused or failed the request
	exitNotExecutable = 126 // the command was found but could not be run
	exitNotFound      = 127 // the command was not found
	exitCancelled     = 130 // interrupted
)

// exitError carries a process exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// reported is an error already told to the user: only its exit code is
// left to give.
type reported struct{ err error }

func (r reported) Error() string { return r.err.Error() }
func (r reported) Unwrap() error { return r.err }

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usageErr(err error) error { return usageError{err} }

// unreachable reports whether err means that sandboxio could not be
// reached at all.
func unreachable(err error) bool {
	return errors.Is(err, natsconn.ErrUnreachable) || errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrConnectionClosed)
}

// tlsExit is the exit code of a failed TLS handshake: 69 when this client
// could not verify the server (--tlsca, the address) or the two disagree
// on TLS, 77 when the server ended the handshake, which it does when it
// refuses the client's certificate or its lack of one.
func tlsExit(err error) int {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		errors.As(err, &header) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) {
		return exitUnreachable
	}
	return exitNoPerm
}

// exitFor tells the user about err (unless reported) and returns the exit
// code.
func exitFor(name string, stderr io.Writer, err error) int {
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var rep reported
	quiet := errors.As(err, &rep)
	say := func(format string, args ...any) {
		if !quiet {
			fmt.Fprintf(stderr, name+": "+format+"\n", args...)
		}
	}
	var se *events.Error
	var ue usageError
	switch {
	case errors.Is(err, natsconn.ErrAuthorization):
		say("%v", err)
		return exitNoPerm
	case errors.Is(err, natsconn.ErrTLS):
		say("%v", err)
		return tlsExit(err)
	case unreachable(err):
		say("cannot reach sandboxio: %v", err)
		return exitUnreachable
	case errors.As(err, &se):
		say("%s %s: %s", se.Code, se.Name, se.Message)
		return sbxExit(se)
	case errors.Is(err, context.Canceled):
		say("cancelled")
		return exitCancelled
	case errors.As(err, &ue):
		say("%v", err)
		return exitUsage
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrExist):
		say("%v", err)
		return exitFailure
	}
	say("%v", err)
	return exitUsage
}

// sbxExit is the exit code of an SBX error: timeouts as GNU timeout, a
// command that cannot start as docker run, anything else 125.
func sbxExit(e *events.Error) int {
	switch {
	case errors.Is(e, events.ErrSandboxTimeout):
		return exitTimeout
	case e.Code == events.CodeExecFailed:
		switch n := e.Details["exit_code"].(type) {
		case float64: // decoded from the wire
			if int(n) == exitNotExecutable {
				return exitNotExecutable
			}
		case int:
			if n == exitNotExecutable {
				return exitNotExecutable
			}
		}
		return exitNotFound
	}
	return exitSBXError
}
