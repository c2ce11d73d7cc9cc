package sealbox

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func TestSealOpens(t *testing.T) {
	worker, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := worker.PublicKey()
	secrets := map[string]string{"DB_PASSWORD": "canary-1", "TOKEN": "canary-2"}
	box, err := Seal(secrets, pub)
	if err != nil {
		t.Fatal(err)
	}
	if e := box.Validate(); e != nil {
		t.Fatalf("the box has no valid shape: %v", e)
	}
	if box.Recipient != pub || strings.Contains(box.Data, "canary") {
		t.Fatalf("box %+v", box)
	}
	raw, err := base64.StdEncoding.DecodeString(box.Data)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := worker.Open(raw, box.Sender)
	if err != nil {
		t.Fatalf("the worker cannot open it: %v", err)
	}
	var got map[string]string
	if err := json.Unmarshal(plain, &got); err != nil || !maps.Equal(got, secrets) {
		t.Fatalf("opened %q (%v)", plain, err)
	}
	// Another key cannot open it, and every box has its own sender.
	other, _ := nkeys.CreateCurveKeys()
	if _, err := other.Open(raw, box.Sender); err == nil {
		t.Fatal("another key opened the box")
	}
	again, _ := Seal(secrets, pub)
	if again.Sender == box.Sender {
		t.Fatal("the sender key was reused")
	}
}

func TestSealRefusesABadRecipient(t *testing.T) {
	if _, err := Seal(map[string]string{"K": "v"}, "not-a-key"); err == nil {
		t.Fatal("sealed to a malformed key")
	}
}
