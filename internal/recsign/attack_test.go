package recsign

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// splitBatch cuts a batch header into its size, index and proof.
func splitBatch(t testing.TB, h string) (n, i, proof string) {
	t.Helper()
	parts := strings.Split(h, ".")
	if len(parts) != 3 {
		t.Fatalf("batch header %q has %d parts", h, len(parts))
	}
	return parts[0], parts[1], parts[2]
}

// TestBatchHeaderIsCanonical: a batch header verifies in one spelling only,
// the signer's. Decimal numbers with a sign or leading zeros and proofs in
// non-canonical base64 (trailing bits set, padding) are refused, so that
// nobody can make a second, different-looking copy of a signed message.
func TestBatchHeaderIsCanonical(t *testing.T) {
	k, _ := NewKey(nil)
	setBit := func(p string) string { // the last character's unused low bits
		b := []byte(p)
		c := strings.IndexByte(base64URL, b[len(b)-1])
		b[len(b)-1] = base64URL[c|1]
		return string(b)
	}
	for _, tc := range []struct {
		name   string
		change func(n, i, p string) string
	}{
		{"size with a plus sign", func(n, i, p string) string { return "+" + n + "." + i + "." + p }},
		{"size with a leading zero", func(n, i, p string) string { return "0" + n + "." + i + "." + p }},
		{"index with a plus sign", func(n, i, p string) string { return n + ".+" + i + "." + p }},
		{"index with a leading zero", func(n, i, p string) string { return n + ".0" + i + "." + p }},
		{"index minus zero", func(n, _, p string) string { return n + ".-0." + p }},
		{"proof with trailing bits", func(n, i, p string) string { return n + "." + i + "." + setBit(p) }},
		{"proof padded", func(n, i, p string) string { return n + "." + i + "." + p + "=" }},
		{"proof with a newline", func(n, i, p string) string { return n + "." + i + "." + p[:10] + "\n" + p[10:] }},
		{"a fourth field", func(n, i, p string) string { return n + "." + i + "." + p + ".x" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A batch of two: a proof of one hash, 43 characters whose
			// last has two unused bits.
			ms := signedBatch(t, k, 2)
			m := ms[0]
			if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
				t.Fatalf("genuine: %v", err)
			}
			n, i, p := splitBatch(t, m.Header.Get(events.HeaderSignatureBatch))
			m.Header.Set(events.HeaderSignatureBatch, tc.change(n, i, p))
			if _, err := Verify(m.Subject, m.Header, m.Data); !errors.Is(err, ErrInvalid) {
				t.Errorf("%q: %v, want ErrInvalid", m.Header.Get(events.HeaderSignatureBatch), err)
			}
		})
	}
}

// TestSignatureIsCanonical: the signature header too verifies in its
// signer's spelling only (alone and in a batch).
func TestSignatureIsCanonical(t *testing.T) {
	k, _ := NewKey(nil)
	alone := recMsg(1)
	if err := k.Sign(alone); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*nats.Msg{alone, signedBatch(t, k, 4)[2]} {
		sig := m.Header.Get(events.HeaderSignature)
		if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
			t.Fatalf("genuine: %v", err)
		}
		// 64 bytes in std base64: 86 characters and "==", the last
		// character's 4 low bits unused.
		b := []byte(sig)
		c := strings.IndexByte(base64Std, b[85])
		b[85] = base64Std[c|1]
		for _, forged := range []string{string(b), sig[:40] + "\r\n" + sig[40:]} {
			m.Header[events.HeaderSignature] = []string{forged}
			if _, err := Verify(m.Subject, m.Header, m.Data); !errors.Is(err, ErrInvalid) {
				t.Errorf("batch %t, signature %q: %v, want ErrInvalid", m.Header.Get(events.HeaderSignatureBatch) != "", forged, err)
			}
		}
	}
}

const (
	base64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	base64Std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
)

// TestBatchGrafts: an inner node of a batch's tree does not pass for a
// leaf (a subtree grafted in its place, or a second preimage between a
// leaf and a node), whatever index is claimed, and a proof cut to the
// subtree's height does not verify for the batch's size.
func TestBatchGrafts(t *testing.T) {
	k, _ := NewKey(nil)
	ms := signedBatch(t, k, 8)
	leaves := make([][sha256.Size]byte, len(ms))
	for i, m := range ms {
		leaves[i] = leafHash(m.Subject, m.Header.Get(events.HeaderCEID), "", m.Data)
	}
	levels := merkleLevels(leaves)
	_, _, p := splitBatch(t, ms[0].Header.Get(events.HeaderSignatureBatch))
	proof, _ := base64.RawURLEncoding.DecodeString(p)
	root := levels[len(levels)-1][0]
	// The node over leaves 0 and 1, with the rest of leaf 0's proof.
	node := levels[1][0]
	rest := base64.RawURLEncoding.EncodeToString(proof[sha256.Size:])
	// As a leaf of the batch of 8, it reaches no root; as a leaf of the
	// tree of 4 that the nodes above the leaves make, it reaches the
	// root, but the signature binds the size (8), and the leaf's 0x00
	// (below) makes the node nobody's leaf.
	for i := range 8 {
		for _, n := range []int{8, 4, 2} {
			h := strconv.Itoa(n) + "." + strconv.Itoa(i) + "." + rest
			if got, r, ok := batchRoot(h, node); ok && got == 8 && r == root {
				t.Errorf("node (0,1) as leaf %d of %d reaches the root of 8", i, n)
			}
		}
	}
	// The node's preimage as a message: the leaf's 0x00 keeps it apart
	// from the node's 0x01, so its leaf is not the node.
	var pre []byte
	pre = append(pre, leaves[0][:]...)
	pre = append(pre, leaves[1][:]...)
	if l := leafHash("", "", "", pre); l == node {
		t.Fatal("a leaf equals an inner node")
	}
	// The real root, and a real proof, as the remembered cache would have
	// them: a message that is no leaf of the batch does not verify.
	forged := nats.NewMsg(ms[0].Subject)
	forged.Header = ms[0].Header
	forged.Data = pre
	if _, err := Verify(forged.Subject, forged.Header, forged.Data); !errors.Is(err, ErrInvalid) {
		t.Errorf("a node's preimage as data: %v, want ErrInvalid", err)
	}
}

// TestBatchHeaderBounded: a batch header longer than the deepest proof
// the verifier accepts is refused before its proof is decoded.
func TestBatchHeaderBounded(t *testing.T) {
	k, _ := NewKey(nil)
	m := signedBatch(t, k, 8)[0]
	n, i, p := splitBatch(t, m.Header.Get(events.HeaderSignatureBatch))
	m.Header.Set(events.HeaderSignatureBatch, n+"."+i+"."+p+strings.Repeat("A", 1<<20))
	if _, err := Verify(m.Subject, m.Header, m.Data); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
	// Decoding the 1 MiB proof would allocate 768 KiB at once.
	res := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = Verify(m.Subject, m.Header, m.Data)
		}
	})
	if bytes := res.AllocedBytesPerOp(); bytes > 64<<10 {
		t.Errorf("a 1 MiB batch header costs %d bytes of allocation per verification, want it refused by its length", bytes)
	}
}

// FuzzBatchHeader: whatever the batch header, signature and message, a
// message verifies only if it is one the key signed, with the header the
// signer gave it; nothing panics.
func FuzzBatchHeader(f *testing.F) {
	k, _ := NewKey(nil)
	ms := signedBatch(f, k, 5)
	type signed struct{ subject, ceID, data, batch, sig string }
	var genuine []signed
	for _, m := range ms {
		genuine = append(genuine, signed{m.Subject, m.Header.Get(events.HeaderCEID), string(m.Data),
			m.Header.Get(events.HeaderSignatureBatch), m.Header.Get(events.HeaderSignature)})
		f.Add(m.Subject, m.Header.Get(events.HeaderCEID), string(m.Data), m.Header.Get(events.HeaderSignatureBatch))
	}
	f.Add(ms[0].Subject, "x", "", "2.1.")
	f.Add("s", "", "", "4096.4095."+strings.Repeat("A", 500))
	sig := genuine[0].sig
	f.Fuzz(func(t *testing.T, subject, ceID, data, batch string) {
		h := nats.Header{}
		h.Set(events.HeaderSigner, k.Public())
		h.Set(events.HeaderSignature, sig)
		h.Set(events.HeaderCEID, ceID)
		h.Set(events.HeaderSignatureBatch, batch)
		if _, err := Verify(subject, h, []byte(data)); err != nil {
			return
		}
		for _, g := range genuine {
			if g.subject == subject && g.ceID == ceID && g.data == data {
				if g.batch != batch {
					t.Fatalf("message %q verifies with batch header %q, signed with %q", subject, batch, g.batch)
				}
				return
			}
		}
		t.Fatalf("a message never signed verifies: subject %q ce-id %q data %q batch %q", subject, ceID, data, batch)
	})
}

// TestNotAfterIsSigned: a command's Sbx-Not-After is covered by its
// signature, alone and in a batch: whoever puts a signed command back on
// its subject cannot strip, move or add the deadline after which workers
// refuse it (the ce-id and the Nats-Msg-Id do not stop a replay: the
// latter is not signed, and a worker runs a node command once per
// delivery).
func TestNotAfterIsSigned(t *testing.T) {
	k, _ := NewKey(nil)
	deadline := events.FormatNotAfter(time.Now().Add(time.Second))
	later := events.FormatNotAfter(time.Now().Add(time.Hour))
	command := func(i int) *nats.Msg {
		m := nats.NewMsg("sbx.cmd.fake.node.w1.exec")
		m.Header.Set(events.HeaderCEID, "op"+strconv.Itoa(i))
		m.Header.Set(events.HeaderNotAfter, deadline)
		m.Data = []byte(`{"sandbox_id":"s1","cmd":["true"]}`)
		return m
	}
	alone := command(0)
	if err := k.Sign(alone); err != nil {
		t.Fatal(err)
	}
	batch := []*nats.Msg{command(1), command(2), command(3)}
	k.SignBatch(batch)
	unbounded := command(4)
	unbounded.Header.Del(events.HeaderNotAfter)
	if err := k.Sign(unbounded); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		m      *nats.Msg
		change func(h nats.Header)
	}{
		{"alone, stripped", alone, func(h nats.Header) { h.Del(events.HeaderNotAfter) }},
		{"alone, moved", alone, func(h nats.Header) { h.Set(events.HeaderNotAfter, later) }},
		{"alone, emptied", alone, func(h nats.Header) { h.Set(events.HeaderNotAfter, "") }},
		{"in a batch, stripped", batch[1], func(h nats.Header) { h.Del(events.HeaderNotAfter) }},
		{"in a batch, moved", batch[1], func(h nats.Header) { h.Set(events.HeaderNotAfter, later) }},
		{"signed without, one added", unbounded, func(h nats.Header) { h.Set(events.HeaderNotAfter, later) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Verify(tc.m.Subject, tc.m.Header, tc.m.Data); err != nil {
				t.Fatalf("genuine: %v", err)
			}
			h := nats.Header{}
			for k, v := range tc.m.Header {
				h[k] = append([]string(nil), v...)
			}
			tc.change(h)
			if _, err := Verify(tc.m.Subject, h, tc.m.Data); !errors.Is(err, ErrInvalid) {
				t.Errorf("Not-After %q: %v, want ErrInvalid", h.Get(events.HeaderNotAfter), err)
			}
		})
	}
}

// TestNotAfterPrefixMatchesEvents: the leaf's deadline prefix is
// events.SignedPayload's.
func TestNotAfterPrefixMatchesEvents(t *testing.T) {
	want := events.SignedPayload("s", "c", "t", []byte("d"))
	if got := notAfterSignedPrefix + "t\ns\nc\nd"; got != string(want) {
		t.Fatalf("%q, want %q", got, want)
	}
}

// TestVerifiedRootsBounded: the remembered batch roots stay within their
// bound however many batches verify, the oldest forgotten first, and a
// forgotten root verifies again (at the cost of a signature check).
func TestVerifiedRootsBounded(t *testing.T) {
	k, _ := NewKey(nil)
	first := signedBatch(t, k, 2)
	if _, err := Verify(first[0].Subject, first[0].Header, first[0].Data); err != nil {
		t.Fatal(err)
	}
	for i := range verifiedSize + 10 {
		ms := []*nats.Msg{recMsg(2 * i), recMsg(2*i + 1)}
		ms[0].Data = append(ms[0].Data, strconv.Itoa(i)...)
		k.SignBatch(ms)
		if _, err := Verify(ms[0].Subject, ms[0].Header, ms[0].Data); err != nil {
			t.Fatal(err)
		}
	}
	verified.Lock()
	n := len(verified.set)
	verified.Unlock()
	if n > verifiedSize {
		t.Fatalf("%d roots remembered, bound %d", n, verifiedSize)
	}
	if _, err := Verify(first[1].Subject, first[1].Header, first[1].Data); err != nil {
		t.Fatalf("a forgotten root: %v", err)
	}
}
