package portauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// TokenPrefix starts every port token (events.PortTokenPrefix).
const TokenPrefix = events.PortTokenPrefix

// tokenBytes is a token's entropy.
const tokenBytes = 32

// maxCredential bounds a token, link signature or cookie value the gateway
// will look at.
const maxCredential = 256

// NewToken makes a fresh token.
func NewToken() (string, error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// Hash is what the registry keeps of a token: its hex SHA-256.
func Hash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// CheckToken reports whether token hashes to tokenHash, in constant time.
func CheckToken(token, tokenHash string) bool {
	if token == "" || tokenHash == "" || len(token) > maxCredential {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(Hash(token)), []byte(tokenHash)) == 1
}

// Purpose says what a signed value is for; a link cannot be used as a
// cookie or the other way round.
type Purpose string

const (
	PurposeLink   Purpose = "link"
	PurposeCookie Purpose = "cookie"
)

// ErrInvalid is every failed check: the caller answers the same 401
// whatever the reason.
var ErrInvalid = errors.New("portauth: invalid or expired credential")

// Sign makes the value of a link's query parameter or a cookie:
// "<unix expiry>.<base64url HMAC>".
func Sign(tokenHash string, p Purpose, sandboxID string, port int, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(mac(tokenHash, p, sandboxID, port, exp))
}

// Verify checks a value made by Sign for the same hash, purpose, sandbox
// and port, and that it has not expired at now.
func Verify(value, tokenHash string, p Purpose, sandboxID string, port int, now time.Time) error {
	if tokenHash == "" || value == "" || len(value) > maxCredential {
		return ErrInvalid
	}
	exp, sig, ok := strings.Cut(value, ".")
	if !ok {
		return ErrInvalid
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || unix <= 0 || now.Unix() >= unix {
		return ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(tokenHash, p, sandboxID, port, exp)) {
		return ErrInvalid
	}
	return nil
}

func mac(tokenHash string, p Purpose, sandboxID string, port int, exp string) []byte {
	h := hmac.New(sha256.New, []byte(tokenHash))
	h.Write([]byte("sandboxio-port/1\x00" + string(p) + "\x00" + sandboxID + "\x00" + strconv.Itoa(port) + "\x00" + exp))
	return h.Sum(nil)
}

// LinkParam is the query parameter that carries a signed link's value
// (events.PortLinkParam).
const LinkParam = events.PortLinkParam

// CookieName is the cookie of a sandbox's port: one per sandbox and port,
// so that a browser holding several never sends the wrong one's value.
func CookieName(sandboxID string, port int) string {
	return "sbx_port_" + strconv.Itoa(port) + "_" + sandboxID
}

// TokenHeader is the header a program sends a private port's token in
// (events.PortTokenHeader).
const TokenHeader = events.PortTokenHeader
