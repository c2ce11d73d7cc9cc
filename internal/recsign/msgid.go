package recsign

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/nats-io/nats.go"

	"github.com/sandboxio/sandboxio/pkg/events"
)

// RecordMsgID is the Nats-Msg-Id of a signed record message: its ce-id and
// a digest of its signature headers. SBX_OPS drops a message whose id it
// saw within its duplicate window; with the ce-id alone, whoever may
// publish on sbx.ops.> could publish an unsigned record under a command's
// record id first and have the worker's signed record dropped. The
// signature is unknown until the worker signs, and a record is signed
// once, so its retries keep one id. An unsigned message keeps its ce-id.
func RecordMsgID(m *nats.Msg) string {
	id := m.Header.Get(events.HeaderCEID)
	sig := m.Header.Get(events.HeaderSignature)
	if sig == "" {
		return id
	}
	h := sha256.New()
	h.Write([]byte(sig))
	h.Write([]byte{0})
	h.Write([]byte(m.Header.Get(events.HeaderSignatureBatch)))
	return id + "-s" + hex.EncodeToString(h.Sum(nil)[:12])
}
