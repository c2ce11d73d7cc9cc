package natsconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"

	"github.com/nats-io/nats.go"
)

func isNetError(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe)
}

// isTLSError: the handshake failed on either side; retrying does not help.
// crypto/tls reports an alert from the server (e.g. "certificate required"
// after a TLS 1.3 handshake) as a *net.OpError with Op "remote error".
func isTLSError(err error) bool {
	if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Op == "remote error" {
		return true
	}
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	return errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &unknown) ||
		errors.As(err, &host) || errors.As(err, &invalid) || errors.As(err, &header) ||
		errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted)
}
