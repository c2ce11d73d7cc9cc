package recsign

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

func msg() *nats.Msg {
	m := nats.NewMsg("sbx.ops.fake.s1.closed")
	m.Header.Set(events.HeaderCEID, "op1-closed")
	m.Data = []byte(`{"op_id":"op1"}`)
	return m
}

// TestSignVerify: a signed record verifies for its signer; unsigned,
// altered, re-addressed and malformed ones are told apart by error.
func TestSignVerify(t *testing.T) {
	k, err := NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewKey(nil)
	for _, tc := range []struct {
		name   string
		change func(m *nats.Msg)
		want   error
	}{
		{"genuine", func(*nats.Msg) {}, nil},
		{"unsigned", func(m *nats.Msg) { m.Header.Del(events.HeaderSigner); m.Header.Del(events.HeaderSignature) }, ErrUnsigned},
		{"data altered", func(m *nats.Msg) { m.Data = []byte(`{"op_id":"op2"}`) }, ErrInvalid},
		{"subject altered", func(m *nats.Msg) { m.Subject = "sbx.ops.fake.s2.closed" }, ErrInvalid},
		{"ce-id altered", func(m *nats.Msg) { m.Header.Set(events.HeaderCEID, "op9-closed") }, ErrInvalid},
		{"another signer claimed", func(m *nats.Msg) { m.Header.Set(events.HeaderSigner, other.Public()) }, ErrInvalid},
		{"signer not a user key", func(m *nats.Msg) { m.Header.Set(events.HeaderSigner, "ANOTAUSER") }, ErrInvalid},
		{"signature not base64", func(m *nats.Msg) { m.Header.Set(events.HeaderSignature, "***") }, ErrInvalid},
		{"signature only", func(m *nats.Msg) { m.Header.Del(events.HeaderSigner) }, ErrInvalid},
	} {
		m := msg()
		if err := k.Sign(m); err != nil {
			t.Fatal(err)
		}
		tc.change(m)
		signer, err := Verify(m.Subject, m.Header, m.Data)
		if !errors.Is(err, tc.want) || (err == nil && signer != k.Public()) {
			t.Errorf("%s: %q %v, want %v", tc.name, signer, err, tc.want)
		}
	}
}

// TestNewKey: a user seed gives its key; other seeds are refused without
// quoting them.
func TestNewKey(t *testing.T) {
	u, _ := nkeys.CreateUser()
	useed, _ := u.Seed()
	upub, _ := u.PublicKey()
	if k, err := NewKey(useed); err != nil || k.Public() != upub {
		t.Fatalf("user seed: %v", err)
	}
	a, _ := nkeys.CreateAccount()
	aseed, _ := a.Seed()
	x, _ := nkeys.CreateCurveKeys()
	xseed, _ := x.Seed()
	for name, seed := range map[string][]byte{"account": aseed, "curve": xseed, "garbage": []byte("SUxx")} {
		_, err := NewKey(seed)
		if !errors.Is(err, ErrBadSeed) || strings.Contains(err.Error(), string(seed)) {
			t.Errorf("%s seed: %v", name, err)
		}
	}
	if ValidAdvert(SignerKey(upub), Advert{SigningKey: upub}) != true || ValidAdvert(SignerKey(upub), Advert{SigningKey: "UOTHER"}) {
		t.Error("ValidAdvert")
	}
}

// TestSignMatchesNKeys: the key derived once signs exactly as nkeys does
// (ed25519 is deterministic), so records signed before and after verify
// alike; the seed it was made from is left intact.
func TestSignMatchesNKeys(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	k, err := NewKey(append([]byte(nil), seed...))
	if err != nil {
		t.Fatal(err)
	}
	m := msg()
	if err := k.Sign(m); err != nil {
		t.Fatal(err)
	}
	want, _ := kp.Sign(events.SignedRecordPayload(m.Subject, m.Header.Get(events.HeaderCEID), m.Data))
	if got := m.Header.Get(events.HeaderSignature); got != base64.StdEncoding.EncodeToString(want) {
		t.Fatalf("signature %s, nkeys gives %s", got, base64.StdEncoding.EncodeToString(want))
	}
	if again, _ := k.kp.Seed(); string(again) != string(seed) {
		t.Fatal("the key's seed was changed")
	}
	if signer, err := Verify(m.Subject, m.Header, m.Data); err != nil || signer != k.Public() {
		t.Fatalf("Verify = %q, %v", signer, err)
	}
}

func BenchmarkSign(b *testing.B) {
	k, _ := NewKey(nil)
	m := msg()
	for b.Loop() {
		_ = k.Sign(m)
	}
}
