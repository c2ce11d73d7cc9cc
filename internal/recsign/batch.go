package recsign

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"math/bits"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// One signature at a time per key, not one per processor: on a busy
// machine the callers that queue behind one signature are what makes the
// batches (with a signer per processor, the woken callers found a free
// slot and signed alone: 22 µs a message against 10 µs with one, under 32
// signers on 2 cores; a lone caller pays the same as before).
//
// Batch signing (ADR 17). Key.Sign is a group commit: a caller that finds
// no signature in progress signs its message alone, as before; callers that
// arrive while one is in progress queue, and when it ends, the first of them
// signs all the queued messages with one signature over the Merkle root of their hashes,
// each message carrying its own proof (events.HeaderSignatureBatch). Every
// message still verifies on its own, in any order, with nothing held back:
// a verifier hashes it, follows its proof to the root and checks the root's
// signature (remembered once verified, so a batch costs one verification).
// A message whose hash is not covered by the signed root, a proof that was
// altered or a root signed by another key does not verify (ErrInvalid).

// MaxBatch bounds the messages under one signature (a proof of at most 8
// hashes).
const MaxBatch = 256

// maxVerifyBatch bounds the batch size a verifier accepts.
const maxVerifyBatch = 1 << 12

// notAfterSignedPrefix is events.SignedPayload's, for leafHash.
const notAfterSignedPrefix = "sbx not after v1 "

// waiter is one message queued for the next batch.
type waiter struct {
	m    *nats.Msg
	done chan struct{}
	// lead is set, before done is closed, on the first waiter of a batch:
	// it signs the batch (itself included).
	lead []*waiter
}

// Sign adds the signature headers to a complete record message (subject,
// ce-id header and data set; nothing may change after). It is safe for
// concurrent use, and returns once m is signed.
func (k *Key) Sign(m *nats.Msg) error {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	w := &waiter{m: m}
	k.mu.Lock()
	if k.signing {
		w.done = make(chan struct{})
		k.queue = append(k.queue, w)
		k.mu.Unlock()
		<-w.done
		if w.lead == nil {
			return nil // signed in another's batch
		}
		k.signBatch(w.lead)
	} else {
		k.signing = true
		k.mu.Unlock()
		k.signBatch([]*waiter{w})
	}
	k.handOver()
	return nil
}

// handOver gives the queued messages (up to MaxBatch) to the first of them
// to sign, or ends signing when none is queued.
func (k *Key) handOver() {
	k.mu.Lock()
	if len(k.queue) == 0 {
		k.signing = false
		k.mu.Unlock()
		return
	}
	n := min(len(k.queue), MaxBatch)
	batch := k.queue[:n:n]
	if n == len(k.queue) {
		k.queue = nil
	} else {
		k.queue = append([]*waiter(nil), k.queue[n:]...)
	}
	k.mu.Unlock()
	batch[0].lead = batch
	close(batch[0].done)
}

// SignBatch signs complete messages (as Sign) under one signature per
// MaxBatch of them; a message alone gets a signature of its own. For a
// publisher that gathers messages itself (pkg/worker's records).
func (k *Key) SignBatch(ms []*nats.Msg) {
	for len(ms) > 0 {
		n := min(len(ms), MaxBatch)
		batch := make([]*waiter, n)
		for i, m := range ms[:n] {
			if m.Header == nil {
				m.Header = nats.Header{}
			}
			batch[i] = &waiter{m: m}
		}
		k.signBatch(batch)
		ms = ms[n:]
	}
}

// signBatch signs the messages of batch and releases every waiter but the
// first (the caller).
func (k *Key) signBatch(batch []*waiter) {
	defer func() {
		for _, w := range batch[1:] {
			if w.done != nil {
				close(w.done)
			}
		}
	}()
	if len(batch) == 1 {
		k.signAlone(batch[0].m)
		return
	}
	leaves := make([][sha256.Size]byte, len(batch))
	for i, w := range batch {
		leaves[i] = leafHash(w.m.Subject, w.m.Header.Get(events.HeaderCEID), w.m.Header.Get(events.HeaderNotAfter), w.m.Data)
	}
	levels := merkleLevels(leaves)
	root := levels[len(levels)-1][0]
	sig := base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, events.BatchSignedPayload(len(batch), root[:])))
	prefix := strconv.Itoa(len(batch)) + "."
	var proof []byte
	for i, w := range batch {
		proof = proof[:0]
		for l, j := 0, i; l < len(levels)-1; l, j = l+1, j>>1 {
			if s := j ^ 1; s < len(levels[l]) {
				proof = append(proof, levels[l][s][:]...)
			}
		}
		w.m.Header[events.HeaderSigner] = []string{k.pub}
		w.m.Header[events.HeaderSignature] = []string{sig}
		w.m.Header[events.HeaderSignatureBatch] = []string{prefix + strconv.Itoa(i) + "." + base64.RawURLEncoding.EncodeToString(proof)}
	}
}

// signAlone signs one message with a signature of its own.
func (k *Key) signAlone(m *nats.Msg) {
	sig := ed25519.Sign(k.priv, events.SignedPayload(m.Subject, m.Header.Get(events.HeaderCEID), m.Header.Get(events.HeaderNotAfter), m.Data))
	m.Header[events.HeaderSigner] = []string{k.pub}
	m.Header[events.HeaderSignature] = []string{base64.StdEncoding.EncodeToString(sig)}
	delete(m.Header, events.HeaderSignatureBatch)
}

// leafHash is SHA-256(0x00 || SignedPayload(subject, ceID, notAfter, data)).
func leafHash(subject, ceID, notAfter string, data []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte{0})
	if notAfter != "" {
		h.Write([]byte(notAfterSignedPrefix))
		h.Write([]byte(notAfter))
		h.Write([]byte{'\n'})
	}
	h.Write([]byte(subject))
	h.Write([]byte{'\n'})
	h.Write([]byte(ceID))
	h.Write([]byte{'\n'})
	h.Write(data)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// nodeHash is SHA-256(0x01 || left || right).
func nodeHash(l, r *[sha256.Size]byte) [sha256.Size]byte {
	var b [1 + 2*sha256.Size]byte
	b[0] = 1
	copy(b[1:], l[:])
	copy(b[1+sha256.Size:], r[:])
	return sha256.Sum256(b[:])
}

// merkleLevels is the tree over leaves, leaves first and the root last; a
// level's odd last node is carried up unchanged.
func merkleLevels(leaves [][sha256.Size]byte) [][][sha256.Size]byte {
	levels := [][][sha256.Size]byte{leaves}
	for cur := leaves; len(cur) > 1; {
		next := make([][sha256.Size]byte, (len(cur)+1)/2)
		for j := range next {
			if 2*j+1 < len(cur) {
				next[j] = nodeHash(&cur[2*j], &cur[2*j+1])
			} else {
				next[j] = cur[2*j]
			}
		}
		levels = append(levels, next)
		cur = next
	}
	return levels
}

// maxProofChars is the longest proof a verifier decodes: one hash per
// level of a tree of maxVerifyBatch leaves.
var maxProofChars = base64.RawURLEncoding.EncodedLen(bits.Len(maxVerifyBatch-1) * sha256.Size)

// canonicalInt parses a decimal number spelled as strconv.Itoa spells a
// non-negative int: digits only, no sign, no leading zero, at most 9 of
// them. A header has one spelling, so a signed message has one form.
func canonicalInt(s string) (int, bool) {
	if s == "" || len(s) > 9 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// canonicalBase64 decodes s only if it is exactly how enc encodes the
// result: the decoder alone ignores CR and LF, and (without Strict) unused
// trailing bits, which would give one signature several spellings.
func canonicalBase64(enc *base64.Encoding, s string) ([]byte, bool) {
	b, err := enc.Strict().DecodeString(s)
	if err != nil || enc.EncodedLen(len(b)) != len(s) {
		return nil, false
	}
	return b, true
}

// batchRoot follows a message's proof ("<n>.<i>.<proof>") from its leaf
// to the root; false when the header is malformed or the proof is not
// exactly as long as the tree's shape requires.
func batchRoot(header string, leaf [sha256.Size]byte) (n int, root [sha256.Size]byte, ok bool) {
	ns, rest, ok1 := strings.Cut(header, ".")
	is, ps, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return 0, root, false
	}
	n, ok1 = canonicalInt(ns)
	i, ok2 := canonicalInt(is)
	if !ok1 || !ok2 || n < 2 || n > maxVerifyBatch || i >= n || len(ps) > maxProofChars {
		return 0, root, false
	}
	proof, ok := canonicalBase64(base64.RawURLEncoding, ps)
	if !ok || len(proof)%sha256.Size != 0 {
		return 0, root, false
	}
	h := leaf
	for count, j := n, i; count > 1; count, j = (count+1)/2, j>>1 {
		if j^1 >= count {
			continue // carried up
		}
		if len(proof) < sha256.Size {
			return 0, root, false
		}
		var sib [sha256.Size]byte
		copy(sib[:], proof[:sha256.Size])
		proof = proof[sha256.Size:]
		if j&1 == 0 {
			h = nodeHash(&h, &sib)
		} else {
			h = nodeHash(&sib, &h)
		}
	}
	if len(proof) != 0 {
		return 0, root, false
	}
	return n, h, true
}

// verified remembers batch signatures that verified (signer, size, root
// and signature, exactly), so that a batch's other messages cost a hash
// and a look-up. Bounded; the oldest is forgotten first.
var verified = struct {
	sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}{set: make(map[string]struct{}, verifiedSize), ring: make([]string, verifiedSize)}

const verifiedSize = 4096

func verifiedKey(signer string, n int, root []byte, sig []byte) string {
	return signer + "\x00" + strconv.Itoa(n) + "\x00" + string(root) + string(sig)
}

// verifyBatch checks a message signed in a batch.
func verifyBatch(kp nkeys.KeyPair, signer, header string, sig []byte, subject, ceID, notAfter string, data []byte) bool {
	n, root, ok := batchRoot(header, leafHash(subject, ceID, notAfter, data))
	if !ok {
		return false
	}
	key := verifiedKey(signer, n, root[:], sig)
	verified.Lock()
	_, seen := verified.set[key]
	verified.Unlock()
	if seen {
		return true
	}
	if kp.Verify(events.BatchSignedPayload(n, root[:]), sig) != nil {
		return false
	}
	verified.Lock()
	if _, seen := verified.set[key]; !seen {
		if old := verified.ring[verified.next]; old != "" {
			delete(verified.set, old)
		}
		verified.ring[verified.next] = key
		verified.next = (verified.next + 1) % verifiedSize
		verified.set[key] = struct{}{}
	}
	verified.Unlock()
	return true
}
