package recsign

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
)

// Errors of Verify, classified with errors.Is.
var (
	// ErrUnsigned: the message has neither signature header.
	ErrUnsigned = errors.New("recsign: record is not signed")
	// ErrInvalid: a signature header is malformed, or the signature does
	// not verify for the claimed signer (forged or altered).
	ErrInvalid = errors.New("recsign: record signature does not verify")
	// ErrBadSeed: a seed that is not a user nkey seed (SU…).
	ErrBadSeed = errors.New("recsign: not a user nkey seed (SU…)")
)

// maxSignerLen bounds the signer a verdict reports (a public nkey is 56).
const maxSignerLen = 64

// Key is a record-signing key: a user nkey.
type Key struct {
	kp  nkeys.KeyPair
	pub string
	// priv is the ed25519 key of kp, derived once: nkeys derives it from
	// the seed on every Sign (a scalar multiplication each time, half the
	// cost of a signature). The signature is the same (ed25519 is
	// deterministic).
	priv ed25519.PrivateKey

	// Whether a signature is in progress, and the messages queued for
	// the next batch (batch.go).
	mu      sync.Mutex
	signing bool
	queue   []*waiter
}

// NewKey returns the key of seed (a user nkey seed, SU…), or a new key
// when seed is empty. The error never quotes the seed.
func NewKey(seed []byte) (*Key, error) {
	var kp nkeys.KeyPair
	var err error
	seed = bytes.TrimSpace(seed) // a seed file may end with a newline
	if len(seed) > 0 {
		if kp, err = nkeys.FromSeed(seed); err != nil {
			return nil, ErrBadSeed
		}
	} else if kp, err = nkeys.CreateUser(); err != nil {
		return nil, fmt.Errorf("recsign: new key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, ErrBadSeed
	}
	priv, err := edKey(kp)
	if err != nil {
		return nil, ErrBadSeed
	}
	return &Key{kp: kp, pub: pub, priv: priv}, nil
}

// edKey is the ed25519 private key of a user key pair.
func edKey(kp nkeys.KeyPair) (ed25519.PrivateKey, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, err
	}
	defer wipe(raw)
	if len(raw) != ed25519.SeedSize {
		return nil, ErrBadSeed
	}
	return ed25519.NewKeyFromSeed(raw), nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}

// Public is the key's public nkey (U…).
func (k *Key) Public() string { return k.pub }

// Verify checks the signature headers of a record or command message,
// signed alone or in a batch (over events.SignedPayload: a command's
// Sbx-Not-After is signed too), and returns the signer it claims (truncated to 64 bytes; "" when unsigned). A nil error
// means the signature verifies for that signer: whether the signer is
// trusted is the caller's decision. Errors: ErrUnsigned, ErrInvalid.
func Verify(subject string, h nats.Header, data []byte) (string, error) {
	signer, sigB64 := h.Get(events.HeaderSigner), h.Get(events.HeaderSignature)
	if signer == "" && sigB64 == "" {
		return "", ErrUnsigned
	}
	if len(signer) > maxSignerLen {
		signer = signer[:maxSignerLen]
	}
	if !nkeys.IsValidPublicUserKey(signer) {
		return signer, ErrInvalid
	}
	kp, err := nkeys.FromPublicKey(signer)
	if err != nil {
		return signer, ErrInvalid
	}
	raw, ok := canonicalBase64(base64.StdEncoding, sigB64)
	if !ok {
		return signer, ErrInvalid
	}
	notAfter := h.Get(events.HeaderNotAfter)
	if strings.ContainsAny(notAfter, "\r\n") {
		return signer, ErrInvalid
	}
	if batch := h.Get(events.HeaderSignatureBatch); batch != "" {
		if !verifyBatch(kp, signer, batch, raw, subject, h.Get(events.HeaderCEID), notAfter, data) {
			return signer, ErrInvalid
		}
		return signer, nil
	}
	if err := kp.Verify(events.SignedPayload(subject, h.Get(events.HeaderCEID), notAfter, data), raw); err != nil {
		return signer, ErrInvalid
	}
	return signer, nil
}

// The reaper's records and the advertisement of its key.
const (
	// ReaperWorker is the worker named by every record the reaper
	// publishes (OpRecord.Worker); the sandbox's worker is in
	// Summary[SummaryWorker].
	ReaperWorker = "reaper"
	// SummaryWorker is the summary key of a reaper record naming the
	// sandbox's worker.
	SummaryWorker = "worker"
	// ReaperBucket is the reaper's KV bucket (its leader lease and the
	// adverts of its signing keys).
	ReaperBucket = bus.ReaperBucket
	// signerPrefix prefixes the advert keys in ReaperBucket.
	signerPrefix = "signer."
	// SignerFilter matches every advert key in ReaperBucket.
	SignerFilter = signerPrefix + ">"
)

// SignerKey is the ReaperBucket key of the advert of public key pub.
func SignerKey(pub string) string { return signerPrefix + pub }

// Advert is the value under SignerKey(SigningKey): a reaper instance
// vouching for its record-signing key.
type Advert struct {
	Instance   string    `json:"instance"`
	SigningKey string    `json:"signing_key"`
	At         time.Time `json:"at"`
}

// ValidAdvert reports whether an advert sits under its own key and names
// a public user nkey.
func ValidAdvert(key string, a Advert) bool {
	return key == SignerKey(a.SigningKey) && nkeys.IsValidPublicUserKey(a.SigningKey)
}
