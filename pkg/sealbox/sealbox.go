package sealbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// Seal seals the JSON object of secrets to recipient (a public xkey, X…)
// with a new sender key that is wiped afterwards.
func Seal(secrets map[string]string, recipient string) (*events.SealedBox, error) {
	plain, err := json.Marshal(secrets)
	if err != nil {
		return nil, fmt.Errorf("sealbox: %w", err)
	}
	defer clear(plain)
	kp, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, fmt.Errorf("sealbox: sender key: %w", err)
	}
	defer kp.Wipe()
	sender, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("sealbox: sender key: %w", err)
	}
	sealed, err := kp.Seal(plain, recipient)
	if err != nil {
		return nil, fmt.Errorf("sealbox: recipient %s: %w", recipient, err)
	}
	return &events.SealedBox{Recipient: recipient, Sender: sender, Data: base64.StdEncoding.EncodeToString(sealed)}, nil
}
