package recsign

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/internal/poll"
	"github.com/sandboxio/sandboxio/pkg/events"
)

func recMsg(i int) *nats.Msg {
	m := nats.NewMsg(fmt.Sprintf("sbx.ops.fake.s%d.closed", i))
	m.Header.Set(events.HeaderCEID, fmt.Sprintf("op%d-closed", i))
	m.Data = []byte(fmt.Sprintf(`{"op_id":"op%d"}`, i))
	return m
}

// signedBatch signs n messages as one batch.
func signedBatch(t testing.TB, k *Key, n int) []*nats.Msg {
	t.Helper()
	ms := make([]*nats.Msg, n)
	batch := make([]*waiter, n)
	for i := range ms {
		ms[i] = recMsg(i)
		batch[i] = &waiter{m: ms[i], done: make(chan struct{})}
	}
	k.signBatch(batch)
	return ms
}

// TestBatchVerifies: every message of batches of every shape verifies on
// its own, for its signer, with one signature for the whole batch.
func TestBatchVerifies(t *testing.T) {
	k, err := NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 3, 4, 5, 7, 8, 9, 31, 64, 100, MaxBatch} {
		ms := signedBatch(t, k, n)
		for i, m := range ms {
			if m.Header.Get(events.HeaderSignatureBatch) == "" {
				t.Fatalf("n=%d: message %d has no batch header", n, i)
			}
			if m.Header.Get(events.HeaderSignature) != ms[0].Header.Get(events.HeaderSignature) {
				t.Fatalf("n=%d: message %d has a signature of its own", n, i)
			}
			if signer, err := Verify(m.Subject, m.Header, m.Data); err != nil || signer != k.Public() {
				t.Errorf("n=%d: message %d: %q %v", n, i, signer, err)
			}
		}
	}
}

// TestBatchForgeries: a message that its batch's signature does not cover
// does not verify, whichever part was changed or moved.
func TestBatchForgeries(t *testing.T) {
	k, _ := NewKey(nil)
	other, _ := NewKey(nil)
	flip := func(s string, at int) string {
		b, _ := base64.RawURLEncoding.DecodeString(s)
		b[at%len(b)] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	for _, tc := range []struct {
		name   string
		change func(ms, others []*nats.Msg)
	}{
		{"data altered", func(ms, _ []*nats.Msg) { ms[3].Data = []byte(`{"op_id":"op9"}`) }},
		{"subject altered", func(ms, _ []*nats.Msg) { ms[3].Subject = "sbx.ops.fake.s9.closed" }},
		{"ce-id altered", func(ms, _ []*nats.Msg) { ms[3].Header.Set(events.HeaderCEID, "op9-closed") }},
		{"another signer claimed", func(ms, _ []*nats.Msg) { ms[3].Header.Set(events.HeaderSigner, other.Public()) }},
		{"proof of another message", func(ms, _ []*nats.Msg) {
			ms[3].Header.Set(events.HeaderSignatureBatch, ms[4].Header.Get(events.HeaderSignatureBatch))
		}},
		{"index changed", func(ms, _ []*nats.Msg) {
			n, rest, _ := strings.Cut(ms[3].Header.Get(events.HeaderSignatureBatch), ".")
			_, p, _ := strings.Cut(rest, ".")
			ms[3].Header.Set(events.HeaderSignatureBatch, n+".2."+p)
		}},
		{"size changed", func(ms, _ []*nats.Msg) {
			_, rest, _ := strings.Cut(ms[3].Header.Get(events.HeaderSignatureBatch), ".")
			ms[3].Header.Set(events.HeaderSignatureBatch, "7."+rest)
		}},
		{"proof altered", func(ms, _ []*nats.Msg) {
			h := ms[3].Header.Get(events.HeaderSignatureBatch)
			i := strings.LastIndexByte(h, '.')
			ms[3].Header.Set(events.HeaderSignatureBatch, h[:i+1]+flip(h[i+1:], 5))
		}},
		{"proof truncated", func(ms, _ []*nats.Msg) {
			h := ms[3].Header.Get(events.HeaderSignatureBatch)
			ms[3].Header.Set(events.HeaderSignatureBatch, h[:len(h)-43])
		}},
		{"proof extended", func(ms, _ []*nats.Msg) {
			h := ms[3].Header.Get(events.HeaderSignatureBatch)
			i := strings.LastIndexByte(h, '.')
			b, _ := base64.RawURLEncoding.DecodeString(h[i+1:])
			b = append(b, make([]byte, 32)...)
			ms[3].Header.Set(events.HeaderSignatureBatch, h[:i+1]+base64.RawURLEncoding.EncodeToString(b))
		}},
		{"batch header dropped", func(ms, _ []*nats.Msg) { ms[3].Header.Del(events.HeaderSignatureBatch) }},
		{"batch header malformed", func(ms, _ []*nats.Msg) { ms[3].Header.Set(events.HeaderSignatureBatch, "x") }},
		{"signature of another batch", func(ms, others []*nats.Msg) {
			ms[3].Header.Set(events.HeaderSignature, others[3].Header.Get(events.HeaderSignature))
		}},
		{"batch of another signer spliced in", func(ms, _ []*nats.Msg) {
			forged := signedBatch(t, other, 8)
			forged[3].Header.Set(events.HeaderSigner, k.Public())
			ms[3] = forged[3]
		}},
	} {
		ms, others := signedBatch(t, k, 8), signedBatch(t, k, 9)
		// The genuine batch verifies first, so its root is remembered: a
		// forgery must not pass on the strength of the cache.
		for _, m := range append(ms, others...) {
			if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
				t.Fatalf("%s: genuine message: %v", tc.name, err)
			}
		}
		tc.change(ms, others)
		if _, err := Verify(ms[3].Subject, ms[3].Header, ms[3].Data); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
}

// TestBatchSignatureIsNotARecordSignature: a batch's signature, replayed
// as the signature of a message of its own, does not verify.
func TestBatchSignatureIsNotARecordSignature(t *testing.T) {
	k, _ := NewKey(nil)
	ms := signedBatch(t, k, 4)
	m := ms[1]
	m.Header.Del(events.HeaderSignatureBatch)
	if _, err := Verify(m.Subject, m.Header, m.Data); !errors.Is(err, ErrInvalid) {
		t.Fatalf("%v, want ErrInvalid", err)
	}
}

// TestSignBatch: a publisher's own batch is signed under one signature per
// MaxBatch messages, and each verifies.
func TestSignBatch(t *testing.T) {
	k, _ := NewKey(nil)
	for _, n := range []int{1, 2, MaxBatch + 3} {
		ms := make([]*nats.Msg, n)
		for i := range ms {
			ms[i] = recMsg(i)
		}
		k.SignBatch(ms)
		sigs := map[string]bool{}
		for i, m := range ms {
			sigs[m.Header.Get(events.HeaderSignature)] = true
			if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
				t.Fatalf("n=%d: message %d: %v", n, i, err)
			}
		}
		if want := (n + MaxBatch - 1) / MaxBatch; len(sigs) != want {
			t.Errorf("n=%d: %d signatures, want %d", n, len(sigs), want)
		}
		if n == 1 && ms[0].Header.Get(events.HeaderSignatureBatch) != "" {
			t.Errorf("a batch of one is not signed alone")
		}
	}
}

// TestSignCoalesces: messages signed while a signature is in progress are
// signed together, under one signature, and each verifies; a message
// signed when none is in progress is signed alone, as before batches.
func TestSignCoalesces(t *testing.T) {
	k, _ := NewKey(nil)
	alone := recMsg(0)
	if err := k.Sign(alone); err != nil {
		t.Fatal(err)
	}
	if alone.Header.Get(events.HeaderSignatureBatch) != "" {
		t.Fatal("a lone message was signed in a batch")
	}
	if _, err := Verify(alone.Subject, alone.Header, alone.Data); err != nil {
		t.Fatal(err)
	}

	const n = 10
	k.mu.Lock()
	k.signing = true // a signature in progress
	k.mu.Unlock()
	ms := make([]*nats.Msg, n)
	var wg sync.WaitGroup
	for i := range ms {
		ms[i] = recMsg(i + 1)
		wg.Go(func() { _ = k.Sign(ms[i]) })
	}
	poll.Eventually(t, 10*time.Second, func() error {
		k.mu.Lock()
		defer k.mu.Unlock()
		if len(k.queue) != n {
			return fmt.Errorf("%d of %d signers queued", len(k.queue), n)
		}
		return nil
	})
	k.handOver() // the signature in progress ends
	wg.Wait()
	for i, m := range ms {
		if m.Header.Get(events.HeaderSignatureBatch) == "" || m.Header.Get(events.HeaderSignature) != ms[0].Header.Get(events.HeaderSignature) {
			t.Fatalf("message %d was not signed in the one batch: %v", i, m.Header)
		}
		if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.signing || len(k.queue) != 0 {
		t.Fatalf("signing %v, %d queued after the batch", k.signing, len(k.queue))
	}
}

// TestSignConcurrent: many concurrent signers, every message verifies.
func TestSignConcurrent(t *testing.T) {
	k, _ := NewKey(nil)
	const clients, each = 32, 50
	ms := make([][]*nats.Msg, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				m := recMsg(c*each + i)
				_ = k.Sign(m)
				ms[c] = append(ms[c], m)
			}
		})
	}
	wg.Wait()
	batched := 0
	for _, cm := range ms {
		for _, m := range cm {
			if m.Header.Get(events.HeaderSignatureBatch) != "" {
				batched++
			}
			if _, err := Verify(m.Subject, m.Header, m.Data); err != nil {
				t.Fatalf("%s: %v", m.Subject, err)
			}
		}
	}
	t.Logf("%d of %d messages signed in batches", batched, clients*each)
}

func BenchmarkSignParallel(b *testing.B) {
	k, _ := NewKey(nil)
	b.SetParallelism(16) // 16 × GOMAXPROCS signers, as under 64 clients
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			_ = k.Sign(recMsg(i))
		}
	})
}

func BenchmarkSignAlone(b *testing.B) {
	k, _ := NewKey(nil)
	for i := 0; b.Loop(); i++ {
		m := recMsg(i)
		k.signAlone(m)
	}
}
