package portauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
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

// ErrNoKey is a link key of the wrong size (or none).
var ErrNoKey = errors.New("portauth: no port link key")

// KeySize is the size of a port link key.
const KeySize = 32

// clockSkew is how far past its maximum age a value's expiry may lie, for
// the clocks of the router that minted it and the gateway that checks it.
const clockSkew = time.Minute

// Sign makes the value of a link's query parameter or a cookie:
// "<unix expiry>.<base64url HMAC>", keyed by the port link key (which only
// the routers and the gateways hold) over the token's hash, what the
// value is for, the sandbox, the port and the expiry.
func Sign(key []byte, tokenHash string, p Purpose, sandboxID string, port int, expires time.Time) (string, error) {
	if len(key) != KeySize {
		return "", ErrNoKey
	}
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + base64.RawURLEncoding.EncodeToString(mac(key, tokenHash, p, sandboxID, port, exp)), nil
}

// Verify checks a value made by Sign with the same key, for the same hash,
// purpose, sandbox and port: that it has not expired at now, and that its
// expiry is no further than maxAge from now (a value that lives longer
// was not made by a router or a gateway).
func Verify(key []byte, value, tokenHash string, p Purpose, sandboxID string, port int, now time.Time, maxAge time.Duration) error {
	if len(key) != KeySize || tokenHash == "" || value == "" || len(value) > maxCredential {
		return ErrInvalid
	}
	exp, sig, ok := strings.Cut(value, ".")
	if !ok {
		return ErrInvalid
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || unix <= 0 || now.Unix() >= unix || unix-now.Unix() > int64((maxAge+clockSkew)/time.Second) {
		return ErrInvalid
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, mac(key, tokenHash, p, sandboxID, port, exp)) {
		return ErrInvalid
	}
	return nil
}

func mac(key []byte, tokenHash string, p Purpose, sandboxID string, port int, exp string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("sandboxio-port/2\x00" + tokenHash + "\x00" + string(p) + "\x00" + sandboxID + "\x00" + strconv.Itoa(port) + "\x00" + exp))
	return h.Sum(nil)
}

// NewKey makes a fresh port link key.
func NewKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return k, nil
}

// maxKeyFile bounds what LoadKey reads.
const maxKeyFile = 4096

// LoadKey reads a port link key file: the key's 32 bytes as hex (64
// digits; surrounding white space ignored), as WriteKey writes it.
func LoadKey(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("port link key: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("port link key %s: %w", file, err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != KeySize {
		return nil, fmt.Errorf("port link key %s: want %d bytes as %d hex digits", file, KeySize, 2*KeySize)
	}
	return k, nil
}

// MarshalKey is a key file's content: the key as hex and a newline.
func MarshalKey(k []byte) []byte { return []byte(hex.EncodeToString(k) + "\n") }

// WriteKey writes a fresh port link key to file (mode 0600), refusing to
// replace one.
func WriteKey(file string) error {
	k, err := NewKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("port link key: %w", err)
	}
	if _, err := f.Write(MarshalKey(k)); err != nil {
		f.Close()
		return fmt.Errorf("port link key %s: %w", file, err)
	}
	return f.Close()
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
